package ha

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/master"
)

func kindSeg(id string, kind store.SegmentKind) master.Segment {
	s := seg(id, 64<<10)
	s.Kind = kind
	return s
}

// TestWireSegmentKind: the kind travels as text, is left out for embedded
// segments (so what older masters wrote, without it, reads as embedded)
// and an unknown text is corrupt.
func TestWireSegmentKind(t *testing.T) {
	for _, tc := range []struct {
		name    string
		json    string
		want    store.SegmentKind
		corrupt bool
	}{
		{"standalone", `[{"op":"mount","segment":{"id":"s","name":"node-s","base":1,"size":64,"kind":"standalone","client":"n"}}]`, store.SegmentStandalone, false},
		{"embedded", `[{"op":"mount","segment":{"id":"s","name":"node-s","base":1,"size":64,"kind":"embedded","client":"n"}}]`, store.SegmentEmbedded, false},
		{"written before kinds", `[{"op":"mount","segment":{"id":"s","name":"node-s","base":1,"size":64,"client":"n"}}]`, store.SegmentEmbedded, false},
		{"unknown kind", `[{"op":"mount","segment":{"id":"s","name":"node-s","base":1,"size":64,"kind":"ssd","client":"n"}}]`, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, err := decodeBatch("k", []byte(tc.json))
			if tc.corrupt {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("decodeBatch = %v, want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := newMaster(t, 1)
			if err := apply(m, es[0]); err != nil {
				t.Fatal(err)
			}
			if got := m.ListSegments()[0].Kind; got != tc.want {
				t.Fatalf("replayed kind %v, want %v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		kind store.SegmentKind
		want string // how the kind appears in the segment's JSON; "" = absent
	}{{store.SegmentEmbedded, ""}, {store.SegmentStandalone, `"kind":"standalone"`}} {
		b, err := json.Marshal(toWireSegment(kindSeg("s", tc.kind), "n"))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(b); (tc.want == "" && strings.Contains(got, `"kind"`)) || !strings.Contains(got, tc.want) {
			t.Fatalf("%v encodes as %s, want %q", tc.kind, got, tc.want)
		}
	}
}

// TestReplicateSegmentKind: segments of both kinds mounted before a
// snapshot (restored from it) and after it (replayed from the log) keep
// their kinds on a master loaded from etcd, which then places standalone
// first.
func TestReplicateSegmentKind(t *testing.T) {
	cli := etcdClient(t)
	ctx := testCtx(t)
	const cluster = "kind-test"
	l := &locked{m: newMaster(t, 1)}
	rep := NewReplicator(ReplicatorConfig{Client: cli, ClusterID: cluster, Do: l.Do, SnapshotEvery: -1, SnapshotInterval: -1})
	defer rep.Close()
	rep.Attach(l.m)
	mount := func(segs ...master.Segment) {
		t.Helper()
		l.Do(func(m *master.Master) {
			for _, s := range segs {
				if err := m.MountSegment(s, "node"); err != nil {
					t.Fatal(err)
				}
			}
		})
		if err := rep.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]store.SegmentKind{"snap-emb": store.SegmentEmbedded, "snap-std": store.SegmentStandalone,
		"log-emb": store.SegmentEmbedded, "log-std": store.SegmentStandalone}
	mount(kindSeg("snap-emb", store.SegmentEmbedded), kindSeg("snap-std", store.SegmentStandalone))
	if err := rep.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	mount(kindSeg("log-emb", store.SegmentEmbedded), kindSeg("log-std", store.SegmentStandalone))

	m, ls := loadFresh(t, ctx, cli, cluster)
	if ls.SnapshotSeq == 0 || ls.Replayed != 2 {
		t.Fatalf("load %+v: want a snapshot and 2 replayed mounts", ls)
	}
	got := map[string]store.SegmentKind{}
	for _, s := range m.ListSegments() {
		got[s.ID] = s.Kind
	}
	if len(got) != len(want) {
		t.Fatalf("loaded segments %v, want %v", got, want)
	}
	for id, k := range want {
		if got[id] != k {
			t.Fatalf("segment %s loaded as %v, want %v (all: %v)", id, got[id], k, got)
		}
	}
	for i := range 8 {
		key := fmt.Sprint("k", i)
		rs, err := m.PutStart("w", key, 100, master.ReplicaConfig{ReplicaNum: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got[rs[0].SegmentID] != store.SegmentStandalone {
			t.Fatalf("put %s on the loaded master landed on %s (%v)", key, rs[0].SegmentID, got[rs[0].SegmentID])
		}
	}
}
