package engine

/*
#cgo CFLAGS: -I${SRCDIR}/../include
#include "mooncake/transfer_engine.h"
*/
import "C"

import (
	"fmt"
	"math"
	"time"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// The mcgo_te_* functions are called only by the trampolines in te.c, one
// per mc_te_* function of transfer_engine.h, which pass engine handles as
// uint64_t and caller addresses as uintptr_t. Pointers that do arrive here
// (strings, out parameters, the request array) are C memory: read or
// written during the call, never kept.

// The status values of the header are core/transfer's.
const (
	_ = uint(C.MC_TE_STATUS_WAITING-transfer.StatusWaiting) + uint(transfer.StatusWaiting-C.MC_TE_STATUS_WAITING)
	_ = uint(C.MC_TE_STATUS_COMPLETED-transfer.StatusCompleted) + uint(transfer.StatusCompleted-C.MC_TE_STATUS_COMPLETED)
	_ = uint(C.MC_TE_STATUS_FAILED-transfer.StatusFailed) + uint(transfer.StatusFailed-C.MC_TE_STATUS_FAILED)
	_ = uint(C.MC_TE_LOCAL_SEGMENT-transfer.LocalSegment) + uint(transfer.LocalSegment-C.MC_TE_LOCAL_SEGMENT)
	_ = uint(C.MC_TE_OPCODE_READ-int(transfer.Read)) + uint(int(transfer.Read)-C.MC_TE_OPCODE_READ)
	_ = uint(C.MC_TE_OPCODE_WRITE-int(transfer.Write)) + uint(int(transfer.Write)-C.MC_TE_OPCODE_WRITE)
)

// teABIVersion is MC_TE_ABI_VERSION.
const teABIVersion uint32 = C.MC_TE_ABI_VERSION_MAJOR<<16 | C.MC_TE_ABI_VERSION_MINOR

func lookup(engine C.uint64_t) (*teEngine, error) {
	return cbridge.Lookup[*teEngine](cbridge.Handles, cbridge.Handle(engine), "engine")
}

//export mcgo_te_create
func mcgo_te_create(meta, name, host *C.char, port C.uint64_t, autoDiscover C.int, out *C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_create"
	_ = autoDiscover // tcp is installed either way (see the header)
	switch {
	case meta == nil:
		return cbridge.Fail(fn, cbridge.Null("metadata_conn_string"))
	case name == nil:
		return cbridge.Fail(fn, cbridge.Null("local_server_name"))
	case out == nil:
		return cbridge.Fail(fn, cbridge.Null("out"))
	}
	t, err := newEngine(engineArgs{
		Conn: C.GoString(meta), Name: C.GoString(name), Host: cbridge.GoString(host),
		Port: uint64(port), Env: cbridge.Environ(),
	})
	return cbridge.DoneHandle(fn, out, t, err)
}

//export mcgo_te_destroy
func mcgo_te_destroy(engine C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_destroy"
	t, err := cbridge.Take[*teEngine](cbridge.Handles, cbridge.Handle(engine), "engine")
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	return cbridge.Done(fn, t.destroy())
}

//export mcgo_te_install_transport
func mcgo_te_install_transport(engine C.uint64_t, proto *C.char) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_install_transport"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if proto == nil {
		return cbridge.Fail(fn, cbridge.Null("proto"))
	}
	return cbridge.Done(fn, t.installTransport(C.GoString(proto)))
}

//export mcgo_te_register_local_memory
func mcgo_te_register_local_memory(engine C.uint64_t, addr C.uintptr_t, length C.size_t, location *C.char, remote C.int) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_register_local_memory"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	buf, err := cbridge.ForeignBytes("addr", uintptr(addr), uintptr(length))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	return cbridge.Done(fn, t.register(buf, cbridge.GoString(location), remote != 0))
}

//export mcgo_te_unregister_local_memory
func mcgo_te_unregister_local_memory(engine C.uint64_t, addr C.uintptr_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_unregister_local_memory"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if addr == 0 {
		return cbridge.Fail(fn, cbridge.Null("addr"))
	}
	return cbridge.Done(fn, t.unregister(uint64(addr)))
}

//export mcgo_te_open_segment
func mcgo_te_open_segment(engine C.uint64_t, name *C.char, out *C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_open_segment"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	switch {
	case name == nil:
		return cbridge.Fail(fn, cbridge.Null("name"))
	case out == nil:
		return cbridge.Fail(fn, cbridge.Null("out_id"))
	}
	id, err := t.openSegment(C.GoString(name))
	return cbridge.DoneOut(fn, out, C.int32_t(id), err)
}

//export mcgo_te_close_segment
func mcgo_te_close_segment(engine C.uint64_t, id C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_close_segment"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	return cbridge.Done(fn, t.closeSegment(int32(id)))
}

//export mcgo_te_allocate_batch
func mcgo_te_allocate_batch(engine C.uint64_t, size C.size_t, out *C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_allocate_batch"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if out == nil {
		return cbridge.Fail(fn, cbridge.Null("out_batch"))
	}
	id, err := t.allocateBatch(uint64(size))
	return cbridge.DoneOut(fn, out, C.uint64_t(id), err)
}

//export mcgo_te_submit
func mcgo_te_submit(engine, batch C.uint64_t, reqs *C.mc_te_request_t, count C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_submit"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if count == 0 {
		return cbridge.Done(fn, t.submit(uint64(batch), nil)) // still reports an unknown batch
	}
	in, err := cbridge.Slice("reqs", reqs, uintptr(count))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	out := make([]transfer.Request, len(in))
	for i := range in {
		out[i] = transfer.Request{
			Op: opcode(int64(in[i].opcode)),
			// The address is converted straight to an integer: a caller's
			// bad value must never sit in a Go pointer variable.
			Source:       uint64(uintptr(in[i].source)),
			Target:       transfer.SegmentID(in[i].target_id),
			TargetOffset: uint64(in[i].target_offset),
			Length:       uint64(in[i].length),
		}
	}
	return cbridge.Done(fn, t.submit(uint64(batch), out))
}

//export mcgo_te_get_status
func mcgo_te_get_status(engine, batch C.uint64_t, task C.size_t, out *C.mc_te_status_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_get_status"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if out == nil {
		return cbridge.Fail(fn, cbridge.Null("out"))
	}
	st, err := t.status(uint64(batch), uint64(task))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	out.status = C.int(st.Status)
	out.transferred_bytes = C.uint64_t(st.TransferredBytes)
	if st.Status == transfer.StatusFailed {
		// MC_OK, but the reason is kept for the caller (see the header).
		cbridge.SetError(fmt.Sprintf("%s: task %d of batch %d FAILED: %v", fn, uint64(task), uint64(batch), st.Err))
		return int32(cbridge.OK)
	}
	return cbridge.Succeed()
}

//export mcgo_te_free_batch
func mcgo_te_free_batch(engine, batch C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_free_batch"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	return cbridge.Done(fn, t.freeBatch(uint64(batch)))
}

// fillBuf hands b to the caller as an mc_buf_t it frees with mc_buf_free:
// a malloc'd copy (C.CBytes), or {NULL, 0} for no bytes.
func fillBuf(out *C.mc_buf_t, b []byte) {
	out.data, out.len = nil, 0
	if len(b) > 0 {
		out.data = C.CBytes(b)
		out.len = C.size_t(len(b))
	}
}

//export mcgo_te_get_local_name
func mcgo_te_get_local_name(engine C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_get_local_name"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if out == nil {
		return cbridge.Fail(fn, cbridge.Null("out"))
	}
	fillBuf(out, append([]byte(t.localName()), 0))
	return cbridge.Succeed()
}

//export mcgo_te_get_rpc_port
func mcgo_te_get_rpc_port(engine C.uint64_t, out *C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_get_rpc_port"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if out == nil {
		return cbridge.Fail(fn, cbridge.Null("out_port"))
	}
	return cbridge.DoneOut(fn, out, C.int32_t(t.rpcPort()), nil)
}

//export mcgo_te_refresh_segment
func mcgo_te_refresh_segment(engine C.uint64_t, id C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_refresh_segment"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	return cbridge.Done(fn, t.refreshSegment(int32(id)))
}

//export mcgo_te_get_segment_buffers
func mcgo_te_get_segment_buffers(engine C.uint64_t, id C.int32_t, out *C.mc_te_buffer_t, capacity C.size_t, count *C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_get_segment_buffers"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if count == nil {
		return cbridge.Fail(fn, cbridge.Null("out_count"))
	}
	var dst []C.mc_te_buffer_t
	if capacity > 0 {
		if dst, err = cbridge.Slice("out", out, uintptr(capacity)); err != nil {
			return cbridge.Fail(fn, err)
		}
	}
	bufs, err := t.segmentBuffers(int32(id))
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	for i := range min(len(dst), len(bufs)) {
		dst[i].addr = C.uint64_t(bufs[i].Addr)
		dst[i].length = C.uint64_t(bufs[i].Length)
	}
	*count = C.size_t(len(bufs))
	return cbridge.Succeed()
}

//export mcgo_te_wait_batch
func mcgo_te_wait_batch(engine, batch, timeoutMS C.uint64_t, out *C.mc_te_status_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_wait_batch"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if out == nil {
		return cbridge.Fail(fn, cbridge.Null("out"))
	}
	timeout := time.Duration(math.MaxInt64)
	if uint64(timeoutMS) < uint64(math.MaxInt64/time.Millisecond) {
		timeout = time.Duration(timeoutMS) * time.Millisecond
	}
	st, err := t.batchStatus(uint64(batch), timeout)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	out.status = C.int(st.Status)
	out.transferred_bytes = C.uint64_t(st.TransferredBytes)
	if st.Status == transfer.StatusFailed {
		cbridge.SetError(fmt.Sprintf("%s: batch %d FAILED: %v", fn, uint64(batch), st.Err))
		return int32(cbridge.OK)
	}
	return cbridge.Succeed()
}

//export mcgo_te_probe
func mcgo_te_probe(engine C.uint64_t, name *C.char) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_probe"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if name == nil {
		return cbridge.Fail(fn, cbridge.Null("segment_name"))
	}
	return cbridge.Done(fn, t.probe(C.GoString(name)))
}

//export mcgo_te_send_notify
func mcgo_te_send_notify(engine C.uint64_t, name, notifyName, msg *C.char) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_send_notify"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	switch {
	case name == nil:
		return cbridge.Fail(fn, cbridge.Null("segment_name"))
	case notifyName == nil:
		return cbridge.Fail(fn, cbridge.Null("notify_name"))
	case msg == nil:
		return cbridge.Fail(fn, cbridge.Null("notify_msg"))
	}
	return cbridge.Done(fn, t.sendNotify(C.GoString(name), C.GoString(notifyName), C.GoString(msg)))
}

//export mcgo_te_get_notifies
func mcgo_te_get_notifies(engine C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_te_get_notifies"
	t, err := lookup(engine)
	if err != nil {
		return cbridge.Fail(fn, err)
	}
	if out == nil {
		return cbridge.Fail(fn, cbridge.Null("out"))
	}
	fillBuf(out, t.notifies())
	return cbridge.Succeed()
}
