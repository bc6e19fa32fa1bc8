package client

import (
	"context"
	"fmt"
	"time"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// Copying batch calls (values in any memory, staged through the local
// buffer), ranged reads and the health probe: what upstream's Python
// MooncakeDistributedStore offers beyond the zero-copy calls of ops.go.

// BatchPut stores a copy of each values[i] under keys[i], staging every
// value through the local buffer, and returns one error per key (nil =
// stored; an existing key keeps its value, as BatchPutFrom). A value that
// does not fit the local buffer's free space now fails alone with
// BUFFER_OVERFLOW; an empty value with INVALID_PARAMS; the rest as
// BatchPutFrom. Mirrors upstream put_batch (which reports one code for
// the whole batch; the caller folds them).
func (c *Client) BatchPut(ctx context.Context, keys []string, values [][]byte, opts *PutOptions) []error {
	errs := make([]error, len(keys))
	if len(values) != len(keys) {
		return fill(errs, store.Errorf(store.InvalidParams, "%d values for %d keys", len(values), len(keys)))
	}
	return c.batchPutCopy(ctx, keys, single(values), opts)
}

// PutParts stores under key a copy of the concatenation of parts (any
// memory, in order), gathered once into the local buffer. An empty total
// is INVALID_PARAMS; the rest as Put. Mirrors upstream put_parts.
func (c *Client) PutParts(ctx context.Context, key string, parts [][]byte, opts *PutOptions) error {
	return c.batchPutCopy(ctx, []string{key}, [][][]byte{parts}, opts)[0]
}

// batchPutCopy gathers each key's parts into a scratch range of the local
// buffer and stores the ranges with BatchPutFrom.
func (c *Client) batchPutCopy(ctx context.Context, keys []string, parts [][][]byte, opts *PutOptions) []error {
	errs := make([]error, len(keys))
	var ks []string
	var bufs [][]byte
	var idx []int
	var releases []func()
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	for i, ps := range parts {
		n := partsLen(ps)
		if n == 0 {
			errs[i] = store.Errorf(store.InvalidParams, "key %q: empty value", keys[i])
			continue
		}
		buf, release, err := c.scratch(int(n))
		if err != nil {
			errs[i] = fmt.Errorf("key %q: %w", keys[i], err)
			continue
		}
		releases = append(releases, release)
		off := 0
		for _, p := range ps {
			off += copy(buf[off:], p)
		}
		ks, bufs, idx = append(ks, keys[i]), append(bufs, buf), append(idx, i)
	}
	if len(ks) == 0 {
		return errs
	}
	for j, err := range c.BatchPutFrom(ctx, ks, bufs, opts) {
		errs[idx[j]] = err
	}
	return errs
}

// BatchGetAlloc reads each keys[i] through the local buffer into memory
// that alloc hands out once the value's size is known: alloc(i, size)
// returns a destination of at least size bytes (or an error, which becomes
// key i's error). It returns the bytes read per key, or an error per key
// as BatchGetInto, plus BUFFER_OVERFLOW when a value does not fit the local
// buffer's free space now. alloc is called at most once per key, from the
// calling goroutine, before any byte moves; a destination it returned for
// a key that then fails holds undefined bytes. Mirrors upstream
// get_batch / batch_get_buffer (one replica list call for all keys).
func (c *Client) BatchGetAlloc(ctx context.Context, keys []string, alloc func(i int, size uint64) ([]byte, error)) ([]int, []error) {
	n := make([]int, len(keys))
	errs := make([]error, len(keys))
	if len(keys) == 0 {
		return n, errs
	}
	granted := time.Now()
	lists, err := c.replicaLists(ctx, keys)
	if err != nil {
		fill(errs[len(lists):], err)
	}
	var ks []string
	var results []*pb.GetReplicaListResult
	var scratch, dsts [][]byte
	var idx []int
	var releases []func()
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	for i, r := range lists {
		if err := statusErr(r.Status); err != nil {
			errs[i] = err
			continue
		}
		if len(r.Replicas) == 0 {
			errs[i] = store.Errorf(store.InvalidReplica, "key %q has no replica", keys[i])
			continue
		}
		size := r.Replicas[0].Size
		buf, release, err := c.scratch(int(size))
		if err != nil {
			errs[i] = fmt.Errorf("key %q: %w", keys[i], err)
			continue
		}
		releases = append(releases, release)
		dst, err := alloc(i, size)
		if err == nil && uint64(len(dst)) < size {
			err = store.Errorf(store.BufferOverflow, "key %q: destination of %d bytes for a %d-byte value", keys[i], len(dst), size)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		ks, results, idx = append(ks, keys[i]), append(results, r), append(idx, i)
		scratch, dsts = append(scratch, buf), append(dsts, dst)
	}
	if len(ks) == 0 {
		return n, errs
	}
	got, gerrs := c.readReplicas(ctx, ks, results, make([]error, len(ks)), granted, single(scratch))
	for j, i := range idx {
		if gerrs[j] != nil {
			errs[i] = gerrs[j]
			continue
		}
		n[i] = copy(dsts[j], scratch[j][:got[j]])
	}
	return n, errs
}

// Range is one ranged read: the bytes [Offset, Offset+len(Dst)) of Key's
// value, into Dst (registered memory).
type Range struct {
	Key    string
	Offset uint64
	Dst    []byte
}

// BatchGetRanges reads every range and returns the bytes read per range
// (len(Dst)), or an error per range: OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY,
// INVALID_PARAMS (the range runs past the end of the value),
// TRANSFER_FAIL (every replica failed), LEASE_EXPIRED, RPC_FAIL. An empty
// Dst reads nothing and succeeds when the key is readable. Each key is
// looked up once however many ranges name it; only the ranged bytes move.
// Mirrors upstream get_into_ranges (flattened: one range per entry).
func (c *Client) BatchGetRanges(ctx context.Context, ranges []Range) ([]int, []error) {
	n := make([]int, len(ranges))
	errs := make([]error, len(ranges))
	if len(ranges) == 0 {
		return n, errs
	}
	var keys []string
	slot := map[string]int{}
	for _, r := range ranges {
		if _, ok := slot[r.Key]; !ok {
			slot[r.Key] = len(keys)
			keys = append(keys, r.Key)
		}
	}
	granted := time.Now()
	lists, err := c.replicaLists(ctx, keys)
	if err != nil {
		for i, rg := range ranges {
			if slot[rg.Key] >= len(lists) {
				errs[i] = err
			}
		}
	}
	type pending struct{ r, first, n, rep int }
	var reqs []transfer.Request
	var todo []pending
	for i, rg := range ranges {
		if slot[rg.Key] >= len(lists) {
			continue
		}
		res := lists[slot[rg.Key]]
		if err := statusErr(res.Status); err != nil {
			errs[i] = err
			continue
		}
		if len(res.Replicas) == 0 {
			errs[i] = store.Errorf(store.InvalidReplica, "key %q has no replica", rg.Key)
			continue
		}
		size := res.Replicas[0].Size
		if rg.Offset > size || uint64(len(rg.Dst)) > size-rg.Offset {
			errs[i] = store.Errorf(store.InvalidParams, "key %q: range [%d, +%d) runs past the %d-byte value", rg.Key, rg.Offset, len(rg.Dst), size)
			continue
		}
		if len(rg.Dst) == 0 {
			continue
		}
		rep := c.pick(res.Replicas)
		rs, err := c.rangeReqs(ctx, res.Replicas[rep], rg.Offset, rg.Dst)
		for k := 0; err != nil && k < len(res.Replicas); k++ {
			if k != c.pick(res.Replicas) {
				if rs, err = c.rangeReqs(ctx, res.Replicas[k], rg.Offset, rg.Dst); err == nil {
					rep = k
				}
			}
		}
		if err != nil {
			errs[i] = store.Errorf(store.TransferFail, "key %q: no replica reachable: %v", rg.Key, err)
			continue
		}
		todo = append(todo, pending{i, len(reqs), len(rs), rep})
		reqs = append(reqs, rs...)
	}
	st, terr := c.run(ctx, reqs)
	for _, p := range todo {
		rg := ranges[p.r]
		cause := terr
		if cause == nil {
			cause = failed(st[p.first : p.first+p.n])
		}
		if cause == nil {
			n[p.r] = len(rg.Dst)
			continue
		}
		errs[p.r] = store.Errorf(store.TransferFail, "key %q: %v", rg.Key, cause)
		for k, rep := range lists[slot[rg.Key]].Replicas {
			if k == p.rep || ctx.Err() != nil {
				continue
			}
			rs, err := c.rangeReqs(ctx, rep, rg.Offset, rg.Dst)
			if err == nil {
				var s []transfer.TaskStatus
				if s, err = c.run(ctx, rs); err == nil {
					err = failed(s)
				}
			}
			if err == nil {
				n[p.r], errs[p.r] = len(rg.Dst), nil
				break
			}
		}
	}
	took := time.Since(granted)
	for i, rg := range ranges {
		if slot[rg.Key] >= len(lists) {
			continue
		}
		lease := time.Duration(lists[slot[rg.Key]].LeaseTtlMs) * time.Millisecond
		if errs[i] == nil && len(rg.Dst) > 0 && lease > 0 && took > lease {
			n[i], errs[i] = 0, store.Errorf(store.LeaseExpired, "key %q: read took longer than the %v lease", rg.Key, lease)
		}
	}
	return n, errs
}

// rangeReqs returns the READ requests that move [off, off+len(dst)) of
// replica rep into dst: one per replica slice the range overlaps.
func (c *Client) rangeReqs(ctx context.Context, rep *pb.Replica, off uint64, dst []byte) ([]transfer.Request, error) {
	slices := rep.Slices
	if len(slices) == 0 {
		slices = []*pb.Slice{{Segment: rep.Segment, SegmentId: rep.SegmentId, Addr: rep.Addr, Size: rep.Size}}
	}
	end := off + uint64(len(dst))
	var out []transfer.Request
	var base uint64 // value offset of the current slice
	for i, s := range slices {
		lo, hi := max(off, base), min(end, base+s.Size)
		if lo < hi {
			seg, err := c.engine.OpenSegment(ctx, s.Segment)
			if err != nil {
				return nil, fmt.Errorf("open segment %q: %w", s.Segment, err)
			}
			part := dst[lo-off : hi-off]
			out = append(out, transfer.Request{Op: transfer.Read, Target: seg, TargetOffset: s.Addr + (lo - base), Length: hi - lo, Source: memory.AddrOf(part)})
		}
		base += s.Size
		if base >= end {
			break
		}
		if i == len(slices)-1 && base < end {
			return nil, fmt.Errorf("replica slices hold %d bytes, the range ends at %d", base, end)
		}
	}
	return out, nil
}

// Health asks the master whether it serves this client (a ping). Errors:
// RPC_FAIL / RPC_TIMEOUT (unreachable), or the master's status.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.ping(ctx)
	return err
}
