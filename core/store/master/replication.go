package master

import (
	"cmp"
	"slices"

	"github.com/mooncake-go/mooncake/core/store"
)

// Replication hooks (used by core/store/ha for high availability).
//
// A Master with Config.Observer set tells the observer about every
// committed mutation, synchronously and in the order the master applied
// them: a segment mounted or unmounted (explicitly or because its client's
// TTL passed), a disk tier attached or detached, an object committed
// (PutEnd), a complete object's replicas changed (offloaded to disk, DRAM
// evicted with the disk copy kept, staged back from disk, disk copy
// dropped), a complete object removed (Remove, RemoveByRegex, RemoveAll,
// eviction, a failed load). Replaying those events on a
// fresh master through the Restore methods, in order, rebuilds the same
// object table and segment allocations; Dump and Restore do the same for a
// whole table at once (a snapshot).
//
// Not replicated: leases, the LRU order of reads, soft-pin deadlines,
// clients without segments, writes not yet committed, and disk tier tasks
// with their staging ranges (an owner's report to a new leader is refused
// with TASK_NOT_FOUND; a load in flight is started again by the next read). An unfinished
// write is lost on failover: its PutEnd at the new master fails with
// OBJECT_NOT_FOUND and the writer retries the put. Its space is free at the
// new master, so a writer that is still transferring into it when another
// write is placed there corrupts that write (upstream's OpLog has the same
// window: PutStart is not logged).
//
// Restored objects get a fresh lease of DefaultLeaseTTL: a reader holding a
// lease from the previous master is still protected from eviction and
// removal for as long as that lease can last. Restored segments give their
// clients a fresh ClientTTL, so the nodes' next pings find them alive.

// Observer is told of committed mutations; see the replication notes above.
// Its methods run under the caller's lock around the master, must not call
// back into the master and must not fail: an observer that cannot record an
// event must make its owner stop serving this master (core/store/ha does).
type Observer interface {
	// SegmentMounted follows a successful MountSegment (or ReMountSegment)
	// of seg by client.
	SegmentMounted(seg Segment, client string)
	// SegmentUnmounted follows the removal of segment id, with every
	// replica on it.
	SegmentUnmounted(id string)
	// ObjectCommitted follows the PutEnd that made obj readable.
	ObjectCommitted(obj ObjectRecord)
	// ObjectRemoved follows the removal of the complete object key.
	ObjectRemoved(key string)
	// ObjectUpdated follows a change of a complete object's replicas
	// (tier.go): obj is the whole new record.
	ObjectUpdated(obj ObjectRecord)
	// DiskMounted follows the attachment of a disk tier of capacity bytes
	// to segment id (MountLocalDisk).
	DiskMounted(id string, capacity uint64)
	// DiskUnmounted follows the explicit detachment of segment id's disk
	// tier (UnmountLocalDisk; unmounting the segment implies it).
	DiskUnmounted(id string)
}

// PieceRecord is one allocated range of a replica: Size bytes at Offset
// bytes into segment SegmentID.
type PieceRecord struct {
	SegmentID    string
	Offset, Size uint64
}

// ReplicaRecord is one replica of a committed object: the object's Size
// bytes at Offset in segment SegmentID, or, when Stripe is set, the pieces
// of a striped replica in value order (SegmentID and Offset are then those
// of the first piece).
type ReplicaRecord struct {
	SegmentID string
	Offset    uint64
	Stripe    []PieceRecord
}

// pieces returns r's ranges for an object of size bytes.
func (r ReplicaRecord) pieces(size uint64) []PieceRecord {
	if r.Stripe != nil {
		return r.Stripe
	}
	return []PieceRecord{{SegmentID: r.SegmentID, Offset: r.Offset, Size: size}}
}

// ObjectRecord is a committed object as replicated.
type ObjectRecord struct {
	Key      string
	Size     uint64          // bytes of the value (one replica)
	Owner    string          // the client that wrote it (PutEnd stays idempotent for it)
	Replicas []ReplicaRecord // DRAM replicas; may be empty when Disk is set
	SoftPin  bool            // its soft pin restarts at DefaultSoftPinTTL when restored
	HardPin  bool
	ID       uint64 // the value's identity (tier tasks); 0 = give it a fresh one
	Disk     string // segment id whose disk tier holds a LOCAL_DISK replica; "" = none
}

// SegmentRecord is a mounted segment and the client that mounted it.
type SegmentRecord struct {
	Segment      Segment
	Client       string
	DiskCapacity uint64 // bytes of its disk tier; 0 = none
}

// State is a whole replicated table: what Dump returns and Restore takes.
type State struct {
	Segments []SegmentRecord // in ID order
	Objects  []ObjectRecord  // complete objects, least recently used first
}

func (m *Master) observeMounted(s *segment) {
	if ob := m.cfg.Observer; ob != nil {
		ob.SegmentMounted(s.Segment, s.client)
	}
}

func (m *Master) observeUnmounted(id string) {
	if ob := m.cfg.Observer; ob != nil {
		ob.SegmentUnmounted(id)
	}
}

func (m *Master) observeCommitted(o *object) {
	if ob := m.cfg.Observer; ob != nil {
		ob.ObjectCommitted(m.record(o))
	}
}

func (m *Master) observeUpdated(o *object) {
	if ob := m.cfg.Observer; ob != nil {
		ob.ObjectUpdated(m.record(o))
	}
}

// observeRemoved reports o's removal if it is complete (an unfinished write
// was never reported).
func (m *Master) observeRemoved(o *object) {
	if ob := m.cfg.Observer; ob != nil && o.complete && m.objects.get(o.key) == o {
		ob.ObjectRemoved(o.key)
	}
}

func (m *Master) record(o *object) ObjectRecord {
	var one [1]replica
	rs := o.replicas(&one)
	rec := ObjectRecord{Key: o.key, Size: o.size, Owner: m.owners.name(o.owner), SoftPin: o.softPin, HardPin: o.hardPin, Replicas: make([]ReplicaRecord, len(rs)), ID: o.id}
	if d := o.disk(); d != nil {
		rec.Disk = d.seg.ID
	}
	for i, r := range rs {
		rr := ReplicaRecord{SegmentID: r.seg.ID, Offset: r.offset}
		if r.stripe != nil {
			rr.Stripe = make([]PieceRecord, len(r.stripe))
			for j, p := range r.stripe {
				rr.Stripe[j] = PieceRecord{SegmentID: p.seg.ID, Offset: p.offset, Size: p.size}
			}
		}
		rec.Replicas[i] = rr
	}
	return rec
}

// SetObserver replaces Config.Observer (nil = none), typically once a
// restored master is about to serve; later mutations are reported to ob.
func (m *Master) SetObserver(ob Observer) { m.cfg.Observer = ob }

// Dump returns the replicated part of the master's state: every mounted
// segment with its disk tier, and every complete object: those only on
// disk first (by key), then those in DRAM, least recently used first.
// Restore on a fresh master rebuilds it.
func (m *Master) Dump() State {
	st := State{Segments: make([]SegmentRecord, len(m.order))}
	var diskOnly []*object
	for i, s := range m.order {
		st.Segments[i] = SegmentRecord{Segment: s.Segment, Client: s.client}
		if s.disk != nil {
			st.Segments[i].DiskCapacity = s.disk.capacity
			for o := range s.disk.objects.all {
				if o.nreps() == 0 {
					diskOnly = append(diskOnly, o)
				}
			}
		}
	}
	slices.SortFunc(diskOnly, func(a, b *object) int { return cmp.Compare(a.key, b.key) })
	for _, o := range diskOnly {
		st.Objects = append(st.Objects, m.record(o))
	}
	for o := range m.pol.order {
		st.Objects = append(st.Objects, m.record(o))
	}
	return st
}

// quietly runs f with the observer switched off, so that restoring does not
// report what is being restored.
func (m *Master) quietly(f func() error) error {
	ob := m.cfg.Observer
	m.cfg.Observer = nil
	defer func() { m.cfg.Observer = ob }()
	return f()
}

// Restore mounts st's segments and restores its objects into a fresh
// master (see RestoreObjects). Errors: as RestoreSegment and RestoreObjects;
// on error the master is partly restored and should be discarded.
func (m *Master) Restore(st State) error {
	for _, s := range st.Segments {
		if err := m.RestoreSegment(s.Segment, s.Client); err != nil {
			return err
		}
		if s.DiskCapacity > 0 {
			if err := m.RestoreDisk(s.Segment.ID, s.DiskCapacity); err != nil {
				return err
			}
		}
	}
	return m.RestoreObjects(st.Objects)
}

// RestoreDisk attaches a disk tier of capacity bytes to segment id without
// reporting it, whether or not Config.EnableOffload is set. Errors:
// INVALID_PARAMS (capacity 0); SEGMENT_NOT_FOUND; SEGMENT_ALREADY_EXISTS (a
// tier of another capacity is attached).
func (m *Master) RestoreDisk(id string, capacity uint64) error {
	s, ok := m.segs[id]
	switch {
	case capacity == 0:
		return store.Errorf(store.InvalidParams, "segment %q: disk tier of capacity 0", id)
	case !ok:
		return store.Errorf(store.SegmentNotFound, "segment %q", id)
	case s.disk != nil && s.disk.capacity == capacity:
		return nil
	case s.disk != nil:
		return store.Errorf(store.SegmentAlreadyExists, "segment %q has a disk tier of %d bytes", id, s.disk.capacity)
	}
	return m.quietly(func() error { m.mountDisk(s, capacity); return nil })
}

// RestoreDiskUnmount detaches segment id's disk tier without reporting it.
// Errors: SEGMENT_NOT_FOUND; UNABLE_OFFLOAD (no tier attached).
func (m *Master) RestoreDiskUnmount(id string) error {
	s, ok := m.segs[id]
	if !ok {
		return store.Errorf(store.SegmentNotFound, "segment %q", id)
	}
	if s.disk == nil {
		return store.Errorf(store.UnableOffload, "segment %q has no disk tier", id)
	}
	return m.quietly(func() error { m.dropTier(s, nil); return nil })
}

// RestoreUpdate replaces the complete object rec.Key's replicas with rec's
// (an ObjectUpdated event) without reporting it; the object ends most
// recently used and leased as RestoreObject leaves it. An equal record is
// a no-op. Errors: OBJECT_NOT_FOUND (no complete object under the key); as
// RestoreObject otherwise, in which case the old object is gone and the
// master should be discarded.
func (m *Master) RestoreUpdate(rec ObjectRecord) error {
	o := m.objects.get(rec.Key)
	if o == nil || !o.complete {
		return store.Errorf(store.ObjectNotFound, "key %q: no complete object to update", rec.Key)
	}
	if sameRecord(m.record(o), rec) {
		return nil
	}
	return m.quietly(func() error {
		m.free(o)
		return m.RestoreObjects([]ObjectRecord{rec})
	})
}

// RestoreSegment mounts seg for client without reporting it to the
// observer, and gives client a fresh ClientTTL. Errors: as MountSegment.
func (m *Master) RestoreSegment(seg Segment, client string) error {
	return m.quietly(func() error { return m.MountSegment(seg, client) })
}

// RestoreUnmount unmounts segment id without reporting it. Errors:
// SEGMENT_NOT_FOUND.
func (m *Master) RestoreUnmount(id string) error {
	return m.quietly(func() error {
		s, ok := m.segs[id]
		if !ok {
			return store.Errorf(store.SegmentNotFound, "segment %q", id)
		}
		return m.UnmountSegment(id, s.client)
	})
}

// RestoreRemove removes the complete object key, if there is one, without
// reporting it; it reports whether it removed something.
func (m *Master) RestoreRemove(key string) bool {
	o := m.objects.get(key)
	if o == nil || !o.complete {
		return false
	}
	_ = m.quietly(func() error { m.free(o); return nil })
	return true
}

// RestoreObject re-creates the committed object rec at exactly the
// recorded places (alloc.Allocator.AllocAt), complete, most recently used
// and leased for DefaultLeaseTTL. Restoring an object equal to the one
// already in the table is a no-op. Errors: INVALID_PARAMS / INVALID_KEY for
// a malformed record; SEGMENT_NOT_FOUND; OBJECT_ALREADY_EXISTS (the key
// holds another object); NO_AVAILABLE_HANDLE (a recorded range is not free:
// the table diverged from the one recorded). Nothing changes on error.
func (m *Master) RestoreObject(rec ObjectRecord) error {
	if o := m.objects.get(rec.Key); o != nil && o.complete && sameRecord(m.record(o), rec) {
		return nil
	}
	return m.RestoreObjects([]ObjectRecord{rec})
}

// sameRecord reports whether a and b describe the same object; an ID of 0
// (a record that names none) matches any.
func sameRecord(a, b ObjectRecord) bool {
	return a.Key == b.Key && a.Size == b.Size && a.Owner == b.Owner && a.SoftPin == b.SoftPin && a.HardPin == b.HardPin &&
		(a.ID == b.ID || a.ID == 0 || b.ID == 0) && a.Disk == b.Disk &&
		slices.EqualFunc(a.Replicas, b.Replicas, func(x, y ReplicaRecord) bool {
			return slices.Equal(x.pieces(a.Size), y.pieces(b.Size))
		})
}

// RestoreObjects restores recs in order (the last ends most recently used)
// as RestoreObject does. The ranges are reserved segment by segment in
// ascending offset order, which keeps AllocAt logarithmic when restoring a
// whole table. Errors: as RestoreObject, plus INVALID_PARAMS for a key
// listed twice or a record with two pieces (of its replicas, or of one
// striped replica) on one segment, which no master places; nothing
// changes on error.
func (m *Master) RestoreObjects(recs []ObjectRecord) error {
	type rng struct {
		seg          *segment
		offset, size uint64
	}
	var all []rng
	seen := make(map[string]bool, len(recs))
	for _, rec := range recs {
		if err := checkKey(rec.Key); err != nil {
			return err
		}
		switch {
		case seen[rec.Key]:
			return store.Errorf(store.InvalidParams, "key %q restored twice", rec.Key)
		case m.objects.get(rec.Key) != nil:
			return store.Errorf(store.ObjectAlreadyExists, "key %q", rec.Key)
		case rec.Size == 0 || (len(rec.Replicas) == 0 && rec.Disk == ""):
			return store.Errorf(store.InvalidParams, "key %q: %d bytes, %d replicas", rec.Key, rec.Size, len(rec.Replicas))
		}
		if rec.Disk != "" {
			s, ok := m.segs[rec.Disk]
			if !ok {
				return store.Errorf(store.SegmentNotFound, "key %q: disk tier of segment %q", rec.Key, rec.Disk)
			}
			if s.disk == nil {
				return store.Errorf(store.InvalidParams, "key %q: segment %q has no disk tier", rec.Key, rec.Disk)
			}
		}
		seen[rec.Key] = true
		on := map[string]bool{} // segments holding a piece of rec
		for _, r := range rec.Replicas {
			var total uint64
			for _, p := range r.pieces(rec.Size) {
				s, ok := m.segs[p.SegmentID]
				if !ok {
					return store.Errorf(store.SegmentNotFound, "key %q: segment %q", rec.Key, p.SegmentID)
				}
				if on[p.SegmentID] {
					return store.Errorf(store.InvalidParams, "key %q: two pieces on segment %q (replicas and their pieces lie on distinct segments)", rec.Key, p.SegmentID)
				}
				on[p.SegmentID] = true
				if p.Size == 0 {
					return store.Errorf(store.InvalidParams, "key %q: empty piece on segment %q", rec.Key, p.SegmentID)
				}
				total += p.Size
				all = append(all, rng{s, p.Offset, p.Size})
			}
			if total != rec.Size {
				return store.Errorf(store.InvalidParams, "key %q: replica pieces hold %d of %d bytes", rec.Key, total, rec.Size)
			}
		}
	}
	sorted := slices.Clone(all)
	slices.SortFunc(sorted, func(a, b rng) int {
		return cmp.Or(cmp.Compare(a.seg.ID, b.seg.ID), cmp.Compare(a.offset, b.offset))
	})
	for i, r := range sorted {
		if err := r.seg.alloc.AllocAt(r.offset, r.size); err != nil {
			for _, u := range sorted[:i] {
				_ = u.seg.alloc.FreeSized(u.offset, u.size)
			}
			return store.Errorf(store.NoAvailableHandle, "segment %q: range [%d,+%d) not free: %v", r.seg.ID, r.offset, r.size, err)
		}
	}
	now := m.cfg.Now()
	for _, rec := range recs {
		o := &object{key: rec.Key, size: rec.Size, owner: m.owners.intern(rec.Owner), when: m.stamp(now), complete: true,
			leaseUntil: m.stamp(now.Add(m.cfg.DefaultLeaseTTL)), softPin: rec.SoftPin, hardPin: rec.HardPin, id: rec.ID}
		if o.id == 0 {
			o.id = m.nextID
		}
		m.nextID = max(m.nextID, o.id+1)
		if rec.Disk != "" {
			m.attachDisk(o, m.segs[rec.Disk].disk)
		}
		for _, rr := range rec.Replicas {
			ps := rr.pieces(rec.Size)
			r := replica{seg: m.segs[ps[0].SegmentID], offset: ps[0].Offset}
			if rr.Stripe != nil {
				r.stripe = make([]piece, len(ps))
				for j, p := range ps {
					r.stripe[j] = piece{seg: m.segs[p.SegmentID], offset: p.Offset, size: p.Size}
				}
			}
			for _, p := range r.parts(rec.Size) {
				p.seg.track(o)
				m.used += p.size
			}
			o.addReplica(r)
		}
		m.objects.put(o)
		if o.softPin {
			m.pinned.soft++
		}
		if o.hardPin {
			m.pinned.hard++
		}
		if o.nreps() > 0 {
			m.pol.insert(o)
		}
		m.refreshSoftPin(o)
	}
	return nil
}
