package integration

import (
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/master"
)

// TestReadFallsBackWhenSegmentUnresolvable: a key with two replicas stays
// readable by a fresh client when one replica's segment descriptor has
// vanished from the metadata store (the peer cannot even be opened).
func TestReadFallsBackWhenSegmentUnresolvable(t *testing.T) {
	cl, c := startPool(t, master.Config{})
	ctx := testContext(t)
	v := randBytes(newRand(t, 11), 128<<10)
	if err := c.Put(ctx, "fb/k", v, &client.PutOptions{ReplicaNum: 2}); err != nil {
		t.Fatal(err)
	}
	meta, err := httpmeta.NewClient(cl.Master.MetadataURL)
	if err != nil {
		t.Fatal(err)
	}
	// Remove the descriptor of the replica a reader tries first.
	info, err := c.Stat(ctx, "fb/k")
	if err != nil || len(info.Replicas) != 2 {
		t.Fatalf("stat: %+v, %v", info, err)
	}
	first := info.Replicas[0][0].Segment
	if err := meta.Delete(ctx, metadata.SegmentKey("", first)); err != nil {
		t.Fatal(err)
	}
	reader := newClient(t, cl, "fresh-reader")
	mustGet(t, ctx, reader, "fb/k", v)
}
