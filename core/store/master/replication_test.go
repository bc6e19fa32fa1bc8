package master

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/store"
)

// replEvent is one Observer call, recorded.
type replEvent struct {
	op       string // mount, unmount, commit, remove
	seg      Segment
	client   string
	id       string
	obj      ObjectRecord
	key      string
	capacity uint64
}

// recorder is an Observer that keeps every event.
type recorder struct{ events []replEvent }

func (r *recorder) SegmentMounted(seg Segment, client string) {
	r.events = append(r.events, replEvent{op: "mount", seg: seg, client: client})
}
func (r *recorder) SegmentUnmounted(id string) {
	r.events = append(r.events, replEvent{op: "unmount", id: id})
}
func (r *recorder) ObjectCommitted(obj ObjectRecord) {
	r.events = append(r.events, replEvent{op: "commit", obj: obj})
}
func (r *recorder) ObjectRemoved(key string) {
	r.events = append(r.events, replEvent{op: "remove", key: key})
}
func (r *recorder) ObjectUpdated(obj ObjectRecord) {
	r.events = append(r.events, replEvent{op: "update", obj: obj})
}
func (r *recorder) DiskMounted(id string, capacity uint64) {
	r.events = append(r.events, replEvent{op: "disk-mount", id: id, capacity: capacity})
}
func (r *recorder) DiskUnmounted(id string) {
	r.events = append(r.events, replEvent{op: "disk-unmount", id: id})
}

// replay applies e to m through the Restore methods, as a new leader does.
func replay(m *Master, e replEvent) error {
	switch e.op {
	case "mount":
		return m.RestoreSegment(e.seg, e.client)
	case "unmount":
		return m.RestoreUnmount(e.id)
	case "commit":
		return m.RestoreObject(e.obj)
	case "remove":
		if !m.RestoreRemove(e.key) {
			return fmt.Errorf("remove %q: no such complete object", e.key)
		}
		return nil
	case "update":
		return m.RestoreUpdate(e.obj)
	case "disk-mount":
		return m.RestoreDisk(e.id, e.capacity)
	case "disk-unmount":
		return m.RestoreDiskUnmount(e.id)
	}
	return fmt.Errorf("unknown event %q", e.op)
}

// canonical sorts a dump's objects by key: the LRU order of reads is not
// replicated.
func canonical(st State) State {
	st.Objects = slices.Clone(st.Objects)
	slices.SortFunc(st.Objects, func(a, b ObjectRecord) int { return cmp.Compare(a.Key, b.Key) })
	return st
}

// committedBytes is the space the complete objects of st occupy.
func committedBytes(st State) uint64 {
	var n uint64
	for _, o := range st.Objects {
		n += o.Size * uint64(len(o.Replicas))
	}
	return n
}

func replSeg(id string, size uint64) Segment {
	return Segment{ID: id, Name: "node-" + id, Base: 1 << 32, Size: size, Protocol: "tcp"}
}

type replClock struct{ t time.Time }

func (c *replClock) now() time.Time { return c.t }

func newReplMaster(t testing.TB, clk *replClock, ob Observer, seed uint64, tweak ...func(*Config)) *Master {
	t.Helper()
	cfg := Config{Now: clk.now, Rand: rand.New(rand.NewPCG(seed, 3)), Observer: ob,
		DefaultLeaseTTL: time.Second, ClientTTL: 5 * time.Second, EvictionHighWatermark: 0.8, EvictionRatio: 0.1}
	for _, f := range tweak {
		f(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestReplicationReplay drives a master with random operations and follows
// it with (a) a master fed every observed event through the Restore
// methods and (b) masters restored from a Dump taken at a random step and
// then fed the later events. After every step all of them hold exactly the
// leader's committed objects at the same places, and their allocators
// hold exactly those bytes.
func TestReplicationReplay(t *testing.T) {
	seeds := 60
	if testing.Short() {
		seeds = 10
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { replayRun(t, seed, 300, nil) })
	}
}

// TestReplicationReplayOffload is TestReplicationReplay with disk tiers:
// segments get and lose tiers, owners take tasks and report them done or
// failed in random order, evict files, and readers stage disk-only
// objects; write-through and offload-on-evict alternate by seed. The
// followers must hold the same objects, LOCAL_DISK replicas included.
func TestReplicationReplayOffload(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	var total Stats
	for seed := range uint64(seeds) {
		onEvict := seed%2 == 1
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			st := replayRun(t, seed, 300, func(c *Config) { c.EnableOffload, c.OffloadOnEvict = true, onEvict })
			total.Offloads += st.Offloads
			total.OffloadFailures += st.OffloadFailures
			total.DiskHits += st.DiskHits
			total.DiskMisses += st.DiskMisses
			total.DiskEvictions += st.DiskEvictions
			total.EvictedObjects += st.EvictedObjects
		})
	}
	t.Logf("over all seeds: %d offloads (%d failed), %d loads (%d failed), %d disk evictions, %d evicted", total.Offloads,
		total.OffloadFailures, total.DiskHits, total.DiskMisses, total.DiskEvictions, total.EvictedObjects)
	if total.Offloads == 0 || total.OffloadFailures == 0 || total.DiskHits == 0 || total.DiskMisses == 0 || total.DiskEvictions == 0 {
		t.Fatal("the random walk missed a tier transition; adjust its weights")
	}
}

func replayRun(t *testing.T, seed uint64, steps int, tweak func(*Config)) Stats {
	rng := rand.New(rand.NewPCG(seed, 17))
	clk := &replClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	rec := &recorder{}
	var tweaks []func(*Config)
	if tweak != nil {
		tweaks = append(tweaks, tweak)
	}
	leader := newReplMaster(t, clk, rec, seed, tweaks...)
	follower := newReplMaster(t, clk, nil, seed+1, tweaks...)
	offload := tweak != nil
	var taken []struct {
		seg, client string
		task        TierTask
	}
	type snap struct {
		m    *Master
		from int // events already in the dump
	}
	var snaps []snap
	applied := 0
	var inflight []string
	clients := []string{"c0", "c1", "c2"}
	segs := []string{"s0", "s1", "s2", "s3"}
	for step := range steps {
		client := clients[rng.IntN(len(clients))]
		op := rng.IntN(100)
		if offload && rng.IntN(3) == 0 {
			op = -1
		}
		switch {
		case op < 0:
			// An owner's move: attach or detach a tier, take tasks, report
			// one (ok or failed), or evict a file.
			id := segs[rng.IntN(len(segs))]
			var tiered []string
			for _, x := range segs {
				if s, ok := leader.segs[x]; ok && s.disk != nil {
					tiered = append(tiered, x)
				}
			}
			if len(tiered) > 0 && rng.IntN(4) != 0 {
				id = tiered[rng.IntN(len(tiered))] // mostly where things happen
			}
			s, ok := leader.segs[id]
			if !ok {
				break
			}
			switch k := rng.IntN(10); {
			case k == 0:
				_ = leader.MountLocalDisk(id, s.client, uint64(16<<10+rng.IntN(64<<10)))
			case k == 1 && rng.IntN(4) == 0:
				_ = leader.UnmountLocalDisk(id, s.client)
			case k < 5:
				ts, _ := leader.TakeTierTasks(id, s.client, 1+rng.IntN(3))
				if rng.IntN(2) == 0 { // a quick owner reports at once
					for _, task := range ts {
						_ = leader.CompleteTierTask(id, s.client, TaskResult{Kind: task.Kind, Key: task.Key, ObjectID: task.ObjectID, OK: rng.IntN(5) != 0})
					}
					break
				}
				for _, task := range ts {
					taken = append(taken, struct {
						seg, client string
						task        TierTask
					}{id, s.client, task})
				}
			case k < 8 && len(taken) > 0:
				i := rng.IntN(len(taken))
				x := taken[i]
				taken = slices.Delete(taken, i, i+1)
				_ = leader.CompleteTierTask(x.seg, x.client, TaskResult{Kind: x.task.Kind, Key: x.task.Key, ObjectID: x.task.ObjectID, OK: rng.IntN(5) != 0})
			case s.disk != nil && s.disk.objects.len() > 0:
				var on []*object
				for o := range s.disk.objects.all {
					on = append(on, o)
				}
				slices.SortFunc(on, func(a, b *object) int { return cmp.Compare(a.key, b.key) })
				o := on[rng.IntN(len(on))]
				if k == 8 {
					_ = leader.CompleteTierTask(id, s.client, TaskResult{Kind: TaskDiskEvicted, Key: o.key, ObjectID: o.id})
				} else {
					_, _, _, _ = leader.GetOrLoad(o.key) // a reader of a disk replica
				}
			}
		case op < 8:
			id := segs[rng.IntN(len(segs))]
			_ = leader.MountSegment(replSeg(id, uint64(8<<10+rng.IntN(56<<10))), client)
		case op < 11:
			id := segs[rng.IntN(len(segs))]
			if s, ok := leader.segs[id]; ok {
				_ = leader.UnmountSegment(id, s.client)
			}
		case op < 50:
			key := fmt.Sprintf("k%d", rng.IntN(80))
			size := uint64(1 + rng.IntN(12<<10))
			if rng.IntN(20) == 0 {
				size = uint64(70<<10 + rng.IntN(40<<10)) // larger than any segment: striped
			}
			cfg := ReplicaConfig{ReplicaNum: 1 + rng.IntN(2), WithHardPin: rng.IntN(10) == 0, WithSoftPin: rng.IntN(10) == 0}
			if _, err := leader.PutStart(client, key, size, cfg); err != nil {
				break
			}
			if rng.IntN(4) == 0 {
				inflight = append(inflight, client+"\x00"+key)
			} else if err := leader.PutEnd(client, key); err != nil {
				t.Fatalf("step %d: PutEnd(%q): %v", step, key, err)
			}
		case op < 58 && len(inflight) > 0:
			i := rng.IntN(len(inflight))
			ck := inflight[i]
			inflight = slices.Delete(inflight, i, i+1)
			c, k, _ := strings.Cut(ck, "\x00")
			if rng.IntN(3) == 0 {
				_ = leader.PutRevoke(c, k)
			} else {
				_ = leader.PutEnd(c, k)
			}
		case op < 70:
			_ = leader.Remove(fmt.Sprintf("k%d", rng.IntN(80)), rng.IntN(2) == 0)
		case op < 80:
			_, _, _ = leader.GetReplicaList(fmt.Sprintf("k%d", rng.IntN(80)))
		case op < 92:
			clk.t = clk.t.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			for _, c := range clients {
				if rng.IntN(4) != 0 {
					_, _ = leader.Ping(c)
				}
			}
			leader.Tick()
		case op < 94:
			leader.RemoveAll(rng.IntN(2) == 0)
		case op < 97:
			// Snapshot: restore the dump into a fresh master.
			m := newReplMaster(t, clk, nil, seed+uint64(step), tweaks...)
			if err := m.Restore(leader.Dump()); err != nil {
				t.Fatalf("step %d: Restore(Dump()): %v", step, err)
			}
			snaps = append(snaps, snap{m, len(rec.events)})
		default:
			leader.Tick()
		}
		for ; applied < len(rec.events); applied++ {
			e := rec.events[applied]
			if err := replay(follower, e); err != nil {
				t.Fatalf("step %d: replay event %d %+v: %v", step, applied, e, err)
			}
			for _, s := range snaps {
				if applied >= s.from {
					if err := replay(s.m, e); err != nil {
						t.Fatalf("step %d: replay event %d on snapshot from %d: %v", step, applied, s.from, err)
					}
				}
			}
		}
		want := canonical(leader.Dump())
		for i, m := range append([]*Master{follower}, func() []*Master {
			var ms []*Master
			for _, s := range snaps {
				ms = append(ms, s.m)
			}
			return ms
		}()...) {
			got := canonical(m.Dump())
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d: master %d (0 = follower, else snapshot) diverged:\n got %+v\nwant %+v", step, i, got, want)
			}
			st := m.Stats()
			var allocated uint64
			for _, s := range m.order {
				allocated += s.alloc.Stats().Used
			}
			if allocated != committedBytes(want) || st.Used != allocated {
				t.Fatalf("step %d: master %d allocators hold %d bytes (Stats.Used %d), committed objects %d", step, i, allocated, st.Used, committedBytes(want))
			}
		}
		// The leader's own books: its allocators hold what Stats.Used
		// says (objects, staging ranges, discarded writes), and its disk
		// usage is the sum of its LOCAL_DISK replicas.
		st := leader.Stats()
		var allocated, disk uint64
		for _, s := range leader.order {
			allocated += s.alloc.Stats().Used
		}
		for _, o := range want.Objects {
			if o.Disk != "" {
				disk += o.Size
			}
		}
		if allocated != st.Used || disk != st.DiskUsed || st.PendingOffloadBytes > st.Used {
			t.Fatalf("step %d: leader allocators %d bytes, Stats.Used %d; disk replicas %d bytes, Stats.DiskUsed %d; pending %d",
				step, allocated, st.Used, disk, st.DiskUsed, st.PendingOffloadBytes)
		}
	}
	return leader.Stats()
}

func TestObserverEvents(t *testing.T) {
	clk := &replClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	rec := &recorder{}
	m := newReplMaster(t, clk, rec, 1)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.MountSegment(replSeg("a", 1<<20), "c"))
	_, err := m.PutStart("c", "x", 100, ReplicaConfig{ReplicaNum: 1})
	must(err)
	_, err = m.PutStart("c", "y", 100, ReplicaConfig{ReplicaNum: 1})
	must(err)
	must(m.PutEnd("c", "x"))
	must(m.PutEnd("c", "x")) // idempotent: no second event
	must(m.PutRevoke("c", "y"))
	must(m.Remove("x", true))
	must(m.UnmountSegment("a", "c"))
	var ops []string
	for _, e := range rec.events {
		ops = append(ops, e.op)
	}
	if want := []string{"mount", "commit", "remove", "unmount"}; !slices.Equal(ops, want) {
		t.Fatalf("events %v, want %v", ops, want)
	}
	if c := rec.events[1].obj; c.Key != "x" || c.Size != 100 || c.Owner != "c" || len(c.Replicas) != 1 || c.Replicas[0].SegmentID != "a" {
		t.Fatalf("commit event %+v", c)
	}
}

func TestRestoreSemantics(t *testing.T) {
	clk := &replClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	rec := &recorder{}
	m := newReplMaster(t, clk, rec, 1)
	if err := m.RestoreSegment(replSeg("a", 1<<20), "node"); err != nil {
		t.Fatal(err)
	}
	obj := ObjectRecord{Key: "x", Size: 4096, Owner: "w", Replicas: []ReplicaRecord{{SegmentID: "a", Offset: 8192}}}
	if err := m.RestoreObject(obj); err != nil {
		t.Fatal(err)
	}
	if err := m.RestoreObject(obj); err != nil {
		t.Fatalf("restoring the same object again: %v", err)
	}
	if len(rec.events) != 0 {
		t.Fatalf("restoring reported %d events to the observer", len(rec.events))
	}
	tests := []struct {
		name string
		rec  ObjectRecord
		want *store.Error
	}{
		{"overlap", ObjectRecord{Key: "y", Size: 100, Replicas: []ReplicaRecord{{SegmentID: "a", Offset: 8192 + 4000}}}, store.ErrNoAvailableHandle},
		{"unknown segment", ObjectRecord{Key: "y", Size: 100, Replicas: []ReplicaRecord{{SegmentID: "b"}}}, store.ErrSegmentNotFound},
		{"other object under key", ObjectRecord{Key: "x", Size: 100, Replicas: []ReplicaRecord{{SegmentID: "a"}}}, store.ErrObjectAlreadyExists},
		{"no replicas", ObjectRecord{Key: "y", Size: 100}, store.ErrInvalidParams},
		{"short stripe", ObjectRecord{Key: "y", Size: 100, Replicas: []ReplicaRecord{{SegmentID: "a", Stripe: []PieceRecord{{SegmentID: "a", Size: 50}}}}}, store.ErrInvalidParams},
		{"past the segment", ObjectRecord{Key: "y", Size: 100, Replicas: []ReplicaRecord{{SegmentID: "a", Offset: 1 << 20}}}, store.ErrNoAvailableHandle},
		// No master places two pieces of one object on a segment (found by
		// core/store/ha's FuzzSnapshotRestore: such a record restored, and
		// broke the master's invariants).
		{"two replicas on one segment", ObjectRecord{Key: "y", Size: 100, Replicas: []ReplicaRecord{{SegmentID: "a", Offset: 0}, {SegmentID: "a", Offset: 200}}}, store.ErrInvalidParams},
		{"two pieces on one segment", ObjectRecord{Key: "y", Size: 100, Replicas: []ReplicaRecord{{SegmentID: "a", Stripe: []PieceRecord{{SegmentID: "a", Size: 50}, {SegmentID: "a", Offset: 100, Size: 50}}}}}, store.ErrInvalidParams},
	}
	before := m.Stats()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := m.RestoreObject(tt.rec); !errors.Is(err, tt.want) {
				t.Fatalf("RestoreObject: %v, want %v", err, tt.want.Code)
			}
			if after := m.Stats(); after.Used != before.Used || after.Objects != before.Objects {
				t.Fatalf("a failed restore changed the master: %v -> %v", before, after)
			}
		})
	}
	// The restored object is readable, leased for DefaultLeaseTTL, and its
	// writer's PutEnd stays idempotent.
	rs, _, err := m.GetReplicaList("x")
	if err != nil || len(rs) != 1 || rs[0].Addr != 1<<32+8192 || rs[0].Status != ReplicaComplete {
		t.Fatalf("GetReplicaList(x) = %+v, %v", rs, err)
	}
	if err := m.PutEnd("w", "x"); err != nil {
		t.Fatalf("PutEnd by the original writer: %v", err)
	}
	// The restored segment's client is alive.
	if need, err := m.Ping("node"); err != nil || need {
		t.Fatalf("Ping(node) = %v, %v; want known", need, err)
	}
	if err := m.Remove("x", false); !errors.Is(err, store.ErrObjectHasLease) {
		t.Fatalf("Remove of a freshly restored object: %v, want OBJECT_HAS_LEASE", err)
	}
	clk.t = clk.t.Add(2 * time.Second)
	if !m.RestoreRemove("x") || m.RestoreRemove("x") {
		t.Fatal("RestoreRemove: want true once, then false")
	}
	if err := m.RestoreUnmount("a"); err != nil {
		t.Fatal(err)
	}
	if err := m.RestoreUnmount("a"); !errors.Is(err, store.ErrSegmentNotFound) {
		t.Fatalf("second RestoreUnmount: %v", err)
	}
	if len(rec.events) != 0 {
		t.Fatalf("restoring reported %d events to the observer", len(rec.events))
	}
}
