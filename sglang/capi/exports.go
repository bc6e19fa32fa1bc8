package capi

/*
#cgo CFLAGS: -I${SRCDIR}/../../abi/include
#include <stdlib.h>
#include "mooncake/sglang.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/sglang"
)

// Codes of sglang.h.
const (
	codeBadConfig  = int32(C.MC_SGLANG_ERR_BAD_CONFIG)
	codeNoHostPool = int32(C.MC_SGLANG_ERR_NO_HOST_POOL)
	codeBadLayout  = int32(C.MC_SGLANG_ERR_BAD_LAYOUT)
)

// backend is what an mc_sglang_backend_t handle refers to.
type backend struct {
	b *sglang.Backend
	// notesMu guards notes: the config loader's remarks until taken.
	notesMu sync.Mutex
	notes   []string
}

// sentinels are this header's codes for package sglang's errors.
var sentinels = []cbridge.Sentinel{
	{Err: sglang.ErrBadConfig, Code: codeBadConfig},
	{Err: sglang.ErrNoHostPool, Code: codeNoHostPool},
	{Err: sglang.ErrBadLayout, Code: codeBadLayout},
}

// fail ends a failed call: this header's errors get its codes, others
// cbridge's.
func fail(fn string, err error) int32 { return cbridge.FailAs(fn, err, sentinels) }

func done(fn string, err error) int32 {
	if err != nil {
		return fail(fn, err)
	}
	return cbridge.Succeed()
}

func lookup(h C.uint64_t) (*backend, error) {
	return cbridge.Lookup[*backend](cbridge.Handles, cbridge.Handle(h), "sglang backend")
}

// keys copies the n C strings of keys; n may be 0 (keys NULL).
func keys(p **C.char, n C.size_t) ([]string, error) {
	if n == 0 {
		return nil, nil
	}
	cs, err := cbridge.Slice("keys", p, uintptr(n))
	if err != nil {
		return nil, err
	}
	out := make([]string, len(cs))
	for i, c := range cs {
		if c == nil {
			return nil, cbridge.Null(fmt.Sprintf("keys[%d]", i))
		}
		out[i] = cbridge.GoString(c)
	}
	return out, nil
}

//export mcgo_sglang_create
func mcgo_sglang_create(config *C.char, out *C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_sglang_create"
	if config == nil {
		return fail(fn, cbridge.Null("config_json"))
	}
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	s, err := sglang.ParseSettings([]byte(C.GoString(config)))
	if err != nil {
		return fail(fn, err)
	}
	// libc's environment, not the Go runtime's (DESIGN.md).
	b, notes, err := sglang.Open(context.Background(), s, cbridge.Environ())
	if err != nil {
		return fail(fn, err)
	}
	*out = C.uint64_t(cbridge.Handles.Add(&backend{b: b, notes: notes}))
	return cbridge.Succeed()
}

//export mcgo_sglang_destroy
func mcgo_sglang_destroy(h C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_sglang_destroy"
	b, err := cbridge.Take[*backend](cbridge.Handles, cbridge.Handle(h), "sglang backend")
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, b.b.Close())
}

//export mcgo_sglang_register_host_pool
func mcgo_sglang_register_host_pool(h C.uint64_t, poolJSON *C.char, base C.uintptr_t, size C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_sglang_register_host_pool"
	b, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if poolJSON == nil {
		return fail(fn, cbridge.Null("pool_json"))
	}
	var g sglang.Geometry
	if err := json.Unmarshal([]byte(C.GoString(poolJSON)), &g); err != nil {
		return fail(fn, fmt.Errorf("%w: pool_json: %v", sglang.ErrBadConfig, err))
	}
	buf, err := cbridge.ForeignBytes("base", uintptr(base), uintptr(size))
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, b.b.RegisterHostPool(context.Background(), g, buf))
}

//export mcgo_sglang_batch_exists
func mcgo_sglang_batch_exists(h C.uint64_t, ks **C.char, n C.size_t, out *C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_sglang_batch_exists"
	b, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if out == nil {
		return fail(fn, cbridge.Null("out_pages"))
	}
	ids, err := keys(ks, n)
	if err != nil {
		return fail(fn, err)
	}
	pages, err := b.b.BatchExists(context.Background(), ids)
	if err != nil {
		return fail(fn, err)
	}
	*out = C.size_t(pages)
	return cbridge.Succeed()
}

// Operations of mcgo_sglang_transfer (capi.c passes them).
const (
	opBatchGet = 0
	opBatchSet = 1
	opGetPages = 2
	opSetPages = 3
)

var opNames = [...]string{"mc_sglang_batch_get", "mc_sglang_batch_set", "mc_sglang_get_pages", "mc_sglang_set_pages"}

//export mcgo_sglang_transfer
func mcgo_sglang_transfer(h C.uint64_t, op C.int, ks **C.char, n, perPage C.size_t, ptrs *C.uintptr_t, sizes *C.size_t, outOK *C.uint8_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	if op < 0 || int(op) >= len(opNames) {
		return fail("mc_sglang_transfer", fmt.Errorf("%w: operation %d", cbridge.ErrInvalidArgument, int(op)))
	}
	fn := opNames[op]
	b, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if n == 0 {
		return cbridge.Succeed()
	}
	ids, err := keys(ks, n)
	if err != nil {
		return fail(fn, err)
	}
	if perPage == 0 {
		return fail(fn, fmt.Errorf("%w: parts_per_page is 0", cbridge.ErrInvalidArgument))
	}
	total := uintptr(n) * uintptr(perPage)
	if total/uintptr(perPage) != uintptr(n) {
		return fail(fn, fmt.Errorf("%w: %d pages of %d buffers overflow", cbridge.ErrInvalidArgument, uint64(n), uint64(perPage)))
	}
	ps, err := cbridge.Slice("ptrs", ptrs, total)
	if err != nil {
		return fail(fn, err)
	}
	ss, err := cbridge.Slice("sizes", sizes, total)
	if err != nil {
		return fail(fn, err)
	}
	ok, err := cbridge.Slice("out_ok", outOK, uintptr(n))
	if err != nil {
		return fail(fn, err)
	}
	parts := make([][]byte, total)
	for i := range parts {
		if parts[i], err = cbridge.ForeignBytes(fmt.Sprintf("ptrs[%d]", i), uintptr(ps[i]), uintptr(ss[i])); err != nil {
			return fail(fn, err)
		}
	}
	ctx := context.Background()
	var res []bool
	switch op {
	case opBatchGet:
		res, err = b.b.BatchGet(ctx, ids, parts, int(perPage))
	case opBatchSet:
		res, err = b.b.BatchSet(ctx, ids, parts, int(perPage))
	case opGetPages, opSetPages:
		if perPage != 1 {
			return fail(fn, fmt.Errorf("%w: one buffer per page", cbridge.ErrInvalidArgument))
		}
		if op == opGetPages {
			res, err = b.b.GetPages(ctx, ids, parts)
		} else {
			res, err = b.b.SetPages(ctx, ids, parts)
		}
	}
	if err != nil {
		return fail(fn, err)
	}
	for i, v := range res {
		ok[i] = 0
		if v {
			ok[i] = 1
		}
	}
	return cbridge.Succeed()
}

//export mcgo_sglang_clear
func mcgo_sglang_clear(h C.uint64_t, out *C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_sglang_clear"
	b, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	n, err := b.b.Clear(context.Background())
	if err != nil {
		return fail(fn, err)
	}
	if out != nil {
		*out = C.uint64_t(n)
	}
	return cbridge.Succeed()
}

//export mcgo_sglang_take_stats
func mcgo_sglang_take_stats(h C.uint64_t, out *C.mc_sglang_stats_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_sglang_take_stats"
	b, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	s := b.b.TakeStats()
	out.prefetch_pages, out.backup_pages = C.uint64_t(s.PrefetchPages), C.uint64_t(s.BackupPages)
	out.prefetch_bytes, out.backup_bytes = C.uint64_t(s.PrefetchBytes), C.uint64_t(s.BackupBytes)
	out.prefetch_seconds, out.backup_seconds = C.double(s.PrefetchSeconds), C.double(s.BackupSeconds)
	out.failed_gets, out.failed_sets, out.timeouts = C.uint64_t(s.FailedGets), C.uint64_t(s.FailedSets), C.uint64_t(s.Timeouts)
	out.exists_calls, out.exists_errors = C.uint64_t(s.ExistsCalls), C.uint64_t(s.ExistsErrors)
	return cbridge.Succeed()
}

//export mcgo_sglang_take_notes
func mcgo_sglang_take_notes(h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_sglang_take_notes"
	b, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	b.notesMu.Lock()
	notes := append([]string{}, b.notes...)
	b.notes = nil
	b.notesMu.Unlock()
	if e := b.b.TakeLastError(); e != "" {
		notes = append(notes, e)
	}
	data, err := json.Marshal(notes)
	if err != nil {
		return fail(fn, err)
	}
	out.data, out.len = C.CBytes(data), C.size_t(len(data))
	return cbridge.Succeed()
}
