package capi

/*
#cgo CFLAGS: -I${SRCDIR}/../../abi/include
#include <stdlib.h>
#include "mooncake/trtllm.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/connectors/xferagent"
	"github.com/mooncake-go/mooncake/core/transfer/cuda"
)

// Codes of trtllm.h.
var (
	errUnknownAgent   = errors.New("trtllm: unknown agent")
	errSizeMismatch   = errors.New("trtllm: size mismatch")
	errHostGeneration = errors.New("trtllm: host generation not supported")
)

var codes = []cbridge.Sentinel{
	{Err: errUnknownAgent, Code: int32(C.MC_TRTLLM_ERR_UNKNOWN_AGENT)},
	{Err: xferagent.ErrNotFound, Code: int32(C.MC_TRTLLM_ERR_UNKNOWN_AGENT)},
	{Err: errSizeMismatch, Code: int32(C.MC_TRTLLM_ERR_SIZE_MISMATCH)},
	{Err: errHostGeneration, Code: int32(C.MC_TRTLLM_ERR_HOST_GENERATION)},
}

func fail(fn string, err error) int32 { return cbridge.FailAs(fn, err, codes) }

func done(fn string, err error) int32 {
	if err != nil {
		return fail(fn, err)
	}
	return cbridge.Succeed()
}

// agent is what an mc_trtllm_agent_t handle refers to.
type agent struct {
	e  *xferagent.Engine
	mu sync.Mutex
	// regs counts the registrations of each (memory type, address): the
	// engine holds one, released when the count drops to zero.
	regs map[[2]uint64]*reg
}

type reg struct {
	id   uint64
	refs int
}

func lookup(h C.uint64_t) (*agent, error) {
	return cbridge.Lookup[*agent](cbridge.Handles, cbridge.Handle(h), "trtllm agent")
}

// fillBuf hands b to C in out (malloc'd; the caller frees it with mc_buf_free).
func fillBuf(out *C.mc_buf_t, b []byte) {
	out.data, out.len = nil, 0
	if len(b) > 0 {
		out.data = C.CBytes(b)
		out.len = C.size_t(len(b))
	}
}

// str copies the n bytes at p (n == 0: "" whatever p is).
func str(what string, p *C.char, n C.size_t) (string, error) {
	if n == 0 {
		return "", nil
	}
	return cbridge.GoStringN(what, p, uintptr(n))
}

// blob copies the n bytes at address p (n == 0: empty).
func blob(what string, p C.uintptr_t, n C.size_t) ([]byte, error) {
	if n == 0 {
		return []byte{}, nil
	}
	b, err := cbridge.ForeignBytes(what, uintptr(p), uintptr(n))
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}

// descs copies the C array p[0..n).
func descs(what string, p *C.mc_trtllm_desc_t, n C.size_t) ([]xferagent.Desc, error) {
	if n == 0 {
		return nil, nil
	}
	cs, err := cbridge.Slice(what, p, uintptr(n))
	if err != nil {
		return nil, err
	}
	out := make([]xferagent.Desc, len(cs))
	for i, d := range cs {
		out[i] = xferagent.Desc{Addr: uint64(d.addr), Len: uint64(d.len), DevID: uint64(d.dev_id)}
	}
	return out, nil
}

// mem converts a TRT-LLM MemoryType to the agent's.
func mem(m C.int) int { return int(m) } // the same values: DRAM 0, VRAM 1, BLK 2, OBJ 3, FILE 4

// Generations of TensorRT-LLM's transfer-agent interface a shim may be
// built for (trtllm.h MC_TRTLLM_GEN_*).
const (
	genG2b = 2
	genG3  = 3
)

//export mcgo_trtllm_check_host
func mcgo_trtllm_check_host(shimABI, generation C.uint32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_trtllm_check_host"
	if uint32(shimABI)>>16 != uint32(C.MC_TRTLLM_ABI_VERSION_MAJOR) {
		return fail(fn, fmt.Errorf("%w: the wrapper was built for mc_trtllm ABI %#x, this libmooncake.so has %#x", errHostGeneration, uint32(shimABI), uint32(C.MC_TRTLLM_ABI_VERSION)))
	}
	if generation != genG2b && generation != genG3 {
		return fail(fn, fmt.Errorf("%w: interface generation %d (built: %d and %d)", errHostGeneration, generation, genG2b, genG3))
	}
	return cbridge.Succeed()
}

// ipFromEnv is the address an agent uses, as TensorRT-LLM's own Mooncake
// wrapper: TLLM_MOONCAKE_IP_ADDR, else the IPv4 address of interface
// TRTLLM_MOONCAKE_INTERFACE, else "" (the agent's default). Errors name a
// bad value.
func ipFromEnv(env map[string]string) (string, error) {
	if ip := env["TLLM_MOONCAKE_IP_ADDR"]; ip != "" {
		if net.ParseIP(ip) == nil {
			return "", fmt.Errorf("%w: TLLM_MOONCAKE_IP_ADDR=%q is not an IP address", cbridge.ErrInvalidArgument, ip)
		}
		return ip, nil
	}
	name := env["TRTLLM_MOONCAKE_INTERFACE"]
	if name == "" {
		return "", nil
	}
	it, err := net.InterfaceByName(name)
	if err != nil {
		return "", fmt.Errorf("%w: TRTLLM_MOONCAKE_INTERFACE=%q: %v", cbridge.ErrInvalidArgument, name, err)
	}
	addrs, _ := it.Addrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.String(), nil
		}
	}
	return "", fmt.Errorf("%w: TRTLLM_MOONCAKE_INTERFACE=%q has no IPv4 address", cbridge.ErrInvalidArgument, name)
}

//export mcgo_trtllm_agent_create
func mcgo_trtllm_agent_create(name *C.char, nameLen C.size_t, flags C.uint32_t, params *C.mc_trtllm_kv_t, n C.size_t, out *C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_trtllm_agent_create"
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	nm, err := cbridge.GoStringN("name", name, uintptr(nameLen))
	if err != nil {
		return fail(fn, err)
	}
	// libc's environment, not the Go runtime's view (the host may have
	// changed it after the library loaded).
	ip, err := ipFromEnv(cbridge.Environ())
	if err != nil {
		return fail(fn, err)
	}
	cfg := xferagent.Config{Agent: nm, Params: map[string]string{}}
	if ip != "" {
		cfg.Params[xferagent.ParamIPAddr] = ip
	}
	if n > 0 {
		kvs, err := cbridge.Slice("params", params, uintptr(n))
		if err != nil {
			return fail(fn, err)
		}
		for _, kv := range kvs {
			k, err := cbridge.GoStringN("params key", kv.key, uintptr(kv.key_len))
			if err != nil {
				return fail(fn, err)
			}
			v, err := str("params value", kv.value, kv.value_len)
			if err != nil {
				return fail(fn, err)
			}
			cfg.Params[k] = v
		}
	}
	if rt, err := cuda.Load(); err == nil { // $MC_CUDART_PATH, else the default names
		cfg.CUDA = rt
	}
	e, err := xferagent.New(cfg)
	if err != nil {
		return fail(fn, err)
	}
	*out = C.uint64_t(cbridge.Handles.Add(&agent{e: e, regs: map[[2]uint64]*reg{}}))
	return cbridge.Succeed()
}

//export mcgo_trtllm_agent_destroy
func mcgo_trtllm_agent_destroy(h C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_trtllm_agent_destroy"
	a, err := cbridge.Take[*agent](cbridge.Handles, cbridge.Handle(h), "trtllm agent")
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, a.e.Close())
}

//export mcgo_trtllm_register
func mcgo_trtllm_register(h C.uint64_t, m C.int, p *C.mc_trtllm_desc_t, n C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_trtllm_register"
	a, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	ds, err := descs("descs", p, n)
	if err != nil {
		return fail(fn, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	// A descriptor that fails undoes this call's earlier ones: the call
	// registers all of descs or none (registerMemory throws then).
	var done [][2]uint64
	undo := func() {
		for _, k := range done {
			r := a.regs[k]
			if r.refs--; r.refs == 0 {
				delete(a.regs, k)
				_ = a.e.Deregister(r.id)
			}
		}
	}
	for i, d := range ds {
		k := [2]uint64{uint64(m), d.Addr}
		if r, ok := a.regs[k]; ok {
			r.refs++
			done = append(done, k)
			continue
		}
		var buf []byte
		if m == C.MC_TRTLLM_MEM_DRAM {
			if buf, err = cbridge.ForeignBytes("desc addr", uintptr(d.Addr), uintptr(d.Len)); err != nil {
				undo()
				return fail(fn, fmt.Errorf("descriptor %d: %w", i, err))
			}
		}
		id, err := a.e.Register(buf, d.Addr, d.Len, d.DevID, mem(m))
		if err != nil {
			undo()
			return fail(fn, fmt.Errorf("descriptor %d: %w", i, err))
		}
		a.regs[k] = &reg{id: id, refs: 1}
		done = append(done, k)
	}
	return cbridge.Succeed()
}

//export mcgo_trtllm_deregister
func mcgo_trtllm_deregister(h C.uint64_t, m C.int, p *C.mc_trtllm_desc_t, n C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_trtllm_deregister"
	a, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	ds, err := descs("descs", p, n)
	if err != nil {
		return fail(fn, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, d := range ds {
		k := [2]uint64{uint64(m), d.Addr}
		r, ok := a.regs[k]
		if !ok {
			continue // unknown addresses are ignored, as TensorRT-LLM's agents do
		}
		if r.refs--; r.refs == 0 {
			delete(a.regs, k)
			if err := a.e.Deregister(r.id); err != nil {
				return fail(fn, err)
			}
		}
	}
	return cbridge.Succeed()
}

//export mcgo_trtllm_local_agent_desc
func mcgo_trtllm_local_agent_desc(h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	return connString("mc_trtllm_local_agent_desc", h, out)
}

//export mcgo_trtllm_local_conn_info
func mcgo_trtllm_local_conn_info(h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	return connString("mc_trtllm_local_conn_info", h, out)
}

// connString fills out with the agent's connection string: it is both its
// descriptor and its connection info (peers need nothing else).
func connString(fn string, h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	a, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	fillBuf(out, []byte(a.e.ConnInfo()))
	return cbridge.Succeed()
}

// loadPeer records peer name at connection string info.
func loadPeer(fn string, h C.uint64_t, name *C.char, nameLen C.size_t, info []byte, err error) (rc int32) {
	if err != nil {
		return fail(fn, err)
	}
	a, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	nm, err := cbridge.GoStringN("name", name, uintptr(nameLen))
	if err != nil {
		return fail(fn, err)
	}
	if nm == a.e.Agent() {
		return cbridge.Succeed() // this agent itself needs no loading
	}
	return done(fn, a.e.LoadRemoteConnInfo(nm, string(info)))
}

//export mcgo_trtllm_load_remote_desc
func mcgo_trtllm_load_remote_desc(h C.uint64_t, name *C.char, nameLen C.size_t, p C.uintptr_t, n C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	b, err := blob("blob", p, n)
	return loadPeer("mc_trtllm_load_remote_desc", h, name, nameLen, b, err)
}

//export mcgo_trtllm_load_remote_conn
func mcgo_trtllm_load_remote_conn(h C.uint64_t, name *C.char, nameLen C.size_t, info *C.char, n C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	s, err := str("info", info, n)
	return loadPeer("mc_trtllm_load_remote_conn", h, name, nameLen, []byte(s), err)
}

//export mcgo_trtllm_invalidate_remote
func mcgo_trtllm_invalidate_remote(h C.uint64_t, name *C.char, nameLen C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_trtllm_invalidate_remote"
	a, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	nm, err := str("name", name, nameLen)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, a.e.Disconnect(nm))
}

//export mcgo_trtllm_submit
func mcgo_trtllm_submit(h C.uint64_t, op, srcMem C.int, src *C.mc_trtllm_desc_t, dstMem C.int, dst *C.mc_trtllm_desc_t, n C.size_t, remote *C.char, remoteLen C.size_t, msg C.uintptr_t, msgLen C.size_t, hasMsg C.int, out *C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_trtllm_submit"
	if out == nil {
		return fail(fn, cbridge.Null("out_xfer"))
	}
	a, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	s, err := descs("src", src, n)
	if err != nil {
		return fail(fn, err)
	}
	d, err := descs("dst", dst, n)
	if err != nil {
		return fail(fn, err)
	}
	for i := range s {
		if s[i].Len != d[i].Len {
			return fail(fn, fmt.Errorf("%w: pair %d: src is %d bytes, dst %d", errSizeMismatch, i, s[i].Len, d[i].Len))
		}
	}
	peer, err := cbridge.GoStringN("remote", remote, uintptr(remoteLen))
	if err != nil {
		return fail(fn, err)
	}
	var m []byte
	if hasMsg != 0 {
		if m, err = blob("msg", msg, msgLen); err != nil {
			return fail(fn, err)
		}
	}
	req, err := a.e.PrepRaw(int(op), mem(srcMem), s, mem(dstMem), d, peer)
	if err != nil {
		return fail(fn, err)
	}
	if _, err := a.e.PostXfer(req, int(op), s, d, m); err != nil {
		a.e.ReleaseWhenDone(req)
		return fail(fn, err)
	}
	*out = C.uint64_t(req)
	return cbridge.Succeed()
}

// state is the MC_TRTLLM_STATE_* of a transfer from (done, err).
func state(done bool, err error) C.int32_t {
	switch {
	case err != nil:
		return C.MC_TRTLLM_STATE_FAILURE
	case done:
		return C.MC_TRTLLM_STATE_SUCCESS
	}
	return C.MC_TRTLLM_STATE_IN_PROGRESS
}

//export mcgo_trtllm_xfer_test
func mcgo_trtllm_xfer_test(h, x C.uint64_t, out *C.int32_t) (rc int32) {
	return xferWait("mc_trtllm_xfer_test", h, x, 0, out)
}

//export mcgo_trtllm_xfer_wait
func mcgo_trtllm_xfer_wait(h, x C.uint64_t, timeoutMs C.int64_t, out *C.int32_t) (rc int32) {
	return xferWait("mc_trtllm_xfer_wait", h, x, timeoutMs, out)
}

// xferWait waits up to timeoutMs (negative: no bound; 0: not at all) and
// stores the transfer's state; an unknown agent or transfer reads FAILURE
// (a status that outlived its agent).
func xferWait(fn string, h, x C.uint64_t, timeoutMs C.int64_t, out *C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	if out == nil {
		return fail(fn, cbridge.Null("out_state"))
	}
	a, err := lookup(h)
	if err != nil {
		*out = C.MC_TRTLLM_STATE_FAILURE
		return cbridge.Succeed()
	}
	timeout := time.Duration(timeoutMs) * time.Millisecond
	if timeoutMs < 0 {
		timeout = -1
	}
	d, err := a.e.Wait(uint64(x), timeout)
	*out = state(d, err)
	return cbridge.Succeed()
}

//export mcgo_trtllm_xfer_error
func mcgo_trtllm_xfer_error(h, x C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_trtllm_xfer_error"
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	a, err := lookup(h)
	if err != nil {
		fillBuf(out, []byte("the agent of this transfer was destroyed"))
		return cbridge.Succeed()
	}
	_, err = a.e.CheckXfer(uint64(x))
	if err != nil {
		fillBuf(out, []byte(err.Error()))
	} else {
		fillBuf(out, nil)
	}
	return cbridge.Succeed()
}

//export mcgo_trtllm_xfer_release
func mcgo_trtllm_xfer_release(h, x C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_trtllm_xfer_release"
	a, err := lookup(h)
	if err != nil {
		return cbridge.Succeed() // its agent is gone, and the transfer with it
	}
	return done(fn, a.e.ReleaseWhenDone(uint64(x)))
}

//export mcgo_trtllm_notify
func mcgo_trtllm_notify(h C.uint64_t, name *C.char, nameLen C.size_t, msg C.uintptr_t, msgLen C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_trtllm_notify"
	a, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	nm, err := cbridge.GoStringN("name", name, uintptr(nameLen))
	if err != nil {
		return fail(fn, err)
	}
	m, err := blob("msg", msg, msgLen)
	if err != nil {
		return fail(fn, err)
	}
	if err := a.e.GenNotif(nm, m); err != nil {
		if errors.Is(err, xferagent.ErrNotFound) {
			return fail(fn, fmt.Errorf("%w: %q: load it first (loadRemoteAgent)", errUnknownAgent, nm))
		}
		return fail(fn, err)
	}
	return cbridge.Succeed()
}

//export mcgo_trtllm_get_notifs
func mcgo_trtllm_get_notifs(h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_trtllm_get_notifs"
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	a, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	fillBuf(out, xferagent.PackNotifs(a.e.Notifs()))
	return cbridge.Succeed()
}

//export mcgo_trtllm_check_remote
func mcgo_trtllm_check_remote(h C.uint64_t, name *C.char, nameLen C.size_t, m C.int, p *C.mc_trtllm_desc_t, n C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_trtllm_check_remote"
	a, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	nm, err := cbridge.GoStringN("name", name, uintptr(nameLen))
	if err != nil {
		return fail(fn, err)
	}
	ds, err := descs("descs", p, n)
	if err != nil {
		return fail(fn, err)
	}
	cbridge.ClearError()
	if a.e.CoversRemote(nm, mem(m), ds) {
		return 1
	}
	return 0
}
