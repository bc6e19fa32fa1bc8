package capi

/*
#cgo CFLAGS: -I${SRCDIR}/../../abi/include
#include <stdlib.h>
#include "mooncake/vllm.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/core/transfer/cuda"
	"github.com/mooncake-go/mooncake/vllm"
)

// Codes of vllm.h.
const (
	codeWrongRole     = int32(C.MC_VLLM_ERR_WRONG_ROLE)
	codeNotRegistered = int32(C.MC_VLLM_ERR_NOT_REGISTERED)
	codeBadConfig     = int32(C.MC_VLLM_ERR_BAD_CONFIG)
	codeBadInput      = int32(C.MC_VLLM_ERR_BAD_INPUT)
)

// connector is what an mc_vllm_connector_t handle refers to: one half.
type connector struct {
	sched  *vllm.Scheduler
	worker *vllm.Worker
}

// sentinels are this header's codes for package vllm's errors.
var sentinels = []cbridge.Sentinel{
	{Err: vllm.ErrWrongRole, Code: codeWrongRole},
	{Err: vllm.ErrNotRegistered, Code: codeNotRegistered},
	{Err: vllm.ErrBadConfig, Code: codeBadConfig},
	{Err: vllm.ErrBadInput, Code: codeBadInput},
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

// lookup returns the connector of handle h, checking its role.
func lookup(h C.uint64_t, role vllm.Role) (*connector, error) {
	c, err := cbridge.Lookup[*connector](cbridge.Handles, cbridge.Handle(h), "vllm connector")
	if err != nil {
		return nil, err
	}
	if role == vllm.RoleScheduler && c.sched == nil {
		return nil, fmt.Errorf("%w: a scheduler call on a worker connector", vllm.ErrWrongRole)
	}
	if role == vllm.RoleWorker && c.worker == nil {
		return nil, fmt.Errorf("%w: a worker call on a scheduler connector", vllm.ErrWrongRole)
	}
	return c, nil
}

// decode parses the JSON C string p into v.
func decode(what string, p *C.char, v any) error {
	if p == nil {
		return cbridge.Null(what)
	}
	if err := json.Unmarshal([]byte(C.GoString(p)), v); err != nil {
		return fmt.Errorf("%w: %s: %v", vllm.ErrBadInput, what, err)
	}
	return nil
}

// fillBuf hands b to C in out (malloc'd; the caller frees it with mc_buf_free).
func fillBuf(out *C.mc_buf_t, b []byte) {
	out.data, out.len = nil, 0
	if len(b) > 0 {
		out.data = C.CBytes(b)
		out.len = C.size_t(len(b))
	}
}

//export mcgo_vllm_create
func mcgo_vllm_create(settings *C.char, role C.int, out *C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_create"
	if settings == nil {
		return fail(fn, cbridge.Null("settings_json"))
	}
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	// libc's environment, not the Go runtime's: vLLM's setproctitle
	// overwrote the block the runtime read at load time.
	env := cbridge.Environ()
	s, err := vllm.ParseSettings([]byte(C.GoString(settings)), env)
	if err != nil {
		return fail(fn, err)
	}
	c := &connector{}
	switch vllm.Role(role) {
	case vllm.RoleScheduler:
		c.sched, err = vllm.NewScheduler(context.Background(), s, env)
	case vllm.RoleWorker:
		c.worker, err = vllm.NewWorker(s, env, vllm.PD)
	default:
		err = fmt.Errorf("%w: role %d, want MC_VLLM_ROLE_SCHEDULER (0) or MC_VLLM_ROLE_WORKER (1)", vllm.ErrBadConfig, int(role))
	}
	if err != nil {
		return fail(fn, err)
	}
	*out = C.uint64_t(cbridge.Handles.Add(c))
	return cbridge.Succeed()
}

//export mcgo_vllm_destroy
func mcgo_vllm_destroy(h C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_destroy"
	c, err := cbridge.Take[*connector](cbridge.Handles, cbridge.Handle(h), "vllm connector")
	if err != nil {
		return fail(fn, err)
	}
	if c.sched != nil {
		return done(fn, c.sched.Close())
	}
	return done(fn, c.worker.Close())
}

//export mcgo_vllm_lookup
func mcgo_vllm_lookup(h C.uint64_t, args *C.char, outTokens *C.int64_t, outAsync *C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_lookup"
	c, err := lookup(h, vllm.RoleScheduler)
	if err != nil {
		return fail(fn, err)
	}
	if outTokens == nil || outAsync == nil {
		return fail(fn, cbridge.Null("out_tokens or out_async"))
	}
	var a vllm.LookupArgs
	if err := decode("args_json", args, &a); err != nil {
		return fail(fn, err)
	}
	n, async, err := c.sched.Lookup(context.Background(), a)
	*outTokens, *outAsync = C.int64_t(n), 0
	if async {
		*outAsync = 1
	}
	return done(fn, err)
}

//export mcgo_vllm_update_after_alloc
func mcgo_vllm_update_after_alloc(h C.uint64_t, args *C.char) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_update_after_alloc"
	c, err := lookup(h, vllm.RoleScheduler)
	if err != nil {
		return fail(fn, err)
	}
	var a vllm.AllocArgs
	if err := decode("args_json", args, &a); err != nil {
		return fail(fn, err)
	}
	return done(fn, c.sched.UpdateAfterAlloc(a))
}

//export mcgo_vllm_plan_save
func mcgo_vllm_plan_save(h C.uint64_t, args *C.char, outBlocks *C.int64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_plan_save"
	c, err := lookup(h, vllm.RoleScheduler)
	if err != nil {
		return fail(fn, err)
	}
	var a vllm.SaveArgs
	if err := decode("args_json", args, &a); err != nil {
		return fail(fn, err)
	}
	n, err := c.sched.PlanSave(a)
	if err == nil && outBlocks != nil {
		*outBlocks = C.int64_t(n)
	}
	return done(fn, err)
}

//export mcgo_vllm_preempted
func mcgo_vllm_preempted(h C.uint64_t, ids *C.char) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_preempted"
	c, err := lookup(h, vllm.RoleScheduler)
	if err != nil {
		return fail(fn, err)
	}
	var a []string
	if err := decode("ids_json", ids, &a); err != nil {
		return fail(fn, err)
	}
	c.sched.Preempted(a)
	return cbridge.Succeed()
}

//export mcgo_vllm_load_failed
func mcgo_vllm_load_failed(h C.uint64_t, hashes *C.char) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_load_failed"
	c, err := lookup(h, vllm.RoleScheduler)
	if err != nil {
		return fail(fn, err)
	}
	var a [][]byte
	if err := decode("hashes_json", hashes, &a); err != nil {
		return fail(fn, err)
	}
	c.sched.LoadFailed(a)
	return cbridge.Succeed()
}

//export mcgo_vllm_request_finished
func mcgo_vllm_request_finished(h C.uint64_t, args *C.char, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_request_finished"
	c, err := lookup(h, vllm.RoleScheduler)
	if err != nil {
		return fail(fn, err)
	}
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	var a vllm.FinishArgs
	if err := decode("args_json", args, &a); err != nil {
		return fail(fn, err)
	}
	r, err := c.sched.RequestFinished(a)
	if err != nil {
		return fail(fn, err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fail(fn, err)
	}
	fillBuf(out, b)
	return cbridge.Succeed()
}

//export mcgo_vllm_build_meta
func mcgo_vllm_build_meta(h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_build_meta"
	c, err := lookup(h, vllm.RoleScheduler)
	if err != nil {
		return fail(fn, err)
	}
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	b, err := c.sched.BuildMeta()
	if err != nil {
		return fail(fn, err)
	}
	fillBuf(out, b)
	return cbridge.Succeed()
}

//export mcgo_vllm_take_stats_json
func mcgo_vllm_take_stats_json(h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_take_stats_json"
	c, err := lookup(h, vllm.RoleWorker)
	if err != nil {
		return fail(fn, err)
	}
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	s := c.worker.TakeStats()
	b, err := json.Marshal(map[string]uint64{
		"saved_blocks": s.SavedBlocks, "loaded_blocks": s.LoadedBlocks, "failed_blocks": s.FailedBlocks,
		"saved_bytes": s.SavedBytes, "loaded_bytes": s.LoadedBytes,
		"load_busy_ns": uint64(s.LoadBusy.Nanoseconds()), "save_busy_ns": uint64(s.SaveBusy.Nanoseconds()),
	})
	if err != nil {
		return fail(fn, err)
	}
	fillBuf(out, b)
	return cbridge.Succeed()
}

//export mcgo_vllm_take_notes
func mcgo_vllm_take_notes(h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_take_notes"
	c, err := cbridge.Lookup[*connector](cbridge.Handles, cbridge.Handle(h), "vllm connector")
	if err != nil {
		return fail(fn, err)
	}
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	var notes []string
	if c.sched != nil {
		notes = c.sched.TakeNotes()
	} else if c.worker != nil {
		notes = c.worker.TakeNotes()
	}
	b, err := json.Marshal(append([]string{}, notes...))
	if err != nil {
		return fail(fn, err)
	}
	fillBuf(out, b)
	return cbridge.Succeed()
}

//export mcgo_vllm_pool_error
func mcgo_vllm_pool_error(h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_pool_error"
	c, err := cbridge.Lookup[*connector](cbridge.Handles, cbridge.Handle(h), "vllm connector")
	if err != nil {
		return fail(fn, err)
	}
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	var perr error
	if c.sched != nil {
		perr = c.sched.PoolError()
	} else if c.worker != nil {
		perr = c.worker.PoolError()
	}
	var b []byte
	if perr != nil {
		b = []byte(perr.Error())
	}
	fillBuf(out, b)
	return cbridge.Succeed()
}

//export mcgo_vllm_reset
func mcgo_vllm_reset(h C.uint64_t, outRemoved *C.int64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_reset"
	c, err := lookup(h, vllm.RoleScheduler)
	if err != nil {
		return fail(fn, err)
	}
	n, err := c.sched.Reset(context.Background())
	if err == nil && outRemoved != nil {
		*outRemoved = C.int64_t(n)
	}
	return done(fn, err)
}

//export mcgo_vllm_register_kv_caches
func mcgo_vllm_register_kv_caches(h C.uint64_t, regions *C.mc_vllm_region_t, n C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_register_kv_caches"
	c, err := lookup(h, vllm.RoleWorker)
	if err != nil {
		return fail(fn, err)
	}
	rs, err := cbridge.Slice("regions", regions, uintptr(n))
	if err != nil {
		return fail(fn, err)
	}
	out := make([]vllm.Region, len(rs))
	var rt *cuda.Runtime
	for i, r := range rs {
		size := uint64(r.block_bytes) * uint64(r.num_blocks)
		if r.block_bytes == 0 || r.num_blocks == 0 || size/uint64(r.num_blocks) != uint64(r.block_bytes) {
			return fail(fn, fmt.Errorf("%w: regions[%d]: %d blocks of %d bytes", vllm.ErrBadInput, i, uint64(r.num_blocks), uint64(r.block_bytes)))
		}
		reg := vllm.Region{BlockBytes: uint64(r.block_bytes), NumBlocks: uint64(r.num_blocks), Layer: int(r.layer), Device: int(r.device_id)}
		switch {
		case r.device_id < -1:
			return fail(fn, fmt.Errorf("%w: regions[%d]: device_id %d (-1 for host memory, else a CUDA ordinal)", vllm.ErrBadInput, i, int(r.device_id)))
		case r.device_id >= 0:
			if rt == nil {
				var err error
				if rt, err = cuda.Load(); err != nil {
					return fail(fn, fmt.Errorf("regions[%d] is GPU memory of cuda:%d: %w", i, int(r.device_id), err))
				}
			}
			if r.base == nil {
				return fail(fn, fmt.Errorf("%w: regions[%d].base is NULL", vllm.ErrBadInput, i))
			}
			reg.DeviceAddr = uint64(uintptr(r.base))
		default:
			buf, err := cbridge.ForeignBytes(fmt.Sprintf("regions[%d].base", i), uintptr(r.base), uintptr(size))
			if err != nil {
				return fail(fn, err)
			}
			reg.Buf = buf
		}
		out[i] = reg
	}
	if rt != nil {
		c.worker.SetDeviceRuntime(rt)
	}
	return done(fn, c.worker.RegisterKVCaches(context.Background(), out))
}

//export mcgo_vllm_start_load
func mcgo_vllm_start_load(h C.uint64_t, meta C.uintptr_t, n C.size_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_start_load"
	c, err := lookup(h, vllm.RoleWorker)
	if err != nil {
		return fail(fn, err)
	}
	var data []byte
	if n > 0 {
		b, err := cbridge.ForeignBytes("meta", uintptr(meta), uintptr(n))
		if err != nil {
			return fail(fn, err)
		}
		data = append([]byte(nil), b...) // not kept past the call
	}
	return done(fn, c.worker.StartLoad(context.Background(), data))
}

//export mcgo_vllm_save_layer
func mcgo_vllm_save_layer(h C.uint64_t, layer C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_save_layer"
	c, err := lookup(h, vllm.RoleWorker)
	if err != nil {
		return fail(fn, err)
	}
	c.worker.SaveLayer(int(layer))
	return cbridge.Succeed()
}

//export mcgo_vllm_wait_layer_load
func mcgo_vllm_wait_layer_load(h C.uint64_t, layer C.int32_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_wait_layer_load"
	c, err := lookup(h, vllm.RoleWorker)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, c.worker.WaitLayerLoad(context.Background(), int(layer)))
}

//export mcgo_vllm_handle_preemptions
func mcgo_vllm_handle_preemptions(h C.uint64_t, ids *C.char) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_handle_preemptions"
	c, err := lookup(h, vllm.RoleWorker)
	if err != nil {
		return fail(fn, err)
	}
	var a []string
	if err := decode("ids_json", ids, &a); err != nil {
		return fail(fn, err)
	}
	return done(fn, c.worker.HandlePreemptions(context.Background(), a))
}

//export mcgo_vllm_wait_for_save
func mcgo_vllm_wait_for_save(h C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_wait_for_save"
	c, err := lookup(h, vllm.RoleWorker)
	if err != nil {
		return fail(fn, err)
	}
	return done(fn, c.worker.WaitForSave())
}

//export mcgo_vllm_wait_idle
func mcgo_vllm_wait_idle(h C.uint64_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_wait_idle"
	c, err := lookup(h, vllm.RoleWorker)
	if err != nil {
		return fail(fn, err)
	}
	cbridge.Succeed()
	if c.worker.WaitIdle() {
		return 1
	}
	return 0
}

//export mcgo_vllm_get_finished
func mcgo_vllm_get_finished(h C.uint64_t, out *C.mc_buf_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_get_finished"
	c, err := lookup(h, vllm.RoleWorker)
	if err != nil {
		return fail(fn, err)
	}
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	f, ferr := c.worker.GetFinished()
	b, err := json.Marshal(f)
	if err != nil {
		return fail(fn, err)
	}
	fillBuf(out, b)
	return done(fn, ferr)
}

//export mcgo_vllm_take_stats
func mcgo_vllm_take_stats(h C.uint64_t, out *C.mc_vllm_stats_t) (rc int32) {
	defer cbridge.Guard(&rc)()
	const fn = "mc_vllm_take_stats"
	c, err := lookup(h, vllm.RoleWorker)
	if err != nil {
		return fail(fn, err)
	}
	if out == nil {
		return fail(fn, cbridge.Null("out"))
	}
	s := c.worker.TakeStats()
	out.saved_blocks, out.loaded_blocks, out.failed_blocks = C.uint64_t(s.SavedBlocks), C.uint64_t(s.LoadedBlocks), C.uint64_t(s.FailedBlocks)
	out.saved_bytes, out.loaded_bytes = C.uint64_t(s.SavedBytes), C.uint64_t(s.LoadedBytes)
	return cbridge.Succeed()
}
