package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// PutOptions are per-call replication settings (upstream ReplicateConfig).
type PutOptions struct {
	ReplicaNum       int    // 0 = the client's default
	PreferredSegment string // segment name tried first
	// PreferredSegments are segment names tried next, in order (upstream
	// ReplicateConfig.preferred_segments); placement falls back to the
	// strategy when none of them has room.
	PreferredSegments []string
	// WithSoftPin soft-pins the values (upstream with_soft_pin, 0.3.x):
	// the master evicts them only when nothing else can go, while they are
	// read within its soft pin TTL.
	WithSoftPin bool
	// WithHardPin hard-pins the values (upstream with_hard_pin): never
	// evicted; removed only by a forced Remove or by RemoveAll.
	WithHardPin bool
	// OnPartial, if set, is called once per key stored with fewer replicas
	// than asked, with the number made and asked. The master places
	// replicas best effort (too few segments, or too little free space), and
	// such a put still succeeds, as upstream.
	OnPartial func(key string, made, asked int)
}

func (c *Client) replicaConfig(o *PutOptions) *pb.ReplicaConfig {
	rc := &pb.ReplicaConfig{ReplicaNum: int32(c.cfg.ReplicaNum), HostId: hostOf(c.cfg.LocalHostname)}
	if o != nil {
		if o.ReplicaNum > 0 {
			rc.ReplicaNum = int32(o.ReplicaNum)
		}
		rc.PreferredSegment = o.PreferredSegment
		rc.PreferredSegments = o.PreferredSegments
		rc.WithSoftPin, rc.WithHardPin = o.WithSoftPin, o.WithHardPin
	}
	return rc
}

// BatchPutFrom stores each srcs[i] (registered memory) under keys[i] and
// returns one error per key (nil = stored). Per key: PutStart at the master,
// WRITE into every replica (acknowledged once landed), then PutEnd; a failed
// write revokes the key. A key that already exists is reported as success
// and keeps its old value (upstream: OBJECT_ALREADY_EXISTS is a no-op
// success). Errors per key: INVALID_PARAMS (length mismatch, empty value),
// NO_AVAILABLE_HANDLE, TRANSFER_FAIL (the transfer cause is kept),
// RPC_FAIL. Mirrors upstream batch_put_from.
func (c *Client) BatchPutFrom(ctx context.Context, keys []string, srcs [][]byte, opts *PutOptions) []error {
	if len(srcs) != len(keys) {
		return fill(make([]error, len(keys)), store.Errorf(store.InvalidParams, "%d values for %d keys", len(srcs), len(keys)))
	}
	return c.BatchPutFromParts(ctx, keys, single(srcs), opts)
}

// single wraps each buffer as a one-part scatter list.
func single(bufs [][]byte) [][][]byte {
	out := make([][][]byte, len(bufs))
	for i := range bufs {
		out[i] = bufs[i : i+1 : i+1]
	}
	return out
}

// BatchPutFromParts stores under keys[i] the concatenation of the buffers
// parts[i] (registered memory, in order; the value is their total length
// in bytes), with no gathering copy: each part is written straight to its
// place in every replica. It is how a KV block spread over per-layer
// regions becomes one pool object. Results and errors as BatchPutFrom
// (an empty value is INVALID_PARAMS). Mirrors
// upstream batch_put_from_multi_buffers.
func (c *Client) BatchPutFromParts(ctx context.Context, keys []string, parts [][][]byte, opts *PutOptions) []error {
	errs := make([]error, len(keys))
	if len(parts) != len(keys) {
		return fill(errs, store.Errorf(store.InvalidParams, "%d part lists for %d keys", len(parts), len(keys)))
	}
	if len(keys) == 0 {
		return errs
	}
	sizes := make([]uint64, len(keys))
	for i, ps := range parts {
		sizes[i] = partsLen(ps) // 0 is refused by the master, per key
	}
	if c.reservable(opts) {
		return c.putReserved(ctx, keys, parts, sizes, opts)
	}
	return c.putStartEnd(ctx, keys, parts, sizes, opts)
}

// putStartEnd puts keys the two-call way (upstream's): PutStart, write,
// PutEnd (PutRevoke for a failed write). sizes[i] is the length of
// parts[i].
func (c *Client) putStartEnd(ctx context.Context, keys []string, parts [][][]byte, sizes []uint64, opts *PutOptions) []error {
	errs := make([]error, len(keys))
	rc := c.replicaConfig(opts)
	sg := stagesOf(ctx)
	t0 := time.Now()
	results, err := chunked(keys, "put start", func(lo, hi int) ([]*pb.PutStartResult, error) {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		resp, err := c.batchPutStart(rctx, &pb.BatchPutStartRequest{ClientId: c.id, Keys: pb.Keys(keys[lo:hi]), Sizes: sizes[lo:hi], Config: rc})
		if err != nil {
			return nil, rpcErr("put start", err)
		}
		return resp.Results, nil
	})
	sg.since(StagePutStart, t0)
	if err != nil {
		// The keys of the chunks that were started go on; the rest fail.
		fill(errs[len(results):], err)
	}
	type write struct{ key, first, n, replicas int }
	var reqs []transfer.Request
	var writes []write
	for i, r := range results {
		if err := statusErr(r.Status); err != nil {
			if !errors.Is(err, store.ErrObjectAlreadyExists) {
				errs[i] = err
			}
			continue
		}
		w := write{key: i, first: len(reqs), replicas: len(r.Replicas)}
		for _, rep := range r.Replicas {
			rs, err := c.transferReqs(ctx, transfer.Write, rep, parts[i])
			if err != nil {
				errs[i] = store.Errorf(store.TransferFail, "key %q: %v", keys[i], err)
				break
			}
			reqs = append(reqs, rs...)
		}
		w.n = len(reqs) - w.first
		writes = append(writes, w)
	}
	t0 = sg.restart(t0) // building the requests is in no stage
	st, terr := c.run(ctx, reqs)
	t0 = sg.since(StageWrite, t0)
	var done, revoke []string
	var doneIdx, revokeIdx []int
	for _, w := range writes {
		ok := errs[w.key] == nil && terr == nil
		for j := w.first; ok && j < w.first+w.n; j++ {
			if st[j].Status != transfer.StatusCompleted {
				ok = false
				errs[w.key] = store.Errorf(store.TransferFail, "key %q: write replica %d: %v", keys[w.key], j-w.first, st[j].Err)
			}
		}
		if terr != nil && errs[w.key] == nil {
			errs[w.key] = store.Errorf(store.TransferFail, "key %q: %v", keys[w.key], terr)
		}
		if ok {
			done, doneIdx = append(done, keys[w.key]), append(doneIdx, w.key)
		} else {
			revoke, revokeIdx = append(revoke, keys[w.key]), append(revokeIdx, w.key)
		}
	}
	c.finish(ctx, c.batchPutEnd, "put end", done, doneIdx, errs)
	sg.since(StagePutEnd, t0)
	if opts != nil && opts.OnPartial != nil {
		asked := int(c.replicaConfig(opts).ReplicaNum)
		for _, w := range writes {
			if errs[w.key] == nil && w.replicas < asked {
				opts.OnPartial(keys[w.key], w.replicas, asked)
			}
		}
	}
	// Revoke failures are reported but the write error stays the cause.
	rerrs := make([]error, len(keys))
	c.finish(ctx, c.batchPutRevoke, "put revoke", revoke, revokeIdx, rerrs)
	return errs
}

type keysCall func(ctx context.Context, in *pb.KeysRequest, opts ...grpc.CallOption) (*pb.StatusList, error)

// finish ends or revokes keys (call is BatchPutEnd or BatchPutRevoke),
// in chunks, and sets errs[idx[j]] for keys[j] that failed; a chunk that
// fails fails its keys and every later one.
func (c *Client) finish(ctx context.Context, call keysCall, what string, keys []string, idx []int, errs []error) {
	results, err := chunked(keys, what, func(lo, hi int) ([]*pb.Status, error) {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		resp, err := call(rctx, &pb.KeysRequest{ClientId: c.id, Keys: pb.Keys(keys[lo:hi])})
		if err != nil {
			return nil, rpcErr(what, err)
		}
		return resp.Results, nil
	})
	for j, s := range results {
		if e := statusErr(s); e != nil {
			errs[idx[j]] = e
		}
	}
	if err != nil {
		for _, i := range idx[len(results):] {
			errs[i] = err
		}
	}
}

// run executes reqs as one batch and waits for all of them.
func (c *Client) run(ctx context.Context, reqs []transfer.Request) ([]transfer.TaskStatus, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	id, err := c.engine.AllocateBatch(len(reqs))
	if err != nil {
		return nil, err
	}
	if err := c.engine.Submit(id, reqs); err != nil {
		_ = c.engine.FreeBatch(id)
		return nil, err
	}
	st, err := c.engine.Wait(ctx, id)
	if err != nil { // ctx ended: let the requests settle (each is bounded by the engine's timeout)
		st, _ = c.engine.Wait(context.Background(), id)
	}
	_ = c.engine.FreeBatch(id)
	return st, err
}

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// PutFrom stores src (registered memory) under key. See BatchPutFrom.
func (c *Client) PutFrom(ctx context.Context, key string, src []byte, opts *PutOptions) error {
	return c.BatchPutFrom(ctx, []string{key}, [][]byte{src}, opts)[0]
}

// BatchGetInto reads each keys[i] into dsts[i] (registered memory, at least
// the value's size) and returns the bytes read per key, or an error per key:
// OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY, BUFFER_OVERFLOW (dst too small),
// TRANSFER_FAIL (every replica failed), LEASE_EXPIRED (the read finished
// after the lease; dst content is then undefined), RPC_FAIL. The same key
// may appear twice; every destination is filled (upstream issue #3876).
// Mirrors upstream batch_get_into.
func (c *Client) BatchGetInto(ctx context.Context, keys []string, dsts [][]byte) ([]int, []error) {
	if len(dsts) != len(keys) {
		return make([]int, len(keys)), fill(make([]error, len(keys)), store.Errorf(store.InvalidParams, "%d buffers for %d keys", len(dsts), len(keys)))
	}
	return c.BatchGetIntoParts(ctx, keys, single(dsts))
}

// BatchGetIntoParts reads each keys[i] into the scatter list dsts[i]
// (registered memory, filled in order: the value's first bytes into the
// first part, and so on) with no scattering copy, and returns the bytes
// read per key. The parts' total length must be at least the value's size
// (BUFFER_OVERFLOW otherwise); results and errors as BatchGetInto. Mirrors
// upstream batch_get_into_multi_buffers.
func (c *Client) BatchGetIntoParts(ctx context.Context, keys []string, dsts [][][]byte) ([]int, []error) {
	n := make([]int, len(keys))
	errs := make([]error, len(keys))
	if len(dsts) != len(keys) {
		return n, fill(errs, store.Errorf(store.InvalidParams, "%d part lists for %d keys", len(dsts), len(keys)))
	}
	if len(keys) == 0 {
		return n, errs
	}
	granted := time.Now() // every lease starts no earlier than this
	results, err := c.replicaLists(ctx, keys)
	stagesOf(ctx).since(StageReplicaList, granted)
	if err != nil {
		// The keys of the chunks answered are read; the rest fail.
		fill(errs[len(results):], err)
	}
	return c.readReplicas(ctx, keys, results, errs, granted, dsts)
}

// replicaLists asks the master for the replica lists of keys (leases
// granted), in chunks (chunked: on error, the lists of the chunks
// answered come back with it).
func (c *Client) replicaLists(ctx context.Context, keys []string) ([]*pb.GetReplicaListResult, error) {
	return chunked(keys, "get replica list", func(lo, hi int) ([]*pb.GetReplicaListResult, error) {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		resp, err := c.batchGetReplicaList(rctx, &pb.KeysRequest{ClientId: c.id, Keys: pb.Keys(keys[lo:hi])})
		if err != nil {
			return nil, rpcErr("get replica list", err)
		}
		return resp.Results, nil
	})
}

// readReplicas is BatchGetIntoParts once the master answered: results[i]
// is keys[i]'s replica list, fetched no earlier than granted (results may
// be shorter than keys: the keys past it keep their errs). It returns the
// bytes read per key and errs, filled in.
func (c *Client) readReplicas(ctx context.Context, keys []string, results []*pb.GetReplicaListResult, errs []error, granted time.Time, dsts [][][]byte) ([]int, []error) {
	n := make([]int, len(keys))
	capOf := make([]uint64, len(keys))
	for i, ps := range dsts {
		capOf[i] = partsLen(ps)
	}
	// First attempt: replica 0 of every key (one batch); failed keys retry
	// on their other replicas one by one.
	reqs := make([]transfer.Request, 0, len(keys))
	type span struct{ key, first, n, rep int } // a key's requests in reqs, and the replica they read
	idx := make([]span, 0, len(keys))
	lease := make([]time.Duration, len(keys)) // per key: keys staged from disk waited at the master
	for i, r := range results {
		if err := statusErr(r.Status); err != nil {
			errs[i] = err
			continue
		}
		if len(r.Replicas) == 0 {
			errs[i] = store.Errorf(store.InvalidReplica, "key %q has no replica", keys[i])
			continue
		}
		size := r.Replicas[0].Size
		if capOf[i] < size {
			errs[i] = store.Errorf(store.BufferOverflow, "key %q: value is %d bytes, buffer %d", keys[i], size, capOf[i])
			continue
		}
		lease[i] = time.Duration(r.LeaseTtlMs) * time.Millisecond
		// The preferred replica first; if its segment cannot even be
		// opened (peer gone from the metadata store), the next one.
		rep := c.pick(r.Replicas)
		rs, err := c.transferReqs(ctx, transfer.Read, r.Replicas[rep], dsts[i])
		for k := 0; err != nil && k < len(r.Replicas); k++ {
			if k != c.pick(r.Replicas) {
				if rs, err = c.transferReqs(ctx, transfer.Read, r.Replicas[k], dsts[i]); err == nil {
					rep = k
				}
			}
		}
		if err != nil {
			errs[i] = store.Errorf(store.TransferFail, "key %q: no replica reachable: %v", keys[i], err)
			continue
		}
		reqs = append(reqs, rs...)
		idx = append(idx, span{i, len(reqs) - len(rs), len(rs), rep})
	}
	sg := stagesOf(ctx)
	t0 := time.Now()
	st, terr := c.run(ctx, reqs)
	sg.since(StageRead, t0)
	for _, sp := range idx {
		i := sp.key
		r := results[i]
		cause := terr
		if cause == nil {
			cause = failed(st[sp.first : sp.first+sp.n])
		}
		if cause == nil {
			n[i] = int(r.Replicas[sp.rep].Size)
			continue
		}
		errs[i] = store.Errorf(store.TransferFail, "key %q: %v", keys[i], cause)
		for k, rep := range r.Replicas {
			if k == sp.rep || ctx.Err() != nil {
				continue
			}
			rs, err := c.transferReqs(ctx, transfer.Read, rep, dsts[i])
			if err == nil {
				var s []transfer.TaskStatus
				if s, err = c.run(ctx, rs); err == nil {
					err = failed(s)
				}
			}
			if err == nil {
				n[i], errs[i] = int(rep.Size), nil
				break
			}
		}
	}
	took := time.Since(granted)
	for i := range keys {
		if errs[i] == nil && lease[i] > 0 && took > lease[i] {
			n[i], errs[i] = 0, store.Errorf(store.LeaseExpired, "key %q: read took longer than the %v lease", keys[i], lease[i])
		}
	}
	return n, errs
}

// pick prefers a replica on this client's own segment (a local copy), else
// the first.
func (c *Client) pick(rs []*pb.Replica) int {
	for i, r := range rs {
		if r.Segment == c.cfg.LocalHostname {
			return i
		}
	}
	return 0
}

// transferReqs returns the requests that move replica rep to (Write) or
// from (Read) the scatter list parts: one per replica slice (a striped
// replica has several, each at its offset in the value; an unstriped one
// is one slice), a plain request when the slice's bytes lie in one part,
// else a scatter-gather request whose pieces are the parts' bytes in the
// slice (transfer.Request.Pieces; the engine merges pieces adjacent in
// memory).
func (c *Client) transferReqs(ctx context.Context, op transfer.Opcode, rep *pb.Replica, parts [][]byte) ([]transfer.Request, error) {
	slices := rep.Slices
	if len(slices) == 0 {
		slices = []*pb.Slice{{Segment: rep.Segment, SegmentId: rep.SegmentId, Addr: rep.Addr, Size: rep.Size}}
	}
	total := partsLen(parts)
	out := make([]transfer.Request, 0, len(slices))
	var off uint64          // value offset of the current slice
	p, poff := 0, uint64(0) // current part and the offset in it
	for i, s := range slices {
		if s.Size == 0 || off+s.Size > rep.Size || off+s.Size > total {
			return nil, fmt.Errorf("replica slice %d (%d bytes at value offset %d) outside the %d-byte value", i, s.Size, off, rep.Size)
		}
		seg, err := c.engine.OpenSegment(ctx, s.Segment)
		if err != nil {
			return nil, fmt.Errorf("open segment %q: %w", s.Segment, err)
		}
		req := transfer.Request{Op: op, Target: seg, TargetOffset: s.Addr, Length: s.Size}
		var pieces []transfer.Piece
		for done := uint64(0); done < s.Size; {
			for poff == uint64(len(parts[p])) {
				p, poff = p+1, 0
			}
			n := min(s.Size-done, uint64(len(parts[p]))-poff)
			addr := memory.AddrOf(parts[p]) + poff
			if done == 0 && n == s.Size {
				req.Source = addr // the slice lies in one part
			} else {
				if pieces == nil {
					pieces = make([]transfer.Piece, 0, len(parts)-p)
				}
				pieces = append(pieces, transfer.Piece{Addr: addr, Length: n})
			}
			done, poff = done+n, poff+n
		}
		req.Pieces = pieces
		out = append(out, req)
		off += s.Size
	}
	if off != rep.Size {
		return nil, fmt.Errorf("replica slices hold %d of %d bytes", off, rep.Size)
	}
	return out, nil
}

// partsLen is the total length in bytes of a scatter list (empty parts
// are skipped when moving bytes).
func partsLen(parts [][]byte) uint64 {
	var n uint64
	for _, b := range parts {
		n += uint64(len(b))
	}
	return n
}

// failed returns the first failure among st, or nil when all completed.
func failed(st []transfer.TaskStatus) error {
	for i, s := range st {
		if s.Status != transfer.StatusCompleted {
			if s.Err != nil {
				return s.Err
			}
			return fmt.Errorf("request %d: %v", i, s.Status)
		}
	}
	return nil
}

// hostOf is the host part of a segment name "host:port", or the name: the
// writer's host id for the master's local_first placement.
func hostOf(name string) string {
	if h, _, err := net.SplitHostPort(name); err == nil {
		return h
	}
	return name
}

// GetInto reads key into dst (registered memory) and returns the bytes
// read. See BatchGetInto.
func (c *Client) GetInto(ctx context.Context, key string, dst []byte) (int, error) {
	n, errs := c.BatchGetInto(ctx, []string{key}, [][]byte{dst})
	return n[0], errs[0]
}

// BatchIsExist reports for each key whether it has a readable replica.
// Errors: RPC_FAIL for the call; INVALID_PARAMS / INVALID_KEY naming the
// first bad key. Existing keys get a lease, as upstream.
func (c *Client) BatchIsExist(ctx context.Context, keys []string) ([]bool, error) {
	out := make([]bool, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	results, err := chunked(keys, "exist key", func(lo, hi int) ([]*pb.ExistResult, error) {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		resp, err := c.rpc.BatchExistKey(rctx, &pb.KeysRequest{ClientId: c.id, Keys: pb.Keys(keys[lo:hi])})
		if err != nil {
			return nil, rpcErr("exist key", err)
		}
		return resp.Results, nil
	})
	if err != nil {
		return nil, err
	}
	for i, r := range results {
		if err := statusErr(r.Status); err != nil {
			return nil, err
		}
		out[i] = r.Exists
	}
	return out, nil
}

// IsExist reports whether key has a readable replica. See BatchIsExist.
func (c *Client) IsExist(ctx context.Context, key string) (bool, error) {
	r, err := c.BatchIsExist(ctx, []string{key})
	if err != nil {
		return false, err
	}
	return r[0], nil
}

// Remove deletes key. Errors: OBJECT_NOT_FOUND, OBJECT_HAS_LEASE (leased,
// and not force), REPLICA_IS_NOT_READY, RPC_FAIL. Mirrors upstream
// remove(key, force).
func (c *Client) Remove(ctx context.Context, key string, force bool) error {
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	resp, err := c.rpc.BatchRemove(rctx, &pb.KeysRequest{ClientId: c.id, Keys: [][]byte{[]byte(key)}, Force: force})
	if err != nil {
		return rpcErr("remove", err)
	}
	if len(resp.Results) != 1 {
		return store.Errorf(store.RPCFail, "remove: %d results", len(resp.Results))
	}
	return statusErr(resp.Results[0])
}

// scratch reserves n bytes of the local buffer; release (call it once)
// returns them. Close waits for every range to be released before it
// unmaps the buffer. Errors: ILLEGAL_CLIENT once Close began;
// BUFFER_OVERFLOW without a local buffer or room in it.
func (c *Client) scratch(n int) ([]byte, func(), error) {
	if c.local == nil {
		return nil, nil, store.Errorf(store.BufferOverflow, "client has no local buffer (local_buffer_size = 0)")
	}
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil, nil, store.Errorf(store.IllegalClient, "store client is closed")
	}
	off, err := c.mu.scratch.Alloc(uint64(n), 64)
	if err == nil {
		c.staged.Add(1)
	}
	c.mu.Unlock()
	if err != nil {
		return nil, nil, store.Errorf(store.BufferOverflow, "%d bytes do not fit the %d-byte local buffer now: %v", n, c.local.Len(), err)
	}
	release := func() {
		c.mu.Lock()
		_ = c.mu.scratch.Free(off)
		c.mu.Unlock()
		c.staged.Done()
	}
	return c.local.Bytes()[off : off+uint64(n)], release, nil
}

// Put stores a copy of value under key, staging it through the local
// buffer. Errors as PutFrom, plus BUFFER_OVERFLOW when value does not fit the
// local buffer; INVALID_PARAMS for an empty value. Mirrors upstream put.
func (c *Client) Put(ctx context.Context, key string, value []byte, opts *PutOptions) error {
	if len(value) == 0 {
		return store.Errorf(store.InvalidParams, "key %q: empty value", key)
	}
	buf, release, err := c.scratch(len(value))
	if err != nil {
		return err
	}
	defer release()
	copy(buf, value)
	return c.PutFrom(ctx, key, buf, opts)
}

// Get returns a copy of key's value, staged through the local buffer.
// Errors as GetInto, plus BUFFER_OVERFLOW when the value does not fit the
// local buffer. Mirrors upstream get (which returns b"" on a miss; here the
// miss is OBJECT_NOT_FOUND).
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	rctx, cancel := c.rpcCtx(ctx)
	resp, err := c.batchGetReplicaList(rctx, &pb.KeysRequest{ClientId: c.id, Keys: [][]byte{[]byte(key)}})
	cancel()
	if err != nil {
		return nil, rpcErr("get replica list", err)
	}
	if len(resp.Results) != 1 {
		return nil, store.Errorf(store.RPCFail, "get replica list: %d results", len(resp.Results))
	}
	if err := statusErr(resp.Results[0].Status); err != nil {
		return nil, err
	}
	if len(resp.Results[0].Replicas) == 0 {
		return nil, store.Errorf(store.InvalidReplica, "key %q has no replica", key)
	}
	size := int(resp.Results[0].Replicas[0].Size)
	buf, release, err := c.scratch(size)
	if err != nil {
		return nil, err
	}
	defer release()
	n, err := c.GetInto(ctx, key, buf)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), buf[:n]...), nil
}

// Stats returns the master's usage snapshot (operator listing). Errors:
// RPC_FAIL.
func (c *Client) Stats(ctx context.Context) (*pb.StatsResponse, error) {
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	r, err := c.rpc.GetStats(rctx, &pb.StatsRequest{})
	if err != nil {
		return nil, rpcErr("get stats", err)
	}
	return r, nil
}
