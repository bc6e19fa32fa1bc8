package client_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
)

// segmentFiles returns the bytes allocated (st_blocks*512) of this
// process's segment memory files, by file size.
func segmentFiles(t *testing.T) map[int64]int64 {
	t.Helper()
	fds, err := filepath.Glob("/proc/self/fd/*")
	require.NoError(t, err)
	out := map[int64]int64{}
	for _, fd := range fds {
		target, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(target, "/memfd:mooncake-segment") {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(fd, &st) == nil {
			out[st.Size] = st.Blocks * 512
		}
	}
	return out
}

// TestPrefaultSegment: with PrefaultSegment the whole global segment is
// allocated soon after start without a single put; without it the
// segment holds no pages until they are written.
func TestPrefaultSegment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lc, err := localcluster.Start(ctx, localcluster.Options{Nodes: 1, SegmentSize: 4 << 20})
	require.NoError(t, err)
	defer lc.Close()
	const eager, lazy = 24 << 20, 20 << 20
	a, err := lc.NewClient(ctx, client.Config{LocalHostname: "prefault-eager", GlobalSegmentSize: eager, PrefaultSegment: true})
	require.NoError(t, err)
	defer a.Close()
	b, err := lc.NewClient(ctx, client.Config{LocalHostname: "prefault-lazy", GlobalSegmentSize: lazy})
	require.NoError(t, err)
	defer b.Close()
	require.Eventually(t, func() bool { return segmentFiles(t)[eager] == eager }, 30*time.Second, 10*time.Millisecond,
		"the prefaulted segment never got all its pages: %v", segmentFiles(t))
	got, ok := segmentFiles(t)[lazy]
	require.True(t, ok, "no memory file of the lazy segment: %v", segmentFiles(t))
	assert.Less(t, got, int64(lazy/4), "a segment without PrefaultSegment holds %d of its %d bytes before any put", got, lazy)
}
