package master

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/store"
)

// tierMaster is a master with offload on (onEvict picks the mode) and one
// 1000-byte segment "a" of client "node" with a 10000-byte disk tier.
func tierMaster(t *testing.T, onEvict bool, mod func(*Config)) (*Master, *fakeClock) {
	t.Helper()
	m, clk := newTestMaster(t, func(c *Config) {
		c.EnableOffload, c.OffloadOnEvict = true, onEvict
		c.EvictionHighWatermark, c.EvictionRatio = 0.5, 0.2
		c.DefaultLeaseTTL = time.Second
		if mod != nil {
			mod(c)
		}
	})
	mustMount(t, m, "node", testSeg("a", 1000))
	if err := m.MountLocalDisk("a", "node", 10000); err != nil {
		t.Fatalf("MountLocalDisk: %v", err)
	}
	return m, clk
}

func take(t *testing.T, m *Master, max int) []TierTask {
	t.Helper()
	ts, err := m.TakeTierTasks("a", "node", max)
	if err != nil {
		t.Fatalf("TakeTierTasks: %v", err)
	}
	return ts
}

func report(t *testing.T, m *Master, task TierTask, ok bool) {
	t.Helper()
	if err := m.CompleteTierTask("a", "node", TaskResult{Kind: task.Kind, Key: task.Key, ObjectID: task.ObjectID, OK: ok}); err != nil {
		t.Fatalf("CompleteTierTask(%s %q): %v", task.Kind, task.Key, err)
	}
}

func wantCode(t *testing.T, what string, err error, want store.ErrorCode) {
	t.Helper()
	if store.CodeOf(err) != want {
		t.Fatalf("%s: %v, want %s", what, err, want)
	}
}

// replicaTypes lists the types of key's replicas as Stat reports them.
func replicaTypes(t *testing.T, m *Master, key string) []ReplicaType {
	t.Helper()
	in, err := m.Stat(key)
	if err != nil {
		t.Fatalf("Stat(%q): %v", key, err)
	}
	var out []ReplicaType
	for _, r := range in.Replicas {
		out = append(out, r.Type)
	}
	return out
}

func TestTierConfigAndErrors(t *testing.T) {
	if _, err := New(Config{OffloadOnEvict: true}); store.CodeOf(err) != store.InvalidParams {
		t.Fatalf("offload_on_evict without enable_offload: %v", err)
	}
	off, _ := newTestMaster(t, nil)
	mustMount(t, off, "node", testSeg("a", 1000))
	wantCode(t, "mount disk with offload off", off.MountLocalDisk("a", "node", 100), store.UnableOffload)

	m, _ := tierMaster(t, true, nil)
	mustMount(t, m, "other", testSeg("b", 1000))
	tests := []struct {
		name string
		err  error
		want store.ErrorCode
	}{
		{"mount: empty id", m.MountLocalDisk("", "node", 1), store.InvalidParams},
		{"mount: capacity 0", m.MountLocalDisk("a", "node", 0), store.InvalidParams},
		{"mount: unknown segment", m.MountLocalDisk("zz", "node", 1), store.SegmentNotFound},
		{"mount: another client's segment", m.MountLocalDisk("b", "node", 1), store.IllegalClient},
		{"mount: same capacity again", m.MountLocalDisk("a", "node", 10000), store.OK},
		{"mount: other capacity", m.MountLocalDisk("a", "node", 5), store.SegmentAlreadyExists},
		{"take: max 0", func() error { _, err := m.TakeTierTasks("a", "node", 0); return err }(), store.InvalidParams},
		{"take: no tier", func() error { _, err := m.TakeTierTasks("b", "other", 1); return err }(), store.UnableOffload},
		{"take: wrong client", func() error { _, err := m.TakeTierTasks("a", "other", 1); return err }(), store.IllegalClient},
		{"take: unknown segment", func() error { _, err := m.TakeTierTasks("zz", "node", 1); return err }(), store.SegmentNotFound},
		{"take: empty id", func() error { _, err := m.TakeTierTasks("", "node", 1); return err }(), store.InvalidParams},
		{"complete: unknown kind", m.CompleteTierTask("a", "node", TaskResult{Kind: 9, Key: "k"}), store.InvalidParams},
		{"complete: no such task", m.CompleteTierTask("a", "node", TaskResult{Kind: TaskOffload, Key: "k", ObjectID: 1, OK: true}), store.TaskNotFound},
		{"complete: evicted file of no object", m.CompleteTierTask("a", "node", TaskResult{Kind: TaskDiskEvicted, Key: "k", ObjectID: 1}), store.ObjectNotFound},
		{"unmount disk: no tier", m.UnmountLocalDisk("b", "other"), store.UnableOffload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantCode(t, tt.name, tt.err, tt.want) })
	}
	if st := m.Stats(); st.DiskCapacity != 10000 || len(st.SegmentsDetail) != 2 || st.SegmentsDetail[0].DiskCapacity != 10000 {
		t.Fatalf("stats %+v", st)
	}
}

// TestOffloadOnEvict walks one object through the tier: eviction queues
// its offload (DRAM kept, still readable), the owner copies it (DRAM
// freed, LOCAL_DISK replica), a read stages it back (load), and the staged
// replica is served from DRAM again.
func TestOffloadOnEvict(t *testing.T) {
	m, clk := tierMaster(t, true, nil)
	seg := testSeg("a", 1000)
	for _, k := range []string{"k1", "k2", "k3"} {
		mustPut(t, m, "w", k, 200, 1)
	}
	clk.Advance(2 * time.Second) // leases of the puts are gone
	// Used 600/1000 > 0.5: the pass wants max(0.2, 0.6-0.5+0.2) = 300
	// bytes: k1 and k2 (LRU) are queued for offload, not dropped.
	if n := m.Tick(); n != 0 {
		t.Fatalf("Tick evicted %d objects; want offloads queued instead", n)
	}
	st := m.Stats()
	if st.Used != 600 || st.PendingOffloadBytes != 400 || st.Objects != 3 {
		t.Fatalf("after tick: %+v; want 600 used, 400 pending, 3 objects", st)
	}
	if n := m.Tick(); n != 0 || m.Stats().PendingOffloadBytes != 400 {
		t.Fatalf("second tick queued more: evicted %d, pending %d", n, m.Stats().PendingOffloadBytes)
	}
	rs, _, err := m.GetReplicaList("k3")
	if err != nil || len(rs) != 1 {
		t.Fatalf("k3 readable while others offload: %v %v", rs, err)
	}
	ts := take(t, m, 10)
	if len(ts) != 2 || ts[0].Kind != TaskOffload || ts[0].Key != "k1" || ts[1].Key != "k2" || ts[0].Size != 200 {
		t.Fatalf("tasks %+v; want offloads of k1, k2", ts)
	}
	if ts[0].Addr < seg.Base || ts[0].Addr+200 > seg.Base+seg.Size || ts[0].ObjectID == ts[1].ObjectID {
		t.Fatalf("task addresses/ids %+v", ts)
	}
	if len(take(t, m, 10)) != 0 {
		t.Fatal("a task was handed out twice")
	}
	// In flight: not removable without force; not evicted.
	wantCode(t, "remove while offloading", m.Remove("k1", false), store.ObjectReplicaBusy)
	report(t, m, ts[0], true)
	report(t, m, ts[1], true)
	st = m.Stats()
	if st.Used != 200 || st.PendingOffloadBytes != 0 || st.Offloads != 2 || st.DiskUsed != 400 || st.DiskObjects != 2 || st.EvictedObjects != 2 {
		t.Fatalf("after offloads: %+v", st)
	}
	if got := replicaTypes(t, m, "k1"); len(got) != 1 || got[0] != ReplicaLocalDisk {
		t.Fatalf("k1 replicas %v; want one LOCAL_DISK", got)
	}
	if !m.LookupWaits("k1") || m.LookupWaits("k3") {
		t.Fatalf("LookupWaits: disk-only k1 %v (want true: it is staged first), k3 in DRAM %v (want false)", m.LookupWaits("k1"), m.LookupWaits("k3"))
	}
	if ok, err := m.ExistKey("k1"); !ok || err != nil {
		t.Fatalf("ExistKey(disk-only k1) = %v, %v", ok, err)
	}
	if n, err := m.GetSize("k1"); n != 200 || err != nil {
		t.Fatalf("GetSize(k1) = %d, %v", n, err)
	}
	// A read stages k1: loading, until the owner loads it.
	_, _, loading, err := m.GetOrLoad("k1")
	if !loading || err != nil {
		t.Fatalf("GetOrLoad(k1) = loading %v, %v", loading, err)
	}
	seq := m.TierSeq()
	_, _, err = m.GetReplicaList("k1")
	wantCode(t, "GetReplicaList while loading", err, store.ReplicaIsNotReady)
	if m.TierSeq() != seq {
		t.Fatal("a second read queued a second load")
	}
	if st := m.Stats(); st.Used != 400 {
		t.Fatalf("staging range not allocated: used %d", st.Used)
	}
	ts = take(t, m, 10)
	if len(ts) != 1 || ts[0].Kind != TaskLoad || ts[0].Key != "k1" || ts[0].Size != 200 {
		t.Fatalf("tasks %+v; want a load of k1", ts)
	}
	report(t, m, ts[0], true)
	rs, _, err = m.GetReplicaList("k1")
	if err != nil || len(rs) != 1 || rs[0].Addr != ts[0].Addr || rs[0].Type != ReplicaMemory || rs[0].Status != ReplicaComplete {
		t.Fatalf("after load: %+v, %v; want the staged replica at %#x", rs, err, ts[0].Addr)
	}
	if got := replicaTypes(t, m, "k1"); len(got) != 2 || got[0] != ReplicaMemory || got[1] != ReplicaLocalDisk {
		t.Fatalf("k1 replicas %v; want DRAM + LOCAL_DISK", got)
	}
	if st := m.Stats(); st.DiskHits != 1 || st.Used != 400 {
		t.Fatalf("after load: %+v", st)
	}
	// A put that needs k1's and k3's space: k1, also on disk, loses its
	// DRAM at once; k3 is queued for offload, so the put fails now (as
	// upstream's, whose eviction is asynchronous) and succeeds once k3's
	// copy is on disk.
	clk.Advance(2 * time.Second)
	_, err = m.PutStart("w", "big", 700, ReplicaConfig{ReplicaNum: 1})
	wantCode(t, "put while k3 offloads", err, store.NoAvailableHandle)
	if got := replicaTypes(t, m, "k1"); len(got) != 1 || got[0] != ReplicaLocalDisk {
		t.Fatalf("k1 after eviction: %v; want LOCAL_DISK only", got)
	}
	ts = take(t, m, 10)
	if len(ts) != 1 || ts[0].Key != "k3" || m.Stats().PendingOffloadBytes != 200 {
		t.Fatalf("tasks %+v, pending %d; want k3's offload", ts, m.Stats().PendingOffloadBytes)
	}
	report(t, m, ts[0], true)
	if _, err := m.PutStart("w", "big", 700, ReplicaConfig{ReplicaNum: 1}); err != nil {
		t.Fatalf("put after k3's offload: %v", err)
	}
	if st := m.Stats(); st.DiskObjects != 3 || st.Used != 700 {
		t.Fatalf("final stats %+v", st)
	}
}

// TestLoadFailureIsMiss: a corrupt (or missing) file is a miss: the
// object is dropped and the staging range freed.
func TestLoadFailureIsMiss(t *testing.T) {
	m, clk := tierMaster(t, true, nil)
	mustPut(t, m, "w", "k", 300, 1)
	mustPut(t, m, "w", "pad", 300, 1)
	clk.Advance(2 * time.Second)
	m.Tick()
	report(t, m, take(t, m, 1)[0], true)
	if got := replicaTypes(t, m, "k"); len(got) != 1 || got[0] != ReplicaLocalDisk {
		t.Fatalf("k: %v; want LOCAL_DISK only", got)
	}
	used := m.Stats().Used
	if _, _, loading, _ := m.GetOrLoad("k"); !loading {
		t.Fatal("no load started")
	}
	report(t, m, take(t, m, 1)[0], false)
	_, _, err := m.GetReplicaList("k")
	wantCode(t, "get after a failed load", err, store.ObjectNotFound)
	st := m.Stats()
	if st.Used != used || st.DiskMisses != 1 || st.DiskUsed != 0 || st.DiskObjects != 0 {
		t.Fatalf("after failed load: %+v (used before %d)", st, used)
	}
}

// TestWriteThrough: without offload_on_evict every put is offloaded at
// once and keeps its DRAM; eviction then drops only the DRAM, objects
// already on disk first. An offload still queued when eviction comes is
// kept, and the object's DRAM goes once the copy is on disk (dropping it
// would lose it).
func TestWriteThrough(t *testing.T) {
	m, clk := tierMaster(t, false, nil)
	mustPut(t, m, "w", "k1", 200, 1)
	ts := take(t, m, 10)
	if len(ts) != 1 || ts[0].Kind != TaskOffload || ts[0].Key != "k1" {
		t.Fatalf("tasks %+v; want k1's offload", ts)
	}
	report(t, m, ts[0], true)
	if got := replicaTypes(t, m, "k1"); len(got) != 2 {
		t.Fatalf("k1: %v; want DRAM + LOCAL_DISK", got)
	}
	mustPut(t, m, "w", "k2", 200, 1) // its offload stays queued
	mustPut(t, m, "w", "k3", 200, 1)
	clk.Advance(2 * time.Second)
	m.Tick() // 600 > 500: frees 300 bytes: k1 (DRAM only), k2 (once copied)
	if got := replicaTypes(t, m, "k1"); len(got) != 1 || got[0] != ReplicaLocalDisk {
		t.Fatalf("k1: %v; want LOCAL_DISK only", got)
	}
	if st := m.Stats(); st.PendingOffloadBytes != 200 || st.Used != 400 {
		t.Fatalf("after the tick: %d bytes pending offload, %d used; want 200, 400", st.PendingOffloadBytes, st.Used)
	}
	ts = take(t, m, 10)
	if len(ts) != 2 || ts[0].Key != "k2" || ts[1].Key != "k3" {
		t.Fatalf("tasks %+v; want k2's and k3's offloads", ts)
	}
	for _, task := range ts {
		report(t, m, task, true)
	}
	if got := replicaTypes(t, m, "k2"); len(got) != 1 || got[0] != ReplicaLocalDisk {
		t.Fatalf("k2: %v; want LOCAL_DISK only", got)
	}
	if got := replicaTypes(t, m, "k3"); len(got) != 2 {
		t.Fatalf("k3: %v; want DRAM + LOCAL_DISK", got)
	}
	if st := m.Stats(); st.EvictedObjects != 2 || st.Used != 200 || st.Offloads != 3 || st.PendingOffloadBytes != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestOffloadFailureEvicts: with offload_on_evict a failed offload drops
// the object as a plain eviction would, and it is not offered again.
func TestOffloadFailureEvicts(t *testing.T) {
	m, clk := tierMaster(t, true, nil)
	mustPut(t, m, "w", "k", 600, 1)
	clk.Advance(2 * time.Second)
	m.Tick()
	report(t, m, take(t, m, 1)[0], false)
	if _, err := m.Stat("k"); store.CodeOf(err) != store.ObjectNotFound {
		t.Fatalf("k after failed offload: %v; want evicted", err)
	}
	if st := m.Stats(); st.OffloadFailures != 1 || st.Used != 0 || st.EvictedObjects != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestTierTaskTimeout: a taken load not reported in time is abandoned; its
// staging range is held one more timeout (the owner may still write it),
// a late report is refused, and the next read starts a new load.
func TestTierTaskTimeout(t *testing.T) {
	m, clk := tierMaster(t, true, func(c *Config) { c.TierTaskTimeout = time.Second })
	mustPut(t, m, "w", "k", 300, 1)
	mustPut(t, m, "w", "pad", 300, 1)
	clk.Advance(2 * time.Second)
	m.Tick()
	report(t, m, take(t, m, 1)[0], true)
	used := m.Stats().Used
	m.GetOrLoad("k")
	load := take(t, m, 1)[0]
	clk.Advance(1500 * time.Millisecond)
	m.Tick()
	st := m.Stats()
	if st.TierTaskTimeouts != 1 || st.DiscardedBytes != 300 || st.Used != used+300 {
		t.Fatalf("after timeout: %+v", st)
	}
	wantCode(t, "late report", m.CompleteTierTask("a", "node", TaskResult{Kind: TaskLoad, Key: "k", ObjectID: load.ObjectID, OK: true}), store.TaskNotFound)
	clk.Advance(time.Second)
	m.Tick()
	if st := m.Stats(); st.DiscardedBytes != 0 || st.Used != used {
		t.Fatalf("staging range not released: %+v", st)
	}
	if _, _, loading, err := m.GetOrLoad("k"); !loading || err != nil {
		t.Fatalf("new read: loading %v, %v", loading, err)
	}
	if ts := take(t, m, 1); len(ts) != 1 || ts[0].Kind != TaskLoad || ts[0].ObjectID != load.ObjectID {
		t.Fatalf("new load %+v", ts)
	}
}

// TestDiskEvictedAndUnmount: the owner's evicted files drop their disk
// replicas (a disk-only object goes); unmounting the segment drops its
// tier and every disk-only object on it.
func TestDiskEvictedAndUnmount(t *testing.T) {
	m, _ := tierMaster(t, false, nil)
	var ids = map[string]uint64{}
	for _, k := range []string{"k1", "k2", "k3"} {
		mustPut(t, m, "w", k, 100, 1)
		task := take(t, m, 1)[0]
		ids[k] = task.ObjectID
		report(t, m, task, true)
	}
	// k1 keeps its DRAM replica; k2 loses it first.
	if err := m.RestoreUpdate(ObjectRecord{Key: "none"}); store.CodeOf(err) != store.ObjectNotFound {
		t.Fatalf("RestoreUpdate of nothing: %v", err)
	}
	o := m.objects.get("k2")
	m.dropMemory(o)
	wantCode(t, "evicted file, wrong id", m.CompleteTierTask("a", "node", TaskResult{Kind: TaskDiskEvicted, Key: "k1", ObjectID: ids["k1"] + 100}), store.ObjectNotFound)
	for _, k := range []string{"k1", "k2"} {
		if err := m.CompleteTierTask("a", "node", TaskResult{Kind: TaskDiskEvicted, Key: k, ObjectID: ids[k]}); err != nil {
			t.Fatalf("evicted %s: %v", k, err)
		}
	}
	if got := replicaTypes(t, m, "k1"); len(got) != 1 || got[0] != ReplicaMemory {
		t.Fatalf("k1: %v; want DRAM only", got)
	}
	if _, err := m.Stat("k2"); store.CodeOf(err) != store.ObjectNotFound {
		t.Fatalf("k2: %v; want gone with its file", err)
	}
	if st := m.Stats(); st.DiskEvictions != 2 || st.DiskObjects != 1 {
		t.Fatalf("stats %+v", st)
	}
	m.dropMemory(m.objects.get("k3"))
	if err := m.UnmountSegment("a", "node"); err != nil {
		t.Fatal(err)
	}
	st := m.Stats()
	if st.Objects != 0 || st.DiskCapacity != 0 || st.DiskUsed != 0 || st.Used != 0 {
		t.Fatalf("after unmount: %+v", st)
	}
}

// TestStaleReportAfterReput: a report about an older value of a key (a
// forced remove and a new put meanwhile) is refused, so the old bytes
// never become the new value's disk copy.
func TestStaleReportAfterReput(t *testing.T) {
	m, _ := tierMaster(t, false, nil)
	mustPut(t, m, "w", "k", 100, 1)
	old := take(t, m, 1)[0]
	if err := m.Remove("k", true); err != nil {
		t.Fatalf("forced remove while offloading: %v", err)
	}
	mustPut(t, m, "w", "k", 100, 1)
	err := m.CompleteTierTask("a", "node", TaskResult{Kind: TaskOffload, Key: "k", ObjectID: old.ObjectID, OK: true})
	wantCode(t, "stale report", err, store.TaskNotFound)
	if got := replicaTypes(t, m, "k"); len(got) != 1 || got[0] != ReplicaMemory {
		t.Fatalf("k: %v; want DRAM only", got)
	}
	fresh := take(t, m, 1)
	if len(fresh) != 1 || fresh[0].ObjectID == old.ObjectID {
		t.Fatalf("new value's task %+v; want a new object id", fresh)
	}
}

// TestUnmountLocalDisk detaches a tier: disk-only objects go, objects in
// DRAM stay, in-flight tasks are cancelled.
func TestUnmountLocalDisk(t *testing.T) {
	m, _ := tierMaster(t, false, nil)
	mustPut(t, m, "w", "a1", 100, 1)
	report(t, m, take(t, m, 1)[0], true)
	m.dropMemory(m.objects.get("a1"))
	mustPut(t, m, "w", "a2", 100, 1) // its offload queued
	wantCode(t, "wrong client", m.UnmountLocalDisk("a", "w"), store.IllegalClient)
	if err := m.UnmountLocalDisk("a", "node"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Stat("a1"); !errors.Is(err, store.ErrObjectNotFound) {
		t.Fatalf("disk-only a1 survived: %v", err)
	}
	if got := replicaTypes(t, m, "a2"); len(got) != 1 || got[0] != ReplicaMemory {
		t.Fatalf("a2: %v", got)
	}
	_, err := m.TakeTierTasks("a", "node", 1)
	wantCode(t, "take after unmount", err, store.UnableOffload)
	if st := m.Stats(); st.DiskCapacity != 0 || st.Objects != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// offloadAll takes every queued task of segment "a" and reports it done.
func offloadAll(t *testing.T, m *Master) {
	t.Helper()
	for _, task := range take(t, m, 100) {
		report(t, m, task, true)
	}
}

// stage reads key, a disk-only object, until it is staged: GetOrLoad
// starts the load, the owner completes it.
func stage(t *testing.T, m *Master, key string) {
	t.Helper()
	if _, _, loading, err := m.GetOrLoad(key); !loading || err != nil {
		t.Fatalf("GetOrLoad(%q) = loading %v, %v; want a load", key, loading, err)
	}
	ts := take(t, m, 10)
	if len(ts) != 1 || ts[0].Kind != TaskLoad || ts[0].Key != key {
		t.Fatalf("tasks %+v; want the load of %q", ts, key)
	}
	report(t, m, ts[0], true)
	if rs, _, err := m.GetReplicaList(key); err != nil || len(rs) != 1 {
		t.Fatalf("GetReplicaList(%q) after its load: %+v, %v", key, rs, err)
	}
}

// TestStagingEvictsDiskCopiesAndWaitsForLeases: staging a disk-only
// object drops the DRAM of objects already on disk (least recently used
// first); when every such copy is leased, GetOrLoad refuses with
// NO_AVAILABLE_HANDLE and StagingRetry names the moment the first lease
// ends, after which staging succeeds.
func TestStagingEvictsDiskCopiesAndWaitsForLeases(t *testing.T) {
	m, clk := tierMaster(t, false, nil) // write-through: every put is copied
	for _, k := range []string{"d1", "d2", "d3"} {
		mustPut(t, m, "w", k, 300, 1)
		offloadAll(t, m)
	}
	mustPut(t, m, "w", "d4", 300, 1) // evicts d1's DRAM (on disk already)
	offloadAll(t, m)
	if got := replicaTypes(t, m, "d1"); len(got) != 1 || got[0] != ReplicaLocalDisk {
		t.Fatalf("d1: %v; want LOCAL_DISK only", got)
	}
	// Each read stages its object over the least recently used copy that
	// is also on disk: d2's, d3's, then d4's DRAM goes.
	for i, k := range []string{"d1", "d2", "d3"} {
		stage(t, m, k)
		victim := []string{"d2", "d3", "d4"}[i]
		if got := replicaTypes(t, m, victim); len(got) != 1 || got[0] != ReplicaLocalDisk {
			t.Fatalf("after staging %s, %s: %v; want LOCAL_DISK only", k, victim, got)
		}
	}
	// d1..d3 are leased (900 of 1000 bytes): no room for d4.
	failures := m.Stats().AllocFailures
	_, _, loading, err := m.GetOrLoad("d4")
	if loading {
		t.Fatal("d4 loading without room to stage it")
	}
	wantCode(t, "stage d4 with every DRAM copy leased", err, store.NoAvailableHandle)
	if st := m.Stats(); st.AllocFailures != failures+1 || st.Used != 900 {
		t.Fatalf("after the refusal: %d alloc failures (want %d), %d used (want 900)", st.AllocFailures, failures+1, st.Used)
	}
	at, wait := m.StagingRetry("d4")
	d1, _ := m.Stat("d1")
	if end := clk.Now().Add(d1.LeaseLeft); !wait || !at.Equal(end) {
		t.Fatalf("StagingRetry(d4) = %v, %v; want true at d1's lease end %v", at, wait, end)
	}
	if _, wait := m.StagingRetry("d1"); wait {
		t.Fatal("StagingRetry of an object in DRAM says wait")
	}
	clk.Advance(at.Sub(clk.Now()))
	stage(t, m, "d4")
	if got := replicaTypes(t, m, "d1"); len(got) != 1 || got[0] != ReplicaLocalDisk {
		t.Fatalf("d1 after its lease ended: %v; want LOCAL_DISK only (its DRAM staged d4)", got)
	}
	if st := m.Stats(); st.DiskHits != 4 || st.Used != 900 || st.DiskObjects != 4 {
		t.Fatalf("final stats %+v; want 4 disk hits, 900 used, 4 disk objects", st)
	}
}

// TestEvictionTakesDiskCopiesFirst: an object only in DRAM outlives a more
// recently used one that is also on disk (dropping the latter loses
// nothing).
func TestEvictionTakesDiskCopiesFirst(t *testing.T) {
	m, _ := tierMaster(t, false, nil)
	mustPut(t, m, "w", "old", 300, 1)
	ts := take(t, m, 10)
	report(t, m, ts[0], false) // its copy failed: DRAM only
	mustPut(t, m, "w", "b", 300, 1)
	mustPut(t, m, "w", "c", 300, 1)
	offloadAll(t, m)
	mustPut(t, m, "w", "new", 300, 1)
	if got := replicaTypes(t, m, "old"); len(got) != 1 || got[0] != ReplicaMemory {
		t.Fatalf("old: %v; want its DRAM replica kept", got)
	}
	if got := replicaTypes(t, m, "b"); len(got) != 1 || got[0] != ReplicaLocalDisk {
		t.Fatalf("b: %v; want LOCAL_DISK only", got)
	}
}

// TestTryPutStartWaitsForOffloads: with offload_on_evict, a put that finds
// no room while eviction's offloads are queued is told to wait (not
// counted as an allocation failure); PutStart then refuses naming the
// asynchronous eviction, and the put fits once the copy is on disk. When
// leases hold the DRAM, the put is told to wait only if the first lease
// ends by the caller's deadline, and when it ends.
func TestTryPutStartWaitsForOffloads(t *testing.T) {
	m, clk := tierMaster(t, true, func(c *Config) { c.EvictionHighWatermark = 1 })
	for _, k := range []string{"k1", "k2", "k3"} {
		mustPut(t, m, "w", k, 300, 1)
	}
	until := clk.Now().Add(100 * time.Millisecond)
	_, at, wait, err := m.TryPutStart("w", "big", 300, ReplicaConfig{ReplicaNum: 1}, until)
	wantCode(t, "TryPutStart while k1 offloads", err, store.NoAvailableHandle)
	if st := m.Stats(); !wait || !at.IsZero() || st.AllocFailures != 0 || st.PendingOffloadBytes != 300 {
		t.Fatalf("wait %v at %v, %d alloc failures, %d pending; want true at zero, 0, 300", wait, at, st.AllocFailures, st.PendingOffloadBytes)
	}
	_, err = m.PutStart("w", "big", 300, ReplicaConfig{ReplicaNum: 1})
	wantCode(t, "PutStart while k1 offloads", err, store.NoAvailableHandle)
	if !strings.Contains(err.Error(), "asynchronous eviction") || m.Stats().AllocFailures != 1 {
		t.Fatalf("PutStart: %v, %d alloc failures; want the asynchronous eviction named, 1", err, m.Stats().AllocFailures)
	}
	seq := m.SpaceSeq()
	offloadAll(t, m)
	if m.SpaceSeq() == seq {
		t.Fatal("SpaceSeq unchanged after k1's DRAM was freed")
	}
	if rs, _, wait, err := m.TryPutStart("w", "big", 300, ReplicaConfig{ReplicaNum: 1}, until); err != nil || wait || len(rs) != 1 {
		t.Fatalf("TryPutStart after the offload: %+v, %v, %v", rs, wait, err)
	}
	// Nothing queued, everything leased (for 1 s).
	if err := m.PutEnd("w", "big"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k2", "k3", "big"} {
		if _, _, err := m.GetReplicaList(k); err != nil {
			t.Fatal(err)
		}
	}
	leaseEnd := clk.Now().Add(time.Second)
	_, _, wait, err = m.TryPutStart("w", "huge", 900, ReplicaConfig{ReplicaNum: 1}, clk.Now().Add(500*time.Millisecond))
	if wait || store.CodeOf(err) != store.NoAvailableHandle || !strings.Contains(err.Error(), "leases") || m.Stats().AllocFailures != 2 {
		t.Fatalf("TryPutStart with leases ending after the deadline: wait %v, %v, %d alloc failures; want a counted refusal naming the leases",
			wait, err, m.Stats().AllocFailures)
	}
	_, at, wait, err = m.TryPutStart("w", "huge", 900, ReplicaConfig{ReplicaNum: 1}, leaseEnd)
	if !wait || !at.Equal(leaseEnd) || store.CodeOf(err) != store.NoAvailableHandle || m.Stats().AllocFailures != 2 {
		t.Fatalf("TryPutStart with a lease ending by the deadline: wait %v at %v (want %v), %v", wait, at, leaseEnd, err)
	}
	clk.Advance(time.Second)
	// The leases ended: eviction queues the three for offload.
	_, at, wait, _ = m.TryPutStart("w", "huge", 900, ReplicaConfig{ReplicaNum: 1}, clk.Now().Add(time.Second))
	if !wait || !at.IsZero() || m.Stats().PendingOffloadBytes != 900 {
		t.Fatalf("after the leases: wait %v at %v, %d pending; want true at zero, 900", wait, at, m.Stats().PendingOffloadBytes)
	}
	offloadAll(t, m)
	if rs, err := m.PutStart("w", "huge", 900, ReplicaConfig{ReplicaNum: 1}); err != nil || len(rs) != 1 {
		t.Fatalf("PutStart after the offloads: %+v, %v", rs, err)
	}
}

// TestLoadCancelledByTierLossIsMiss: a load a reader waits for, cancelled
// because the tier went away (its node left, or unmounted the tier), is a
// disk miss.
func TestLoadCancelledByTierLossIsMiss(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop func(m *Master) error
	}{
		{"segment unmounted", func(m *Master) error { return m.UnmountSegment("a", "node") }},
		{"tier unmounted", func(m *Master) error { return m.UnmountLocalDisk("a", "node") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, clk := tierMaster(t, false, nil)
			mustPut(t, m, "w", "k", 300, 1)
			offloadAll(t, m)
			m.evict(clk.Now(), 1000)
			if _, _, loading, err := m.GetOrLoad("k"); !loading || err != nil {
				t.Fatalf("GetOrLoad(k) = %v, %v; want a load", loading, err)
			}
			if err := tc.drop(m); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Stat("k"); store.CodeOf(err) != store.ObjectNotFound {
				t.Fatalf("k after the tier left: %v; want OBJECT_NOT_FOUND", err)
			}
			if st := m.Stats(); st.DiskMisses != 1 || st.Used != 0 {
				t.Fatalf("disk misses %d, used %d; want 1, 0", st.DiskMisses, st.Used)
			}
		})
	}
}

// TestUnmountSegmentWithTier: unmounting a segment drops its tier through
// the same path as UnmountLocalDisk, with the segment's ranges gone: a
// taken load's staging range vanishes with the allocator (nothing is left
// discarded), a pending write-through offload and the disk-only, DRAM and
// both-tier objects all go, and the counters return to zero.
func TestUnmountSegmentWithTier(t *testing.T) {
	m, clk := tierMaster(t, false, nil)
	mustPut(t, m, "w", "loading", 100, 1)
	mustPut(t, m, "w", "ondisk", 100, 1)
	mustPut(t, m, "w", "both", 100, 1)
	offloadAll(t, m)
	m.dropMemory(m.objects.get("loading"))
	m.dropMemory(m.objects.get("ondisk"))
	mustPut(t, m, "w", "offloading", 100, 1) // write-through, queued
	if _, _, loading, err := m.GetOrLoad("loading"); !loading || err != nil {
		t.Fatalf("GetOrLoad = %v, %v; want a load", loading, err)
	}
	if ts := take(t, m, 1); len(ts) != 1 || ts[0].Kind != TaskLoad {
		t.Fatalf("took %+v; want the load", ts)
	}
	if err := m.UnmountSegment("a", "node"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"loading", "ondisk", "both", "offloading"} {
		if _, err := m.Stat(k); store.CodeOf(err) != store.ObjectNotFound {
			t.Fatalf("%s after unmount: %v; want OBJECT_NOT_FOUND", k, err)
		}
	}
	st := m.Stats()
	if st.Objects != 0 || st.Used != 0 || st.DiscardedBytes != 0 || st.DiskCapacity != 0 || st.DiskUsed != 0 ||
		st.PendingOffloadBytes != 0 || st.DiskMisses != 1 || len(m.inflight) != 0 {
		t.Fatalf("after unmount: %+v, %d in flight", st, len(m.inflight))
	}
	m.expireTasks(clk.Now().Add(time.Hour)) // nothing left to expire
	if st := m.Stats(); st.TierTaskTimeouts != 0 {
		t.Fatalf("timeouts after unmount: %d", st.TierTaskTimeouts)
	}
}
