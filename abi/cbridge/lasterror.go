package cbridge

/*
#include <stdlib.h>
#include "mooncake/common.h"
#include "cbridge.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"unsafe"
)

// SetError stores msg as the calling thread's last-error text (see the
// package doc for which goroutines may call it). msg is copied.
func SetError(msg string) {
	if msg == "" {
		C.mcgo_clear_error()
		return
	}
	// unsafe: passes the string's bytes to C for the duration of the call;
	// they hold no Go pointers and C copies them without keeping the pointer.
	C.mcgo_set_error((*C.char)(unsafe.Pointer(unsafe.StringData(msg))), C.size_t(len(msg)))
}

// ClearError stores "" as the calling thread's last-error text.
func ClearError() { C.mcgo_clear_error() }

// LastError returns the calling thread's last-error text (what
// mc_last_error returns to C).
func LastError() string { return C.GoString(C.mc_last_error()) }

// Fail ends a failed call of the C function fn: it stores "fn: err" as the
// thread's last error and returns err's status code (see CodeOf).
func Fail(fn string, err error) int32 {
	if err == nil {
		err = fmt.Errorf("%w: %s failed without a reason", ErrInternal, fn)
	}
	SetError(fn + ": " + err.Error())
	return int32(CodeOf(err))
}

// Sentinel pairs an adapter's sentinel error with the status code its
// header gives it (MC_VLLM_ERR_BAD_CONFIG for vllm.ErrBadConfig, ...).
type Sentinel struct {
	Err  error
	Code int32
}

// FailAs is Fail for an adapter with codes of its own: when err matches
// (errors.Is) one of sentinels, the first such one's code is returned;
// otherwise Fail's. The last error is "fn: err" either way.
func FailAs(fn string, err error, sentinels []Sentinel) int32 {
	for _, s := range sentinels {
		if err != nil && errors.Is(err, s.Err) {
			SetError(fn + ": " + err.Error())
			return s.Code
		}
	}
	return Fail(fn, err)
}

// BatchDone ends a batch call of the C function fn that was carried out,
// whatever each key's outcome (errs, one per key, nil = succeeded): it
// returns OK, with an empty last error when every key succeeded, else
// "fn: N of M keys failed; first: keys[i]: err" (store.h's convention for
// batch calls, shared by the adapters' batch calls).
func BatchDone(fn string, errs []error) int32 {
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
		return Succeed()
	}
	SetError(fmt.Sprintf("%s: %d of %d keys failed; first: keys[%d]: %v", fn, failed, len(errs), first, errs[first]))
	return int32(OK)
}

// Done ends a call of the C function fn with err's status: OK (and an empty
// last error) for nil, as Fail otherwise.
func Done(fn string, err error) int32 {
	if err != nil {
		return Fail(fn, err)
	}
	return Succeed()
}

// DoneOut ends a call of the C function fn that yields one value: as Fail
// for a non-nil err (out untouched), else it stores v in *out and succeeds.
// out must not be NULL (the export checks it first).
func DoneOut[T any](fn string, out *T, v T, err error) int32 {
	if err != nil {
		return Fail(fn, err)
	}
	*out = v
	return Succeed()
}

// DoneHandle ends a call of the C function fn that creates an object: as
// Fail for a non-nil err (nothing added, out untouched), else it adds v to
// Handles, stores the new handle in *out and succeeds. out must not be NULL
// (the export checks it first).
func DoneHandle[T ~uint64](fn string, out *T, v any, err error) int32 {
	if err != nil {
		return Fail(fn, err)
	}
	*out = T(Handles.Add(v))
	return Succeed()
}

// Succeed ends a successful call: it clears the thread's last error and
// returns OK.
func Succeed() int32 {
	C.mcgo_clear_error()
	return int32(OK)
}

// Guard is the entry and exit guard of every exported function: `defer
// cbridge.Guard(&rc)()` with rc the named result. On entry it locks the
// calling goroutine to the caller's OS thread for the call; the returned
// function, deferred, unlocks it and turns a panic into Internal with the
// panic value as the thread's last error, printing the stack to stderr so
// the bug can be found. No panic crosses into C.
//
// Why lock: an engine may pin the thread it calls us on to one CPU (vLLM's
// CPU worker pins its main thread to a compute core). When Go code running
// on such a thread needs a new OS thread (it starts goroutines, a P needs
// an M), the runtime clones the current thread, and the clone keeps the
// one-CPU mask for good: over a vLLM run more and more of the runtime's
// threads, which run the transfers, were confined to that core. On a
// locked thread the runtime asks its template thread, started with the
// library under the mask mooncake_go loads it with, to create new threads
// instead (runtime.newm). Locking and unlocking make no system call.
func Guard(rc *int32) func() {
	runtime.LockOSThread()
	return func() {
		defer runtime.UnlockOSThread()
		r := recover()
		if r == nil {
			return
		}
		fmt.Fprintf(os.Stderr, "libmooncake: recovered panic: %v\n%s", r, debug.Stack())
		SetError(fmt.Sprintf("%v: panic: %v", ErrInternal, r))
		*rc = int32(Internal)
	}
}
