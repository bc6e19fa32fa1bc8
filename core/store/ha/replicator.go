package ha

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mooncake-go/mooncake/core/store/master"
)

// Defaults of ReplicatorConfig.
const (
	DefaultSnapshotEvery    = 10000
	DefaultSnapshotInterval = time.Minute
	DefaultMaxBatchBytes    = 256 << 10
	DefaultRequestTimeout   = 5 * time.Second
)

// ReplicatorConfig configures a Replicator.
type ReplicatorConfig struct {
	// Client is the etcd client (owned by the caller); required.
	Client *clientv3.Client
	// ClusterID names the cluster; default DefaultClusterID.
	ClusterID string
	// Fence is the condition every write carries (Term.Fence: this master
	// still holds the leadership); a refused write fails the replicator
	// with ErrNotLeader. Empty = unconditional (tests).
	Fence []clientv3.Cmp
	// NextSeq is the sequence number of the first event; Load's result + 1.
	NextSeq uint64
	// Do runs f under the lock that serialises calls into the master (for
	// server.Server, its Do method); snapshots take their dump through it.
	// Nil disables snapshots.
	Do func(f func(m *master.Master))
	// SnapshotEvery takes a snapshot after this many events; default
	// DefaultSnapshotEvery; negative = never by count.
	SnapshotEvery int
	// SnapshotInterval takes a snapshot this often when there are new
	// events; default DefaultSnapshotInterval; negative = never by time.
	SnapshotInterval time.Duration
	// MaxBatchBytes bounds one oplog value and one snapshot chunk; default
	// DefaultMaxBatchBytes (etcd's default request limit is 1.5 MiB).
	MaxBatchBytes int
	// RequestTimeout bounds each etcd request; default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logf receives progress and errors; default none.
	Logf func(format string, args ...any)
}

func (c *ReplicatorConfig) defaults() {
	if c.ClusterID == "" {
		c.ClusterID = DefaultClusterID
	}
	if c.NextSeq == 0 {
		c.NextSeq = 1
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = DefaultSnapshotEvery
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = DefaultSnapshotInterval
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// pendingEntry is an observed event not yet durable.
type pendingEntry struct {
	seq uint64
	e   wireEntry
}

// Replicator is a master.Observer that appends the master's committed
// mutations to the operation log in etcd, and takes periodic snapshots.
// See the package doc for the protocol. Its methods are safe for concurrent
// use; the Observer methods never block.
type Replicator struct {
	cfg    ReplicatorConfig
	keys   keys
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	kick   chan struct{} // wakes the flusher (capacity 1)
	snap   chan struct{} // asks for a snapshot (capacity 1)
	failed chan struct{} // closed by fail
	wg     sync.WaitGroup

	// mu guards the fields under it. Lock order: the master's lock (held
	// by the Observer callers and by Do), then mu.
	mu struct {
		sync.Mutex
		pending   []pendingEntry
		next      uint64        // sequence number of the next event
		durable   uint64        // every event <= durable is in etcd
		flushed   chan struct{} // closed and replaced when durable advances
		err       error         // first failure; sticky
		sinceSnap int           // events since the last snapshot
		master    *master.Master
	}

	snapMu   sync.Mutex // serialises snapshots; guards lastSnap
	lastSnap uint64     // seq of the last snapshot written (or loaded)
}

// NewReplicator starts a replicator (its flusher and, with cfg.Do, its
// snapshot loop). Attach it to the master it replicates; Close it when the
// leadership ends.
func NewReplicator(cfg ReplicatorConfig) *Replicator {
	cfg.defaults()
	r := &Replicator{cfg: cfg, keys: keysFor(cfg.ClusterID), kick: make(chan struct{}, 1), snap: make(chan struct{}, 1), failed: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.mu.next = cfg.NextSeq
	r.mu.durable = cfg.NextSeq - 1
	r.mu.flushed = make(chan struct{})
	r.lastSnap = cfg.NextSeq - 1
	r.wg.Add(1)
	go r.flushLoop()
	if cfg.Do != nil {
		r.wg.Add(1)
		go r.snapshotLoop()
	}
	return r
}

// Attach makes r the observer of m. Call it before m is shared (before the
// server serves it); snapshots dump only an attached master.
func (r *Replicator) Attach(m *master.Master) {
	r.mu.Lock()
	r.mu.master = m
	r.mu.Unlock()
	m.SetObserver(r)
}

// Close stops the replicator: events not yet durable are dropped and every
// Sync from now on fails (ErrClosed unless it had failed already). It waits
// for an etcd request in flight.
func (r *Replicator) Close() {
	r.fail(ErrClosed)
	r.cancel()
	r.wg.Wait()
}

// Failed is closed when the replicator fails (an etcd write failed or was
// refused by the fence) or is closed; the leadership must then end.
func (r *Replicator) Failed() <-chan struct{} { return r.failed }

// Err returns the failure, or nil.
func (r *Replicator) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.err
}

func (r *Replicator) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.err == nil {
		r.mu.err = err
		close(r.failed)
	}
}

// Seqs returns the sequence number of the last event observed and of the
// last one durable in etcd.
func (r *Replicator) Seqs() (observed, durable uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.next - 1, r.mu.durable
}

// observe queues e; called under the master's lock.
func (r *Replicator) observe(e wireEntry) {
	r.mu.Lock()
	r.mu.pending = append(r.mu.pending, pendingEntry{seq: r.mu.next, e: e})
	r.mu.next++
	r.mu.sinceSnap++
	snap := r.cfg.SnapshotEvery > 0 && r.mu.sinceSnap >= r.cfg.SnapshotEvery
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
	if snap {
		select {
		case r.snap <- struct{}{}:
		default:
		}
	}
}

// SegmentMounted implements master.Observer.
func (r *Replicator) SegmentMounted(seg master.Segment, client string) {
	w := toWireSegment(seg, client)
	r.observe(wireEntry{Op: opMount, Segment: &w})
}

// SegmentUnmounted implements master.Observer.
func (r *Replicator) SegmentUnmounted(id string) {
	r.observe(wireEntry{Op: opUnmount, SegmentID: id})
}

// ObjectCommitted implements master.Observer.
func (r *Replicator) ObjectCommitted(obj master.ObjectRecord) {
	w := toWireObject(obj)
	r.observe(wireEntry{Op: opCommit, Object: &w})
}

// ObjectRemoved implements master.Observer.
func (r *Replicator) ObjectRemoved(key string) {
	e := wireEntry{Op: opRemove}
	e.Key, e.KeyBytes = toWireKey(key)
	r.observe(e)
}

// ObjectUpdated implements master.Observer.
func (r *Replicator) ObjectUpdated(obj master.ObjectRecord) {
	w := toWireObject(obj)
	r.observe(wireEntry{Op: opUpdate, Object: &w})
}

// DiskMounted implements master.Observer.
func (r *Replicator) DiskMounted(id string, capacity uint64) {
	r.observe(wireEntry{Op: opDiskMount, SegmentID: id, Capacity: capacity})
}

// DiskUnmounted implements master.Observer.
func (r *Replicator) DiskUnmounted(id string) {
	r.observe(wireEntry{Op: opDiskUnmount, SegmentID: id})
}

// Sync waits until every event observed before the call is durable in
// etcd. A server calls it after each RPC, before answering, so that no
// answer reveals state a new leader would not have. Errors: the
// replicator's failure (ErrNotLeader, ErrClosed, an etcd error); ctx's.
func (r *Replicator) Sync(ctx context.Context) error {
	r.mu.Lock()
	target := r.mu.next - 1
	for r.mu.durable < target {
		if err := r.mu.err; err != nil {
			r.mu.Unlock()
			return err
		}
		ch := r.mu.flushed
		r.mu.Unlock()
		select {
		case r.kick <- struct{}{}:
		default:
		}
		select {
		case <-ch:
		case <-r.failed:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.mu.Lock()
	}
	r.mu.Unlock()
	return nil
}

// flushLoop writes pending events to etcd, in order, as few batches as
// possible (group commit: every RPC that arrives during a write is served
// by the next one).
func (r *Replicator) flushLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.kick:
		}
		for {
			r.mu.Lock()
			batch := r.mu.pending
			stop := r.mu.err != nil
			r.mu.Unlock()
			if stop || len(batch) == 0 {
				break
			}
			if err := r.write(batch); err != nil {
				if r.ctx.Err() == nil {
					r.cfg.Logf("ha: oplog append at seq %d failed: %v", batch[0].seq, err)
				}
				r.fail(err)
				return
			}
			r.mu.Lock()
			r.mu.pending = r.mu.pending[len(batch):]
			if len(r.mu.pending) == 0 {
				r.mu.pending = nil
			}
			r.mu.durable = batch[len(batch)-1].seq
			close(r.mu.flushed)
			r.mu.flushed = make(chan struct{})
			r.mu.Unlock()
		}
	}
}

// write appends batch to the log as one or more values of at most
// MaxBatchBytes, each a fenced put of a new key.
func (r *Replicator) write(batch []pendingEntry) error {
	vals, firsts, err := encodeBatch(batch, r.cfg.MaxBatchBytes)
	if err != nil {
		return err
	}
	for i, v := range vals {
		if err := r.put(r.keys.oplogKey(firsts[i]), v, true); err != nil {
			return err
		}
	}
	return nil
}

// encodeBatch encodes batch (consecutive sequence numbers) as oplog
// values: JSON arrays of events of at most max bytes each (an event larger
// than max gets a value of its own), with the sequence number of each
// value's first event. Errors: an event encoding/json refuses.
func encodeBatch(batch []pendingEntry, max int) (vals []string, firsts []uint64, err error) {
	var buf bytes.Buffer
	first := batch[0].seq
	flush := func() {
		buf.WriteByte(']')
		vals, firsts = append(vals, buf.String()), append(firsts, first)
		buf.Reset()
	}
	for i, p := range batch {
		b, err := json.Marshal(p.e)
		if err != nil {
			return nil, nil, fmt.Errorf("ha: encoding event %d: %w", p.seq, err)
		}
		if buf.Len() > 0 && buf.Len()+len(b)+2 > max {
			flush()
			first = batch[i].seq
		}
		if buf.Len() == 0 {
			buf.WriteByte('[')
		} else {
			buf.WriteByte(',')
		}
		buf.Write(b)
	}
	flush()
	return vals, firsts, nil
}

// put writes key = val if the fence holds (and, with fresh, if key does
// not exist yet). Errors: ErrNotLeader when refused; etcd's.
func (r *Replicator) put(key, val string, fresh bool) error {
	cmps := r.cfg.Fence
	if fresh {
		cmps = append(cmps[:len(cmps):len(cmps)], clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
	}
	return r.txn(cmps, clientv3.OpPut(key, val))
}

func (r *Replicator) txn(cmps []clientv3.Cmp, ops ...clientv3.Op) error {
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.RequestTimeout)
	defer cancel()
	resp, err := r.cfg.Client.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("ha: etcd txn: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: fenced write refused", ErrNotLeader)
	}
	return nil
}

func (r *Replicator) snapshotLoop() {
	defer r.wg.Done()
	var tick <-chan time.Time
	if r.cfg.SnapshotInterval > 0 {
		t := time.NewTicker(r.cfg.SnapshotInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.failed:
			return
		case <-tick:
		case <-r.snap:
		}
		if err := r.Snapshot(r.ctx); err != nil {
			if r.ctx.Err() != nil {
				return
			}
			r.cfg.Logf("ha: snapshot failed: %v", err)
			if errors.Is(err, ErrNotLeader) {
				r.fail(err)
				return
			}
		}
	}
}

// Snapshot writes the attached master's whole table to etcd and truncates
// the log up to it: it dumps the table under the master's lock (through
// Config.Do), waits until the log holds every event the dump reflects,
// writes the chunks and then the manifest (fenced), and deletes older
// snapshot chunks and the log keys the snapshot covers. It does nothing
// when no event happened since the last snapshot. Errors: ErrClosed (no
// attached master, or no Do); Sync's; etcd's; ErrNotLeader.
func (r *Replicator) Snapshot(ctx context.Context) error {
	if r.cfg.Do == nil {
		return fmt.Errorf("%w: no Do to take the dump with", ErrClosed)
	}
	r.snapMu.Lock()
	defer r.snapMu.Unlock()
	var (
		st  master.State
		seq uint64
		ok  bool
	)
	r.cfg.Do(func(m *master.Master) {
		r.mu.Lock()
		attached := r.mu.master
		seq = r.mu.next - 1
		r.mu.Unlock()
		if m == nil || m != attached || seq == r.lastSnap {
			return
		}
		st, ok = m.Dump(), true
		r.mu.Lock()
		r.mu.sinceSnap = 0
		r.mu.Unlock()
	})
	if !ok {
		if seq == r.lastSnap {
			return nil
		}
		return fmt.Errorf("%w: master not attached", ErrClosed)
	}
	if err := r.Sync(ctx); err != nil {
		return err
	}
	data, err := json.Marshal(toWireSnapshot(st, seq))
	if err != nil {
		return fmt.Errorf("ha: encoding snapshot: %w", err)
	}
	// Chunks a failed attempt at the same seq left behind would not match
	// the manifest.
	if err := r.txn(r.cfg.Fence, clientv3.OpDelete(r.keys.snapshotDir(seq), clientv3.WithPrefix())); err != nil {
		return err
	}
	chunks := 0
	for off := 0; off < len(data); off += r.cfg.MaxBatchBytes {
		end := min(off+r.cfg.MaxBatchBytes, len(data))
		if err := r.put(r.keys.snapshotChunk(seq, chunks), string(data[off:end]), false); err != nil {
			return err
		}
		chunks++
	}
	man, _ := json.Marshal(wireManifest{Seq: seq, Chunks: chunks, Bytes: len(data), Objects: len(st.Objects)})
	if err := r.put(r.keys.snapshot(), string(man), false); err != nil {
		return err
	}
	r.lastSnap = seq
	// Older chunks, then the log the snapshot covers. The batch holding
	// seq may also hold later events: keep it (Load skips what the
	// snapshot covers).
	if err := r.txn(r.cfg.Fence, clientv3.OpDelete(r.keys.snapshotData(), clientv3.WithRange(r.keys.snapshotDir(seq)))); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	resp, err := r.cfg.Client.Get(ctx, r.keys.oplog(), clientv3.WithRange(r.keys.oplogKey(seq+1)),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("ha: finding the log to truncate: %w", err)
	}
	if len(resp.Kvs) == 1 {
		if err := r.txn(r.cfg.Fence, clientv3.OpDelete(r.keys.oplog(), clientv3.WithRange(string(resp.Kvs[0].Key)))); err != nil {
			return err
		}
	}
	r.cfg.Logf("ha: snapshot at seq %d: %d objects, %d segments, %d bytes in %d chunks", seq, len(st.Objects), len(st.Segments), len(data), chunks)
	return nil
}
