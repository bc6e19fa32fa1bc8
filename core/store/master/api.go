package master

import (
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mooncake-go/mooncake/core/store"
)

// ObjectInfo describes one object for operators (Stat, ListKeys).
type ObjectInfo struct {
	Key      string
	Size     uint64 // value bytes (one replica)
	Owner    string // client that wrote it
	Complete bool   // readable; false while being written
	// Replicas are the DRAM replicas, then the LOCAL_DISK one if any
	// (Replica.Type).
	Replicas []Replica
	// LeaseLeft is the time until the lease ends, 0 when unleased.
	LeaseLeft time.Duration
	// SoftPin and HardPin are the pins it was put with; SoftPinLeft is the
	// time until the soft pin lapses (0 when not in force).
	SoftPin, HardPin bool
	SoftPinLeft      time.Duration
	// ID is the value's identity (the master numbers values at PutStart;
	// disk tier tasks and the owner's files carry it).
	ID uint64
}

// SegmentInfo describes one mounted segment for operators.
type SegmentInfo struct {
	Segment
	Client      string // owner
	Used        uint64 // bytes allocated (replicas and discarded writes), not counting Reserved
	Reserved    uint64 // bytes held by uncommitted reservations (Reserve)
	LargestFree uint64 // largest contiguous free range, bytes
	Objects     int    // objects with a replica (or piece) here
}

// checkSegment validates a segment as MountSegment does.
func checkSegment(seg Segment) error {
	switch {
	case seg.ID == "":
		return store.Errorf(store.InvalidParams, "segment id is empty")
	case seg.Name == "":
		return store.Errorf(store.InvalidParams, "segment %q has no name", seg.ID)
	case seg.Size == 0:
		return store.Errorf(store.InvalidParams, "segment %q has size 0", seg.ID)
	case seg.Base == 0:
		return store.Errorf(store.InvalidParams, "segment %q has base address 0", seg.ID)
	case !seg.Kind.Valid():
		return store.Errorf(store.InvalidParams, "segment %q has undefined kind %d", seg.ID, seg.Kind)
	}
	return nil
}

// removable is Remove's check without the lookup: nil when o may go now.
func (m *Master) removable(o *object, force bool, now time.Time) error {
	switch {
	case !o.complete:
		return store.Errorf(store.ReplicaIsNotReady, "key %q is being written", o.key)
	case !force && m.leased(o, now):
		return store.Errorf(store.ObjectHasLease, "key %q is leased for %v more", o.key, m.timeOf(o.leaseUntil).Sub(now))
	case !force && o.hardPin:
		return store.Errorf(store.ObjectHasLease, "key %q is hard-pinned; remove it with force", o.key)
	case !force && o.task() != nil && o.task().taken:
		return store.Errorf(store.ObjectReplicaBusy, "key %q: a %s to the disk tier is in progress", o.key, o.task().kind)
	}
	return nil
}

// RemoveByRegex removes every object whose key matches expr (Go RE2 syntax,
// unanchored like upstream's regex_search) and that Remove(key, force)
// would remove: objects being written are skipped, and so are leased and
// hard-pinned ones unless force. It returns how many it removed. Errors:
// INVALID_PARAMS (empty or invalid expression, or one that is not UTF-8).
// Mirrors upstream RemoveByRegex.
//
// Keys are bytes; the expression is UTF-8 text (RE2). A key is matched as
// Go's regexp matches a string: its UTF-8 sequences as characters, and each
// byte that is not part of one as U+FFFD, so "." and `\x{FFFD}` match such
// a byte (and a real U+FFFD alike), while `\xff` means U+00FF (the bytes
// c3 bf), not the byte 0xff. Upstream's std::regex compares single bytes
// instead; expressions over ASCII and UTF-8 keys mean the same in both.
// Remove names one key exactly, whatever its bytes.
func (m *Master) RemoveByRegex(expr string, force bool) (int, error) {
	r, err := m.RemoveByRegexReport(expr, force)
	return r.Removed, err
}

// RegexRemoval is what RemoveByRegexReport did with the objects whose key
// matched: how many it removed and, of those it left, why (ours: upstream
// reports the count removed only).
type RegexRemoval struct {
	Removed int
	// Leased counts objects left because they are leased or hard-pinned
	// (OBJECT_HAS_LEASE); force removes them.
	Leased int
	// Busy counts objects left because a copy to or from the disk tier
	// is in progress (OBJECT_REPLICA_BUSY); force removes them.
	Busy int
	// Writing counts objects left because they are being written
	// (REPLICA_IS_NOT_READY); nothing removes them.
	Writing int
}

// RemoveByRegexReport is RemoveByRegex, saying also how many matching
// objects it left and why. Errors as RemoveByRegex.
func (m *Master) RemoveByRegexReport(expr string, force bool) (RegexRemoval, error) {
	var r RegexRemoval
	if expr == "" {
		return r, store.Errorf(store.InvalidParams, "empty regex")
	}
	if !utf8.ValidString(expr) {
		return r, store.Errorf(store.InvalidParams, "regex %q is not UTF-8; match a byte that is not UTF-8 with . or \\x{FFFD}", expr)
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return r, store.Errorf(store.InvalidParams, "regex %q: %v", expr, err)
	}
	now := m.cfg.Now()
	var victims []*object
	for o := range m.objects.all {
		if !re.MatchString(o.key) {
			continue
		}
		switch store.CodeOf(m.removable(o, force, now)) {
		case store.OK:
			victims = append(victims, o)
		case store.ObjectHasLease:
			r.Leased++
		case store.ObjectReplicaBusy:
			r.Busy++
		default:
			r.Writing++
		}
	}
	for _, o := range victims {
		m.free(o)
	}
	r.Removed = len(victims)
	return r, nil
}

// RemoveAll removes every complete object, skipping leased ones unless
// force; hard pins do not protect (upstream: hard-pinned objects are removed
// only explicitly, by Remove with force or RemoveAll). Objects being written
// are always skipped: their writers still hold the space. It returns how
// many it removed. Mirrors upstream RemoveAll.
func (m *Master) RemoveAll(force bool) int {
	now := m.cfg.Now()
	var victims []*object
	for o := range m.objects.all {
		if m.removable(o, true, now) == nil && (force || !m.leased(o, now)) {
			victims = append(victims, o)
		}
	}
	for _, o := range victims {
		m.free(o)
	}
	return len(victims)
}

// Stat describes key without granting a lease or counting as a use (an
// operator's look; do not read through the replicas it returns). Errors:
// INVALID_PARAMS / INVALID_KEY for a bad key; OBJECT_NOT_FOUND.
func (m *Master) Stat(key string) (ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return ObjectInfo{}, err
	}
	o := m.objects.get(key)
	if o == nil {
		return ObjectInfo{}, store.Errorf(store.ObjectNotFound, "key %q", key)
	}
	return m.info(o, m.cfg.Now()), nil
}

func (m *Master) info(o *object, now time.Time) ObjectInfo {
	in := ObjectInfo{Key: o.key, Size: o.size, Owner: m.owners.name(o.owner), Complete: o.complete, Replicas: m.descs(o), SoftPin: o.softPin, HardPin: o.hardPin, ID: o.id}
	if t := o.disk(); t != nil {
		in.Replicas = append(in.Replicas, Replica{Type: ReplicaLocalDisk, Segment: t.seg.Name, SegmentID: t.seg.ID, Size: o.size, Status: ReplicaComplete})
	}
	if m.leased(o, now) {
		in.LeaseLeft = m.timeOf(o.leaseUntil).Sub(now)
	}
	if m.softPinned(o, now) {
		in.SoftPinLeft = m.timeOf(o.when).Sub(now)
	}
	return in
}

// GetSize returns the size in bytes of key's value; no lease is granted.
// Errors: INVALID_PARAMS / INVALID_KEY for a bad key; OBJECT_NOT_FOUND;
// REPLICA_IS_NOT_READY (being written). Mirrors upstream get_size, which
// reads the replica list (and so takes a lease) instead.
func (m *Master) GetSize(key string) (uint64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	o := m.objects.get(key)
	if o == nil {
		return 0, store.Errorf(store.ObjectNotFound, "key %q", key)
	}
	if !o.complete {
		return 0, store.Errorf(store.ReplicaIsNotReady, "key %q is being written", key)
	}
	return o.size, nil
}

// ReMountSegment mounts segs for client after a NEED_REMOUNT, idempotently:
// a segment already mounted by the same client with the same description is
// left as it is. Every segment is checked before any is mounted. On
// success the client's segments are known (Ping stops asking it to
// remount), also with no segments: a client that has none remounts so.
// Errors:
// INVALID_PARAMS (empty client id, a malformed segment as MountSegment, an
// id listed twice); SEGMENT_ALREADY_EXISTS (the id is mounted by another
// client or with another name, base, size, protocol, host or kind).
// Mirrors upstream ReMountSegment.
func (m *Master) ReMountSegment(segs []Segment, client string) error {
	if client == "" {
		return store.Errorf(store.InvalidParams, "empty client id")
	}
	seen := make(map[string]bool, len(segs))
	for _, s := range segs {
		if err := checkSegment(s); err != nil {
			return err
		}
		if seen[s.ID] {
			return store.Errorf(store.InvalidParams, "segment %q listed twice", s.ID)
		}
		seen[s.ID] = true
		if cur, ok := m.segs[s.ID]; ok {
			if cur.client != client {
				return store.Errorf(store.SegmentAlreadyExists, "segment %q is mounted by client %q", s.ID, cur.client)
			}
			if cur.Segment != s {
				return store.Errorf(store.SegmentAlreadyExists, "segment %q is mounted as %+v", s.ID, cur.Segment)
			}
		}
	}
	for _, s := range segs {
		if _, ok := m.segs[s.ID]; !ok {
			if err := m.MountSegment(s, client); err != nil {
				return err // unreachable: checked above
			}
		}
	}
	m.mountedClient(client)
	return nil
}

func (m *Master) segInfo(s *segment) SegmentInfo {
	st := s.alloc.Stats()
	rb, rn := m.reservedOn(s)
	return SegmentInfo{Segment: s.Segment, Client: s.client, Used: st.Used - rb, Reserved: rb, LargestFree: st.LargestFree, Objects: s.nobj - rn}
}

// ListSegments describes every mounted segment, in ID order.
func (m *Master) ListSegments() []SegmentInfo {
	out := make([]SegmentInfo, len(m.order))
	for i, s := range m.order {
		out[i] = m.segInfo(s)
	}
	return out
}

// QuerySegment describes one segment. Errors: INVALID_PARAMS (empty id);
// SEGMENT_NOT_FOUND. Mirrors upstream QuerySegmentStatusById.
func (m *Master) QuerySegment(id string) (SegmentInfo, error) {
	if id == "" {
		return SegmentInfo{}, store.Errorf(store.InvalidParams, "segment id is empty")
	}
	s, ok := m.segs[id]
	if !ok {
		return SegmentInfo{}, store.Errorf(store.SegmentNotFound, "segment %q", id)
	}
	return m.segInfo(s), nil
}

// ListKeys describes the objects whose key starts with prefix, in key
// order, at most limit of them (0 = all), and returns how many match in
// all. Listing grants no lease and does not count as a use. Errors:
// INVALID_PARAMS (negative limit).
func (m *Master) ListKeys(prefix string, limit int) ([]ObjectInfo, int, error) {
	if limit < 0 {
		return nil, 0, store.Errorf(store.InvalidParams, "limit %d", limit)
	}
	var objs []*object
	for o := range m.objects.all {
		if strings.HasPrefix(o.key, prefix) {
			objs = append(objs, o)
		}
	}
	slices.SortFunc(objs, func(a, b *object) int { return strings.Compare(a.key, b.key) })
	total := len(objs)
	if limit > 0 && len(objs) > limit {
		objs = objs[:limit]
	}
	now := m.cfg.Now()
	out := make([]ObjectInfo, len(objs))
	for i, o := range objs {
		out[i] = m.info(o, now)
	}
	return out, total, nil
}
