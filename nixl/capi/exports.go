package capi

/*
#cgo CFLAGS: -I${SRCDIR}/../../abi/include
#include <stdlib.h>
#include "mooncake/nixl.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	nixl "github.com/mooncake-go/mooncake/connectors/xferagent"
	"github.com/mooncake-go/mooncake/core/transfer/cuda"
)

// Codes of nixl.h.
const (
	codeRemoteDisconnect = int32(C.MC_NIXL_ERR_REMOTE_DISCONNECT)
	codeRepostActive     = int32(C.MC_NIXL_ERR_REPOST_ACTIVE)
	codeMismatch         = int32(C.MC_NIXL_ERR_MISMATCH)
	codeNotAllowed       = int32(C.MC_NIXL_ERR_NOT_ALLOWED)
	codeHostFamily       = int32(C.MC_NIXL_ERR_HOST_FAMILY)
	codeNotFound         = int32(C.MC_ERR_NOT_FOUND)
)

// errHostFamily is mc_nixl_check_host's refusal.
var errHostFamily = errors.New("nixl: host ABI family not supported")

// codes maps package xferagent's errors to this header's codes (and
// MC_ERR_NOT_FOUND); other errors get cbridge's.
var codes = []cbridge.Sentinel{
	{Err: nixl.ErrRemoteDisconnect, Code: codeRemoteDisconnect},
	{Err: nixl.ErrRepostActive, Code: codeRepostActive},
	{Err: nixl.ErrMismatch, Code: codeMismatch},
	{Err: nixl.ErrNotAllowed, Code: codeNotAllowed},
	{Err: nixl.ErrNotFound, Code: codeNotFound},
	{Err: errHostFamily, Code: codeHostFamily},
}

// fail ends a failed call.
func fail(fn string, err error) int32 { return cbridge.FailAs(fn, err, codes) }

func done(fn string, err error) int32 {
	if err != nil {
		return fail(fn, err)
	}
	return cbridge.Succeed()
}

// lookup returns the engine of handle h.
func lookup(h C.uint64_t) (*nixl.Engine, error) {
	return cbridge.Lookup[*nixl.Engine](cbridge.Handles, cbridge.Handle(h), "nixl engine")
}

// bytesN copies the n bytes at address p (any bytes; n == 0 gives an
// empty, non-nil slice whatever p is).
func bytesN(what string, p C.uintptr_t, n C.size_t) ([]byte, error) {
	if n == 0 {
		return []byte{}, nil
	}
	b, err := cbridge.ForeignBytes(what, uintptr(p), uintptr(n))
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}

// stringN copies the agent name or string at p (n bytes, not empty).
func stringN(what string, p *C.char, n C.size_t) (string, error) {
	return cbridge.GoStringN(what, p, uintptr(n))
}

// descs copies the C descriptor array p[0..n) (n == 0: none).
func descs(what string, p *C.mc_nixl_desc_t, n C.size_t) ([]nixl.Desc, error) {
	if n == 0 {
		return nil, nil
	}
	cs, err := cbridge.Slice(what, p, uintptr(n))
	if err != nil {
		return nil, err
	}
	out := make([]nixl.Desc, len(cs))
	for i, d := range cs {
		out[i] = nixl.Desc{Addr: uint64(d.addr), Len: uint64(d.len), DevID: uint64(d.dev_id), MD: uint64(d.md)}
	}
	return out, nil
}

// fillBuf hands b to C in out (malloc'd; the caller frees it with mc_buf_free).
func fillBuf(out *C.mc_buf_t, b []byte) {
	out.data, out.len = nil, 0
	if len(b) > 0 {
		out.data = C.CBytes(b)
		out.len = C.size_t(len(b))
	}
}

// hostFamilyD is the NIXL ABI family the shim is built for (nixl-plugin.md
// section 0: NIXL 1.0 to 1.5).
const hostFamilyD = 4

//export mcgo_nixl_check_host
func mcgo_nixl_check_host(shimABI, family C.uint32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_check_host"
	if uint32(shimABI)>>16 != uint32(C.MC_NIXL_ABI_VERSION_MAJOR) {
		return fail(fn, errors.Join(errHostFamily, errors.New("the plugin was built for another mc_nixl ABI major than this libmooncake.so's")))
	}
	if family != hostFamilyD {
		return fail(fn, errors.Join(errHostFamily, errors.New("this plugin implements NIXL's 1.x backend ABI (family D) only")))
	}
	return cbridge.Succeed()
}

//export mcgo_nixl_backend_options
func mcgo_nixl_backend_options(out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_backend_options"
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	fillBuf(out, nixl.PackParams(nixl.DefaultParams()))
	return cbridge.Succeed()
}

//export mcgo_nixl_create
func mcgo_nixl_create(agent *C.char, agentLen C.size_t, params *C.mc_nixl_kv_t, n C.size_t, flags C.uint32_t, pthrDelayUs C.uint64_t, out *C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_create"
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	name, err := stringN("agent", agent, agentLen)
	if err != nil {
		return fail(fn, err)
	}
	cfg := nixl.Config{Agent: name, Params: map[string]string{}}
	if n > 0 {
		kvs, err := cbridge.Slice("params", params, uintptr(n))
		if err != nil {
			return fail(fn, err)
		}
		for _, kv := range kvs {
			k, err := stringN("params key", kv.key, kv.key_len)
			if err != nil {
				return fail(fn, err)
			}
			v := ""
			if kv.value_len > 0 { // an empty value may come with any pointer
				if v, err = stringN("params value", kv.value, kv.value_len); err != nil {
					return fail(fn, err)
				}
			}
			cfg.Params[k] = v
		}
	}
	// VRAM needs a CUDA runtime in the process; without one the engine
	// moves DRAM only and says so when asked for VRAM.
	if rt, err := cuda.Load(); err == nil { // $MC_CUDART_PATH, else the default names
		cfg.CUDA = rt
	}
	e, err := nixl.New(cfg)
	if err != nil {
		return fail(fn, err)
	}
	*out = C.uint64_t(cbridge.Handles.Add(e))
	return cbridge.Succeed()
}

//export mcgo_nixl_destroy
func mcgo_nixl_destroy(h C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_destroy"
	e, err := cbridge.Take[*nixl.Engine](cbridge.Handles, cbridge.Handle(h), "nixl engine")
	if err != nil {
		return fail(fn, err)
	}
	// One line at teardown says which path the posts took (operators
	// check that same-host peers got cross-memory attach).
	if c, t := e.Paths(); c+t > 0 {
		fmt.Fprintf(os.Stderr, "[mooncake-go NIXL backend] agent %q: %d posts by cross-memory attach, %d over tcp\n", e.Agent(), c, t)
	}
	return done(fn, e.Close())
}

//export mcgo_nixl_caps
func mcgo_nixl_caps(h C.uint64_t, out *C.uint32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_caps"
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	*out = C.uint32_t(e.Caps())
	return cbridge.Succeed()
}

//export mcgo_nixl_register
func mcgo_nixl_register(h C.uint64_t, addr, n, dev C.uint64_t, mem C.int, meta C.uintptr_t, metaLen C.size_t, out *C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_register"
	if out == nil {
		return fail(fn, cbridge.Null("out_md"))
	}
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	var buf []byte
	if mem == C.MC_NIXL_MEM_DRAM {
		if buf, err = cbridge.ForeignBytes("addr", uintptr(addr), uintptr(n)); err != nil {
			return fail(fn, err)
		}
	}
	id, err := e.Register(buf, uint64(addr), uint64(n), uint64(dev), int(mem))
	if err != nil {
		return fail(fn, err)
	}
	*out = C.uint64_t(id)
	return cbridge.Succeed()
}

//export mcgo_nixl_deregister
func mcgo_nixl_deregister(h, md C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_deregister"
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, e.Deregister(uint64(md)))
}

//export mcgo_nixl_public_data
func mcgo_nixl_public_data(h, md C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_public_data"
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	b, err := e.PublicData(uint64(md))
	if err != nil {
		return fail(fn, err)
	}
	fillBuf(out, b)
	return cbridge.Succeed()
}

//export mcgo_nixl_conn_info
func mcgo_nixl_conn_info(h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_conn_info"
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	fillBuf(out, []byte(e.ConnInfo()))
	return cbridge.Succeed()
}

//export mcgo_nixl_load_remote_conn
func mcgo_nixl_load_remote_conn(h C.uint64_t, agent *C.char, agentLen C.size_t, info C.uintptr_t, infoLen C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_load_remote_conn"
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	a, err := stringN("agent", agent, agentLen)
	if err != nil {
		return fail(fn, err)
	}
	ci, err := bytesN("info", info, infoLen)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, e.LoadRemoteConnInfo(a, string(ci)))
}

//export mcgo_nixl_connect
func mcgo_nixl_connect(h C.uint64_t, agent *C.char, agentLen C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_connect"
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	a, err := stringN("agent", agent, agentLen)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, e.Connect(a))
}

//export mcgo_nixl_disconnect
func mcgo_nixl_disconnect(h C.uint64_t, agent *C.char, agentLen C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_disconnect"
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	a, err := stringN("agent", agent, agentLen)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, e.Disconnect(a))
}

//export mcgo_nixl_load_remote_md
func mcgo_nixl_load_remote_md(h, addr, n, dev C.uint64_t, mem C.int, blob C.uintptr_t, blobLen C.size_t, agent *C.char, agentLen C.size_t, out *C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_load_remote_md"
	if out == nil {
		return fail(fn, cbridge.Null("out_md"))
	}
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	b, err := bytesN("blob", blob, blobLen)
	if err != nil {
		return fail(fn, err)
	}
	a, err := stringN("agent", agent, agentLen)
	if err != nil {
		return fail(fn, err)
	}
	id, err := e.LoadRemoteMD(uint64(addr), uint64(n), uint64(dev), int(mem), b, a)
	if err != nil {
		return fail(fn, err)
	}
	*out = C.uint64_t(id)
	return cbridge.Succeed()
}

//export mcgo_nixl_load_local_md
func mcgo_nixl_load_local_md(h, reg C.uint64_t, out *C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_load_local_md"
	if out == nil {
		return fail(fn, cbridge.Null("out_md"))
	}
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	id, err := e.LoadLocalMD(uint64(reg))
	if err != nil {
		return fail(fn, err)
	}
	*out = C.uint64_t(id)
	return cbridge.Succeed()
}

//export mcgo_nixl_unload_md
func mcgo_nixl_unload_md(h, md C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_unload_md"
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, e.UnloadMD(uint64(md)))
}

//export mcgo_nixl_prep_xfer
func mcgo_nixl_prep_xfer(h C.uint64_t, op, lmem C.int, local *C.mc_nixl_desc_t, nLocal C.size_t, rmem C.int, remote *C.mc_nixl_desc_t, nRemote C.size_t, agent *C.char, agentLen C.size_t, custom C.uintptr_t, customLen C.size_t, out *C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_prep_xfer"
	if out == nil {
		return fail(fn, cbridge.Null("out_req"))
	}
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	l, err := descs("local", local, nLocal)
	if err != nil {
		return fail(fn, err)
	}
	r, err := descs("remote", remote, nRemote)
	if err != nil {
		return fail(fn, err)
	}
	a, err := stringN("agent", agent, agentLen)
	if err != nil {
		return fail(fn, err)
	}
	id, err := e.PrepXfer(int(op), int(lmem), l, int(rmem), r, a)
	if err != nil {
		return fail(fn, err)
	}
	*out = C.uint64_t(id)
	return cbridge.Succeed()
}

// state is the MC_NIXL_XFER_* value of a request.
func state(done bool) C.int32_t {
	if done {
		return C.MC_NIXL_XFER_DONE
	}
	return C.MC_NIXL_XFER_IN_PROGRESS
}

//export mcgo_nixl_post_xfer
func mcgo_nixl_post_xfer(h, req C.uint64_t, op C.int, local *C.mc_nixl_desc_t, nLocal C.size_t, remote *C.mc_nixl_desc_t, nRemote C.size_t, hasNotif C.int, notif C.uintptr_t, notifLen C.size_t, out *C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_post_xfer"
	if out == nil {
		return fail(fn, cbridge.Null("out_state"))
	}
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	l, err := descs("local", local, nLocal)
	if err != nil {
		return fail(fn, err)
	}
	r, err := descs("remote", remote, nRemote)
	if err != nil {
		return fail(fn, err)
	}
	var msg []byte
	if hasNotif != 0 {
		if msg, err = bytesN("notif", notif, notifLen); err != nil {
			return fail(fn, err)
		}
	}
	d, err := e.PostXfer(uint64(req), int(op), l, r, msg)
	if err != nil {
		return fail(fn, err)
	}
	*out = state(d)
	return cbridge.Succeed()
}

//export mcgo_nixl_check_xfer
func mcgo_nixl_check_xfer(h, req C.uint64_t, out *C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_check_xfer"
	if out == nil {
		return fail(fn, cbridge.Null("out_state"))
	}
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	d, err := e.CheckXfer(uint64(req))
	if err != nil {
		return fail(fn, err)
	}
	*out = state(d)
	return cbridge.Succeed()
}

//export mcgo_nixl_release_req
func mcgo_nixl_release_req(h, req C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_release_req"
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, e.ReleaseReq(uint64(req)))
}

//export mcgo_nixl_get_notifs
func mcgo_nixl_get_notifs(h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_get_notifs"
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	fillBuf(out, nixl.PackNotifs(e.Notifs()))
	return cbridge.Succeed()
}

//export mcgo_nixl_gen_notif
func mcgo_nixl_gen_notif(h C.uint64_t, agent *C.char, agentLen C.size_t, msg C.uintptr_t, msgLen C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_nixl_gen_notif"
	e, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	a, err := stringN("agent", agent, agentLen)
	if err != nil {
		return fail(fn, err)
	}
	m, err := bytesN("msg", msg, msgLen)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, e.GenNotif(a, m))
}
