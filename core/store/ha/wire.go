package ha

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/master"
)

// The JSON stored in etcd. Field names are part of the format: a master
// must read what an older one wrote.

// Entry ops.
const (
	opMount   = "mount"
	opUnmount = "unmount"
	opCommit  = "commit"
	opRemove  = "remove"
	// SSD tier (master/tier.go).
	opUpdate      = "update"
	opDiskMount   = "disk_mount"
	opDiskUnmount = "disk_unmount"
)

type wireSegment struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Base     uint64 `json:"base"`
	Size     uint64 `json:"size"`
	Protocol string `json:"protocol,omitempty"`
	HostID   string `json:"host_id,omitempty"`
	// Kind is "standalone", or absent for embedded (the zero kind, and
	// what entries written before kinds existed decode as); another text
	// fails to decode (ErrCorrupt).
	Kind   store.SegmentKind `json:"kind,omitempty"`
	Client string            `json:"client"`
	// DiskCapacity is the segment's disk tier in bytes (snapshots only;
	// the log carries disk_mount events); 0 = none.
	DiskCapacity uint64 `json:"disk_capacity,omitempty"`
}

type wirePiece struct {
	Segment string `json:"seg"`
	Offset  uint64 `json:"off"`
	Size    uint64 `json:"size"`
}

type wireReplica struct {
	Segment string      `json:"seg"`
	Offset  uint64      `json:"off"`
	Stripe  []wirePiece `json:"stripe,omitempty"`
}

// Object keys are bytes (store.CheckKey) and JSON strings are UTF-8
// (encoding/json replaces other bytes with U+FFFD), so a key travels as
// "key" when it is UTF-8, as every key written before keys were bytes is,
// and otherwise as "key_bytes", base64 of its bytes, with "key" left out.
// A master built before keys were bytes refuses an entry with key_bytes
// (it reads an empty key: ErrCorrupt) rather than restore a wrong key.

type wireObject struct {
	Key      string        `json:"key,omitempty"`
	KeyBytes []byte        `json:"key_bytes,omitempty"` // key that is not UTF-8
	Size     uint64        `json:"size"`
	Owner    string        `json:"owner,omitempty"`
	Replicas []wireReplica `json:"replicas"`
	SoftPin  bool          `json:"soft_pin,omitempty"`
	HardPin  bool          `json:"hard_pin,omitempty"`
	ID       uint64        `json:"id,omitempty"`   // the value's identity (disk tier tasks)
	Disk     string        `json:"disk,omitempty"` // segment whose disk tier holds a copy
}

// wireEntry is one event of the operation log.
type wireEntry struct {
	Op        string       `json:"op"`
	Segment   *wireSegment `json:"segment,omitempty"`    // mount
	SegmentID string       `json:"segment_id,omitempty"` // unmount
	Object    *wireObject  `json:"object,omitempty"`     // commit, update
	Key       string       `json:"key,omitempty"`        // remove
	KeyBytes  []byte       `json:"key_bytes,omitempty"`  // remove, key that is not UTF-8
	Capacity  uint64       `json:"capacity,omitempty"`   // disk_mount (with segment_id)
}

// wireSnapshot is a whole table (master.State) at sequence number Seq.
type wireSnapshot struct {
	Seq      uint64        `json:"seq"`
	Segments []wireSegment `json:"segments"`
	Objects  []wireObject  `json:"objects"` // least recently used first
}

// wireManifest is the value of the snapshot key: where the chunks of the
// latest complete snapshot are.
type wireManifest struct {
	Seq     uint64 `json:"seq"`
	Chunks  int    `json:"chunks"`
	Bytes   int    `json:"bytes"`
	Objects int    `json:"objects"`
}

func toWireSegment(s master.Segment, client string) wireSegment {
	return wireSegment{ID: s.ID, Name: s.Name, Base: s.Base, Size: s.Size, Protocol: s.Protocol, HostID: s.HostID, Kind: s.Kind, Client: client}
}

func (w wireSegment) segment() master.Segment {
	return master.Segment{ID: w.ID, Name: w.Name, Base: w.Base, Size: w.Size, Protocol: w.Protocol, HostID: w.HostID, Kind: w.Kind}
}

// toWireKey returns key's wire form: (key, nil) for UTF-8, else ("",
// its bytes).
func toWireKey(key string) (string, []byte) {
	if utf8.ValidString(key) {
		return key, nil
	}
	return "", []byte(key)
}

// fromWireKey reverses toWireKey. Errors: ErrCorrupt when both forms are
// present.
func fromWireKey(key string, b []byte) (string, error) {
	if b == nil {
		return key, nil
	}
	if key != "" {
		return "", fmt.Errorf("%w: both key %q and key_bytes %q", ErrCorrupt, key, b)
	}
	return string(b), nil
}

func toWireObject(o master.ObjectRecord) wireObject {
	w := wireObject{Size: o.Size, Owner: o.Owner, SoftPin: o.SoftPin, HardPin: o.HardPin, Replicas: make([]wireReplica, len(o.Replicas)), ID: o.ID, Disk: o.Disk}
	w.Key, w.KeyBytes = toWireKey(o.Key)
	for i, r := range o.Replicas {
		wr := wireReplica{Segment: r.SegmentID, Offset: r.Offset}
		for _, p := range r.Stripe {
			wr.Stripe = append(wr.Stripe, wirePiece{Segment: p.SegmentID, Offset: p.Offset, Size: p.Size})
		}
		w.Replicas[i] = wr
	}
	return w
}

// record converts w back. Errors: ErrCorrupt (both key forms).
func (w wireObject) record() (master.ObjectRecord, error) {
	key, err := fromWireKey(w.Key, w.KeyBytes)
	if err != nil {
		return master.ObjectRecord{}, err
	}
	o := master.ObjectRecord{Key: key, Size: w.Size, Owner: w.Owner, SoftPin: w.SoftPin, HardPin: w.HardPin, Replicas: make([]master.ReplicaRecord, len(w.Replicas)), ID: w.ID, Disk: w.Disk}
	for i, r := range w.Replicas {
		rr := master.ReplicaRecord{SegmentID: r.Segment, Offset: r.Offset}
		for _, p := range r.Stripe {
			rr.Stripe = append(rr.Stripe, master.PieceRecord{SegmentID: p.Segment, Offset: p.Offset, Size: p.Size})
		}
		o.Replicas[i] = rr
	}
	return o, nil
}

func toWireSnapshot(st master.State, seq uint64) wireSnapshot {
	w := wireSnapshot{Seq: seq, Segments: make([]wireSegment, len(st.Segments)), Objects: make([]wireObject, len(st.Objects))}
	for i, s := range st.Segments {
		w.Segments[i] = toWireSegment(s.Segment, s.Client)
		w.Segments[i].DiskCapacity = s.DiskCapacity
	}
	for i, o := range st.Objects {
		w.Objects[i] = toWireObject(o)
	}
	return w
}

// state converts w back. Errors: ErrCorrupt (an object with both key
// forms).
func (w wireSnapshot) state() (master.State, error) {
	st := master.State{Segments: make([]master.SegmentRecord, len(w.Segments)), Objects: make([]master.ObjectRecord, len(w.Objects))}
	for i, s := range w.Segments {
		st.Segments[i] = master.SegmentRecord{Segment: s.segment(), Client: s.Client, DiskCapacity: s.DiskCapacity}
	}
	for i, o := range w.Objects {
		rec, err := o.record()
		if err != nil {
			return master.State{}, fmt.Errorf("object %d: %w", i, err)
		}
		st.Objects[i] = rec
	}
	return st, nil
}

// apply replays one event on m through its Restore methods. Errors:
// ErrCorrupt, wrapping the master's error, when the event does not apply.
func apply(m *master.Master, e wireEntry) error {
	var err error
	switch e.Op {
	case opMount:
		if e.Segment == nil {
			return fmt.Errorf("%w: mount without a segment", ErrCorrupt)
		}
		err = m.RestoreSegment(e.Segment.segment(), e.Segment.Client)
	case opUnmount:
		err = m.RestoreUnmount(e.SegmentID)
	case opCommit:
		if e.Object == nil {
			return fmt.Errorf("%w: commit without an object", ErrCorrupt)
		}
		var rec master.ObjectRecord
		if rec, err = e.Object.record(); err == nil {
			err = m.RestoreObject(rec)
		}
	case opRemove:
		var key string
		if key, err = fromWireKey(e.Key, e.KeyBytes); err == nil && !m.RestoreRemove(key) {
			err = fmt.Errorf("no complete object %q to remove", key)
		}
	case opUpdate:
		if e.Object == nil {
			return fmt.Errorf("%w: update without an object", ErrCorrupt)
		}
		var rec master.ObjectRecord
		if rec, err = e.Object.record(); err == nil {
			err = m.RestoreUpdate(rec)
		}
	case opDiskMount:
		err = m.RestoreDisk(e.SegmentID, e.Capacity)
	case opDiskUnmount:
		err = m.RestoreDiskUnmount(e.SegmentID)
	default:
		err = fmt.Errorf("unknown op %q", e.Op)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, e.Op, err)
	}
	return nil
}

// decodeBatch parses one oplog value.
func decodeBatch(key string, v []byte) ([]wireEntry, error) {
	var es []wireEntry
	if err := json.Unmarshal(v, &es); err != nil {
		return nil, fmt.Errorf("%w: oplog %s: %v", ErrCorrupt, key, err)
	}
	return es, nil
}
