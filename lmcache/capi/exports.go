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

// lookupKey is lookup plus key("key", k), for the one-key calls.
func lookupKey(h C.uint64_t, k *C.char) (*lmcache.Connector, string, error) {
	c, err := lookup(h)
	if err != nil {
		return nil, "", err
	}
	ks, err := key("key", k)
	return c, ks, err
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
	defer cbridge.Guard(&rc)()
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
	defer cbridge.Guard(&rc)()
	const fn = "mc_lmcache_destroy"
	c, err := cbridge.Take[*lmcache.Connector](cbridge.Handles, cbridge.Handle(h), what)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, c.Close())
}

//export mcgo_lmcache_notes
func mcgo_lmcache_notes(h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
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
	defer cbridge.Guard(&rc)()
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
	defer cbridge.Guard(&rc)()
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
	defer cbridge.Guard(&rc)()
	const fn = "mc_lmcache_exists"
	c, ks, err := lookupKey(h, k)
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
	defer cbridge.Guard(&rc)()
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
	defer cbridge.Guard(&rc)()
	const fn = "mc_lmcache_batched_put"
	b, err := newBatch(h, kp, ptrs, sizes, n, "sizes")
	if err != nil || b == nil {
		return done(fn, err)
	}
	codes, err := cbridge.Slice("out_codes", out, uintptr(n))
	if err != nil {
		return fail(fn, err)
	}
	if ks, bufs := b.usable(); len(ks) > 0 {
		for j, err := range b.c.BatchedPut(ks, bufs) {
			b.errs[b.ok[j]] = err
		}
	}
	for i, err := range b.errs {
		codes[i] = C.int32_t(cbridge.CodeOf(err))
	}
	return cbridge.BatchDone(fn, b.errs)
}

//export mcgo_lmcache_batched_get
func mcgo_lmcache_batched_get(h C.uint64_t, kp **C.char, ptrs *C.uintptr_t, caps *C.size_t, n C.size_t, out *C.int64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_lmcache_batched_get"
	b, err := newBatch(h, kp, ptrs, caps, n, "caps")
	if err != nil || b == nil {
		return done(fn, err)
	}
	results, err := cbridge.Slice("out_results", out, uintptr(n))
	if err != nil {
		return fail(fn, err)
	}
	read := make([]int, n)
	if ks, bufs := b.usable(); len(ks) > 0 {
		got, gerrs := b.c.BatchedGet(ks, bufs)
		for j, i := range b.ok {
			read[i], b.errs[i] = got[j], gerrs[j]
		}
	}
	for i, err := range b.errs {
		if err != nil {
			results[i] = C.int64_t(cbridge.CodeOf(err))
		} else {
			results[i] = C.int64_t(read[i])
		}
	}
	return cbridge.BatchDone(fn, b.errs)
}

// batch is one batched put or get: the connector, the keys and buffers
// of the call, and per position the error of a bad buffer.
type batch struct {
	c    *lmcache.Connector
	keys []string
	bufs [][]byte
	errs []error
	ok   []int // positions whose buffer passed the checks (set by usable)
}

// newBatch validates the handle and the C arrays of a batch of n keys;
// nil, nil for n == 0 (nothing to do).
func newBatch(h C.uint64_t, kp **C.char, ptrs *C.uintptr_t, sizes *C.size_t, n C.size_t, sizesName string) (*batch, error) {
	c, err := lookup(h)
	if err != nil || n == 0 {
		return nil, err
	}
	ks, err := keys(kp, n)
	if err != nil {
		return nil, err
	}
	bufs, errs, err := buffers(ptrs, sizes, n, sizesName)
	if err != nil {
		return nil, err
	}
	return &batch{c: c, keys: ks, bufs: bufs, errs: errs}, nil
}

// usable returns the keys and buffers of the positions whose buffer
// passed the checks (b.ok), naming the key in the others' errors.
func (b *batch) usable() ([]string, [][]byte) {
	var ks []string
	var bufs [][]byte
	for i := range b.keys {
		if b.errs[i] != nil {
			b.errs[i] = fmt.Errorf("key %q: %w", b.keys[i], b.errs[i])
			continue
		}
		b.ok = append(b.ok, i)
		ks, bufs = append(ks, b.keys[i]), append(bufs, b.bufs[i])
	}
	return ks, bufs
}

//export mcgo_lmcache_remove
func mcgo_lmcache_remove(h C.uint64_t, k *C.char) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_lmcache_remove"
	c, ks, err := lookupKey(h, k)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, c.Remove(ks))
}

//export mcgo_lmcache_list
func mcgo_lmcache_list(h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
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
	defer cbridge.Guard(&rc)()
	const fn = "mc_lmcache_ping"
	c, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, c.Ping())
}
