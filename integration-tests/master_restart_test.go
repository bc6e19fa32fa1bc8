package integration

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
)

// TestMasterRestartRemounts (issue 15): a master restarted with an empty
// table must get every client's memory back. Two engine clients with their
// own segments and one storage node write; the master is restarted on the
// same addresses (empty table, no segments, empty metadata server) and the
// engines write again at once, before their heartbeats reach it. Every
// segment must be mounted again within a heartbeat interval, later puts
// must land on each of them, a fresh reader (which learns every
// descriptor from the new metadata server, so only from what was
// re-published) must read those values back, and the engines must close
// cleanly. Before the fix an engine's put registered it at the new
// master, its next ping was answered "known", and its segment never came
// back (Close then failed with SEGMENT_NOT_FOUND).
func TestMasterRestartRemounts(t *testing.T) {
	const (
		ping      = 200 * time.Millisecond // heartbeat period of every client
		valueSize = 16 << 10
		seed      = 15
		// reconnect bounds what a heartbeat may need beyond one period:
		// a ping sent while no master listened puts gRPC's connection in
		// backoff (1 s base, 20% jitter) before it dials the new one.
		reconnect = 2 * time.Second
	)
	ctx := testContext(t)
	cl, err := localcluster.Start(ctx, localcluster.Options{Nodes: 1, SegmentSize: segmentSize, PingInterval: ping})
	require.NoError(t, err, "start pool")
	t.Cleanup(cl.Close)
	engines := make([]*client.Client, 2)
	for i := range engines {
		e, err := cl.NewClient(ctx, client.Config{LocalHostname: fmt.Sprintf("engine-%d", i), GlobalSegmentSize: segmentSize,
			LocalBufferSize: localBuffer, PingInterval: ping})
		require.NoError(t, err, "start engine %d", i)
		t.Cleanup(func() { e.Close() }) // no-op (ErrClosed) after the checked close below
		engines[i] = e
	}
	segNames := []string{"engine-0", "engine-1", "node-0"} // sorted
	owners := map[string]string{"engine-0": engines[0].ID(), "engine-1": engines[1].ID(), "node-0": cl.Nodes[0].ID()}

	// mounted fails unless exactly the segments of segNames are mounted,
	// each by its owner.
	mounted := func() error {
		segs, err := engines[0].ListSegments(ctx)
		if err != nil {
			return err
		}
		var names []string
		for _, s := range segs {
			names = append(names, s.Name)
			if s.Client != owners[s.Name] {
				return fmt.Errorf("segment %s is mounted by %q, want %q", s.Name, s.Client, owners[s.Name])
			}
		}
		sort.Strings(names)
		if strings.Join(names, ",") != strings.Join(segNames, ",") {
			return fmt.Errorf("segments mounted: %v, want %v", names, segNames)
		}
		return nil
	}
	// load puts one value from every engine onto every segment and checks
	// where it landed; it returns the keys, by the index of their value.
	load := func(round string) map[string]int {
		keys := map[string]int{}
		for ei, e := range engines {
			for _, seg := range segNames {
				key := fmt.Sprintf("%s/engine-%d/%s", round, ei, seg)
				i := len(keys)
				require.NoError(t, e.Put(ctx, key, valueFor(seed, i, valueSize), &client.PutOptions{PreferredSegment: seg}), "put %s", key)
				info, err := e.Stat(ctx, key)
				require.NoError(t, err, "stat %s", key)
				require.Len(t, info.Replicas, 1, "%s", key)
				require.Equal(t, seg, info.Replicas[0][0].Segment, "%s landed elsewhere", key)
				keys[key] = i
			}
		}
		return keys
	}

	require.NoError(t, mounted())
	load("before")

	require.NoError(t, cl.RestartMaster())
	restarted := time.Now()
	// Both engines write at once, before their heartbeats find the new
	// master. Its pool is empty (or holds only what was remounted since),
	// so a put may fail; the master must answer it, though (a put that
	// never reached it proves nothing), and that answer must not make it
	// forget to ask the engine to remount.
	for ei, e := range engines {
		key := fmt.Sprintf("during/engine-%d", ei)
		eventually(t, reconnect, "a put reaching the new master", func() error {
			err := e.Put(ctx, key, valueFor(seed, 100+ei, valueSize), nil)
			if c := store.CodeOf(err); c == store.RPCFail || c == store.RPCTimeout {
				return err
			}
			return nil
		})
	}
	eventually(t, ping+reconnect-time.Since(restarted), "every segment mounted again", mounted)
	t.Logf("every segment back %v after the restart", time.Since(restarted))

	after := load("after")
	reader := newClient(t, cl, "reader")
	for key, i := range after {
		mustGet(t, ctx, reader, key, valueFor(seed, i, valueSize))
	}
	for i, e := range engines {
		require.NoError(t, e.Close(), "close engine %d: its segment must be mounted", i)
	}
}
