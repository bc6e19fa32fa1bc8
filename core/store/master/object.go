package master

import (
	"math"
	"time"
)

// Per-object memory. A pool holds millions of objects, so an object's
// metadata is kept to what one small allocation can hold (issue 15.5:
// at most 256 bytes per object in all, measured by
// BenchmarkMasterMemoryPerObject):
//
//   - object is 96 bytes (a Go size class): times are int64 nanoseconds
//     from the master's epoch rather than 24-byte time.Time values, the
//     writer is an index into an interned table of client ids (owners)
//     rather than its own copy of the id, the one contiguous DRAM replica
//     most objects have is inline, and everything rarer (more replicas, a
//     striped one, a disk tier replica, a tier task) lives in an
//     objectExtra allocated only while needed;
//   - the table is an objTable (8-byte slots) rather than a Go map;
//   - segments count their objects instead of keeping a set of them, except
//     segments with a disk tier (StagingRetry reads theirs); unmounting a
//     segment without one scans the table, as upstream's does;
//   - the segments' allocators are alloc.Untracked: they record nothing
//     per allocation, since every range's size is known here (FreeSized);
//   - the tables that grow with the object count (objTable, objSet, the
//     allocators' free-range indexes) are rebuilt smaller once most of
//     their entries are gone, since Go maps and slices never shrink by
//     themselves.

// object is one key's value: its metadata, replicas and eviction links.
type object struct {
	key        string
	size       uint64
	prev, next *object // eviction policy's queue (complete objects in DRAM only); head.next is the newest

	// seg and off are the object's DRAM replica when it has exactly one
	// and that one is contiguous (x.reps is then nil); seg is nil when x
	// holds the replicas or there are none.
	seg *segment
	off uint64
	x   *objectExtra // nil while none of its fields is needed

	id uint64 // identity of this value (tier tasks name it)
	// leaseUntil is the lease's end as a stamp (Master.stamp); noStamp
	// when never leased.
	leaseUntil int64
	// when is the PutStart time while the object is being written and its
	// soft pin deadline once complete (refreshed by each lease grant;
	// softPinned reads it only then), as a stamp.
	when int64

	owner            uint32 // the writer, an index into Master.owners
	complete         bool
	softPin, hardPin bool // ReplicaConfig.WithSoftPin / WithHardPin
	// bits: bit 0 noOffload (an offload failed: do not try again); the
	// rest belong to the eviction policy (evict.go), so that a policy's
	// per-object state costs no byte more.
	bits uint8
}

const bitNoOffload = 1 << 0

// bitPrecommit marks a write in progress that its client committed ahead
// of the write's end (PrecommitReserved): readers wait for its PutEnd or
// PutRevoke instead of being told it is not ready. Bits 1-3 are the
// eviction policy's (evict.go).
const bitPrecommit = 1 << 4

func (o *object) noOffload() bool { return o.bits&bitNoOffload != 0 }
func (o *object) setNoOffload()   { o.bits |= bitNoOffload }

// objectExtra holds the rarer parts of an object.
type objectExtra struct {
	reps []replica // every DRAM replica, when not just one contiguous one
	disk *diskTier // LOCAL_DISK replica, or nil
	task *tierTask // queued or taken tier task, or nil
}

// replicas returns o's DRAM replicas. one is scratch space for the common
// single replica, so that a caller's `var one [1]replica` keeps the call
// free of allocations; the result is valid until o changes.
func (o *object) replicas(one *[1]replica) []replica {
	if o.seg != nil {
		one[0] = replica{seg: o.seg, offset: o.off}
		return one[:]
	}
	if o.x != nil {
		return o.x.reps
	}
	return nil
}

// nreps is the number of o's DRAM replicas.
func (o *object) nreps() int {
	if o.seg != nil {
		return 1
	}
	if o.x != nil {
		return len(o.x.reps)
	}
	return 0
}

// setReplicas replaces o's DRAM replicas with rs (which o does not keep).
func (o *object) setReplicas(rs []replica) {
	o.seg, o.off = nil, 0
	if o.x != nil {
		o.x.reps = nil
	}
	switch {
	case len(rs) == 0:
	case len(rs) == 1 && rs[0].stripe == nil:
		o.seg, o.off = rs[0].seg, rs[0].offset
	default:
		o.extra().reps = append([]replica(nil), rs...)
	}
	o.trimExtra()
}

// addReplica appends r to o's DRAM replicas.
func (o *object) addReplica(r replica) {
	switch {
	case o.nreps() == 0 && r.stripe == nil:
		o.seg, o.off = r.seg, r.offset
	case o.seg != nil:
		o.extra().reps = []replica{{seg: o.seg, offset: o.off}, r}
		o.seg, o.off = nil, 0
	default:
		x := o.extra()
		x.reps = append(x.reps, r)
	}
}

// dropReplicas removes o's DRAM replicas.
func (o *object) dropReplicas() { o.setReplicas(nil) }

func (o *object) extra() *objectExtra {
	if o.x == nil {
		o.x = &objectExtra{}
	}
	return o.x
}

// trimExtra frees o.x once nothing is left in it.
func (o *object) trimExtra() {
	if x := o.x; x != nil && len(x.reps) == 0 && x.disk == nil && x.task == nil {
		o.x = nil
	}
}

// disk is o's disk tier holding a LOCAL_DISK replica, or nil.
func (o *object) disk() *diskTier {
	if o.x == nil {
		return nil
	}
	return o.x.disk
}

func (o *object) setDisk(t *diskTier) {
	if t == nil && o.x == nil {
		return
	}
	o.extra().disk = t
	o.trimExtra()
}

// task is o's queued or taken tier task, or nil.
func (o *object) task() *tierTask {
	if o.x == nil {
		return nil
	}
	return o.x.task
}

func (o *object) setTask(t *tierTask) {
	if t == nil && o.x == nil {
		return
	}
	o.extra().task = t
	o.trimExtra()
}

// noStamp is the stamp of "never" (no lease yet): before every time.
const noStamp = math.MinInt64

// stamp is t as nanoseconds from the master's epoch (saturating at the
// ends of int64, as time.Time.Sub does); it keeps t's monotonic reading
// when both t and the epoch have one, so comparisons of stamps agree with
// those of the times.
func (m *Master) stamp(t time.Time) int64 { return int64(t.Sub(m.epoch)) }

// timeOf is the time of stamp s.
func (m *Master) timeOf(s int64) time.Time { return m.epoch.Add(time.Duration(s)) }

// leased reports whether o's lease runs past now.
func (m *Master) leased(o *object, now time.Time) bool { return o.leaseUntil > m.stamp(now) }

// owners interns the client ids that write objects: each object names its
// writer by index, and an id is kept while some object in the table
// names it.
type owners struct {
	index map[string]uint32
	names []string
	refs  []int
	free  []uint32 // unused indexes
}

// intern returns the index of client, counting one more reference.
func (w *owners) intern(client string) uint32 {
	if i, ok := w.index[client]; ok {
		w.refs[i]++
		return i
	}
	if w.index == nil {
		w.index = map[string]uint32{}
	}
	var i uint32
	if n := len(w.free); n > 0 {
		i = w.free[n-1]
		w.free = w.free[:n-1]
		w.names[i], w.refs[i] = client, 1
	} else {
		i = uint32(len(w.names))
		w.names = append(w.names, client)
		w.refs = append(w.refs, 1)
	}
	w.index[client] = i
	return i
}

// release drops one reference to index i.
func (w *owners) release(i uint32) {
	if w.refs[i]--; w.refs[i] == 0 {
		delete(w.index, w.names[i])
		w.names[i] = ""
		w.free = append(w.free, i)
	}
}

// name is the client id at index i.
func (w *owners) name(i uint32) string { return w.names[i] }

// objSet is a set of objects that is rebuilt smaller once it holds under
// 1/8 of its peak (a Go map never shrinks).
type objSet struct {
	m    map[*object]struct{}
	peak int
}

// objSetShrinkMin is the peak below which an objSet is never rebuilt.
const objSetShrinkMin = 1024

func newObjSet() *objSet { return &objSet{m: map[*object]struct{}{}} }

func (s *objSet) add(o *object) {
	s.m[o] = struct{}{}
	s.peak = max(s.peak, len(s.m))
}

func (s *objSet) del(o *object) {
	delete(s.m, o)
	if n := len(s.m); s.peak >= objSetShrinkMin && n*8 < s.peak {
		m := make(map[*object]struct{}, n)
		for x := range s.m {
			m[x] = struct{}{}
		}
		s.m, s.peak = m, n
	}
}

func (s *objSet) len() int { return len(s.m) }

// all yields every object; the set must not change meanwhile.
func (s *objSet) all(yield func(*object) bool) {
	for o := range s.m {
		if !yield(o) {
			return
		}
	}
}
