package master

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"

	"github.com/mooncake-go/mooncake/core/store"
)

// TestMain checks that the package's tests leave no goroutines behind: the
// master is pure logic and must never start one.
func TestMain(m *testing.M) { leakcheck.Main(m) }

// fakeClock is a hand-advanced clock for Config.Now.
type fakeClock struct{ t time.Time }

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

// newTestMaster returns a master on a fake clock with a seeded rand; mod may
// adjust the config before New.
func newTestMaster(t testing.TB, mod func(*Config)) (*Master, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	cfg := Config{Now: clk.Now, Rand: rand.New(rand.NewPCG(7, 11))}
	if mod != nil {
		mod(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m, clk
}

// testSeg is a well-formed segment: id, name "node-<id>", a base address
// unique to the id, size bytes.
func testSeg(id string, size uint64) Segment {
	var h uint64 = 1
	for _, b := range []byte(id) {
		h = h*131 + uint64(b)
	}
	return Segment{ID: id, Name: "node-" + id, Base: (h%1024 + 1) << 32, Size: size, Protocol: "tcp"}
}

func mustMount(t testing.TB, m *Master, client string, segs ...Segment) {
	t.Helper()
	for _, s := range segs {
		if err := m.MountSegment(s, client); err != nil {
			t.Fatalf("MountSegment(%q): %v", s.ID, err)
		}
	}
}

func mustPutStart(t testing.TB, m *Master, client, key string, size uint64, n int) []Replica {
	t.Helper()
	rs, err := m.PutStart(client, key, size, ReplicaConfig{ReplicaNum: n})
	if err != nil {
		t.Fatalf("PutStart(%q, %d bytes, %d replicas): %v", key, size, n, err)
	}
	return rs
}

// mustPut writes a complete object: PutStart then PutEnd.
func mustPut(t testing.TB, m *Master, client, key string, size uint64, n int) []Replica {
	t.Helper()
	rs := mustPutStart(t, m, client, key, size, n)
	if err := m.PutEnd(client, key); err != nil {
		t.Fatalf("PutEnd(%q): %v", key, err)
	}
	return rs
}

// checkErr asserts err matches want both by errors.Is and by store.CodeOf;
// want nil means success.
func checkErr(t testing.TB, err error, want *store.Error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("got success, want %v", want.Code)
	}
	if !errors.Is(err, want) {
		t.Fatalf("error %v does not match %v", err, want.Code)
	}
	if got := store.CodeOf(err); got != want.Code {
		t.Fatalf("CodeOf(%v) = %v, want %v", err, got, want.Code)
	}
}

func exists(t testing.TB, m *Master, key string) bool {
	t.Helper()
	ok, err := m.ExistKey(key)
	if err != nil {
		t.Fatalf("ExistKey(%q): %v", key, err)
	}
	return ok
}

// present reports whether key is in the table without granting a lease.
func present(m *Master, key string) bool {
	return m.objects.get(key) != nil
}

func TestNewValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want *store.Error
	}{
		{"zero config takes defaults", Config{}, nil},
		{"eviction ratio above 1", Config{EvictionRatio: 1.5}, store.ErrInvalidParams},
		{"eviction ratio negative", Config{EvictionRatio: -0.1}, store.ErrInvalidParams},
		{"watermark above 1", Config{EvictionHighWatermark: 1.01}, store.ErrInvalidParams},
		{"watermark negative", Config{EvictionHighWatermark: -1}, store.ErrInvalidParams},
		{"bounds inclusive", Config{EvictionRatio: 1, EvictionHighWatermark: 1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(tc.cfg)
			checkErr(t, err, tc.want)
			if tc.want != nil && m != nil {
				t.Fatalf("New returned a master with an error")
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	if c.DefaultLeaseTTL != 10*time.Second || c.EvictionRatio != 0.05 || c.EvictionHighWatermark != 0.90 ||
		c.PutStartDiscardTimeout != 30*time.Second || c.PutStartReleaseTimeout != 600*time.Second ||
		c.ClientTTL != 10*time.Second || c.Now == nil || c.Rand == nil {
		t.Fatalf("defaults not applied: %+v", c)
	}
}

// TestErrors drives every method into each of its documented error codes.
func TestErrors(t *testing.T) {
	const ttl = 10 * time.Second
	long := strings.Repeat("k", MaxKeyLen+1)
	type env struct {
		m   *Master
		clk *fakeClock
	}
	withSeg := func(t *testing.T, e env) { mustMount(t, e.m, "c1", testSeg("a", 4096)) }
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, e env)
		op    func(e env) error
		want  *store.Error
	}{
		// MountSegment
		{name: "mount ok", op: func(e env) error { return e.m.MountSegment(testSeg("a", 64), "c1") }},
		{name: "mount empty id", op: func(e env) error {
			s := testSeg("a", 64)
			s.ID = ""
			return e.m.MountSegment(s, "c1")
		}, want: store.ErrInvalidParams},
		{name: "mount empty name", op: func(e env) error {
			s := testSeg("a", 64)
			s.Name = ""
			return e.m.MountSegment(s, "c1")
		}, want: store.ErrInvalidParams},
		{name: "mount size 0", op: func(e env) error { return e.m.MountSegment(testSeg("a", 0), "c1") }, want: store.ErrInvalidParams},
		{name: "mount base 0", op: func(e env) error {
			s := testSeg("a", 64)
			s.Base = 0
			return e.m.MountSegment(s, "c1")
		}, want: store.ErrInvalidParams},
		{name: "mount duplicate id", setup: withSeg, op: func(e env) error {
			return e.m.MountSegment(testSeg("a", 128), "c2")
		}, want: store.ErrSegmentExists},

		// UnmountSegment
		{name: "unmount unknown", setup: withSeg, op: func(e env) error { return e.m.UnmountSegment("zz", "c1") }, want: store.ErrSegmentNotFound},
		{name: "unmount twice", setup: withSeg, op: func(e env) error {
			if err := e.m.UnmountSegment("a", "c1"); err != nil {
				return err
			}
			return e.m.UnmountSegment("a", "c1")
		}, want: store.ErrSegmentNotFound},

		// PutStart
		{name: "putstart empty key", setup: withSeg, op: func(e env) error {
			_, err := e.m.PutStart("c1", "", 64, ReplicaConfig{ReplicaNum: 1})
			return err
		}, want: store.ErrInvalidParams},
		{name: "putstart key too long", setup: withSeg, op: func(e env) error {
			_, err := e.m.PutStart("c1", long, 64, ReplicaConfig{ReplicaNum: 1})
			return err
		}, want: store.ErrInvalidKey},
		{name: "putstart key of MaxKeyLen", setup: withSeg, op: func(e env) error {
			_, err := e.m.PutStart("c1", long[:MaxKeyLen], 64, ReplicaConfig{ReplicaNum: 1})
			return err
		}},
		{name: "putstart size 0", setup: withSeg, op: func(e env) error {
			_, err := e.m.PutStart("c1", "k", 0, ReplicaConfig{ReplicaNum: 1})
			return err
		}, want: store.ErrInvalidParams},
		{name: "putstart replica_num 0", setup: withSeg, op: func(e env) error {
			_, err := e.m.PutStart("c1", "k", 64, ReplicaConfig{})
			return err
		}, want: store.ErrInvalidParams},
		{name: "putstart replica_num negative", setup: withSeg, op: func(e env) error {
			_, err := e.m.PutStart("c1", "k", 64, ReplicaConfig{ReplicaNum: -1})
			return err
		}, want: store.ErrInvalidParams},
		{name: "putstart duplicate complete key", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPut(t, e.m, "c1", "k", 64, 1)
			e.clk.Advance(time.Hour) // age does not matter for a complete key
		}, op: func(e env) error {
			_, err := e.m.PutStart("c2", "k", 64, ReplicaConfig{ReplicaNum: 1})
			return err
		}, want: store.ErrObjectAlreadyExists},
		{name: "putstart duplicate in-progress key younger than discard timeout", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPutStart(t, e.m, "c1", "k", 64, 1)
			e.clk.Advance(e.m.Config().PutStartDiscardTimeout - time.Nanosecond)
		}, op: func(e env) error {
			_, err := e.m.PutStart("c2", "k", 64, ReplicaConfig{ReplicaNum: 1})
			return err
		}, want: store.ErrObjectAlreadyExists},
		{name: "putstart same client in progress", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPutStart(t, e.m, "c1", "k", 64, 1)
		}, op: func(e env) error {
			_, err := e.m.PutStart("c1", "k", 64, ReplicaConfig{ReplicaNum: 1})
			return err
		}, want: store.ErrObjectAlreadyExists},
		{name: "putstart no segments", op: func(e env) error {
			_, err := e.m.PutStart("c1", "k", 64, ReplicaConfig{ReplicaNum: 1})
			return err
		}, want: store.ErrNoAvailableHandle},
		{name: "putstart bigger than capacity", setup: withSeg, op: func(e env) error {
			_, err := e.m.PutStart("c1", "k", 4097, ReplicaConfig{ReplicaNum: 1})
			return err
		}, want: store.ErrNoAvailableHandle},
		{name: "putstart bigger than any segment is striped", setup: func(t *testing.T, e env) {
			mustMount(t, e.m, "c1", testSeg("a", 1024), testSeg("b", 1024))
		}, op: func(e env) error {
			_, err := e.m.PutStart("c1", "k", 1500, ReplicaConfig{ReplicaNum: 1})
			return err
		}},
		{name: "putstart bigger than any segment and the free space", setup: func(t *testing.T, e env) {
			mustMount(t, e.m, "c1", testSeg("a", 1024), testSeg("b", 1024))
			mustPutStart(t, e.m, "c1", "busy", 1000, 1) // in progress: not evictable
		}, op: func(e env) error {
			_, err := e.m.PutStart("c1", "k", 1500, ReplicaConfig{ReplicaNum: 1})
			return err
		}, want: store.ErrNoAvailableHandle},
		{name: "putstart exactly capacity", setup: withSeg, op: func(e env) error {
			_, err := e.m.PutStart("c1", "k", 4096, ReplicaConfig{ReplicaNum: 1})
			return err
		}},

		// PutEnd
		{name: "putend unknown", setup: withSeg, op: func(e env) error { return e.m.PutEnd("c1", "k") }, want: store.ErrObjectNotFound},
		{name: "putend wrong client", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPutStart(t, e.m, "c1", "k", 64, 1)
		}, op: func(e env) error { return e.m.PutEnd("c2", "k") }, want: store.ErrIllegalClient},
		{name: "putend wrong client on complete", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPut(t, e.m, "c1", "k", 64, 1)
		}, op: func(e env) error { return e.m.PutEnd("c2", "k") }, want: store.ErrIllegalClient},
		{name: "putend idempotent", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPut(t, e.m, "c1", "k", 64, 1)
		}, op: func(e env) error { return e.m.PutEnd("c1", "k") }},

		// PutRevoke
		{name: "putrevoke unknown", setup: withSeg, op: func(e env) error { return e.m.PutRevoke("c1", "k") }, want: store.ErrObjectNotFound},
		{name: "putrevoke wrong client", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPutStart(t, e.m, "c1", "k", 64, 1)
		}, op: func(e env) error { return e.m.PutRevoke("c2", "k") }, want: store.ErrIllegalClient},
		{name: "putrevoke complete", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPut(t, e.m, "c1", "k", 64, 1)
		}, op: func(e env) error { return e.m.PutRevoke("c1", "k") }, want: store.ErrInvalidWrite},
		{name: "putrevoke twice", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPutStart(t, e.m, "c1", "k", 64, 1)
			if err := e.m.PutRevoke("c1", "k"); err != nil {
				t.Fatal(err)
			}
		}, op: func(e env) error { return e.m.PutRevoke("c1", "k") }, want: store.ErrObjectNotFound},

		// GetReplicaList
		{name: "get unknown", setup: withSeg, op: func(e env) error {
			_, _, err := e.m.GetReplicaList("k")
			return err
		}, want: store.ErrObjectNotFound},
		{name: "get not ready", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPutStart(t, e.m, "c1", "k", 64, 1)
		}, op: func(e env) error {
			_, _, err := e.m.GetReplicaList("k")
			return err
		}, want: store.ErrReplicaIsNotReady},
		{name: "get empty key", op: func(e env) error {
			_, _, err := e.m.GetReplicaList("")
			return err
		}, want: store.ErrInvalidParams},
		{name: "get key too long", op: func(e env) error {
			_, _, err := e.m.GetReplicaList(long)
			return err
		}, want: store.ErrInvalidKey},

		// ExistKey
		{name: "exist empty key", op: func(e env) error {
			_, err := e.m.ExistKey("")
			return err
		}, want: store.ErrInvalidParams},
		{name: "exist key too long", op: func(e env) error {
			_, err := e.m.ExistKey(long)
			return err
		}, want: store.ErrInvalidKey},

		// Remove
		{name: "remove unknown", setup: withSeg, op: func(e env) error { return e.m.Remove("k", false) }, want: store.ErrObjectNotFound},
		{name: "remove unknown force", setup: withSeg, op: func(e env) error { return e.m.Remove("k", true) }, want: store.ErrObjectNotFound},
		{name: "remove empty key", op: func(e env) error { return e.m.Remove("", true) }, want: store.ErrInvalidParams},
		{name: "remove key too long", op: func(e env) error { return e.m.Remove(long, true) }, want: store.ErrInvalidKey},
		{name: "remove unleased", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPut(t, e.m, "c1", "k", 64, 1)
		}, op: func(e env) error { return e.m.Remove("k", false) }},
		{name: "remove leased without force", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPut(t, e.m, "c1", "k", 64, 1)
			if _, _, err := e.m.GetReplicaList("k"); err != nil {
				t.Fatal(err)
			}
			e.clk.Advance(ttl - time.Nanosecond)
		}, op: func(e env) error { return e.m.Remove("k", false) }, want: store.ErrObjectHasLease},
		{name: "remove leased by ExistKey without force", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPut(t, e.m, "c1", "k", 64, 1)
			if !exists(t, e.m, "k") {
				t.Fatal("k does not exist")
			}
		}, op: func(e env) error { return e.m.Remove("k", false) }, want: store.ErrObjectHasLease},
		{name: "remove leased with force", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPut(t, e.m, "c1", "k", 64, 1)
			if _, _, err := e.m.GetReplicaList("k"); err != nil {
				t.Fatal(err)
			}
		}, op: func(e env) error { return e.m.Remove("k", true) }},
		{name: "remove when lease ends", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPut(t, e.m, "c1", "k", 64, 1)
			if _, _, err := e.m.GetReplicaList("k"); err != nil {
				t.Fatal(err)
			}
			e.clk.Advance(ttl)
		}, op: func(e env) error { return e.m.Remove("k", false) }},
		{name: "remove in progress", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPutStart(t, e.m, "c1", "k", 64, 1)
		}, op: func(e env) error { return e.m.Remove("k", false) }, want: store.ErrReplicaIsNotReady},
		{name: "remove in progress force", setup: func(t *testing.T, e env) {
			withSeg(t, e)
			mustPutStart(t, e.m, "c1", "k", 64, 1)
		}, op: func(e env) error { return e.m.Remove("k", true) }, want: store.ErrReplicaIsNotReady},

		// Ping
		{name: "ping empty id", op: func(e env) error {
			_, err := e.m.Ping("")
			return err
		}, want: store.ErrInvalidParams},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, clk := newTestMaster(t, func(c *Config) { c.DefaultLeaseTTL = ttl })
			e := env{m, clk}
			if tc.setup != nil {
				tc.setup(t, e)
			}
			checkErr(t, tc.op(e), tc.want)
		})
	}
}

func TestPutEndMakesReadable(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	mustMount(t, m, "c1", testSeg("a", 4096))
	rs := mustPutStart(t, m, "c1", "k", 100, 1)
	if len(rs) != 1 || rs[0].Status != ReplicaProcessing || rs[0].Size != 100 {
		t.Fatalf("PutStart replicas = %+v", rs)
	}
	if exists(t, m, "k") {
		t.Fatal("ExistKey true for an in-progress key")
	}
	if err := m.PutEnd("c1", "k"); err != nil {
		t.Fatal(err)
	}
	if !exists(t, m, "k") {
		t.Fatal("ExistKey false after PutEnd")
	}
	got, ttl, err := m.GetReplicaList("k")
	if err != nil {
		t.Fatal(err)
	}
	if ttl != m.Config().DefaultLeaseTTL {
		t.Fatalf("lease ttl %v, want %v", ttl, m.Config().DefaultLeaseTTL)
	}
	if len(got) != 1 || got[0].Status != ReplicaComplete || got[0].Addr != rs[0].Addr || got[0].SegmentID != "a" ||
		got[0].Segment != "node-a" || got[0].Size != 100 {
		t.Fatalf("GetReplicaList = %+v, PutStart gave %+v", got, rs)
	}
	// A second PutEnd changes nothing.
	if err := m.PutEnd("c1", "k"); err != nil {
		t.Fatal(err)
	}
	if st := m.Stats(); st.Objects != 1 || st.Used != 100 {
		t.Fatalf("stats %v", st)
	}
}

func TestExistKey(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	mustMount(t, m, "c1", testSeg("a", 4096))
	mustPutStart(t, m, "c1", "progress", 64, 1)
	mustPut(t, m, "c1", "done", 64, 1)
	for _, tc := range []struct {
		key  string
		want bool
	}{{"absent", false}, {"progress", false}, {"done", true}} {
		t.Run(tc.key, func(t *testing.T) {
			if got := exists(t, m, tc.key); got != tc.want {
				t.Fatalf("ExistKey(%q) = %v, want %v", tc.key, got, tc.want)
			}
		})
	}
}

func TestPutRevokeFreesSpace(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	mustMount(t, m, "c1", testSeg("a", 1024), testSeg("b", 1024))
	mustPutStart(t, m, "c1", "k", 1024, 2)
	if st := m.Stats(); st.Used != 2048 || st.Objects != 1 {
		t.Fatalf("after PutStart: %v", st)
	}
	// The pool is full: another key cannot be placed (nothing evictable).
	if _, err := m.PutStart("c1", "other", 64, ReplicaConfig{ReplicaNum: 1}); !errors.Is(err, store.ErrNoAvailableHandle) {
		t.Fatalf("PutStart on a full pool: %v", err)
	}
	if err := m.PutRevoke("c1", "k"); err != nil {
		t.Fatal(err)
	}
	st := m.Stats()
	if st.Used != 0 || st.Objects != 0 {
		t.Fatalf("after PutRevoke: %v", st)
	}
	for _, sd := range st.SegmentsDetail {
		if sd.Used != 0 || sd.Objects != 0 {
			t.Fatalf("segment %s still used after revoke: %+v", sd.ID, sd)
		}
	}
	if _, _, err := m.GetReplicaList("k"); !errors.Is(err, store.ErrObjectNotFound) {
		t.Fatalf("GetReplicaList after revoke: %v", err)
	}
	// The same key can be written again at once, and the space is reusable.
	mustPut(t, m, "c2", "k", 1024, 2)
}

func TestReplicas(t *testing.T) {
	for _, tc := range []struct {
		name       string
		segments   int
		replicaNum int
		want       int
	}{
		{"1 of 1 segment", 1, 1, 1},
		{"2 over 3 segments", 3, 2, 2},
		{"3 over 3 segments", 3, 3, 3},
		{"3 with 2 segments is best effort", 2, 3, 2},
		{"2 with one segment", 1, 2, 1},
		{"100 over 4 segments", 4, 100, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newTestMaster(t, nil)
			segs := map[string]Segment{}
			for i := range tc.segments {
				s := testSeg(fmt.Sprintf("s%d", i), 1<<20)
				segs[s.ID] = s
				mustMount(t, m, "c1", s)
			}
			for k := range 20 {
				key := fmt.Sprintf("k%d", k)
				const size = 1000
				rs := mustPutStart(t, m, "c1", key, size, tc.replicaNum)
				checkReplicas(t, rs, segs, size, ReplicaProcessing, tc.want)
				if err := m.PutEnd("c1", key); err != nil {
					t.Fatal(err)
				}
				got, _, err := m.GetReplicaList(key)
				if err != nil {
					t.Fatal(err)
				}
				checkReplicas(t, got, segs, size, ReplicaComplete, tc.want)
				if !slices.EqualFunc(rs, got, func(a, b Replica) bool { return a.SegmentID == b.SegmentID && a.Addr == b.Addr }) {
					t.Fatalf("GetReplicaList %+v differs from PutStart %+v", got, rs)
				}
			}
			if st := m.Stats(); st.Used != uint64(20*1000*tc.want) {
				t.Fatalf("used %d, want %d", st.Used, 20*1000*tc.want)
			}
		})
	}
}

// checkReplicas asserts want replicas of size bytes with status st. Every
// piece (the replica itself unless striped) lies inside its segment's
// [base, base+size) and is aligned; no two pieces of the value share a
// segment; a striped replica has at least two pieces summing to size and
// empty top-level Segment/SegmentID/Addr.
func checkReplicas(t testing.TB, rs []Replica, segs map[string]Segment, size uint64, st ReplicaStatus, want int) {
	t.Helper()
	if len(rs) != want {
		t.Fatalf("%d replicas, want %d: %+v", len(rs), want, rs)
	}
	seen := map[string]bool{}
	for _, r := range rs {
		if r.Size != size || r.Status != st {
			t.Fatalf("replica %+v: want size %d, status %d", r, size, st)
		}
		if len(r.Slices) > 0 {
			if len(r.Slices) < 2 || r.Segment != "" || r.SegmentID != "" || r.Addr != 0 {
				t.Fatalf("striped replica %+v: want >= 2 slices and no top-level location", r)
			}
		}
		var sum uint64
		for _, p := range r.Pieces() {
			s, ok := segs[p.SegmentID]
			if !ok {
				t.Fatalf("replica on unknown segment %q", p.SegmentID)
			}
			if seen[p.SegmentID] {
				t.Fatalf("two replicas (or pieces) on segment %q: %+v", p.SegmentID, rs)
			}
			seen[p.SegmentID] = true
			if p.Segment != s.Name || p.Size == 0 {
				t.Fatalf("piece %+v: want segment name %q and a size", p, s.Name)
			}
			if p.Addr < s.Base || p.Addr+p.Size > s.Base+s.Size {
				t.Fatalf("piece [%#x, %#x) outside segment %q [%#x, %#x)", p.Addr, p.Addr+p.Size, s.ID, s.Base, s.Base+s.Size)
			}
			if (p.Addr-s.Base)%AllocAlign != 0 {
				t.Fatalf("piece offset %#x not %d-aligned", p.Addr-s.Base, AllocAlign)
			}
			sum += p.Size
		}
		if sum != size {
			t.Fatalf("replica %+v: pieces hold %d bytes of %d", r, sum, size)
		}
	}
}

func TestPlacementCoversAllSegments(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	for i := range 5 {
		mustMount(t, m, "c1", testSeg(fmt.Sprintf("s%d", i), 1<<20))
	}
	count := map[string]int{}
	for k := range 500 {
		rs := mustPut(t, m, "c1", fmt.Sprintf("k%d", k), 64, 1)
		count[rs[0].SegmentID]++
	}
	for _, sd := range m.Stats().SegmentsDetail {
		if count[sd.ID] == 0 || sd.Objects != count[sd.ID] {
			t.Fatalf("segment %s: %d puts, stats %d objects (all: %v)", sd.ID, count[sd.ID], sd.Objects, count)
		}
		// Random placement: every segment gets a fair share (500/5 = 100).
		if count[sd.ID] < 50 {
			t.Fatalf("segment %s got only %d of 500 puts: %v", sd.ID, count[sd.ID], count)
		}
	}
}

// TestPlacementDeterministic: the same seed and calls give the same
// placement (the master reads randomness only from Config.Rand).
func TestPlacementDeterministic(t *testing.T) {
	run := func() []string {
		m, _ := newTestMaster(t, nil)
		for i := range 4 {
			mustMount(t, m, "c1", testSeg(fmt.Sprintf("s%d", i), 1<<20))
		}
		var out []string
		for k := range 50 {
			for _, r := range mustPut(t, m, "c1", fmt.Sprintf("k%d", k), 100, 2) {
				out = append(out, fmt.Sprintf("%s@%d", r.SegmentID, r.Addr))
			}
		}
		return out
	}
	if a, b := run(), run(); !slices.Equal(a, b) {
		t.Fatalf("placement differs between identical runs:\n%v\n%v", a, b)
	}
}

func TestPreferredSegment(t *testing.T) {
	setup := func(t *testing.T) *Master {
		m, _ := newTestMaster(t, nil)
		mustMount(t, m, "c1", testSeg("a", 1<<20), testSeg("b", 1024), testSeg("c", 1<<20))
		return m
	}
	t.Run("honoured with space", func(t *testing.T) {
		m := setup(t)
		for k := range 16 {
			rs, err := m.PutStart("c1", fmt.Sprintf("k%d", k), 64, ReplicaConfig{ReplicaNum: 1, PreferredSegment: "node-b"})
			if err != nil {
				t.Fatal(err)
			}
			if rs[0].SegmentID != "b" {
				t.Fatalf("put %d landed on %s, want preferred b", k, rs[0].SegmentID)
			}
		}
		// b is full now: the next put falls back to another segment.
		rs, err := m.PutStart("c1", "spill", 64, ReplicaConfig{ReplicaNum: 1, PreferredSegment: "node-b"})
		if err != nil {
			t.Fatal(err)
		}
		if rs[0].SegmentID == "b" {
			t.Fatal("put landed on a full preferred segment")
		}
	})
	t.Run("first of several replicas", func(t *testing.T) {
		m := setup(t)
		for k := range 10 {
			rs, err := m.PutStart("c1", fmt.Sprintf("k%d", k), 64, ReplicaConfig{ReplicaNum: 2, PreferredSegment: "node-b"})
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != 2 || rs[0].SegmentID != "b" || rs[1].SegmentID == "b" {
				t.Fatalf("put %d: %+v, want b first then another segment", k, rs)
			}
		}
	})
	t.Run("unknown name ignored", func(t *testing.T) {
		m := setup(t)
		rs, err := m.PutStart("c1", "k", 64, ReplicaConfig{ReplicaNum: 1, PreferredSegment: "node-zz"})
		if err != nil || len(rs) != 1 {
			t.Fatalf("PutStart = %+v, %v", rs, err)
		}
	})
}

func TestStalePutStartTakeover(t *testing.T) {
	const (
		discard = 30 * time.Second
		release = 600 * time.Second
	)
	for _, via := range []string{"Tick", "PutStart"} {
		t.Run("release via "+via, func(t *testing.T) {
			m, clk := newTestMaster(t, func(c *Config) {
				c.PutStartDiscardTimeout = discard
				c.PutStartReleaseTimeout = release
				c.ClientTTL = time.Hour
			})
			mustMount(t, m, "c0", testSeg("a", 1024))
			old := mustPutStart(t, m, "c1", "k", 256, 1)

			clk.Advance(discard - time.Nanosecond)
			_, err := m.PutStart("c2", "k", 256, ReplicaConfig{ReplicaNum: 1})
			checkErr(t, err, store.ErrObjectAlreadyExists)

			clk.Advance(time.Nanosecond)
			rs, err := m.PutStart("c2", "k", 256, ReplicaConfig{ReplicaNum: 1})
			checkErr(t, err, nil)
			if rs[0].Addr == old[0].Addr {
				t.Fatal("the new write reuses the old writer's range while it may still be writing")
			}
			st := m.Stats()
			if st.DiscardedBytes != 256 || st.Used != 512 || st.Objects != 1 {
				t.Fatalf("after takeover: used %d discarded %d objects %d", st.Used, st.DiscardedBytes, st.Objects)
			}
			// The key now belongs to c2: the old writer can neither end nor
			// revoke it.
			checkErr(t, m.PutEnd("c1", "k"), store.ErrIllegalClient)
			checkErr(t, m.PutRevoke("c1", "k"), store.ErrIllegalClient)
			checkErr(t, m.PutEnd("c2", "k"), nil)

			doRelease := func() {
				if via == "Tick" {
					m.Tick()
				} else {
					mustPutStart(t, m, "c3", fmt.Sprintf("other-%d", clk.Now().UnixNano()), 64, 1)
				}
			}
			clk.Advance(release - time.Nanosecond) // 1 ns before the release deadline
			doRelease()
			if st := m.Stats(); st.DiscardedBytes != 256 {
				t.Fatalf("discarded space released early: %v / discarded %d", st, st.DiscardedBytes)
			}
			clk.Advance(time.Nanosecond)
			doRelease()
			st = m.Stats()
			var extra uint64
			if via == "PutStart" {
				extra = 2 * 64
			}
			if st.DiscardedBytes != 0 || st.Used != 256+extra {
				t.Fatalf("after release: used %d (want %d), discarded %d", st.Used, 256+extra, st.DiscardedBytes)
			}
			if sd := st.SegmentsDetail[0]; sd.Used != st.Used {
				t.Fatalf("segment allocator used %d, master used %d", sd.Used, st.Used)
			}
		})
	}
}

// TestTakeoverFreesSpaceForReuse: once released, a taken-over write's space
// can be allocated again (the allocator really freed it).
func TestTakeoverFreesSpaceForReuse(t *testing.T) {
	m, clk := newTestMaster(t, func(c *Config) {
		c.PutStartDiscardTimeout = time.Second
		c.PutStartReleaseTimeout = 2 * time.Second
		c.ClientTTL = time.Hour
	})
	mustMount(t, m, "c0", testSeg("a", 1024))
	mustPutStart(t, m, "c1", "k", 512, 1)
	clk.Advance(time.Second)
	mustPutStart(t, m, "c2", "k", 512, 1) // takeover; pool now full
	if _, err := m.PutStart("c2", "x", 64, ReplicaConfig{ReplicaNum: 1}); !errors.Is(err, store.ErrNoAvailableHandle) {
		t.Fatalf("PutStart while discarded space is held: %v", err)
	}
	clk.Advance(2 * time.Second)
	mustPutStart(t, m, "c2", "x", 512, 1) // releases the discard first, then fits
	if st := m.Stats(); st.Used != 1024 || st.DiscardedBytes != 0 {
		t.Fatalf("stats %v discarded %d", st, st.DiscardedBytes)
	}
}

// fillComplete writes n complete objects k0..k(n-1) of size bytes in order,
// so k0 is the least recently used.
func fillComplete(t testing.TB, m *Master, n int, size uint64) {
	t.Helper()
	for i := range n {
		mustPut(t, m, "c1", fmt.Sprintf("k%d", i), size, 1)
	}
}

func TestEvictionLRUOnPutStart(t *testing.T) {
	m, clk := newTestMaster(t, func(c *Config) {
		c.EvictionHighWatermark = 1 // Tick never evicts; PutStart does
		c.DefaultLeaseTTL = time.Second
		c.ClientTTL = time.Hour
	})
	mustMount(t, m, "c1", testSeg("a", 640))
	fillComplete(t, m, 10, 64)
	// Touch k0 and k1: they become the most recently used. Let their
	// leases lapse so only recency protects them.
	for _, k := range []string{"k0", "k1"} {
		if _, _, err := m.GetReplicaList(k); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Second)
	rs := mustPutStart(t, m, "c1", "big", 192, 1)
	if len(rs) != 1 {
		t.Fatalf("replicas %+v", rs)
	}
	for i := range 10 {
		k := fmt.Sprintf("k%d", i)
		gone := i >= 2 && i <= 4
		if present(m, k) == gone {
			t.Errorf("%s present = %v, want %v", k, !gone, gone)
		}
	}
	st := m.Stats()
	if st.EvictedObjects != 3 || st.EvictedBytes != 192 || st.Used != 640 || st.AllocFailures != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestEvictionSkipsLeased(t *testing.T) {
	m, clk := newTestMaster(t, func(c *Config) {
		c.EvictionHighWatermark = 1
		c.DefaultLeaseTTL = 10 * time.Second
		c.ClientTTL = time.Hour
	})
	mustMount(t, m, "c1", testSeg("a", 640))
	fillComplete(t, m, 10, 64)
	for i := range 10 {
		if _, _, err := m.GetReplicaList(fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := m.PutStart("c1", "new", 64, ReplicaConfig{ReplicaNum: 1})
	checkErr(t, err, store.ErrNoAvailableHandle)
	if st := m.Stats(); st.Objects != 10 || st.EvictedObjects != 0 || st.AllocFailures != 1 {
		t.Fatalf("leased objects evicted: %+v", st)
	}
	clk.Advance(10*time.Second - time.Nanosecond)
	_, err = m.PutStart("c1", "new", 64, ReplicaConfig{ReplicaNum: 1})
	checkErr(t, err, store.ErrNoAvailableHandle)
	clk.Advance(time.Nanosecond)
	mustPutStart(t, m, "c1", "new", 64, 1)
	if st := m.Stats(); st.EvictedObjects != 1 || present(m, "k0") {
		t.Fatalf("after lease expiry: %+v, k0 present %v", st, present(m, "k0"))
	}

	// A partly leased pool: only the unleased ones go.
	t.Run("mixed", func(t *testing.T) {
		m, _ := newTestMaster(t, func(c *Config) { c.EvictionHighWatermark = 1; c.ClientTTL = time.Hour })
		mustMount(t, m, "c1", testSeg("a", 640))
		fillComplete(t, m, 10, 64)
		for _, k := range []string{"k0", "k2", "k4"} {
			if _, _, err := m.GetReplicaList(k); err != nil {
				t.Fatal(err)
			}
		}
		// 7 unleased objects; ask for a bit more than 3 slots.
		mustPutStart(t, m, "c1", "new", 192, 1)
		for _, k := range []string{"k0", "k2", "k4"} {
			if !present(m, k) {
				t.Fatalf("leased %s was evicted", k)
			}
		}
	})
}

func TestEvictionSkipsInProgress(t *testing.T) {
	m, _ := newTestMaster(t, func(c *Config) { c.EvictionHighWatermark = 1; c.ClientTTL = time.Hour })
	mustMount(t, m, "c1", testSeg("a", 640))
	for i := range 10 {
		mustPutStart(t, m, "c1", fmt.Sprintf("p%d", i), 64, 1)
	}
	_, err := m.PutStart("c1", "new", 64, ReplicaConfig{ReplicaNum: 1})
	checkErr(t, err, store.ErrNoAvailableHandle)
	if st := m.Stats(); st.Objects != 10 || st.EvictedObjects != 0 {
		t.Fatalf("in-progress objects evicted: %+v", st)
	}
	// Complete half; now those (only) can be evicted.
	for i := range 5 {
		if err := m.PutEnd("c1", fmt.Sprintf("p%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	mustPutStart(t, m, "c1", "new", 128, 1)
	for i := 5; i < 10; i++ {
		if !present(m, fmt.Sprintf("p%d", i)) {
			t.Fatalf("in-progress p%d was evicted", i)
		}
	}
	if st := m.Stats(); st.EvictedObjects != 2 {
		t.Fatalf("evicted %d, want 2", st.EvictedObjects)
	}
}

// TestEvictionForSecondReplica: PutStart evicts to make room for every
// replica asked for, not only the first, and keeps replicas distinct.
func TestEvictionForSecondReplica(t *testing.T) {
	m, _ := newTestMaster(t, func(c *Config) { c.EvictionHighWatermark = 1; c.ClientTTL = time.Hour })
	mustMount(t, m, "c1", testSeg("a", 640), testSeg("b", 1<<20))
	rs, err := m.PutStart("c1", "x", 640, ReplicaConfig{ReplicaNum: 1, PreferredSegment: "node-a"})
	if err != nil || rs[0].SegmentID != "a" {
		t.Fatalf("PutStart = %+v, %v", rs, err)
	}
	checkErr(t, m.PutEnd("c1", "x"), nil)
	rs = mustPutStart(t, m, "c1", "y", 640, 2)
	if len(rs) != 2 || rs[0].SegmentID == rs[1].SegmentID {
		t.Fatalf("replicas %+v", rs)
	}
	if present(m, "x") {
		t.Fatal("x should have been evicted to make room on a")
	}
}

func TestTickEviction(t *testing.T) {
	// One 6400-byte segment holds 100 objects of 64 bytes.
	for _, tc := range []struct {
		name      string
		fill      int
		watermark float64
		ratio     float64
		leased    bool
		want      int
	}{
		{name: "below watermark", fill: 50, watermark: 0.9, ratio: 0.05, want: 0},
		{name: "at watermark", fill: 90, watermark: 0.9, ratio: 0.05, want: 0},
		{name: "just above watermark frees ratio plus excess", fill: 91, watermark: 0.9, ratio: 0.05, want: 6},
		{name: "full frees excess plus ratio", fill: 100, watermark: 0.9, ratio: 0.05, want: 15},
		{name: "large ratio", fill: 91, watermark: 0.9, ratio: 0.2, want: 21},
		{name: "low watermark", fill: 40, watermark: 0.25, ratio: 0.05, want: 20},
		{name: "watermark 1.0 disables", fill: 100, watermark: 1.0, ratio: 0.05, want: 0},
		{name: "leased objects stay", fill: 100, watermark: 0.9, ratio: 0.05, leased: true, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newTestMaster(t, func(c *Config) {
				c.EvictionHighWatermark = tc.watermark
				c.EvictionRatio = tc.ratio
				c.ClientTTL = time.Hour
			})
			mustMount(t, m, "c1", testSeg("a", 6400))
			fillComplete(t, m, tc.fill, 64)
			if tc.leased {
				for i := range tc.fill {
					if _, _, err := m.GetReplicaList(fmt.Sprintf("k%d", i)); err != nil {
						t.Fatal(err)
					}
				}
			}
			got := m.Tick()
			if got != tc.want {
				t.Fatalf("Tick evicted %d, want %d", got, tc.want)
			}
			st := m.Stats()
			if st.Objects != tc.fill-tc.want || st.Used != uint64(64*(tc.fill-tc.want)) || st.EvictedObjects != uint64(tc.want) ||
				st.EvictedBytes != uint64(64*tc.want) {
				t.Fatalf("stats after Tick: %+v", st)
			}
			// The oldest go first.
			for i := range tc.fill {
				if want := tc.leased || i >= tc.want; present(m, fmt.Sprintf("k%d", i)) != want {
					t.Fatalf("k%d present = %v, want %v", i, !want, want)
				}
			}
			// A second Tick does nothing once usage is at or below the
			// watermark (or when nothing can be evicted).
			if tc.want > 0 {
				if st.Used*100 > uint64(tc.watermark*100)*st.Capacity {
					t.Fatalf("still above watermark after Tick: %d/%d", st.Used, st.Capacity)
				}
			}
			if again := m.Tick(); again != 0 {
				t.Fatalf("second Tick evicted %d", again)
			}
		})
	}
}

func TestClientTTL(t *testing.T) {
	const ttl = 10 * time.Second
	m, clk := newTestMaster(t, func(c *Config) { c.ClientTTL = ttl; c.DefaultLeaseTTL = time.Hour })
	mustMount(t, m, "c1", testSeg("a", 4096))
	mustMount(t, m, "c2", testSeg("b", 4096))
	for _, p := range []struct{ client, key, seg string }{{"c1", "x", "node-a"}, {"c2", "y", "node-b"}} {
		rs, err := m.PutStart(p.client, p.key, 64, ReplicaConfig{ReplicaNum: 1, PreferredSegment: p.seg})
		if err != nil || rs[0].Segment != p.seg {
			t.Fatalf("PutStart(%s) = %+v, %v", p.key, rs, err)
		}
		checkErr(t, m.PutEnd(p.client, p.key), nil)
	}
	// A lease does not keep an object whose segment goes away.
	if _, _, err := m.GetReplicaList("x"); err != nil {
		t.Fatal(err)
	}
	// c2 keeps pinging, c1 goes silent.
	clk.Advance(ttl / 2)
	if need, _ := m.Ping("c2"); need {
		t.Fatal("live client asked to remount")
	}
	clk.Advance(ttl / 2)
	if need, _ := m.Ping("c2"); need {
		t.Fatal("live client asked to remount")
	}
	m.Tick() // c1's deadline is exactly now: still alive
	if st := m.Stats(); st.Segments != 2 || st.Clients != 2 {
		t.Fatalf("client expired at its deadline: %+v", st)
	}
	clk.Advance(time.Nanosecond)
	m.Tick()
	st := m.Stats()
	if st.Segments != 1 || st.Clients != 1 || st.Objects != 1 || st.Used != 64 || st.Capacity != 4096 {
		t.Fatalf("after expiry: %+v", st)
	}
	if _, _, err := m.GetReplicaList("x"); !errors.Is(err, store.ErrObjectNotFound) {
		t.Fatalf("x after its segment's owner expired: %v", err)
	}
	if !exists(t, m, "y") {
		t.Fatal("y lost")
	}
	if need, err := m.Ping("c1"); err != nil || !need {
		t.Fatalf("Ping(c1) after expiry = %v, %v; want needRemount", need, err)
	}
	if need, _ := m.Ping("c2"); need {
		t.Fatal("c2 asked to remount")
	}
	// c1 remounts and the pool is whole again.
	mustMount(t, m, "c1", testSeg("a", 4096))
	if st := m.Stats(); st.Segments != 2 || st.Capacity != 8192 {
		t.Fatalf("after remount: %+v", st)
	}
}

// TestClientTTLRefreshedByCalls: PutStart, PutEnd and MountSegment count as
// signs of life, like Ping.
func TestClientTTLRefreshedByCalls(t *testing.T) {
	const ttl = 10 * time.Second
	m, clk := newTestMaster(t, func(c *Config) { c.ClientTTL = ttl; c.PutStartDiscardTimeout = time.Hour })
	mustMount(t, m, "c1", testSeg("a", 4096))
	clk.Advance(ttl)
	mustPutStart(t, m, "c1", "k", 64, 1)
	clk.Advance(ttl)
	checkErr(t, m.PutEnd("c1", "k"), nil)
	clk.Advance(ttl)
	m.Tick()
	if st := m.Stats(); st.Segments != 1 || st.Objects != 1 {
		t.Fatalf("client expired although it kept calling: %+v", st)
	}
}

func TestUnmountDropsReplicas(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	mustMount(t, m, "c1", testSeg("a", 4096), testSeg("b", 4096))
	mustPut(t, m, "c1", "k", 100, 2)
	mustPutStart(t, m, "c1", "w", 50, 2)
	if st := m.Stats(); st.Used != 300 {
		t.Fatalf("used %d, want 300", st.Used)
	}
	checkErr(t, m.UnmountSegment("a", "c1"), nil)
	rs, _, err := m.GetReplicaList("k")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].SegmentID != "b" {
		t.Fatalf("after unmounting a: %+v", rs)
	}
	if st := m.Stats(); st.Used != 150 || st.Capacity != 4096 || st.Objects != 2 || st.Segments != 1 {
		t.Fatalf("after unmounting a: %+v", st)
	}
	checkErr(t, m.UnmountSegment("b", "c1"), nil)
	if _, _, err := m.GetReplicaList("k"); !errors.Is(err, store.ErrObjectNotFound) {
		t.Fatalf("k after both segments went: %v", err)
	}
	// The in-progress write lost all its replicas: its PutEnd fails.
	checkErr(t, m.PutEnd("c1", "w"), store.ErrObjectNotFound)
	if st := m.Stats(); st.Used != 0 || st.Capacity != 0 || st.Objects != 0 || st.Segments != 0 {
		t.Fatalf("after unmounting both: %+v", st)
	}
	// Remounting an id that was unmounted gives a fresh, empty segment.
	mustMount(t, m, "c1", testSeg("a", 4096))
	if st := m.Stats(); st.Used != 0 || st.SegmentsDetail[0].Used != 0 {
		t.Fatalf("remounted segment not empty: %+v", st)
	}
}

// TestUnmountDropsDiscardedSpace: space of a taken-over write on a segment
// that is unmounted disappears from Used as well as from DiscardedBytes.
func TestUnmountDropsDiscardedSpace(t *testing.T) {
	m, clk := newTestMaster(t, func(c *Config) {
		c.PutStartDiscardTimeout = time.Second
		c.ClientTTL = time.Hour
	})
	mustMount(t, m, "c1", testSeg("a", 4096), testSeg("b", 4096))
	rs, err := m.PutStart("c1", "k", 256, ReplicaConfig{ReplicaNum: 1, PreferredSegment: "node-a"})
	if err != nil || rs[0].SegmentID != "a" {
		t.Fatalf("PutStart = %+v, %v", rs, err)
	}
	clk.Advance(time.Second)
	rs, err = m.PutStart("c2", "k", 256, ReplicaConfig{ReplicaNum: 1, PreferredSegment: "node-b"})
	if err != nil || rs[0].SegmentID != "b" {
		t.Fatalf("takeover PutStart = %+v, %v", rs, err)
	}
	if st := m.Stats(); st.Used != 512 || st.DiscardedBytes != 256 {
		t.Fatalf("after takeover: used %d discarded %d", st.Used, st.DiscardedBytes)
	}
	checkErr(t, m.UnmountSegment("a", "c1"), nil)
	st := m.Stats()
	if st.DiscardedBytes != 0 || st.Used != 256 {
		t.Fatalf("after unmounting the discarded write's segment: used %d (want 256), discarded %d (want 0)", st.Used, st.DiscardedBytes)
	}
	if st.SegmentsDetail[0].Used != st.Used {
		t.Fatalf("allocators hold %d bytes, master says %d", st.SegmentsDetail[0].Used, st.Used)
	}
}

func TestStatsString(t *testing.T) {
	m, _ := newTestMaster(t, nil)
	mustMount(t, m, "c1", testSeg("a", 4096))
	mustPut(t, m, "c1", "k", 100, 1)
	got := m.Stats().String()
	if want := "used 100/4096 bytes, 1 objects, 1 segments, 0 evicted"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}
