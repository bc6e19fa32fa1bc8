package p2p

/*
#cgo CFLAGS: -I${SRCDIR}/../include
#include <stdlib.h>
#include "mooncake/p2p.h"
*/
import "C"

import (
	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta"
	"github.com/mooncake-go/mooncake/core/p2p"
)

// sentinels maps core/p2p's errors to the codes of p2p.h; other errors go
// through cbridge's table.
var sentinels = []cbridge.Sentinel{
	{Err: p2p.ErrExists, Code: C.MC_P2P_ERR_EXISTS},
	{Err: p2p.ErrOpened, Code: C.MC_P2P_ERR_OPENED},
	{Err: p2p.ErrNotOpened, Code: C.MC_P2P_ERR_NOT_OPENED},
	{Err: p2p.ErrNoHolder, Code: C.MC_P2P_ERR_NO_HOLDER},
	{Err: p2p.ErrSizeMismatch, Code: C.MC_P2P_ERR_SIZE},
	{Err: p2p.ErrNotFound, Code: int32(cbridge.NotFound)},
	{Err: p2p.ErrInvalidArgument, Code: int32(cbridge.InvalidArgument)},
	{Err: p2p.ErrClosed, Code: int32(cbridge.Closed)},
	{Err: etcdmeta.ErrUnreachable, Code: int32(cbridge.Metadata)},
}

// The mcgo_p2p_* functions are called only by the trampolines in p2p.c.
// Pointers that arrive here (strings, the address and size arrays, out
// parameters) are C memory, read or written during the call; the buffers
// the arrays name are foreign memory that core/p2p registers with its
// engine until the matching unregister, delete_replica or destroy.

func lookup(h C.uint64_t) (*p2p.Store, error) {
	return cbridge.Lookup[*p2p.Store](cbridge.Handles, cbridge.Handle(h), "p2p store")
}

//export mcgo_p2p_create
func mcgo_p2p_create(uri, name *C.char, out *C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_p2p_create"
	switch {
	case uri == nil:
		return cbridge.Fail(fn, cbridge.Null("metadata_uri"))
	case out == nil:
		return cbridge.Fail(fn, cbridge.Null("out"))
	}
	s, err := create(C.GoString(uri), cbridge.GoString(name), cbridge.Environ())
	if err != nil {
		return cbridge.FailAs(fn, err, sentinels)
	}
	return cbridge.DoneHandle(fn, out, s, nil)
}

//export mcgo_p2p_destroy
func mcgo_p2p_destroy(h C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_p2p_destroy"
	s, err := cbridge.Take[*p2p.Store](cbridge.Handles, cbridge.Handle(h), "p2p store")
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	return done(fn, s.Close())
}

func done(fn string, err error) int32 {
	if err != nil {
		return cbridge.FailAs(fn, err, sentinels)
	}
	return cbridge.Succeed()
}

// cBuffers reads count (address, size) pairs.
func cBuffers(addrs *C.uintptr_t, sizes *C.uint64_t, count C.size_t) ([][]byte, error) {
	as, err := cbridge.Slice("addrs", addrs, uintptr(count))
	if err != nil {
		return nil, err
	}
	ss, err := cbridge.Slice("sizes", sizes, uintptr(count))
	if err != nil {
		return nil, err
	}
	a := make([]uintptr, len(as))
	z := make([]uint64, len(ss))
	for i := range as {
		a[i], z[i] = uintptr(as[i]), uint64(ss[i])
	}
	return buffers(a, z)
}

//export mcgo_p2p_register
func mcgo_p2p_register(h C.uint64_t, name *C.char, addrs *C.uintptr_t, sizes *C.uint64_t, count C.size_t, maxShard C.uint64_t, location *C.char) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_p2p_register"
	s, err := lookup(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if name == nil {
		return cbridge.Fail(fn, cbridge.Null("name"))
	}
	bufs, err := cBuffers(addrs, sizes, count)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	ctx, cancel := long()
	defer cancel()
	return done(fn, s.Register(ctx, C.GoString(name), bufs, uint64(maxShard), cbridge.GoString(location)))
}

//export mcgo_p2p_unregister
func mcgo_p2p_unregister(h C.uint64_t, name *C.char) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_p2p_unregister"
	s, err := lookup(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if name == nil {
		return cbridge.Fail(fn, cbridge.Null("name"))
	}
	ctx, cancel := quick()
	defer cancel()
	return done(fn, s.Unregister(ctx, C.GoString(name)))
}

//export mcgo_p2p_get_replica
func mcgo_p2p_get_replica(h C.uint64_t, name *C.char, addrs *C.uintptr_t, sizes *C.uint64_t, count C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_p2p_get_replica"
	s, err := lookup(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if name == nil {
		return cbridge.Fail(fn, cbridge.Null("name"))
	}
	bufs, err := cBuffers(addrs, sizes, count)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	ctx, cancel := long()
	defer cancel()
	return done(fn, s.GetReplica(ctx, C.GoString(name), bufs))
}

//export mcgo_p2p_delete_replica
func mcgo_p2p_delete_replica(h C.uint64_t, name *C.char) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_p2p_delete_replica"
	s, err := lookup(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if name == nil {
		return cbridge.Fail(fn, cbridge.Null("name"))
	}
	ctx, cancel := quick()
	defer cancel()
	return done(fn, s.DeleteReplica(ctx, C.GoString(name)))
}

//export mcgo_p2p_list
func mcgo_p2p_list(h C.uint64_t, prefix *C.char, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_p2p_list"
	s, err := lookup(h)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if out == nil {
		return cbridge.Fail(fn, cbridge.Null("out"))
	}
	b, err := list(s, cbridge.GoString(prefix))
	if err != nil {
		return cbridge.FailAs(fn, err, sentinels)
	}
	out.data, out.len = nil, 0
	if len(b) > 0 {
		out.data = C.CBytes(b)
		out.len = C.size_t(len(b))
	}
	return cbridge.Succeed()
}
