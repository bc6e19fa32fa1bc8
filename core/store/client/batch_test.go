package client_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
)

// TestBatchCallsLargerThanOneMessage: batch calls whose keys alone exceed
// gRPC's 4 MiB message limit succeed (they are sent in chunks), and the
// answers come back in key order across chunk boundaries.
func TestBatchCallsLargerThanOneMessage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lc, err := localcluster.Start(ctx, localcluster.Options{Nodes: 1, SegmentSize: 16 << 20})
	require.NoError(t, err)
	defer lc.Close()
	c, err := lc.NewClient(ctx, client.Config{LocalHostname: "batch-test"})
	require.NoError(t, err)
	defer c.Close()

	// 120,000 keys of 50 bytes: a 6 MB existence check.
	missing := make([]string, 120_000)
	for i := range missing {
		missing[i] = fmt.Sprintf("batch-test/missing/%031d", i)
	}
	exist, err := c.BatchIsExist(ctx, missing)
	require.NoError(t, err)
	require.Len(t, exist, len(missing))
	assert.NotContains(t, exist, true)

	// 5,000 values (3 chunks of keys), each holding its own index.
	const n, size = 5000, 64
	buf, err := memory.Map(2 * n * size)
	require.NoError(t, err)
	defer buf.Close()
	require.NoError(t, c.RegisterBuffer(ctx, buf.Bytes()))
	defer c.UnregisterBuffer(context.Background(), buf.Bytes())
	src, dst := buf.Bytes()[:n*size], buf.Bytes()[n*size:]
	keys := make([]string, n)
	srcs, dsts := make([][]byte, n), make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("batch-test/put/%06d", i)
		srcs[i], dsts[i] = src[i*size:(i+1)*size], dst[i*size:(i+1)*size]
		copy(srcs[i], fmt.Sprintf("%0*d", size, i))
	}
	for i, err := range c.BatchPutFrom(ctx, keys, srcs, nil) {
		require.NoError(t, err, "put %s", keys[i])
	}
	// Present and missing keys interleaved: each answer is its key's.
	mixed := make([]string, 0, 2*n)
	for i := range keys {
		mixed = append(mixed, keys[i], missing[i])
	}
	exist, err = c.BatchIsExist(ctx, mixed)
	require.NoError(t, err)
	for i, e := range exist {
		require.Equal(t, i%2 == 0, e, "exist(%s)", mixed[i])
	}
	got, errs := c.BatchGetInto(ctx, keys, dsts)
	for i := range keys {
		require.NoError(t, errs[i], "get %s", keys[i])
		require.Equal(t, size, got[i])
		require.Equal(t, string(srcs[i]), string(dsts[i]), "value of %s", keys[i])
	}
	sizes, errs := c.BatchGetSize(ctx, keys)
	for i := range keys {
		require.NoError(t, errs[i])
		require.Equal(t, uint64(size), sizes[i])
	}

	// Keys near the 4 KiB bound: 1,200 of them are 4.9 MB of keys.
	long := make([]string, 1200)
	for i := range long {
		long[i] = fmt.Sprintf("batch-test/long/%05d/", i) + strings.Repeat("x", 4000)
	}
	exist, err = c.BatchIsExist(ctx, long)
	require.NoError(t, err)
	assert.NotContains(t, exist, true)

	for i, err := range c.BatchRemove(ctx, keys, true) { // force: the reads leased them
		require.NoError(t, err, "remove %s", keys[i])
	}
	_, errs = c.BatchGetSize(ctx, keys)
	for i := range keys {
		require.ErrorIs(t, errs[i], store.ErrObjectNotFound, "size of removed %s", keys[i])
	}
}
