package master

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/store"
)

// TestAPIErrors drives the operator and bulk methods into each of their
// documented error codes.
func TestAPIErrors(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen+1)
	type env struct {
		m   *Master
		clk *fakeClock
	}
	withSeg := func(t *testing.T, e env) { mustMount(t, e.m, "c1", testSeg("a", 4096)) }
	withKey := func(t *testing.T, e env) {
		withSeg(t, e)
		mustPut(t, e.m, "c1", "k", 64, 1)
	}
	remount := func(e env, client string, mod func(*Segment)) error {
		s := testSeg("a", 4096)
		if mod != nil {
			mod(&s)
		}
		return e.m.ReMountSegment([]Segment{s}, client)
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, e env)
		op    func(e env) error
		want  *store.Error
	}{
		// New
		{name: "new unknown strategy", op: func(e env) error {
			_, err := New(Config{AllocationStrategy: "fastest"})
			return err
		}, want: store.ErrInvalidParams},
		{name: "new known strategies", op: func(e env) error {
			for _, s := range []string{StrategyRandom, StrategyFreeRatioFirst, StrategyLocalFirst} {
				if _, err := New(Config{AllocationStrategy: s}); err != nil {
					return err
				}
			}
			return nil
		}},

		// RemoveByRegex
		{name: "regex invalid", setup: withKey, op: func(e env) error {
			_, err := e.m.RemoveByRegex("(", false)
			return err
		}, want: store.ErrInvalidParams},
		{name: "regex empty", setup: withKey, op: func(e env) error {
			_, err := e.m.RemoveByRegex("", true)
			return err
		}, want: store.ErrInvalidParams},
		{name: "regex ok", setup: withKey, op: func(e env) error {
			_, err := e.m.RemoveByRegex("^k$", false)
			return err
		}},

		// GetSize
		{name: "getsize unknown", setup: withSeg, op: func(e env) error {
			_, err := e.m.GetSize("k")
			return err
		}, want: store.ErrObjectNotFound},
		{name: "getsize being written", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPutStart(t, e.m, "c1", "k", 64, 1)
		}, op: func(e env) error {
			_, err := e.m.GetSize("k")
			return err
		}, want: store.ErrReplicaIsNotReady},
		{name: "getsize empty key", op: func(e env) error {
			_, err := e.m.GetSize("")
			return err
		}, want: store.ErrInvalidParams},
		{name: "getsize key too long", op: func(e env) error {
			_, err := e.m.GetSize(long)
			return err
		}, want: store.ErrInvalidKey},
		{name: "getsize ok", setup: withKey, op: func(e env) error {
			_, err := e.m.GetSize("k")
			return err
		}},

		// Stat
		{name: "stat unknown", setup: withSeg, op: func(e env) error {
			_, err := e.m.Stat("k")
			return err
		}, want: store.ErrObjectNotFound},
		{name: "stat empty key", op: func(e env) error {
			_, err := e.m.Stat("")
			return err
		}, want: store.ErrInvalidParams},
		{name: "stat being written", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPutStart(t, e.m, "c1", "k", 64, 1)
		}, op: func(e env) error {
			_, err := e.m.Stat("k")
			return err
		}},

		// ReMountSegment
		{name: "remount empty client", op: func(e env) error { return remount(e, "", nil) }, want: store.ErrInvalidParams},
		{name: "remount size 0", op: func(e env) error { return remount(e, "c1", func(s *Segment) { s.Size = 0 }) }, want: store.ErrInvalidParams},
		{name: "remount base 0", op: func(e env) error { return remount(e, "c1", func(s *Segment) { s.Base = 0 }) }, want: store.ErrInvalidParams},
		{name: "remount empty id", op: func(e env) error { return remount(e, "c1", func(s *Segment) { s.ID = "" }) }, want: store.ErrInvalidParams},
		{name: "remount empty name", op: func(e env) error { return remount(e, "c1", func(s *Segment) { s.Name = "" }) }, want: store.ErrInvalidParams},
		{name: "remount id twice", op: func(e env) error {
			return e.m.ReMountSegment([]Segment{testSeg("a", 64), testSeg("a", 64)}, "c1")
		}, want: store.ErrInvalidParams},
		{name: "remount new", op: func(e env) error { return remount(e, "c1", nil) }},
		{name: "remount empty list", op: func(e env) error { return e.m.ReMountSegment(nil, "c1") }},
		{name: "remount same again", setup: withSeg, op: func(e env) error { return remount(e, "c1", nil) }},
		{name: "remount owned by another client", setup: withSeg, op: func(e env) error { return remount(e, "c2", nil) }, want: store.ErrSegmentExists},
		{name: "remount with another size", setup: withSeg, op: func(e env) error {
			return remount(e, "c1", func(s *Segment) { s.Size = 8192 })
		}, want: store.ErrSegmentExists},

		// QuerySegment
		{name: "query empty id", op: func(e env) error {
			_, err := e.m.QuerySegment("")
			return err
		}, want: store.ErrInvalidParams},
		{name: "query unknown", setup: withSeg, op: func(e env) error {
			_, err := e.m.QuerySegment("zz")
			return err
		}, want: store.ErrSegmentNotFound},
		{name: "query ok", setup: withSeg, op: func(e env) error {
			_, err := e.m.QuerySegment("a")
			return err
		}},

		// ListKeys
		{name: "listkeys negative limit", op: func(e env) error {
			_, _, err := e.m.ListKeys("", -1)
			return err
		}, want: store.ErrInvalidParams},
		{name: "listkeys empty table", op: func(e env) error {
			_, _, err := e.m.ListKeys("", 0)
			return err
		}},

		// Pins and PutStart
		{name: "remove hard-pinned without force", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			putPinned(t, e.m, "k", 64, ReplicaConfig{ReplicaNum: 1, WithHardPin: true})
		}, op: func(e env) error { return e.m.Remove("k", false) }, want: store.ErrObjectHasLease},
		{name: "remove hard-pinned with force", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			putPinned(t, e.m, "k", 64, ReplicaConfig{ReplicaNum: 1, WithHardPin: true})
		}, op: func(e env) error { return e.m.Remove("k", true) }},
		{name: "remove soft-pinned without force", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			putPinned(t, e.m, "k", 64, ReplicaConfig{ReplicaNum: 1, WithSoftPin: true})
		}, op: func(e env) error { return e.m.Remove("k", false) }},
		{name: "putstart bigger than the pool", setup: withSeg, op: func(e env) error {
			_, err := e.m.PutStart("c1", "k", 1<<40, ReplicaConfig{ReplicaNum: 1})
			return err
		}, want: store.ErrNoAvailableHandle},
		{name: "putstart unknown preferred segment falls back", setup: withSeg, op: func(e env) error {
			_, err := e.m.PutStart("c1", "k", 64, ReplicaConfig{ReplicaNum: 1, PreferredSegment: "nowhere", PreferredSegments: []string{"nor-here"}})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, clk := newTestMaster(t, nil)
			e := env{m, clk}
			if tc.setup != nil {
				tc.setup(t, e)
			}
			checkErr(t, tc.op(e), tc.want)
		})
	}
}

// putPinned writes a complete object with cfg as client c1.
func putPinned(t testing.TB, m *Master, key string, size uint64, cfg ReplicaConfig) []Replica {
	t.Helper()
	rs, err := m.PutStart("c1", key, size, cfg)
	if err != nil {
		t.Fatalf("PutStart(%q, %+v): %v", key, cfg, err)
	}
	if err := m.PutEnd("c1", key); err != nil {
		t.Fatalf("PutEnd(%q): %v", key, err)
	}
	return rs
}

func lease(t testing.TB, m *Master, key string) {
	t.Helper()
	if _, _, err := m.GetReplicaList(key); err != nil {
		t.Fatalf("GetReplicaList(%q): %v", key, err)
	}
}

func keysOf(m *Master) []string {
	var ks []string
	for o := range m.objects.all {
		ks = append(ks, o.key)
	}
	slices.Sort(ks)
	return ks
}

func TestRemoveByRegex(t *testing.T) {
	setup := func(t *testing.T) *Master {
		m, _ := newTestMaster(t, nil)
		mustMount(t, m, "c1", testSeg("a", 1<<20))
		mustPut(t, m, "c1", "a/1", 64, 1)
		mustPut(t, m, "c1", "a/2", 64, 1)
		lease(t, m, "a/2")
		mustPutStart(t, m, "c1", "a/3", 64, 1)
		putPinned(t, m, "a/4", 64, ReplicaConfig{ReplicaNum: 1, WithHardPin: true})
		putPinned(t, m, "a/5", 64, ReplicaConfig{ReplicaNum: 1, WithSoftPin: true})
		mustPut(t, m, "c1", "b/1", 64, 1)
		mustPut(t, m, "c1", "xa/1", 64, 1) // unanchored expressions match inside keys
		return m
	}
	for _, tc := range []struct {
		expr  string
		force bool
		n     int
		left  []string
		// skipped: leased or hard-pinned, being written
		leased, writing int
	}{
		{"^a/", false, 2, []string{"a/2", "a/3", "a/4", "b/1", "xa/1"}, 2, 1},
		{"^a/", true, 4, []string{"a/3", "b/1", "xa/1"}, 0, 1},
		{"a/", false, 3, []string{"a/2", "a/3", "a/4", "b/1"}, 2, 1},
		{"^nothing$", true, 0, []string{"a/1", "a/2", "a/3", "a/4", "a/5", "b/1", "xa/1"}, 0, 0},
		{".*", true, 6, []string{"a/3"}, 0, 1},
	} {
		t.Run(fmt.Sprintf("%s force=%v", tc.expr, tc.force), func(t *testing.T) {
			m := setup(t)
			n, err := m.RemoveByRegex(tc.expr, tc.force)
			if err != nil || n != tc.n {
				t.Fatalf("RemoveByRegex = %d, %v; want %d", n, err, tc.n)
			}
			// The report on a fresh table says why the rest stayed.
			r, err := setup(t).RemoveByRegexReport(tc.expr, tc.force)
			require.NoError(t, err)
			assert.Equal(t, RegexRemoval{Removed: tc.n, Leased: tc.leased, Writing: tc.writing}, r)
			if got := keysOf(m); !slices.Equal(got, tc.left) {
				t.Fatalf("left %v, want %v", got, tc.left)
			}
			if st := m.Stats(); st.Used != uint64(64*len(tc.left)) {
				t.Fatalf("used %d, want %d", st.Used, 64*len(tc.left))
			}
		})
	}
}

func TestRemoveAll(t *testing.T) {
	for _, force := range []bool{false, true} {
		t.Run(fmt.Sprintf("force=%v", force), func(t *testing.T) {
			m, clk := newTestMaster(t, nil)
			mustMount(t, m, "c1", testSeg("a", 1<<20), testSeg("b", 1<<20))
			mustPut(t, m, "c1", "plain", 100, 2)
			mustPut(t, m, "c1", "leased", 100, 1)
			lease(t, m, "leased")
			mustPutStart(t, m, "c1", "writing", 100, 1)
			putPinned(t, m, "hard", 100, ReplicaConfig{ReplicaNum: 1, WithHardPin: true})
			putPinned(t, m, "soft", 100, ReplicaConfig{ReplicaNum: 1, WithSoftPin: true})
			want, left := 3, []string{"leased", "writing"}
			if force {
				want, left = 4, []string{"writing"}
			}
			if n := m.RemoveAll(force); n != want {
				t.Fatalf("RemoveAll = %d, want %d", n, want)
			}
			if got := keysOf(m); !slices.Equal(got, left) {
				t.Fatalf("left %v, want %v", got, left)
			}
			st := m.Stats()
			if st.Used != uint64(100*len(left)) || st.HardPinned != 0 || st.SoftPinned != 0 {
				t.Fatalf("stats after RemoveAll: %+v", st)
			}
			// Once the lease ends a plain RemoveAll takes the rest but the
			// write in progress.
			clk.Advance(time.Minute)
			m.RemoveAll(false)
			if got := keysOf(m); !slices.Equal(got, []string{"writing"}) {
				t.Fatalf("left %v", got)
			}
		})
	}
}

// TestAdminReadsGrantNoLease: GetSize, Stat and ListKeys leave an object
// removable and do not refresh its LRU position.
func TestAdminReadsGrantNoLease(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	mustMount(t, m, "c1", testSeg("a", 1024))
	mustPut(t, m, "c1", "old", 512, 1)
	mustPut(t, m, "c1", "new", 512, 1)
	if n, err := m.GetSize("old"); err != nil || n != 512 {
		t.Fatalf("GetSize = %d, %v", n, err)
	}
	if in, err := m.Stat("old"); err != nil || in.LeaseLeft != 0 || in.Size != 512 || !in.Complete || len(in.Replicas) != 1 {
		t.Fatalf("Stat = %+v, %v", in, err)
	}
	if _, _, err := m.ListKeys("", 0); err != nil {
		t.Fatal(err)
	}
	// "old" is still the least recently used: a new put evicts it.
	mustPut(t, m, "c1", "newer", 512, 1)
	if present(m, "old") || !present(m, "new") {
		t.Fatalf("keys %v: want old evicted, new kept", keysOf(m))
	}
	if err := m.Remove("new", false); err != nil {
		t.Fatalf("Remove after admin reads: %v", err)
	}
}

func TestListKeys(t *testing.T) {
	m, clk := newTestMaster(t, func(c *Config) { c.DefaultSoftPinTTL = time.Minute })
	mustMount(t, m, "c1", testSeg("a", 1<<20), testSeg("b", 1<<20))
	for _, k := range []string{"p/3", "p/1", "q/1", "p/2"} {
		mustPut(t, m, "c1", k, 100, 2)
	}
	mustPutStart(t, m, "c2", "p/0", 50, 1)
	putPinned(t, m, "p/9", 10, ReplicaConfig{ReplicaNum: 1, WithSoftPin: true, WithHardPin: true})
	lease(t, m, "p/1")
	clk.Advance(time.Second)

	keys := func(in []ObjectInfo) []string {
		var out []string
		for _, x := range in {
			out = append(out, x.Key)
		}
		return out
	}
	for _, tc := range []struct {
		prefix string
		limit  int
		want   []string
		total  int
	}{
		{"", 0, []string{"p/0", "p/1", "p/2", "p/3", "p/9", "q/1"}, 6},
		{"p/", 0, []string{"p/0", "p/1", "p/2", "p/3", "p/9"}, 5},
		{"p/", 2, []string{"p/0", "p/1"}, 5},
		{"q", 10, []string{"q/1"}, 1},
		{"zzz", 0, nil, 0},
	} {
		got, total, err := m.ListKeys(tc.prefix, tc.limit)
		if err != nil || !slices.Equal(keys(got), tc.want) || total != tc.total {
			t.Fatalf("ListKeys(%q, %d) = %v, %d, %v; want %v, %d", tc.prefix, tc.limit, keys(got), total, err, tc.want, tc.total)
		}
	}
	all, _, _ := m.ListKeys("p/", 0)
	byKey := map[string]ObjectInfo{}
	for _, x := range all {
		byKey[x.Key] = x
	}
	if x := byKey["p/0"]; x.Complete || x.Owner != "c2" || x.Size != 50 || len(x.Replicas) != 1 || x.Replicas[0].Status != ReplicaProcessing {
		t.Fatalf("p/0: %+v", x)
	}
	if x := byKey["p/1"]; !x.Complete || x.LeaseLeft != 9*time.Second || len(x.Replicas) != 2 {
		t.Fatalf("p/1: %+v", x)
	}
	if x := byKey["p/9"]; !x.SoftPin || !x.HardPin || x.SoftPinLeft != 59*time.Second {
		t.Fatalf("p/9: %+v", x)
	}
	// Listing took no lease: p/2 is removable.
	if err := m.Remove("p/2", false); err != nil {
		t.Fatal(err)
	}
}

func TestListAndQuerySegments(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	mustMount(t, m, "c1", testSeg("b", 4096))
	mustMount(t, m, "c2", testSeg("a", 2048))
	mustPut(t, m, "c1", "k", 1000, 2)
	putPinned(t, m, "k2", 100, ReplicaConfig{ReplicaNum: 1, PreferredSegment: "node-a"})
	segs := m.ListSegments()
	if len(segs) != 2 || segs[0].ID != "a" || segs[1].ID != "b" {
		t.Fatalf("ListSegments = %+v", segs)
	}
	a := segs[0]
	if a.Client != "c2" || a.Size != 2048 || a.Name != "node-a" || a.Used != 1100 || a.Objects != 2 || a.LargestFree == 0 {
		t.Fatalf("segment a: %+v", a)
	}
	q, err := m.QuerySegment("b")
	if err != nil || q != segs[1] || q.Used != 1000 || q.Objects != 1 || q.Client != "c1" {
		t.Fatalf("QuerySegment(b) = %+v, %v; list %+v", q, err, segs[1])
	}
}

// TestReMountSegment: a client that was expired remounts its segments in
// one call; remounting again (or a segment still mounted) is a no-op;
// a bad entry mounts nothing.
func TestReMountSegment(t *testing.T) {
	m, clk := newTestMaster(t, nil)
	segs := []Segment{testSeg("a", 4096), testSeg("b", 4096)}
	if err := m.ReMountSegment(segs, "c1"); err != nil {
		t.Fatal(err)
	}
	mustPut(t, m, "c1", "k", 64, 2)
	if err := m.ReMountSegment(segs, "c1"); err != nil {
		t.Fatalf("idempotent remount: %v", err)
	}
	if !present(m, "k") || m.Stats().Capacity != 8192 {
		t.Fatalf("a repeated remount changed the pool: %+v", m.Stats())
	}
	clk.Advance(m.Config().ClientTTL + time.Second)
	m.Tick()
	if st := m.Stats(); st.Segments != 0 {
		t.Fatalf("expired client's segments still mounted: %+v", st)
	}
	if need, _ := m.Ping("c1"); !need {
		t.Fatal("expired client not told to remount")
	}
	if err := m.ReMountSegment(segs, "c1"); err != nil {
		t.Fatal(err)
	}
	if st := m.Stats(); st.Segments != 2 || st.Capacity != 8192 {
		t.Fatalf("after remount: %+v", st)
	}
	bad := []Segment{testSeg("c", 4096), testSeg("d", 0)}
	checkErr(t, m.ReMountSegment(bad, "c1"), store.ErrInvalidParams)
	if _, err := m.QuerySegment("c"); err == nil {
		t.Fatal("a failed remount mounted part of its list")
	}
}

// TestPinStats: the pinned counts follow objects in and out of the table.
func TestPinStats(t *testing.T) {
	m, clk := newTestMaster(t, nil)
	mustMount(t, m, "c1", testSeg("a", 4096), testSeg("b", 4096))
	pins := func() (int, int) { st := m.Stats(); return st.SoftPinned, st.HardPinned }
	putPinned(t, m, "s1", 64, ReplicaConfig{ReplicaNum: 1, WithSoftPin: true})
	putPinned(t, m, "h1", 64, ReplicaConfig{ReplicaNum: 1, WithHardPin: true})
	putPinned(t, m, "sh", 64, ReplicaConfig{ReplicaNum: 2, WithSoftPin: true, WithHardPin: true})
	if _, err := m.PutStart("c1", "w", 64, ReplicaConfig{ReplicaNum: 1, WithSoftPin: true}); err != nil {
		t.Fatal(err)
	}
	if s, h := pins(); s != 3 || h != 2 {
		t.Fatalf("pins %d soft %d hard, want 3, 2", s, h)
	}
	if err := m.Remove("s1", false); err != nil {
		t.Fatal(err)
	}
	if err := m.PutRevoke("c1", "w"); err != nil {
		t.Fatal(err)
	}
	if s, h := pins(); s != 1 || h != 2 {
		t.Fatalf("pins %d soft %d hard, want 1, 2", s, h)
	}
	// A takeover of a stale pinned write drops its count.
	if _, err := m.PutStart("c1", "w2", 64, ReplicaConfig{ReplicaNum: 1, WithHardPin: true}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(m.Config().PutStartDiscardTimeout)
	if _, err := m.PutStart("c2", "w2", 64, ReplicaConfig{ReplicaNum: 1}); err != nil {
		t.Fatal(err)
	}
	if s, h := pins(); s != 1 || h != 2 {
		t.Fatalf("after takeover pins %d soft %d hard, want 1, 2", s, h)
	}
	// Losing all segments drops every object.
	for _, id := range []string{"a", "b"} {
		if err := m.UnmountSegment(id, "c1"); err != nil {
			t.Fatal(err)
		}
	}
	if s, h := pins(); s != 0 || h != 0 {
		t.Fatalf("after unmount pins %d soft %d hard", s, h)
	}
}
