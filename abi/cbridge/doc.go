// Package cbridge is what every C ABI of libmooncake.so shares: the handle
// table, the mapping from Go errors to MC_ status codes (one table), the
// per-thread last-error text behind mc_last_error, the panic guard, and
// pointer/length validation. It also implements mc_last_error,
// mc_abi_version and mc_buf_free (in C) from abi/include/mooncake/common.h,
// and the one mapping of upstream store error codes into the codes of
// store.h (codes.go).
//
// How an export uses it (see abi/engine):
//
//	//export mcgo_te_free_batch
//	func mcgo_te_free_batch(engine, batch C.uint64_t) (rc int32) {
//		defer cbridge.Guard(&rc)()
//		e, err := cbridge.Lookup[*teEngine](cbridge.Handles, cbridge.Handle(engine), "engine")
//		if err != nil {
//			return cbridge.Fail("mc_te_free_batch", err)
//		}
//		...
//		return cbridge.Succeed()
//	}
//
// Rules at the boundary (DESIGN.md): opaque handles (integers in a table,
// never Go pointers: C sees a handle value cast to a pointer type), int
// status codes with a message retrievable per thread, no Go pointer kept by
// C, no panic crosses into C, every pointer and length validated.
//
// This is one of the two packages allowed to use unsafe (the other is
// core/memory); each use is commented.
//
// Concurrency: everything here is safe for concurrent use. The last-error
// functions act on the calling OS thread; call them only from a goroutine
// running an exported function (locked to the C caller's thread for the
// call) or one that called runtime.LockOSThread.
package cbridge
