package master

import (
	"time"

	"github.com/mooncake-go/mooncake/core/store"
)

// The SSD tier (upstream LOCAL_DISK replicas: enable_offload,
// offload_on_evict, MountLocalDiskSegment, OffloadObjectHeartbeat,
// NotifyOffloadSuccess, promotion on hit).
//
// A client that owns a mounted segment may attach a disk tier to it
// (MountLocalDisk, with a capacity in bytes): a directory on its local SSD
// (core/store/disk). The master never touches the files; it hands the
// owner tasks (TakeTierTasks) and records their outcome
// (CompleteTierTask):
//
//   - Offload: copy the object's DRAM replica on the tier's segment into a
//     file. With Config.OffloadOnEvict, eviction queues an offload instead
//     of dropping an object whose replica lies on a segment with a disk
//     tier; the DRAM stays allocated (and readable) until the owner reports
//     success, and is then freed unless a lease or hard pin arrived
//     meanwhile. Without it (write-through), PutEnd queues the offload and
//     the DRAM is kept. Either way success adds a LOCAL_DISK replica, and an
//     object with one loses only its DRAM replicas when evicted.
//   - Load: a read (GetReplicaList, via GetOrLoad) of an object whose only
//     replica is on disk allocates a staging range on the tier's segment,
//     leases the object and queues a load; the owner reads and verifies the
//     file into the range, and on success the range becomes a complete
//     DRAM replica that readers pull with the transfer engine as any other
//     (promotion on hit). A failed load (checksum mismatch, missing file)
//     drops the disk replica: the object is then gone (OBJECT_NOT_FOUND),
//     never served with wrong bytes.
//   - The owner evicts its own files when the tier is full (least recently
//     used) and reports each as a TaskDiskEvicted result; the disk replica
//     goes, and the object with it if nothing else is left.
//
// Tasks name the object by key and ObjectID (a number the master gives
// each value at PutStart, replicated with it), so a late report about an
// older value of a key, or from before a failover, is refused with
// TASK_NOT_FOUND and the owner discards its work. A task taken by the
// owner must be reported within Config.TierTaskTimeout; past it the task is
// abandoned (an offload is not retried; a load's staging range is held for
// another timeout in case the owner is still writing it). An object with a
// task in flight is never evicted and Remove without force refuses it with
// OBJECT_REPLICA_BUSY.
//
// Tasks and staging ranges are not replicated; LOCAL_DISK replicas, disk
// tiers and object ids are (Observer.DiskMounted, DiskUnmounted,
// ObjectUpdated).

// TaskKind is the kind of a disk tier task or report.
type TaskKind int

const (
	// TaskOffload: copy [Addr, Addr+Size) of the owner's segment into the
	// object's file.
	TaskOffload TaskKind = 1
	// TaskLoad: read the object's file, verify it, and write it to
	// [Addr, Addr+Size) of the owner's segment.
	TaskLoad TaskKind = 2
	// TaskDiskEvicted (a report only): the owner deleted the object's
	// file to make room.
	TaskDiskEvicted TaskKind = 3
)

// String names the kind as logs and the wire do.
func (k TaskKind) String() string {
	switch k {
	case TaskOffload:
		return "offload"
	case TaskLoad:
		return "load"
	case TaskDiskEvicted:
		return "disk-evicted"
	}
	return "unknown"
}

// ReplicaType is where a replica lives (upstream replica types MEMORY and
// LOCAL_DISK).
type ReplicaType int

const (
	ReplicaMemory    ReplicaType = 0 // a range of a mounted segment
	ReplicaLocalDisk ReplicaType = 1 // a file on the disk tier of segment Replica.SegmentID
)

// TierTask is one task for a disk tier's owner.
type TierTask struct {
	Kind     TaskKind
	Key      string
	ObjectID uint64    // the value's identity; echo it in the report
	Addr     uint64    // absolute address in the owner's segment (Segment.Base + offset)
	Size     uint64    // bytes of the value
	Deadline time.Time // report before this, or the task is abandoned
}

// TaskResult is the owner's report of a task (or of an evicted file).
type TaskResult struct {
	Kind     TaskKind
	Key      string
	ObjectID uint64
	OK       bool   // the task succeeded (ignored for TaskDiskEvicted)
	Reason   string // why it failed, for logs
}

// diskTier is a disk tier attached to a segment.
type diskTier struct {
	seg      *segment
	capacity uint64      // bytes, as registered
	used     uint64      // value bytes of the LOCAL_DISK replicas here
	objects  *objSet     // objects with a LOCAL_DISK replica here
	queue    []*tierTask // not taken yet; a cancelled task stays until the next take (task.o.task() != task)
}

// tierTask is a queued or taken task.
type tierTask struct {
	kind     TaskKind
	o        *object
	tier     *diskTier
	taken    bool
	deadline time.Time
	evict    bool    // offload queued by eviction: the DRAM goes on success
	pending  uint64  // bytes of this offload counted in Master.pendingFree
	src      replica // offload: the contiguous replica on tier.seg
	staging  replica // load: the range being filled on tier.seg
}

// TierSeq changes whenever a disk tier task is queued or settled (done,
// failed, cancelled); a server watches it to wake owners waiting for tasks
// and readers waiting for a load.
func (m *Master) TierSeq() uint64 { return m.tierSeq }

// ownedSegment returns segment id after checking the caller owns it.
func (m *Master) ownedSegment(id, client string) (*segment, error) {
	s, ok := m.segs[id]
	switch {
	case id == "":
		return nil, store.Errorf(store.InvalidParams, "segment id is empty")
	case !ok:
		return nil, store.Errorf(store.SegmentNotFound, "segment %q", id)
	case s.client != client:
		return nil, store.Errorf(store.IllegalClient, "segment %q is mounted by %q, not %q", id, s.client, client)
	}
	return s, nil
}

// tierOf returns segment id's disk tier after checking the caller owns it.
func (m *Master) tierOf(id, client string) (*diskTier, error) {
	s, err := m.ownedSegment(id, client)
	if err != nil {
		return nil, err
	}
	if s.disk == nil {
		return nil, store.Errorf(store.UnableOffload, "segment %q has no disk tier", id)
	}
	return s.disk, nil
}

// MountLocalDisk attaches a disk tier of capacity bytes to segment id,
// owned by client: objects whose DRAM replica lies there may be offloaded
// to it (see the tier notes above). Mounting again with the same capacity
// is a no-op. Errors: INVALID_PARAMS (empty id, capacity 0);
// SEGMENT_NOT_FOUND; ILLEGAL_CLIENT (another client's segment);
// UNABLE_OFFLOAD (the master runs without Config.EnableOffload);
// SEGMENT_ALREADY_EXISTS (a tier with another capacity is attached).
// Mirrors upstream MountLocalDiskSegment, with the tier tied to a segment
// rather than to the client.
func (m *Master) MountLocalDisk(id, client string, capacity uint64) error {
	if id == "" {
		return store.Errorf(store.InvalidParams, "segment id is empty")
	}
	if capacity == 0 {
		return store.Errorf(store.InvalidParams, "segment %q: disk tier of capacity 0", id)
	}
	if !m.cfg.EnableOffload {
		return store.Errorf(store.UnableOffload, "segment %q: the master runs without enable_offload", id)
	}
	s, err := m.ownedSegment(id, client)
	if err != nil {
		return err
	}
	m.touchClient(client)
	if s.disk != nil {
		if s.disk.capacity == capacity {
			return nil
		}
		return store.Errorf(store.SegmentAlreadyExists, "segment %q has a disk tier of %d bytes", id, s.disk.capacity)
	}
	m.mountDisk(s, capacity)
	return nil
}

func (m *Master) mountDisk(s *segment, capacity uint64) {
	on := newObjSet()
	for _, o := range m.objectsOn(s) {
		on.add(o)
	}
	s.objects = on
	s.disk = &diskTier{seg: s, capacity: capacity, objects: newObjSet()}
	m.diskCapacity += capacity
	if ob := m.cfg.Observer; ob != nil {
		ob.DiskMounted(s.ID, capacity)
	}
}

// UnmountLocalDisk detaches segment id's disk tier: its LOCAL_DISK replicas
// and tasks are dropped, and objects left without a replica disappear.
// Errors: as TakeTierTasks. Mirrors upstream UnmountLocalDiskSegment.
func (m *Master) UnmountLocalDisk(id, client string) error {
	t, err := m.tierOf(id, client)
	if err != nil {
		return err
	}
	m.dropTier(t.seg, nil)
	if ob := m.cfg.Observer; ob != nil {
		ob.DiskUnmounted(id)
	}
	return nil
}

// dropTier detaches s's disk tier, explicitly (gone nil) or with the
// segment (gone == s: UnmountSegment, after dropping the replicas on s;
// staging ranges then vanish with s's allocator).
func (m *Master) dropTier(s *segment, gone *segment) {
	t := s.disk
	if t == nil {
		return
	}
	cancel := func(o *object) {
		if task := o.task(); task != nil && task.tier == t {
			if task.kind == TaskLoad {
				m.stats.DiskMisses++ // a reader waits for it
			}
			m.cancelTask(o, gone)
		}
	}
	for _, o := range m.objectsOn(s) {
		cancel(o)
	}
	var onDisk []*object
	for o := range t.objects.all {
		onDisk = append(onDisk, o)
	}
	for _, o := range onDisk {
		cancel(o)
		m.detachDisk(o)
		if o.nreps() == 0 {
			m.forget(o)
		}
	}
	m.diskCapacity -= t.capacity
	s.disk = nil
	s.objects = nil
	m.tierSeq++
}

func (m *Master) attachDisk(o *object, t *diskTier) {
	o.setDisk(t)
	t.used += o.size
	t.objects.add(o)
}

func (m *Master) detachDisk(o *object) {
	if t := o.disk(); t != nil {
		t.used -= o.size
		t.objects.del(o)
		o.setDisk(nil)
	}
}

// offloadSource returns the disk tier o may be offloaded to and the
// replica to copy: the first contiguous DRAM replica on a segment with a
// tier. ok is false when offload is off, o is already on disk, failed to
// offload before, or has a task.
func (m *Master) offloadSource(o *object) (t *diskTier, src replica, ok bool) {
	if !m.cfg.EnableOffload || !o.complete || o.disk() != nil || o.noOffload() || o.task() != nil {
		return nil, replica{}, false
	}
	var one [1]replica
	for _, r := range o.replicas(&one) {
		if r.stripe == nil && r.seg.disk != nil {
			return r.seg.disk, r, true
		}
	}
	return nil, replica{}, false
}

func (m *Master) queueTask(t *tierTask) {
	t.o.setTask(t)
	t.tier.queue = append(t.tier.queue, t)
	m.tierSeq++
}

func (m *Master) queueOffload(o *object, t *diskTier, src replica, evict bool) {
	task := &tierTask{kind: TaskOffload, o: o, tier: t, src: src, evict: evict}
	if evict {
		task.pending = o.size * uint64(o.nreps())
		m.pendingFree += task.pending
	}
	m.queueTask(task)
}

// cancelTask drops o's task, if any. A load's staging range is freed at
// once when the owner has not taken the task, dropped with gone (a segment
// being unmounted), and otherwise held as a discarded range until one
// TierTaskTimeout past the task's deadline, since the owner may still be
// writing into it.
func (m *Master) cancelTask(o *object, gone *segment) {
	t := m.endTask(o)
	if t == nil {
		return
	}
	if t.kind != TaskLoad {
		return
	}
	switch {
	case t.staging.seg == gone || !t.taken:
		m.freeReplica(o, t.staging, gone)
	default:
		t.staging.seg.untrack(o)
		m.stats.DiscardedBytes += o.size
		m.discards = append(m.discards, discarded{pieces: []piece{{seg: t.staging.seg, offset: t.staging.offset, size: o.size}}, release: t.deadline.Add(m.cfg.TierTaskTimeout)})
	}
}

// endTask detaches o's task, if any, from o and the master's bookkeeping
// (pending DRAM, tasks in flight) and returns it.
func (m *Master) endTask(o *object) *tierTask {
	t := o.task()
	if t == nil {
		return nil
	}
	o.setTask(nil)
	m.pendingFree -= t.pending
	delete(m.inflight, t)
	m.tierSeq++
	return t
}

// dropMemory frees o's DRAM replicas; o keeps its LOCAL_DISK replica and
// leaves the LRU list.
func (m *Master) dropMemory(o *object) {
	m.freeReplicas(o, nil)
	m.pol.remove(o)
	m.observeUpdated(o)
}

// settle reports o's new replica set, or removes o when nothing is left.
func (m *Master) settle(o *object) {
	if o.nreps() == 0 && o.disk() == nil {
		m.free(o)
		return
	}
	m.observeUpdated(o)
}

// evictable reports whether eviction may take o now (ignoring soft pins).
func (m *Master) evictable(o *object, now time.Time) bool {
	return !m.leased(o, now) && !o.hardPin
}

// TakeTierTasks hands segment id's owner up to max queued tasks, loads
// first (a reader waits for them), each with a deadline of
// Config.TierTaskTimeout from now; the call also counts as the owner's
// heartbeat. Errors: INVALID_PARAMS (empty id, max <= 0);
// SEGMENT_NOT_FOUND; ILLEGAL_CLIENT; UNABLE_OFFLOAD (no disk tier).
// Mirrors upstream OffloadObjectHeartbeat (which returns objects to
// persist) extended to loads.
func (m *Master) TakeTierTasks(id, client string, max int) ([]TierTask, error) {
	if max <= 0 {
		return nil, store.Errorf(store.InvalidParams, "segment %q: take %d tasks", id, max)
	}
	t, err := m.tierOf(id, client)
	if err != nil {
		return nil, err
	}
	m.touchClient(client)
	now := m.cfg.Now()
	var out []TierTask
	for _, kind := range []TaskKind{TaskLoad, TaskOffload} {
		for _, task := range t.queue {
			if len(out) == max {
				break
			}
			if task.o.task() != task || task.taken || task.kind != kind {
				continue
			}
			task.taken = true
			task.deadline = now.Add(m.cfg.TierTaskTimeout)
			m.inflight[task] = struct{}{}
			r := task.src
			if kind == TaskLoad {
				r = task.staging
			}
			out = append(out, TierTask{Kind: kind, Key: task.o.key, ObjectID: task.o.id, Addr: r.seg.Base + r.offset, Size: task.o.size, Deadline: task.deadline})
		}
	}
	kept := t.queue[:0]
	for _, task := range t.queue {
		if task.o.task() == task && !task.taken {
			kept = append(kept, task)
		}
	}
	clear(t.queue[len(kept):])
	t.queue = kept
	return out, nil
}

// CompleteTierTask records the owner's report r on a task of segment id's
// disk tier (see the tier notes above). Errors: as TakeTierTasks;
// INVALID_PARAMS (unknown kind); TASK_NOT_FOUND (no such task in flight:
// abandoned, cancelled, or for another value of the key; the owner should
// discard its work, e.g. delete a file it just wrote); OBJECT_NOT_FOUND (a
// TaskDiskEvicted report for an object without a disk replica here).
// Mirrors upstream NotifyOffloadSuccess and EvictDiskReplica.
func (m *Master) CompleteTierTask(id, client string, r TaskResult) error {
	t, err := m.tierOf(id, client)
	if err != nil {
		return err
	}
	m.touchClient(client)
	now := m.cfg.Now()
	o := m.objects.get(r.Key)
	switch r.Kind {
	case TaskOffload, TaskLoad:
	case TaskDiskEvicted:
		if o == nil || o.id != r.ObjectID || o.disk() != t {
			return store.Errorf(store.ObjectNotFound, "key %q (object %d) has no disk replica on segment %q", r.Key, r.ObjectID, id)
		}
		m.stats.DiskEvictions++
		m.tierSeq++
		if task := o.task(); task != nil && task.kind == TaskLoad {
			m.cancelTask(o, nil)
		}
		m.detachDisk(o)
		m.settle(o)
		return nil
	default:
		return store.Errorf(store.InvalidParams, "key %q: unknown task kind %d", r.Key, r.Kind)
	}
	if o == nil || o.id != r.ObjectID || o.task() == nil || o.task().kind != r.Kind || !o.task().taken || o.task().tier != t {
		return store.Errorf(store.TaskNotFound, "no %s task in flight for key %q (object %d) on segment %q", r.Kind, r.Key, r.ObjectID, id)
	}
	task := m.endTask(o)
	if task.kind == TaskOffload {
		if !r.OK {
			m.stats.OffloadFailures++
			o.setNoOffload()
			if task.evict && m.evictable(o, now) {
				m.countEviction(o)
				m.free(o)
			}
			return nil
		}
		m.stats.Offloads++
		m.attachDisk(o, t)
		if task.evict && m.evictable(o, now) {
			m.countEviction(o)
			m.dropMemory(o)
			return nil
		}
		m.observeUpdated(o)
		return nil
	}
	if !r.OK {
		m.stats.DiskMisses++
		m.freeReplica(o, task.staging, nil)
		m.detachDisk(o)
		m.settle(o)
		return nil
	}
	m.stats.DiskHits++
	o.addReplica(task.staging)
	m.grant(o)
	m.observeUpdated(o)
	return nil
}

// countEviction counts o's DRAM replicas as evicted.
func (m *Master) countEviction(o *object) {
	n := o.size * uint64(o.nreps())
	m.stats.EvictedObjects++
	m.stats.EvictedBytes += n
}

// GetOrLoad is GetReplicaList that starts serving a disk-only object: when
// key's only replica is on a disk tier, it allocates a staging range on the
// tier's segment (evicting if needed: DRAM copies of objects already on
// disk first, then by the usual policy), queues a load for the owner,
// leases the object and returns loading = true with no replicas; the
// caller waits for TierSeq to change and asks again, and gets the staged
// DRAM replica once the load succeeded, or OBJECT_NOT_FOUND once it failed
// (a corrupt or missing file, or the tier went away with its node). While
// the load is queued or in flight, loading stays true. Errors: as
// GetReplicaList; NO_AVAILABLE_HANDLE (no room to stage the value on the
// tier's segment, even after eviction: StagingRetry says whether waiting
// may help).
func (m *Master) GetOrLoad(key string) (reps []Replica, ttl time.Duration, loading bool, err error) {
	if err := checkKey(key); err != nil {
		return nil, 0, false, err
	}
	o := m.objects.get(key)
	if o == nil {
		return nil, 0, false, store.Errorf(store.ObjectNotFound, "key %q", key)
	}
	if !o.complete {
		return nil, 0, false, store.Errorf(store.ReplicaIsNotReady, "key %q is being written", key)
	}
	if o.nreps() > 0 {
		m.grant(o)
		return m.descs(o), m.cfg.DefaultLeaseTTL, false, nil
	}
	if task := o.task(); task != nil && task.kind == TaskLoad {
		m.grant(o)
		return nil, m.cfg.DefaultLeaseTTL, true, nil
	}
	if o.disk() == nil { // unreachable: an object keeps a replica
		m.free(o)
		return nil, 0, false, store.Errorf(store.ObjectNotFound, "key %q", key)
	}
	m.cancelTask(o, nil)
	seg := o.disk().seg
	now := m.cfg.Now()
	off, err := seg.alloc.Alloc(o.size, AllocAlign)
	for round := 0; err != nil && round < 4; round++ {
		if m.evict(now, m.evictTarget(o.size)) == 0 {
			break
		}
		off, err = seg.alloc.Alloc(o.size, AllocAlign)
	}
	if err != nil {
		// No lease: a disk-only object holds no DRAM, and a lease would
		// keep a failed reader's object from being dropped meanwhile.
		m.stats.AllocFailures++
		return nil, 0, false, store.Errorf(store.NoAvailableHandle, "key %q is on the disk tier of segment %q, which has no %d free bytes of DRAM to stage it", key, seg.ID, o.size)
	}
	m.grant(o)
	staging := replica{seg: seg, offset: off}
	seg.track(o)
	m.used += o.size
	m.queueTask(&tierTask{kind: TaskLoad, o: o, tier: o.disk(), staging: staging})
	return nil, m.cfg.DefaultLeaseTTL, true, nil
}

// StagingRetry tells a reader whose GetOrLoad of key was refused with
// NO_AVAILABLE_HANDLE whether asking again may succeed, and when: wait is
// true while DRAM of the tier's segment is held by leases or hard pins
// that will end, by offloads queued by eviction, or by loads in flight
// (their objects become evictable once their leases end); at is the first
// moment a lease on that segment ends (zero when none does: wait for
// TierSeq or SpaceSeq to change instead). wait is false for a key that
// is no longer disk-only (ask again at once), gone, or larger than the
// segment.
func (m *Master) StagingRetry(key string) (at time.Time, wait bool) {
	o := m.objects.get(key)
	if o == nil || !o.complete || o.nreps() > 0 || o.disk() == nil || o.task() != nil {
		return time.Time{}, false
	}
	seg := o.disk().seg
	if o.size > seg.Size {
		return time.Time{}, false
	}
	now := m.cfg.Now()
	wait = m.pendingFree > 0
	for x := range seg.objects.all { // seg has a disk tier, so it keeps its objects
		if t := x.task(); t != nil && t.kind == TaskLoad {
			wait = true
		}
		if x.complete && !x.hardPin && m.leased(x, now) {
			wait = true
			if end := m.timeOf(x.leaseUntil); at.IsZero() || end.Before(at) {
				at = end
			}
		}
	}
	return at, wait
}

// SpaceSeq changes whenever DRAM of a segment is freed; a server watches
// it, with TierSeq, to retry staging and puts that found no room.
func (m *Master) SpaceSeq() uint64 { return m.spaceSeq }

// expireTasks abandons taken tasks whose deadline passed.
func (m *Master) expireTasks(now time.Time) {
	for t := range m.inflight {
		if !now.After(t.deadline) {
			continue
		}
		m.stats.TierTaskTimeouts++
		if t.kind == TaskOffload {
			t.o.setNoOffload()
		}
		m.cancelTask(t.o, nil)
	}
}
