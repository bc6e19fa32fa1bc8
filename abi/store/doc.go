// Package store implements the KV-cache pool client's C ABI,
// abi/include/mooncake/store.h (symbol prefix mc_store_), over
// core/store/client with the tcp transport and an HTTP, etcd or P2P
// handshake metadata service.
//
// Layers, from C inward (as abi/engine):
//
//   - store.c: the public mc_store_* functions. Each is a trampoline that
//     only converts types: the handle pointer to its integer, void*
//     addresses and arrays of them to uintptr_t, then calls the Go export of
//     the same name with the prefix mcgo_store_ (hidden by the version
//     script). So Go never holds a handle or a caller's address in a pointer
//     variable, and the header's exact prototypes are checked by the C
//     compiler. A function and its _n twin (key by pointer and length,
//     store.h 1.1) share one export, told apart by its byLen argument.
//   - exports.go: the //export mcgo_store_* functions. Each guards against
//     panics (cbridge.Guard), validates every pointer, length and key,
//     decodes C arguments, calls the Go layer and encodes the result,
//     setting the thread's last error (cbridge.Fail / cbridge.Done; batch
//     calls summarise their per-key failures).
//   - store.go: the Go layer (storeClient), plain Go types, tested without
//     cgo calls.
//
// Codes: pool errors (*core/store.Error) become store.h's codes through the
// one table of cbridge/codes.go: upstream Mooncake Store's values, except
// the few a common.h code already has (see store.h).
//
// get_size asks the master for the key's replica list over a gRPC
// connection of its own, because core/store/client has no such call.
//
// The package is linked into libmooncake.so by abi/cmd/libmooncake.
//
// Concurrency: every function may be called from any thread at once; store
// handles live in cbridge.Handles. mc_store_destroy removes the handle
// first (later calls get MC_ERR_INVALID_HANDLE), then waits for the calls in
// flight on it to return before closing the client, so no call ever runs on
// a closed client.
package store
