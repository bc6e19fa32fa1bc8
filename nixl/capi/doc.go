// Package capi exports the mc_nixl_* C ABI of abi/include/mooncake/nixl.h
// from libmooncake.so (imported by abi/cmd/libmooncake): the functions the
// C++ shim libplugin_MOONCAKE_GO.so (nixl/plugin) calls for each method of
// NIXL's backend engine class, each a thin conversion to package connectors/xferagent.
// capi.c holds the public C symbols; they convert the opaque engine
// pointer to the integer handle it carries and call the Go exports
// (mcgo_nixl_*) here, which guard against panics (cbridge.Guard) and
// set mc_last_error.
package capi
