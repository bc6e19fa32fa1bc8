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
// TTL passed), an object committed (PutEnd), a complete object removed
// (Remove, RemoveByRegex, RemoveAll, eviction). Replaying those events on a
// fresh master through the Restore methods, in order, rebuilds the same
// object table and segment allocations; Dump and Restore do the same for a
// whole table at once (a snapshot).
//
// Not replicated: leases, the LRU order of reads, soft-pin deadlines,
// clients without segments, and writes not yet committed. An unfinished
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
	Size     uint64 // bytes of the value (one replica)
	Owner    string // the client that wrote it (PutEnd stays idempotent for it)
	Replicas []ReplicaRecord
	SoftPin  bool // its soft pin restarts at DefaultSoftPinTTL when restored
	HardPin  bool
}

// SegmentRecord is a mounted segment and the client that mounted it.
type SegmentRecord struct {
	Segment Segment
	Client  string
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
		ob.ObjectCommitted(record(o))
	}
}

// observeRemoved reports o's removal if it is complete (an unfinished write
// was never reported).
func (m *Master) observeRemoved(o *object) {
	if ob := m.cfg.Observer; ob != nil && o.complete && m.objects[o.key] == o {
		ob.ObjectRemoved(o.key)
	}
}

func record(o *object) ObjectRecord {
	rec := ObjectRecord{Key: o.key, Size: o.size, Owner: o.owner, SoftPin: o.softPin, HardPin: o.hardPin, Replicas: make([]ReplicaRecord, len(o.replicas))}
	for i, r := range o.replicas {
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
// segment and every complete object, least recently used first. Restore on
// a fresh master rebuilds it.
func (m *Master) Dump() State {
	st := State{Segments: make([]SegmentRecord, len(m.order))}
	for i, s := range m.order {
		st.Segments[i] = SegmentRecord{Segment: s.Segment, Client: s.client}
	}
	for o := m.lru.prev; o != &m.lru; o = o.prev {
		st.Objects = append(st.Objects, record(o))
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
	}
	return m.RestoreObjects(st.Objects)
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
	o, ok := m.objects[key]
	if !ok || !o.complete {
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
	if o, ok := m.objects[rec.Key]; ok && o.complete && sameRecord(record(o), rec) {
		return nil
	}
	return m.RestoreObjects([]ObjectRecord{rec})
}

func sameRecord(a, b ObjectRecord) bool {
	return a.Key == b.Key && a.Size == b.Size && a.Owner == b.Owner && a.SoftPin == b.SoftPin && a.HardPin == b.HardPin &&
		slices.EqualFunc(a.Replicas, b.Replicas, func(x, y ReplicaRecord) bool {
			return slices.Equal(x.pieces(a.Size), y.pieces(b.Size))
		})
}

// RestoreObjects restores recs in order (the last ends most recently used)
// as RestoreObject does. The ranges are reserved segment by segment in
// ascending offset order, which keeps AllocAt logarithmic when restoring a
// whole table. Errors: as RestoreObject, plus INVALID_PARAMS for a key
// listed twice; nothing changes on error.
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
		case m.objects[rec.Key] != nil:
			return store.Errorf(store.ObjectAlreadyExists, "key %q", rec.Key)
		case rec.Size == 0 || len(rec.Replicas) == 0:
			return store.Errorf(store.InvalidParams, "key %q: %d bytes, %d replicas", rec.Key, rec.Size, len(rec.Replicas))
		}
		seen[rec.Key] = true
		for _, r := range rec.Replicas {
			var total uint64
			for _, p := range r.pieces(rec.Size) {
				s, ok := m.segs[p.SegmentID]
				if !ok {
					return store.Errorf(store.SegmentNotFound, "key %q: segment %q", rec.Key, p.SegmentID)
				}
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
				_ = u.seg.alloc.Free(u.offset)
			}
			return store.Errorf(store.NoAvailableHandle, "segment %q: range [%d,+%d) not free: %v", r.seg.ID, r.offset, r.size, err)
		}
	}
	now := m.cfg.Now()
	for _, rec := range recs {
		o := &object{key: rec.Key, size: rec.Size, owner: rec.Owner, started: now, complete: true,
			leaseUntil: now.Add(m.cfg.DefaultLeaseTTL), softPin: rec.SoftPin, hardPin: rec.HardPin}
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
				p.seg.objects[o] = struct{}{}
				m.used += p.size
			}
			o.replicas = append(o.replicas, r)
		}
		m.objects[o.key] = o
		if o.softPin {
			m.pinned.soft++
		}
		if o.hardPin {
			m.pinned.hard++
		}
		m.lruFront(o)
		m.refreshSoftPin(o)
	}
	return nil
}
