package integration

import (
	"fmt"
	"testing"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
)

// TestEngineSegmentDoesNotTakeSaves is the embedded-engine case: an
// engine's store client mounts its own DRAM segment (embedded, the default)
// next to one storage node (standalone, as `mooncake node`), and saves 20
// values. The master places them all on the node, so once the engine
// exits (Close unmounts its segment, and whatever was on it vanishes) a
// fresh client reads every value back.
func TestEngineSegmentDoesNotTakeSaves(t *testing.T) {
	const (
		keys      = 20
		valueSize = 64 << 10 // 20 values: 1.25 MiB, well within one node
		seed      = 21
	)
	ctx := testContext(t)
	cl, err := localcluster.Start(ctx, localcluster.Options{Nodes: 1, SegmentSize: segmentSize})
	if err != nil {
		t.Fatalf("start pool: %v", err)
	}
	t.Cleanup(cl.Close)
	engine, err := cl.NewClient(ctx, client.Config{LocalHostname: "engine", GlobalSegmentSize: segmentSize, LocalBufferSize: localBuffer})
	if err != nil {
		t.Fatalf("start engine client: %v", err)
	}
	t.Cleanup(func() { engine.Close() }) // no-op (ErrClosed) after the close below
	key := func(i int) string { return fmt.Sprintf("engine/%d", i) }
	for i := range keys {
		if err := engine.Put(ctx, key(i), valueFor(seed, i, valueSize), nil); err != nil {
			t.Fatalf("put %s: %v", key(i), err)
		}
	}

	segs, err := engine.ListSegments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	objects := map[store.SegmentKind]int{}
	names := map[store.SegmentKind]string{}
	for _, s := range segs {
		objects[s.Kind] += s.Objects
		names[s.Kind] = s.Name
	}
	if len(segs) != 2 || names[store.SegmentEmbedded] != "engine" || names[store.SegmentStandalone] != "node-0" {
		t.Fatalf("segments %+v: want the engine's embedded one and node-0's standalone one", segs)
	}
	if objects[store.SegmentStandalone] != keys || objects[store.SegmentEmbedded] != 0 {
		t.Fatalf("objects by kind %v: want all %d on the standalone node", objects, keys)
	}

	if err := engine.Close(); err != nil {
		t.Fatalf("close engine: %v", err)
	}
	if st := stats(t, ctx, cl.Nodes[0]); st.Segments != 1 || st.Objects != keys {
		t.Fatalf("after the engine exits: %v, want node-0 alone with %d objects", st, keys)
	}
	reader := newClient(t, cl, "reader")
	for i := range keys {
		mustGet(t, ctx, reader, key(i), valueFor(seed, i, valueSize))
	}
}
