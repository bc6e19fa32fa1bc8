package master

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/store"
)

// fillSeg puts complete objects of size bytes preferring segment id until
// it holds at least bytes (testSeg names segments "node-<id>").
func fillSeg(t testing.TB, m *Master, id string, size, bytes uint64) {
	t.Helper()
	for i := 0; uint64(i)*size < bytes; i++ {
		rs := putPinned(t, m, fmt.Sprintf("fill-%s-%d", id, i), size, ReplicaConfig{ReplicaNum: 1, PreferredSegment: "node-" + id})
		if rs[0].SegmentID != id {
			t.Fatalf("fill of %s landed on %s", id, rs[0].SegmentID)
		}
	}
}

// share counts single-replica puts per segment id.
func share(t testing.TB, m *Master, prefix string, n int, size uint64, cfg ReplicaConfig) map[string]int {
	t.Helper()
	count := map[string]int{}
	for i := range n {
		rs := putPinned(t, m, fmt.Sprintf("%s%d", prefix, i), size, cfg)
		count[rs[0].SegmentID]++
	}
	return count
}

// TestFreeRatioFirstSpread is upstream issue #3688: three half-full
// segments and a newly joined empty one. free_ratio_first must send the new
// segment more than its fair share (it prefers emptier segments) but not
// every write, as upstream's sorted sample does; random spreads evenly.
func TestFreeRatioFirstSpread(t *testing.T) {
	const writes = 400
	for _, tc := range []struct {
		strategy       string
		minNew, maxNew float64 // bounds on the new segment's share
	}{
		{StrategyRandom, 0.15, 0.35},
		{StrategyFreeRatioFirst, 0.32, 0.55}, // weights 1 : .5 : .5 : .5 -> 0.4
	} {
		t.Run(tc.strategy, func(t *testing.T) {
			m, _ := newTestMaster(t, func(c *Config) { c.AllocationStrategy = tc.strategy })
			for _, id := range []string{"a", "b", "c"} {
				mustMount(t, m, "c1", testSeg(id, 1<<20))
				fillSeg(t, m, id, 64<<10, 512<<10)
			}
			mustMount(t, m, "c2", testSeg("new", 1<<20))
			count := share(t, m, "k", writes, 256, ReplicaConfig{ReplicaNum: 1})
			got := float64(count["new"]) / writes
			t.Logf("%s: %v (new segment %.2f)", tc.strategy, count, got)
			if got < tc.minNew || got > tc.maxNew {
				t.Fatalf("new segment got %.2f of writes, want [%.2f, %.2f]: %v", got, tc.minNew, tc.maxNew, count)
			}
			for _, id := range []string{"a", "b", "c"} {
				if count[id] < writes/10 {
					t.Fatalf("segment %s got %d of %d writes: %v", id, count[id], writes, count)
				}
			}
		})
	}
}

// TestFreeRatioFirstPrefersEmptier: a 90 % full segment next to an empty
// one gets few writes (weights .1 : 1), and a full one none.
func TestFreeRatioFirstPrefersEmptier(t *testing.T) {
	m, _ := newTestMaster(t, func(c *Config) { c.AllocationStrategy = StrategyFreeRatioFirst })
	mustMount(t, m, "c1", testSeg("full", 1<<20), testSeg("busy", 1<<20), testSeg("empty", 1<<20))
	fillSeg(t, m, "full", 64<<10, 1<<20)
	fillSeg(t, m, "busy", 64<<10, 920<<10)
	count := share(t, m, "k", 200, 64, ReplicaConfig{ReplicaNum: 1})
	if count["full"] != 0 || count["empty"] < 160 || count["busy"] == 0 {
		t.Fatalf("placement %v: want most on empty, some on busy, none on full", count)
	}
	// Two replicas still land on distinct segments.
	for i := range 20 {
		rs := putPinned(t, m, fmt.Sprintf("two%d", i), 64, ReplicaConfig{ReplicaNum: 2})
		if len(rs) != 2 || rs[0].SegmentID == rs[1].SegmentID {
			t.Fatalf("replicas %+v", rs)
		}
	}
}

func TestLocalFirst(t *testing.T) {
	setup := func(t *testing.T) *Master {
		m, _ := newTestMaster(t, func(c *Config) { c.AllocationStrategy = StrategyLocalFirst })
		for _, s := range []Segment{
			{ID: "a1", Name: "hostA:1", Base: 1 << 32, Size: 1 << 20},
			{ID: "a2", Name: "hostA:2", Base: 2 << 32, Size: 1 << 20},
			{ID: "b1", Name: "hostB:1", Base: 3 << 32, Size: 1 << 20},
			{ID: "c1", Name: "node-7", HostID: "hostC", Base: 4 << 32, Size: 1 << 20},
		} {
			mustMount(t, m, "c1", s)
		}
		return m
	}
	for _, tc := range []struct {
		name string
		cfg  ReplicaConfig
		want []string // segments that may receive writes; all must be used
	}{
		{"writer on hostB", ReplicaConfig{ReplicaNum: 1, HostID: "hostB"}, []string{"b1"}},
		{"writer on hostA spreads by key", ReplicaConfig{ReplicaNum: 1, HostID: "hostA"}, []string{"a1", "a2"}},
		{"segment HostID overrides its name", ReplicaConfig{ReplicaNum: 1, HostID: "hostC"}, []string{"c1"}},
		{"unknown host takes the next one", ReplicaConfig{ReplicaNum: 1, HostID: "hostBB"}, []string{"c1"}},
		{"past the last host wraps around", ReplicaConfig{ReplicaNum: 1, HostID: "zzz"}, []string{"a1", "a2"}},
		{"host from the preferred segment name", ReplicaConfig{ReplicaNum: 1, PreferredSegment: "hostB:9"}, []string{"b1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := setup(t)
			count := share(t, m, "k", 40, 64, tc.cfg)
			var got []string
			for id := range count {
				got = append(got, id)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("writes went to %v, want %v", count, tc.want)
			}
		})
	}
	t.Run("full host overflows to the next", func(t *testing.T) {
		m := setup(t)
		rs := putPinned(t, m, "big", 1<<20, ReplicaConfig{ReplicaNum: 1, HostID: "hostB"})
		if rs[0].SegmentID != "b1" {
			t.Fatalf("first write on %s", rs[0].SegmentID)
		}
		lease(t, m, "big")
		rs = putPinned(t, m, "next", 64, ReplicaConfig{ReplicaNum: 1, HostID: "hostB"})
		if rs[0].SegmentID != "c1" {
			t.Fatalf("overflow write on %s, want c1 (hostC follows hostB)", rs[0].SegmentID)
		}
	})
	t.Run("no writer host is random", func(t *testing.T) {
		m := setup(t)
		if count := share(t, m, "k", 200, 64, ReplicaConfig{ReplicaNum: 1}); len(count) != 4 {
			t.Fatalf("writes went to %v, want all four segments", count)
		}
	})
}

func TestPreferredSegmentsInOrder(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	mustMount(t, m, "c1", testSeg("a", 1024), testSeg("b", 1024), testSeg("c", 1024))
	cfg := ReplicaConfig{ReplicaNum: 2, PreferredSegments: []string{"node-c", "node-a"}, PreferredSegment: "node-b"}
	rs := putPinned(t, m, "k", 600, cfg)
	if len(rs) != 2 || rs[0].SegmentID != "c" || rs[1].SegmentID != "a" {
		t.Fatalf("replicas %+v, want on c then a", rs)
	}
	// c and a are full now; the lease keeps the next put from evicting k
	// to make room for its second replica.
	lease(t, m, "k")
	rs = putPinned(t, m, "k2", 600, cfg)
	if len(rs) != 1 || rs[0].SegmentID != "b" {
		t.Fatalf("replicas %+v, want one on b", rs)
	}
	if st := m.Stats(); st.PartialPuts != 1 {
		t.Fatalf("PartialPuts %d, want 1", st.PartialPuts)
	}
}

// TestStriping: a value larger than every segment but not the pool is
// striped, one piece per segment; reads return the same slices; removal,
// eviction and unmount free every piece.
func TestStriping(t *testing.T) {
	segs := map[string]Segment{}
	setup := func(t *testing.T, n int) *Master {
		m, _ := newTestMaster(t, nil)
		for i := range n {
			s := testSeg(fmt.Sprintf("s%d", i), 1024)
			segs[s.ID] = s
			mustMount(t, m, "c1", s)
		}
		return m
	}
	t.Run("read back", func(t *testing.T) {
		m := setup(t, 3)
		rs := mustPutStart(t, m, "c1", "big", 2500, 1)
		checkReplicas(t, rs, segs, 2500, ReplicaProcessing, 1)
		if len(rs[0].Slices) != 3 {
			t.Fatalf("want 3 slices: %+v", rs[0])
		}
		if err := m.PutEnd("c1", "big"); err != nil {
			t.Fatal(err)
		}
		got, _, err := m.GetReplicaList("big")
		if err != nil {
			t.Fatal(err)
		}
		checkReplicas(t, got, segs, 2500, ReplicaComplete, 1)
		if !slices.Equal(got[0].Slices, rs[0].Slices) {
			t.Fatalf("read %+v, wrote %+v", got[0].Slices, rs[0].Slices)
		}
		st := m.Stats()
		if st.Used != 2500 || st.StripedPuts != 1 || st.PartialPuts != 0 {
			t.Fatalf("stats %+v", st)
		}
		for _, sd := range st.SegmentsDetail {
			if sd.Objects != 1 {
				t.Fatalf("segment %s holds %d objects, want a piece of big", sd.ID, sd.Objects)
			}
		}
		if err := m.Remove("big", true); err != nil {
			t.Fatal(err)
		}
		if st := m.Stats(); st.Used != 0 {
			t.Fatalf("used %d after remove", st.Used)
		}
	})
	t.Run("two replicas on disjoint segments", func(t *testing.T) {
		m := setup(t, 4)
		rs := mustPutStart(t, m, "c1", "big", 1500, 2)
		checkReplicas(t, rs, segs, 1500, ReplicaProcessing, 2)
	})
	t.Run("fewer replicas when segments run out", func(t *testing.T) {
		m := setup(t, 3)
		rs := mustPutStart(t, m, "c1", "big", 1500, 2)
		checkReplicas(t, rs, segs, 1500, ReplicaProcessing, 1)
		if st := m.Stats(); st.PartialPuts != 1 {
			t.Fatalf("PartialPuts %d", st.PartialPuts)
		}
	})
	t.Run("unmounting one piece's segment drops the replica", func(t *testing.T) {
		m := setup(t, 3)
		rs := mustPut(t, m, "c1", "big", 2500, 1)
		if err := m.UnmountSegment(rs[0].Slices[1].SegmentID, "c1"); err != nil {
			t.Fatal(err)
		}
		if present(m, "big") {
			t.Fatal("big survived the loss of a piece")
		}
		st := m.Stats()
		if st.Used != 0 {
			t.Fatalf("used %d: the other pieces were not freed", st.Used)
		}
		for _, sd := range st.SegmentsDetail {
			if sd.Used != 0 || sd.Objects != 0 {
				t.Fatalf("segment %+v still holds a piece", sd)
			}
		}
	})
	t.Run("evicted whole", func(t *testing.T) {
		m := setup(t, 3)
		mustPut(t, m, "c1", "big", 2500, 1)
		mustPut(t, m, "c1", "next", 1000, 1) // needs eviction of big
		if present(m, "big") || m.Stats().Used != 1000 {
			t.Fatalf("big not evicted cleanly: %+v", m.Stats())
		}
	})
	t.Run("last resort on fragmented free space", func(t *testing.T) {
		m := setup(t, 2)
		mustPutStart(t, m, "c1", "w0", 512, 1) // in progress: never evicted
		rs := mustPutStart(t, m, "c1", "w1", 640, 1)
		if rs[0].SegmentID == m.objects.get("w0").seg.ID {
			t.Fatal("w0 and w1 on one segment")
		}
		rs = mustPutStart(t, m, "c1", "mid", 800, 1) // 512 + 384 free
		checkReplicas(t, rs, segs, 800, ReplicaProcessing, 1)
		if len(rs[0].Slices) != 2 {
			t.Fatalf("want a 2-piece stripe: %+v", rs[0])
		}
	})
	t.Run("takeover of a striped write", func(t *testing.T) {
		m, clk := newTestMaster(t, func(c *Config) { c.ClientTTL = time.Hour })
		for i := range 3 {
			mustMount(t, m, "c1", testSeg(fmt.Sprintf("s%d", i), 1024))
		}
		mustPutStart(t, m, "c1", "big", 2500, 1)
		clk.Advance(m.Config().PutStartDiscardTimeout)
		if _, err := m.PutStart("c2", "big", 100, ReplicaConfig{ReplicaNum: 1}); err != nil {
			t.Fatal(err)
		}
		if st := m.Stats(); st.DiscardedBytes != 2500 || st.Used != 2600 {
			t.Fatalf("after takeover %+v", st)
		}
		clk.Advance(m.Config().PutStartReleaseTimeout)
		m.Tick()
		if st := m.Stats(); st.DiscardedBytes != 0 || st.Used != 100 {
			t.Fatalf("after release %+v", st)
		}
	})
	t.Run("larger than the free pool", func(t *testing.T) {
		m := setup(t, 2)
		_, err := m.PutStart("c1", "big", 2049, ReplicaConfig{ReplicaNum: 1})
		checkErr(t, err, store.ErrNoAvailableHandle)
		if st := m.Stats(); st.Used != 0 {
			t.Fatalf("a failed stripe leaked %d bytes", st.Used)
		}
	})
}

// TestStrategiesKeepInvariants runs random puts, removes and unmounts under
// each strategy, on embedded and standalone segments, and checks the placement invariants after every step.
func TestStrategiesKeepInvariants(t *testing.T) {
	for _, strategy := range []string{StrategyRandom, StrategyFreeRatioFirst, StrategyLocalFirst} {
		t.Run(strategy, func(t *testing.T) {
			m, clk := newTestMaster(t, func(c *Config) { c.AllocationStrategy = strategy })
			r := rand.New(rand.NewPCG(5, 6))
			segs := map[string]Segment{}
			mount := func(i int) {
				s := testSeg(fmt.Sprintf("s%d", i), uint64(512*(1+r.IntN(6))))
				s.HostID = fmt.Sprintf("h%d", i%3)
				s.Kind = store.SegmentKind(i % 2) // a mixed pool: standalone first
				segs[s.ID] = s
				mustMount(t, m, "c1", s)
			}
			for i := range 5 {
				mount(i)
			}
			next := 5
			for step := range 3000 {
				key := fmt.Sprintf("k%d", r.IntN(40))
				switch n := r.IntN(10); {
				case n < 6:
					size := uint64(1 + r.IntN(3000))
					cfg := ReplicaConfig{ReplicaNum: 1 + r.IntN(3), HostID: fmt.Sprintf("h%d", r.IntN(4)), WithSoftPin: r.IntN(4) == 0, WithHardPin: r.IntN(10) == 0}
					rs, err := m.PutStart("c1", key, size, cfg)
					if err == nil {
						checkReplicas(t, rs, segs, size, ReplicaProcessing, len(rs))
						if r.IntN(5) > 0 {
							m.PutEnd("c1", key)
						}
					} else if c := store.CodeOf(err); c != store.ObjectAlreadyExists && c != store.NoAvailableHandle {
						t.Fatalf("step %d: PutStart: %v", step, err)
					}
				case n < 8:
					m.Remove(key, r.IntN(2) == 0)
					if r.IntN(3) == 0 {
						m.GetReplicaList(key)
					}
				case n < 9:
					clk.Advance(time.Duration(r.IntN(20)) * time.Second)
					m.Ping("c1")
					m.Tick()
				default:
					ids := m.ListSegments()
					if len(ids) > 2 {
						id := ids[r.IntN(len(ids))].ID
						if err := m.UnmountSegment(id, "c1"); err != nil {
							t.Fatal(err)
						}
						delete(segs, id)
					}
					mount(next)
					next++
				}
				checkTable(t, m, step)
			}
		})
	}
}

// checkTable checks the space accounting and that no ranges overlap.
func checkTable(t *testing.T, m *Master, step int) {
	t.Helper()
	type rng struct{ off, end uint64 }
	bySeg := map[*segment][]rng{}
	var live uint64
	soft, hard := 0, 0
	if err := checkSegmentCounts(m); err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	for o := range m.objects.all {
		if o.softPin {
			soft++
		}
		if o.hardPin {
			hard++
		}
		var one [1]replica
		for _, r := range o.replicas(&one) {
			for _, p := range r.parts(o.size) {
				bySeg[p.seg] = append(bySeg[p.seg], rng{p.offset, p.offset + p.size})
				live += p.size
			}
		}
	}
	st := m.Stats()
	if st.Used != live+st.DiscardedBytes || st.SoftPinned != soft || st.HardPinned != hard {
		t.Fatalf("step %d: stats %+v; live %d, pins %d/%d", step, st, live, soft, hard)
	}
	for s, rs := range bySeg {
		slices.SortFunc(rs, func(a, b rng) int { return int(a.off) - int(b.off) })
		for i := 1; i < len(rs); i++ {
			if rs[i-1].end > rs[i].off {
				t.Fatalf("step %d: overlap on %s: %v", step, s.ID, rs)
			}
		}
	}
}
