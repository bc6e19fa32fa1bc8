package ha

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/master"
)

// Fuzzing the replication wire a new leader reads from etcd: oplog values
// (FuzzOplogReplay) and snapshots (FuzzSnapshotRestore). Whatever the
// bytes, decoding and replaying them must end in an error or in a table
// that is consistent: its space accounting adds up, it survives a
// snapshot round trip unchanged, and removing everything and unmounting
// every segment leaves it empty. Seeds are what a real Replicator wrote
// for a master under a random workload with disk tiers.

// recordReplication runs a random workload (mounts, puts, removes,
// evictions, disk tier offloads, loads and evictions, unmounts) on a
// master observed by a Replicator, and returns the oplog values the
// Replicator would append (small batches, as with a small MaxBatchBytes)
// and snapshots taken along the way.
func recordReplication(tb testing.TB) (batches, snapshots [][]byte) {
	m, err := master.New(master.Config{Rand: rand.New(rand.NewPCG(8, 5)), EvictionHighWatermark: 0.6, EvictionRatio: 0.2,
		EnableOffload: true, OffloadOnEvict: true})
	require.NoError(tb, err)
	// A Replicator without its goroutines: events queue in mu.pending.
	r := &Replicator{}
	r.mu.next = 1
	r.Attach(m)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 2 {
		id := fmt.Sprint("s", i)
		s := seg(id, 32<<10)
		if i == 1 {
			s.Kind = store.SegmentStandalone
		}
		require.NoError(tb, m.MountSegment(s, "node"))
		require.NoError(tb, m.MountLocalDisk(id, "node", 1<<20))
	}
	take := func() {
		if len(r.mu.pending) == 0 {
			return
		}
		vals, _, err := encodeBatch(r.mu.pending, 600)
		require.NoError(tb, err)
		for _, v := range vals {
			batches = append(batches, []byte(v))
		}
		r.mu.pending = nil
	}
	for step := range 40 {
		for range 1 + rng.IntN(6) {
			key := fmt.Sprintf("key-%d", rng.IntN(30))
			if rng.IntN(8) == 0 {
				key = fmt.Sprintf("\xff\x00bytes-%d", rng.IntN(4)) // a key that is not UTF-8
			}
			id := fmt.Sprint("s", rng.IntN(2))
			switch op := rng.IntN(13); {
			case op < 5:
				if _, err := m.PutStart("w", key, uint64(1+rng.IntN(6<<10)), master.ReplicaConfig{ReplicaNum: 1 + rng.IntN(2)}); err == nil {
					_ = m.PutEnd("w", key)
				}
			case op < 6:
				_ = m.Remove(key, true)
			case op < 7:
				m.Tick()
			case op < 9:
				_, _, _, _ = m.GetOrLoad(key)
			case op < 11:
				ts, err := m.TakeTierTasks(id, "node", 4)
				if err != nil {
					continue
				}
				for _, task := range ts {
					_ = m.CompleteTierTask(id, "node", master.TaskResult{Kind: task.Kind, Key: task.Key, ObjectID: task.ObjectID, OK: rng.IntN(6) != 0})
				}
			case op < 12:
				if in, err := m.Stat(key); err == nil {
					for _, rp := range in.Replicas {
						if rp.Type == master.ReplicaLocalDisk {
							_ = m.CompleteTierTask(rp.SegmentID, "node", master.TaskResult{Kind: master.TaskDiskEvicted, Key: key, ObjectID: in.ID})
						}
					}
				}
			default:
				if err := m.UnmountLocalDisk(id, "node"); err != nil {
					_ = m.MountLocalDisk(id, "node", 1<<20)
				}
			}
		}
		take()
		if step%8 == 7 {
			data, err := json.Marshal(toWireSnapshot(m.Dump(), r.mu.next-1))
			require.NoError(tb, err)
			snapshots = append(snapshots, data)
		}
	}
	require.NoError(tb, m.UnmountSegment("s0", "node"))
	take()
	return batches, snapshots
}

// checkTable fails t unless m's table is consistent (see the file
// comment).
func checkTable(t *testing.T, m *master.Master) {
	t.Helper()
	st := m.Stats()
	var used uint64
	for _, s := range st.SegmentsDetail {
		require.LessOrEqual(t, s.Used, s.Capacity, "segment %s", s.ID)
		used += s.Used
	}
	require.Equal(t, st.Used, used, "master's used bytes vs its segments' allocators")

	checkPlaces(t, m)
	dump := canonical(m.Dump())
	data, err := json.Marshal(toWireSnapshot(m.Dump(), 1))
	require.NoError(t, err)
	var snap wireSnapshot
	require.NoError(t, json.Unmarshal(data, &snap))
	back, err := snap.state()
	require.NoError(t, err)
	fresh := newMaster(t, 7)
	require.NoError(t, fresh.Restore(back), "a snapshot of the replayed table does not restore")
	require.True(t, reflect.DeepEqual(dump, canonical(fresh.Dump())), "snapshot round trip changed the table")

	// Unmount the segments one by one (dropping what lived on each), then
	// remove what is left: the table stays consistent at every step.
	for _, s := range m.ListSegments() {
		require.NoError(t, m.UnmountSegment(s.ID, s.Client))
		checkPlaces(t, m)
	}
	m.RemoveAll(true)
	st = m.Stats()
	require.Zero(t, st.Objects, "objects left after removing all and unmounting every segment")
	require.Zero(t, st.Used, "bytes in use with no segment")
	require.Zero(t, st.Segments)
}

// checkPlaces fails t unless every replica piece and disk copy of every
// object lies on a mounted segment, inside it, and the pieces of one
// object's replicas lie on distinct segments (core/store/master's
// invariants).
func checkPlaces(t *testing.T, m *master.Master) {
	t.Helper()
	size := map[string]uint64{}
	for _, s := range m.ListSegments() {
		size[s.ID] = s.Size
	}
	for _, o := range m.Dump().Objects {
		seen := map[string]bool{}
		for _, r := range o.Replicas {
			pieces := r.Stripe
			if pieces == nil {
				pieces = []master.PieceRecord{{SegmentID: r.SegmentID, Offset: r.Offset, Size: o.Size}}
			}
			for _, p := range pieces {
				n, ok := size[p.SegmentID]
				require.True(t, ok, "object %q has a replica on segment %q, which is not mounted", o.Key, p.SegmentID)
				require.True(t, p.Offset < n && p.Size <= n-p.Offset, "object %q: piece [%d,+%d) outside segment %q of %d bytes", o.Key, p.Offset, p.Size, p.SegmentID, n)
				require.False(t, seen[p.SegmentID], "object %q has two pieces on segment %q", o.Key, p.SegmentID)
				seen[p.SegmentID] = true
			}
		}
		if o.Disk != "" {
			_, ok := size[o.Disk]
			require.True(t, ok, "object %q has a disk copy on segment %q, which is not mounted", o.Key, o.Disk)
		}
	}
}

// FuzzOplogReplay decodes fuzzed oplog values and replays their events on
// a fresh master, as Load does; a value that decodes and applies must
// leave a consistent table.
func FuzzOplogReplay(f *testing.F) {
	batches, _ := recordReplication(f)
	// One seed replays the whole log (one JSON array of every event), the
	// others are the values as written.
	var all []json.RawMessage
	for _, b := range batches {
		var es []json.RawMessage
		require.NoError(f, json.Unmarshal(b, &es))
		all = append(all, es...)
		f.Add(b)
	}
	whole, err := json.Marshal(all)
	require.NoError(f, err)
	f.Add(whole)
	f.Add([]byte(`[{"op":"mount","segment":{"id":"s","name":"n","base":0,"size":18446744073709551615,"client":"c"}}]`))
	f.Add([]byte(`[{"op":"commit","object":{"key":"k","key_bytes":"/w==","size":1,"replicas":[]}}]`))
	f.Add([]byte(`[{"op":"disk_mount","segment_id":"s","capacity":1},{"op":"remove"}]`))
	f.Fuzz(func(t *testing.T, value []byte) {
		es, err := decodeBatch("fuzz", value)
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt)
			return
		}
		m := newMaster(t, 3)
		for _, e := range es {
			if err := apply(m, e); err != nil {
				require.ErrorIs(t, err, ErrCorrupt)
				return // Load discards a master an event did not apply to
			}
		}
		checkTable(t, m)
	})
}

// FuzzSnapshotRestore decodes a fuzzed snapshot and restores it into a
// fresh master, as Load does; one that restores must leave a consistent
// table.
func FuzzSnapshotRestore(f *testing.F) {
	_, snapshots := recordReplication(f)
	for _, s := range snapshots {
		f.Add(s)
	}
	f.Add([]byte(`{"seq":1,"segments":[{"id":"a","name":"a","base":1,"size":100,"client":"c"}],"objects":[{"key":"k","size":10,"replicas":[{"seg":"a","off":0},{"seg":"a","off":50}]}]}`))
	f.Add([]byte(`{"seq":1,"segments":[{"id":"a","name":"a","base":1,"size":100,"client":"c"},{"id":"b","name":"b","base":1,"size":100,"client":"c"}],"objects":[{"key":"k","size":10,"replicas":[{"seg":"a","off":0,"stripe":[{"seg":"a","off":0,"size":5},{"seg":"a","off":20,"size":5}]}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var snap wireSnapshot
		if json.Unmarshal(data, &snap) != nil {
			return
		}
		st, err := snap.state()
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt)
			return
		}
		m := newMaster(t, 3)
		if m.Restore(st) != nil {
			return // Load discards it
		}
		checkTable(t, m)
	})
}

// fzBytes hands out the bytes of a fuzz input, then zeros.
type fzBytes []byte

func (b *fzBytes) next() byte {
	if len(*b) == 0 {
		return 0
	}
	c := (*b)[0]
	*b = (*b)[1:]
	return c
}

// fzEvents turns fuzz input into oplog events over a few segments and
// keys, so that replay reaches deep into the master (overlapping,
// striped, disk-only and re-placed objects; tiers attached and dropped;
// segments unmounted under objects) rather than stopping at JSON syntax.
func fzEvents(data []byte) []wireEntry {
	in := fzBytes(data)
	segID := func() string { return fmt.Sprint("s", in.next()%4) }
	key := func() string {
		if k := in.next() % 8; k < 6 {
			return fmt.Sprint("k", k)
		} else {
			return fmt.Sprint("\xff", k) // not UTF-8: travels as key_bytes
		}
	}
	object := func() *wireObject {
		o := &wireObject{Size: uint64(in.next())*64 + uint64(in.next()%64)}
		o.Key, o.KeyBytes = toWireKey(key())
		for range in.next() % 4 {
			r := wireReplica{Segment: segID(), Offset: uint64(in.next()) * 256}
			if n := in.next() % 4; n > 1 {
				left := o.Size
				for i := range n {
					p := wirePiece{Segment: segID(), Offset: uint64(in.next()) * 256, Size: left / uint64(n-i)}
					left -= p.Size
					r.Stripe = append(r.Stripe, p)
				}
				r.Segment, r.Offset = r.Stripe[0].Segment, r.Stripe[0].Offset
			}
			o.Replicas = append(o.Replicas, r)
		}
		if in.next()%4 == 0 {
			o.Disk = segID()
		}
		o.ID = uint64(in.next() % 4)
		o.SoftPin, o.HardPin = in.next()%5 == 0, in.next()%7 == 0
		return o
	}
	var es []wireEntry
	for len(in) > 0 {
		switch in.next() % 7 {
		case 0:
			id := segID()
			s := wireSegment{ID: id, Name: "node-" + id, Base: 1 << 30, Size: 1 << (10 + in.next()%8), Client: "c"}
			if in.next()%2 == 0 {
				s.Kind = store.SegmentStandalone
			}
			es = append(es, wireEntry{Op: opMount, Segment: &s})
		case 1:
			es = append(es, wireEntry{Op: opUnmount, SegmentID: segID()})
		case 2:
			es = append(es, wireEntry{Op: opCommit, Object: object()})
		case 3:
			e := wireEntry{Op: opRemove}
			e.Key, e.KeyBytes = toWireKey(key())
			es = append(es, e)
		case 4:
			es = append(es, wireEntry{Op: opUpdate, Object: object()})
		case 5:
			es = append(es, wireEntry{Op: opDiskMount, SegmentID: segID(), Capacity: uint64(in.next()%3) << 16})
		case 6:
			es = append(es, wireEntry{Op: opDiskUnmount, SegmentID: segID()})
		}
	}
	return es
}

// FuzzOplogEvents replays event sequences built from fuzz input (see
// fzEvents), each through its JSON wire form, and checks the table after
// every event that applied.
func FuzzOplogEvents(f *testing.F) {
	f.Add([]byte{0, 0, 4, 0, 0, 1, 2, 2, 10, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0})
	f.Add([]byte{0, 0, 7, 0, 0, 1, 7, 0, 5, 0, 1, 2, 0, 2, 1, 1, 0, 0, 0, 4, 3, 0, 1, 0, 1})
	f.Add([]byte{0, 0, 7, 0, 0, 1, 7, 0, 5, 0, 1, 2, 3, 0, 4, 0, 1, 0, 4, 0, 0, 0, 0, 1, 1, 0, 6, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		es := fzEvents(data)
		m := newMaster(t, 3)
		for i, e := range es {
			b, err := json.Marshal([]wireEntry{e})
			require.NoError(t, err)
			back, err := decodeBatch("fuzz", b)
			require.NoError(t, err, "event %d", i)
			if apply(m, back[0]) != nil {
				continue // Load would stop here; the master must still be consistent
			}
			checkPlaces(t, m)
		}
		checkTable(t, m)
	})
}
