package capi

/*
#cgo CFLAGS: -I${SRCDIR}/../../abi/include
#include <stdlib.h>
#include "mooncake/lmcache.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/lmcache"
)

// Codes of lmcache.h.
const (
	codeBadURL    = int32(C.MC_LMCACHE_ERR_BAD_URL)
	codeBadConfig = int32(C.MC_LMCACHE_ERR_BAD_CONFIG)
)

const what = "lmcache connector"

// fail ends a failed call: this header's errors get its codes, others
// cbridge's.
func fail(fn string, err error) int32 {
	var code int32
	switch {
	case errors.Is(err, lmcache.ErrBadURL):
		code = codeBadURL
	case errors.Is(err, lmcache.ErrBadConfig):
		code = codeBadConfig
	case errors.Is(err, lmcache.ErrNotRegistered):
		return cbridge.Fail(fn, fmt.Errorf("%w: %w", cbridge.ErrInvalidArgument, err))
	default:
		return cbridge.Fail(fn, err)
	}
	cbridge.SetError(fn + ": " + err.Error())
	return code
}

func done(fn string, err error) int32 {
	if err != nil {
		return fail(fn, err)
	}
	return cbridge.Succeed()
}

func lookup(h C.uint64_t) (*lmcache.Connector, error) {
	return cbridge.Lookup[*lmcache.Connector](cbridge.Handles, cbridge.Handle(h), what)
}

// key copies the C key string p (named name), refusing NULL and "".
func key(name string, p *C.char) (string, error) {
	if p == nil {
		return "", cbridge.Null(name)
	}
	k := cbridge.GoString(p)
	if k == "" {
		return "", fmt.Errorf("%w: %s is empty", cbridge.ErrInvalidArgument, name)
	}
	return k, nil
}

// keys copies the C array of n key strings.
func keys(p **C.char, n C.size_t) ([]string, error) {
	ps, err := cbridge.Slice("keys", p, uintptr(n))
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ps))
	for i, kp := range ps {
		if out[i], err = key(fmt.Sprintf("keys[%d]", i), kp); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// buffers turns the C arrays of n addresses and lengths into slices over
// foreign memory; a bad range fails its position alone (errs).
func buffers(ptrs *C.uintptr_t, sizes *C.size_t, n C.size_t, sizesName string) ([][]byte, []error, error) {
	ps, err := cbridge.Slice("ptrs", ptrs, uintptr(n))
	if err != nil {
		return nil, nil, err
	}
	sz, err := cbridge.Slice(sizesName, sizes, uintptr(n))
	if err != nil {
		return nil, nil, err
	}
	bufs := make([][]byte, n)
	errs := make([]error, n)
	for i := range ps {
		bufs[i], errs[i] = cbridge.ForeignBytes(fmt.Sprintf("ptrs[%d]", i), uintptr(ps[i]), uintptr(sz[i]))
	}
	return bufs, errs, nil
}

// batchDone ends a batch that was carried out: MC_OK, with the count of
// failed keys and the first failure as mc_last_error.
func batchDone(fn string, errs []error) int32 {
	failed, first := 0, -1
	for i, err := range errs {
		if err != nil {
			failed++
			if first < 0 {
				first = i
			}
		}
	}
	if failed == 0 {
		return cbridge.Succeed()
	}
	cbridge.SetError(fmt.Sprintf("%s: %d of %d keys failed; first: keys[%d]: %v", fn, failed, len(errs), first, errs[first]))
	return int32(cbridge.OK)
}

// fillBuf hands b to C in out (malloc'd; the caller frees it with mc_buf_free).
func fillBuf(out *C.mc_buf_t, b []byte) {
	out.data, out.len = nil, 0
	if len(b) > 0 {
		out.data = C.CBytes(b)
		out.len = C.size_t(len(b))
	}
}

//export mcgo_lmcache_create
func mcgo_lmcache_create(url, config *C.char, out *C.uint64_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_lmcache_create"
	switch {
	case url == nil:
		return fail(fn, cbridge.Null("url"))
	case config == nil:
		return fail(fn, cbridge.Null("config_json"))
	case out == nil:
		return fail(fn, cbridge.Null("out"))
	}
	// libc's environment, not the Go runtime's (abi/cbridge/env.go).
	env := cbridge.Environ()
	s, err := lmcache.ParseSettings(cbridge.GoString(url), []byte(cbridge.GoString(config)), env)
	if err != nil {
		return fail(fn, err)
	}
	c, err := lmcache.Open(context.Background(), s, env)
	if err != nil {
		return fail(fn, err)
	}
	*out = C.uint64_t(cbridge.Handles.Add(c))
	return cbridge.Succeed()
}

//export mcgo_lmcache_destroy
func mcgo_lmcache_destroy(h C.uint64_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_lmcache_destroy"
	c, err := cbridge.Take[*lmcache.Connector](cbridge.Handles, cbridge.Handle(h), what)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, c.Close())
}

//export mcgo_lmcache_notes
func mcgo_lmcache_notes(h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_lmcache_notes"
	c, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	notes := c.Settings().Notes
	if notes == nil {
		notes = []string{}
	}
	b, err := json.Marshal(notes)
	if err != nil {
		return fail(fn, err)
	}
	fillBuf(out, b)
	return cbridge.Succeed()
}

//export mcgo_lmcache_register_buffer
func mcgo_lmcache_register_buffer(h C.uint64_t, ptr C.uintptr_t, size C.size_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_lmcache_register_buffer"
	c, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	buf, err := cbridge.ForeignBytes("ptr", uintptr(ptr), uintptr(size))
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, c.RegisterBuffer(buf))
}

//export mcgo_lmcache_unregister_buffer
func mcgo_lmcache_unregister_buffer(h C.uint64_t, ptr C.uintptr_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_lmcache_unregister_buffer"
	c, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if err := cbridge.CheckRange("ptr", uintptr(ptr), 1); err != nil {
		return fail(fn, err)
	}
	return done(fn, c.UnregisterBuffer(uint64(ptr)))
}

//export mcgo_lmcache_exists
func mcgo_lmcache_exists(h C.uint64_t, k *C.char) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_lmcache_exists"
	c, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	ks, err := key("key", k)
	if err != nil {
		return fail(fn, err)
	}
	ok, err := c.Exists(ks)
	if err != nil {
		return fail(fn, err)
	}
	cbridge.Succeed()
	if ok {
		return 1
	}
	return 0
}

//export mcgo_lmcache_batched_contains
func mcgo_lmcache_batched_contains(h C.uint64_t, kp **C.char, n C.size_t, pin C.int, out *C.size_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_lmcache_batched_contains"
	c, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if out == nil {
		return fail(fn, cbridge.Null("out_prefix"))
	}
	if n == 0 {
		*out = 0
		return cbridge.Succeed()
	}
	ks, err := keys(kp, n)
	if err != nil {
		return fail(fn, err)
	}
	got, err := c.BatchedContains(ks)
	if err != nil {
		return fail(fn, err)
	}
	*out = C.size_t(got)
	return cbridge.Succeed()
}

//export mcgo_lmcache_batched_put
func mcgo_lmcache_batched_put(h C.uint64_t, kp **C.char, ptrs *C.uintptr_t, sizes *C.size_t, n C.size_t, out *C.int32_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_lmcache_batched_put"
	c, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if n == 0 {
		return cbridge.Succeed()
	}
	ks, err := keys(kp, n)
	if err != nil {
		return fail(fn, err)
	}
	bufs, errs, err := buffers(ptrs, sizes, n, "sizes")
	if err != nil {
		return fail(fn, err)
	}
	codes, err := cbridge.Slice("out_codes", out, uintptr(n))
	if err != nil {
		return fail(fn, err)
	}
	ok := usable(ks, bufs, errs)
	if len(ok) > 0 {
		sub, subBufs := subset(ks, bufs, ok)
		for j, err := range c.BatchedPut(sub, subBufs) {
			errs[ok[j]] = err
		}
	}
	for i, err := range errs {
		codes[i] = C.int32_t(cbridge.CodeOf(err))
	}
	return batchDone(fn, errs)
}

//export mcgo_lmcache_batched_get
func mcgo_lmcache_batched_get(h C.uint64_t, kp **C.char, ptrs *C.uintptr_t, caps *C.size_t, n C.size_t, out *C.int64_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_lmcache_batched_get"
	c, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if n == 0 {
		return cbridge.Succeed()
	}
	ks, err := keys(kp, n)
	if err != nil {
		return fail(fn, err)
	}
	bufs, errs, err := buffers(ptrs, caps, n, "caps")
	if err != nil {
		return fail(fn, err)
	}
	results, err := cbridge.Slice("out_results", out, uintptr(n))
	if err != nil {
		return fail(fn, err)
	}
	read := make([]int, n)
	ok := usable(ks, bufs, errs)
	if len(ok) > 0 {
		sub, subBufs := subset(ks, bufs, ok)
		got, gerrs := c.BatchedGet(sub, subBufs)
		for j, i := range ok {
			read[i], errs[i] = got[j], gerrs[j]
		}
	}
	for i, err := range errs {
		if err != nil {
			results[i] = C.int64_t(cbridge.CodeOf(err))
		} else {
			results[i] = C.int64_t(read[i])
		}
	}
	return batchDone(fn, errs)
}

// usable lists the positions whose buffer passed the checks.
func usable(ks []string, bufs [][]byte, errs []error) []int {
	var ok []int
	for i := range ks {
		if errs[i] == nil {
			ok = append(ok, i)
		} else {
			errs[i] = fmt.Errorf("key %q: %w", ks[i], errs[i])
		}
	}
	return ok
}

func subset(ks []string, bufs [][]byte, idx []int) ([]string, [][]byte) {
	sk := make([]string, len(idx))
	sb := make([][]byte, len(idx))
	for j, i := range idx {
		sk[j], sb[j] = ks[i], bufs[i]
	}
	return sk, sb
}

//export mcgo_lmcache_remove
func mcgo_lmcache_remove(h C.uint64_t, k *C.char) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_lmcache_remove"
	c, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	ks, err := key("key", k)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, c.Remove(ks))
}

//export mcgo_lmcache_list
func mcgo_lmcache_list(h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_lmcache_list"
	c, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	ks, err := c.List()
	if err != nil {
		return fail(fn, err)
	}
	b, err := json.Marshal(ks)
	if err != nil {
		return fail(fn, err)
	}
	fillBuf(out, b)
	return cbridge.Succeed()
}

//export mcgo_lmcache_ping
func mcgo_lmcache_ping(h C.uint64_t) (rc int32) {
	defer cbridge.Recover(&rc)
	const fn = "mc_lmcache_ping"
	c, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, c.Ping())
}
