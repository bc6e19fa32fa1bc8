package store

/*
#cgo CFLAGS: -I${SRCDIR}/../include
#include <stdlib.h>
#include "mooncake/store.h"

uintptr_t mcgo_store_buf_alloc(mc_buf_t* b, size_t n);
uintptr_t mcgo_store_call_alloc(mc_store_alloc_fn f, uintptr_t ctx, size_t i, size_t n);
*/
import "C"

import (
	"fmt"
	"math"
	"syscall"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	mcstore "github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
)

// The exports behind store.h 1.2 (store.c's trampolines call them). The
// conventions of exports.go hold: C memory is read or written during the
// call only, per-key failures go to the out arrays, and only an unusable
// call returns an error.

// maxReplicas bounds mc_store_replicate_config_t.replica_num (a larger
// value is a mistake, not a wish for that many copies).
const maxReplicas = 1 << 10

// beginPut is putConfig(cfg) then begin(h): on success the caller defers
// s.release(), on failure nothing is held.
func beginPut(h C.uint64_t, cfg *C.mc_store_replicate_config_t) (*storeClient, *putOptions, error) {
	o, err := putConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	s, err := begin(h)
	if err != nil {
		return nil, nil, err
	}
	return s, o, nil
}

// putConfig decodes a replicate config; NULL is nil (defaults).
func putConfig(cfg *C.mc_store_replicate_config_t) (*putOptions, error) {
	if cfg == nil {
		return nil, nil
	}
	if cfg.replica_num > maxReplicas {
		return nil, mcstore.Errorf(mcstore.InvalidParams, "config.replica_num %d exceeds %d", uint32(cfg.replica_num), maxReplicas)
	}
	o := &putOptions{ReplicaNum: int(cfg.replica_num), WithHardPin: cfg.with_hard_pin != 0, WithSoftPin: cfg.with_soft_pin != 0}
	if cfg.n_preferred_segments > 0 {
		segs, err := cbridge.Slice("config.preferred_segments", cfg.preferred_segments, uintptr(cfg.n_preferred_segments))
		if err != nil {
			return nil, err
		}
		for i, p := range segs {
			if p == nil {
				return nil, cbridge.Null(fmt.Sprintf("config.preferred_segments[%d]", i))
			}
			o.PreferredSegments = append(o.PreferredSegments, C.GoString(p))
		}
	}
	return o, nil
}

// arrays turns the C arrays of a batch of n entries (keys by pointer and
// length, batchKeys) into slices; n == 0 gives nil slices (the arrays may
// then be NULL).
func arrays[A, B, O any](n C.size_t, keys **C.char, keyLens *C.size_t, a *A, aName string, b *B, bName string, out *O, outName string) (ks []*C.char, ls []C.size_t, as []A, bs []B, os []O, err error) {
	if n == 0 {
		return nil, nil, nil, nil, nil, nil
	}
	if ks, ls, err = batchKeys(keys, keyLens, 1, n); err != nil {
		return
	}
	if aName != "" {
		if as, err = cbridge.Slice(aName, a, uintptr(n)); err != nil {
			return
		}
	}
	if bName != "" {
		if bs, err = cbridge.Slice(bName, b, uintptr(n)); err != nil {
			return
		}
	}
	os, err = cbridge.Slice(outName, out, uintptr(n))
	return
}

//export mcgo_store_batch_put
func mcgo_store_batch_put(h C.uint64_t, keys **C.char, keyLens *C.size_t, values *C.uintptr_t, sizes *C.size_t, n C.size_t, cfg *C.mc_store_replicate_config_t, out *C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_batch_put"
	s, o, err := beginPut(h, cfg)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	ks, ls, vs, sz, codes, err := arrays(n, keys, keyLens, values, "values", sizes, "sizes", out, "out_codes")
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	b := newBatch(s, ks, ls, nil, nil)
	var vals [][]byte
	var keep []int // positions in b.keys whose value is usable
	for j, i := range b.idx {
		if sz[i] == 0 {
			b.set(j, 0, mcstore.Errorf(mcstore.InvalidParams, "key %q: zero-size value", b.keys[j]))
			continue
		}
		v, err := cbridge.ForeignBytes(fmt.Sprintf("values[%d]", i), uintptr(vs[i]), uintptr(sz[i]))
		if err != nil {
			b.set(j, 0, err)
			continue
		}
		vals, keep = append(vals, v), append(keep, j)
	}
	if len(keep) > 0 {
		put := make([]string, len(keep))
		for x, j := range keep {
			put[x] = b.keys[j]
		}
		for x, err := range s.batchPut(put, vals, o) {
			b.set(keep[x], 0, err)
		}
	}
	return report(fn, b, codes)
}

//export mcgo_store_put_parts
func mcgo_store_put_parts(h C.uint64_t, key *C.char, keyLen C.size_t, parts *C.uintptr_t, sizes *C.size_t, nParts C.size_t, cfg *C.mc_store_replicate_config_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_put_parts"
	s, k, err := beginKey(h, key, keyLen, 1)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	o, err := putConfig(cfg)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	var bufs [][]byte
	if nParts > 0 {
		ps, err := cbridge.Slice("parts", parts, uintptr(nParts))
		if err != nil {
			return cbridge.Fail(fn, err)
		}
		sz, err := cbridge.Slice("sizes", sizes, uintptr(nParts))
		if err != nil {
			return cbridge.Fail(fn, err)
		}
		for i := range ps {
			if sz[i] == 0 {
				continue
			}
			b, err := cbridge.ForeignBytes(fmt.Sprintf("parts[%d]", i), uintptr(ps[i]), uintptr(sz[i]))
			if err != nil {
				return cbridge.Fail(fn, err)
			}
			bufs = append(bufs, b)
		}
	}
	return cbridge.Done(fn, s.putParts(k, bufs, o))
}

//export mcgo_store_batch_put_from_config
func mcgo_store_batch_put_from_config(h C.uint64_t, keys **C.char, keyLens *C.size_t, ptrs *C.uintptr_t, sizes *C.size_t, n C.size_t, cfg *C.mc_store_replicate_config_t, out *C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_batch_put_from_config"
	s, o, err := beginPut(h, cfg)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	b, codes, err := zeroCopyBatch(s, keys, keyLens, 1, ptrs, sizes, n, "out_codes", out)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if len(b.keys) > 0 {
		parts := make([][][]byte, len(b.bufs))
		for j := range b.bufs {
			parts[j] = b.bufs[j : j+1 : j+1]
		}
		for j, err := range s.batchPutFromParts(b.keys, parts, o) {
			b.set(j, 0, err)
		}
	}
	return report(fn, b, codes)
}

// partsBatch validates a flattened multi-buffer batch: per key its
// part_counts[i] parts, each inside a registered buffer (zero-size parts
// are skipped). A key with a bad part fails alone; the result holds the
// usable keys and their part lists.
func partsBatch[O any](s *storeClient, keys **C.char, keyLens *C.size_t, ptrs *C.uintptr_t, sizes *C.size_t, counts *C.size_t, n C.size_t, outName string, out *O) (*batch, [][][]byte, []O, error) {
	ks, ls, cs, _, res, err := arrays[C.size_t, C.size_t](n, keys, keyLens, counts, "part_counts", nil, "", out, outName)
	if err != nil || n == 0 {
		return &batch{}, nil, nil, err
	}
	var total uint64
	for _, c := range cs {
		if uint64(c) > math.MaxInt32 || total+uint64(c) > math.MaxInt32 {
			return nil, nil, nil, fmt.Errorf("%w: part_counts add up to more than %d", cbridge.ErrInvalidArgument, math.MaxInt32)
		}
		total += uint64(c)
	}
	var ps []C.uintptr_t
	var sz []C.size_t
	if total > 0 {
		if ps, err = cbridge.Slice("part_ptrs", ptrs, uintptr(total)); err != nil {
			return nil, nil, nil, err
		}
		if sz, err = cbridge.Slice("part_sizes", sizes, uintptr(total)); err != nil {
			return nil, nil, nil, err
		}
	}
	b := newBatch(s, ks, ls, nil, nil)
	first := make([]int, len(ks)) // index of key i's first part
	for i, off := 0, 0; i < len(ks); i++ {
		first[i], off = off, off+int(cs[i])
	}
	var lists [][][]byte
	var keep []int
	for j, i := range b.idx {
		var list [][]byte
		var bad error
		for p := first[i]; p < first[i]+int(cs[i]) && bad == nil; p++ {
			if sz[p] == 0 {
				continue
			}
			buf, err := s.zeroCopy(fmt.Sprintf("part_ptrs[%d]", p), uintptr(ps[p]), uintptr(sz[p]))
			if err != nil {
				bad = fmt.Errorf("key %q: %w", b.keys[j], err)
				continue
			}
			list = append(list, buf)
		}
		if bad != nil {
			b.set(j, 0, bad)
			continue
		}
		lists, keep = append(lists, list), append(keep, j)
	}
	// Keep only the usable keys in b.keys / b.idx, in order.
	nb := &batch{vals: b.vals, errs: b.errs}
	for _, j := range keep {
		nb.keys, nb.idx = append(nb.keys, b.keys[j]), append(nb.idx, b.idx[j])
	}
	return nb, lists, res, nil
}

//export mcgo_store_batch_put_from_parts
func mcgo_store_batch_put_from_parts(h C.uint64_t, keys **C.char, keyLens *C.size_t, ptrs *C.uintptr_t, sizes *C.size_t, counts *C.size_t, n C.size_t, cfg *C.mc_store_replicate_config_t, out *C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_batch_put_from_parts"
	s, o, err := beginPut(h, cfg)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	b, lists, codes, err := partsBatch(s, keys, keyLens, ptrs, sizes, counts, n, "out_codes", out)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if len(b.keys) > 0 {
		for j, err := range s.batchPutFromParts(b.keys, lists, o) {
			b.set(j, 0, err)
		}
	}
	return report(fn, b, codes)
}

//export mcgo_store_batch_get_into_parts
func mcgo_store_batch_get_into_parts(h C.uint64_t, keys **C.char, keyLens *C.size_t, ptrs *C.uintptr_t, sizes *C.size_t, counts *C.size_t, n C.size_t, out *C.int64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_batch_get_into_parts"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	b, lists, results, err := partsBatch(s, keys, keyLens, ptrs, sizes, counts, n, "out_results", out)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if len(b.keys) > 0 {
		got, errs := s.batchGetIntoParts(b.keys, lists)
		for j := range b.keys {
			b.set(j, int64(got[j]), errs[j])
		}
	}
	return report(fn, b, results)
}

//export mcgo_store_batch_get
func mcgo_store_batch_get(h C.uint64_t, keys **C.char, keyLens *C.size_t, n C.size_t, bufs *C.mc_buf_t, out *C.int64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_batch_get"
	var ob []C.mc_buf_t
	outBufs := func() (err error) {
		if n == 0 {
			return nil
		}
		if ob, err = cbridge.Slice("out_bufs", bufs, uintptr(n)); err != nil {
			return err
		}
		for i := range ob {
			ob[i].data, ob[i].len = nil, 0
		}
		return nil
	}
	alloc := func(i int, size uint64) uintptr { return uintptr(C.mcgo_store_buf_alloc(&ob[i], C.size_t(size))) }
	b, results, err := getAlloc(h, keys, keyLens, n, outBufs, alloc, out)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	for i, err := range b.errs {
		if err != nil && ob[i].data != nil {
			C.free(ob[i].data)
			ob[i].data, ob[i].len = nil, 0
		}
	}
	return report(fn, b, results)
}

//export mcgo_store_batch_get_alloc
func mcgo_store_batch_get_alloc(h C.uint64_t, keys **C.char, keyLens *C.size_t, n C.size_t, alloc C.mc_store_alloc_fn, ctx C.uintptr_t, out *C.int64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_batch_get_alloc"
	if alloc == nil {
		return cbridge.Fail(fn, cbridge.Null("alloc"))
	}
	b, results, err := getAlloc(h, keys, keyLens, n, nil, func(i int, size uint64) uintptr {
		return uintptr(C.mcgo_store_call_alloc(alloc, ctx, C.size_t(i), C.size_t(size)))
	}, out)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	return report(fn, b, results)
}

// getAlloc is the body of mc_store_batch_get and mc_store_batch_get_alloc:
// it reads each key through the local buffer into the memory alloc(i, size)
// returns for keys[i] (i indexes the caller's arrays; 0 = no memory, the
// key's error is then ENOMEM), after check (nil: none) accepted the
// caller's other arguments. The batch's errs and the results slice (out as
// Go memory) go to report; err is set when the call itself is unusable.
func getAlloc(h C.uint64_t, keys **C.char, keyLens *C.size_t, n C.size_t, check func() error, alloc func(i int, size uint64) uintptr, out *C.int64_t) (*batch, []C.int64_t, error) {
	s, err := begin(h)
	if err != nil {
		return nil, nil, err
	}
	defer s.release()
	ks, ls, _, _, results, err := arrays[C.int, C.int](n, keys, keyLens, nil, "", nil, "", out, "out_results")
	if err != nil {
		return nil, nil, err
	}
	if check != nil {
		if err := check(); err != nil {
			return nil, nil, err
		}
	}
	b := newBatch(s, ks, ls, nil, nil)
	if len(b.keys) > 0 {
		got, errs := s.batchGet(b.keys, func(j int, size uint64) ([]byte, error) {
			addr := alloc(b.idx[j], size)
			if addr == 0 {
				return nil, fmt.Errorf("%w: cannot allocate %d bytes for key %q", syscall.ENOMEM, size, b.keys[j])
			}
			if size == 0 {
				return nil, nil
			}
			return cbridge.ForeignBytes("destination", addr, uintptr(size))
		})
		for j := range b.keys {
			b.set(j, int64(got[j]), errs[j])
		}
	}
	return b, results, nil
}

//export mcgo_store_batch_get_ranges
func mcgo_store_batch_get_ranges(h C.uint64_t, keys **C.char, keyLens *C.size_t, dsts *C.uintptr_t, offsets *C.uint64_t, sizes *C.size_t, n C.size_t, out *C.int64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_batch_get_ranges"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	ks, ls, ds, offs, results, err := arrays(n, keys, keyLens, dsts, "dsts", offsets, "src_offsets", out, "out_results")
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	var sz []C.size_t
	if n > 0 {
		if sz, err = cbridge.Slice("sizes", sizes, uintptr(n)); err != nil {
			return cbridge.Fail(fn, err)
		}
	}
	b := newBatch(s, ks, ls, nil, nil)
	var rs []client.Range
	var keep []int
	for j, i := range b.idx {
		r := client.Range{Key: b.keys[j], Offset: uint64(offs[i])}
		if sz[i] > 0 {
			buf, err := s.zeroCopy(fmt.Sprintf("dsts[%d]", i), uintptr(ds[i]), uintptr(sz[i]))
			if err != nil {
				b.set(j, 0, fmt.Errorf("key %q: %w", b.keys[j], err))
				continue
			}
			r.Dst = buf
		}
		rs, keep = append(rs, r), append(keep, j)
	}
	if len(rs) > 0 {
		got, errs := s.batchGetRanges(rs)
		for x, j := range keep {
			b.set(j, int64(got[x]), errs[x])
		}
	}
	return report(fn, b, results)
}

//export mcgo_store_batch_remove
func mcgo_store_batch_remove(h C.uint64_t, keys **C.char, keyLens *C.size_t, n C.size_t, force C.int, out *C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_batch_remove"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	b, codes, err := keyBatch(s, keys, keyLens, 1, n, "out_codes", out)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if len(b.keys) > 0 {
		for j, err := range s.batchRemove(b.keys, force != 0) {
			b.set(j, 0, err)
		}
	}
	return report(fn, b, codes)
}

//export mcgo_store_remove_by_regex
func mcgo_store_remove_by_regex(h C.uint64_t, expr *C.char, force C.int, out *C.int64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_remove_by_regex"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	switch {
	case expr == nil:
		return cbridge.Fail(fn, cbridge.Null("regex"))
	case out == nil:
		return cbridge.Fail(fn, cbridge.Null("out_count"))
	}
	count, err := s.removeByRegex(C.GoString(expr), force != 0)
	return cbridge.DoneOut(fn, out, C.int64_t(count), err)
}

//export mcgo_store_remove_all
func mcgo_store_remove_all(h C.uint64_t, force C.int, out *C.int64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_remove_all"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	if out == nil {
		return cbridge.Fail(fn, cbridge.Null("out_count"))
	}
	count, err := s.removeAll(force != 0)
	return cbridge.DoneOut(fn, out, C.int64_t(count), err)
}

//export mcgo_store_get_replica_desc
func mcgo_store_get_replica_desc(h C.uint64_t, keys **C.char, keyLens *C.size_t, n C.size_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_get_replica_desc"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	if out == nil {
		return cbridge.Fail(fn, cbridge.Null("out"))
	}
	out.data, out.len = nil, 0
	var ks []*C.char
	var ls []C.size_t
	if n > 0 {
		if ks, ls, err = batchKeys(keys, keyLens, 1, n); err != nil {
			return cbridge.Fail(fn, err)
		}
	}
	names := make([]string, len(ks))
	errs := make([]error, len(ks))
	for i, p := range ks {
		names[i], errs[i] = nKey(fmt.Sprintf("keys[%d]", i), p, ls[i])
	}
	text, err := s.replicaDesc(names, errs)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	addr := C.mcgo_store_buf_alloc(out, C.size_t(len(text)))
	if addr == 0 {
		return cbridge.Fail(fn, fmt.Errorf("%w: cannot allocate %d bytes", syscall.ENOMEM, len(text)))
	}
	dst, err := cbridge.ForeignBytes("out", uintptr(addr), uintptr(len(text)))
	if err != nil {
		C.free(out.data)
		out.data, out.len = nil, 0
		return cbridge.Fail(fn, err)
	}
	copy(dst, text)
	return cbridge.Succeed()
}

//export mcgo_store_health_check
func mcgo_store_health_check(h C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_store_health_check"
	s, err := begin(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	defer s.release()
	return cbridge.Done(fn, s.health())
}
