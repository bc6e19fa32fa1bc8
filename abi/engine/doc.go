// Package engine implements the transfer engine's C ABI,
// abi/include/mooncake/transfer_engine.h (symbol prefix mc_te_), over
// core/transfer with the tcp transport and the metadata service the
// connection string names (HTTP, etcd or P2PHANDSHAKE, through
// core/metadata/metaopen). Every engine also runs a handshake endpoint (a
// p2pmeta listener; in P2P mode the metadata store itself) that answers
// probes and queues notifications, published under HandshakeDir when
// there is a metadata service.
//
// Layers, from C inward:
//
//   - te.c: the public mc_te_* functions. Each is a trampoline that only
//     converts types: handle pointers to integers, void* addresses to
//     uintptr_t, then calls the Go export of the same name with the prefix
//     mcgo_te_ (hidden by the version script). So Go never holds a handle or
//     a caller's address in a pointer variable, and the header's exact
//     prototypes are checked by the C compiler.
//   - exports.go: the //export mcgo_te_* functions. Each guards against
//     panics (cbridge.Guard), validates every pointer and length, decodes
//     C arguments, calls the Go layer and encodes the result, setting the
//     thread's last error (cbridge.Fail / cbridge.Done).
//   - te.go: the Go layer (teEngine), plain Go types, tested without cgo
//     calls.
//
// The package is linked into libmooncake.so by abi/cmd/libmooncake: //export
// functions of a non-main package are exported from a c-shared library as
// long as the main package imports it.
//
// Concurrency: every function may be called from any thread at once; the
// engine handle table is cbridge.Handles; mc_te_destroy removes the handle
// first, so calls racing with it see MC_ERR_INVALID_HANDLE or
// MC_ERR_CLOSED, never freed state.
package engine
