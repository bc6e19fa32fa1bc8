// The public mc_p2p_* functions of mooncake/p2p.h: trampolines to the Go
// exports mcgo_p2p_* (exports.go). They turn the store pointer into the
// integer handle it carries and the address array into uintptr_t values,
// so Go never holds them as pointers, and let the C compiler check these
// definitions against the header.

#include <stdint.h>

#include "mooncake/p2p.h"
#include "_cgo_export.h"

static inline uint64_t handle_of(const mc_p2p_store_t* s) { return (uint64_t)(uintptr_t)s; }

_Static_assert(sizeof(void*) == sizeof(uintptr_t), "addresses must fit uintptr_t");

uint32_t mc_p2p_abi_version(void) { return MC_P2P_ABI_VERSION; }

int mc_p2p_create(const char* metadata_uri, const char* local_segment_name, mc_p2p_store_t** out) {
  uint64_t h = 0;
  int rc = mcgo_p2p_create((char*)metadata_uri, (char*)local_segment_name, out != NULL ? &h : NULL);
  if (rc == MC_OK) {
    *out = (mc_p2p_store_t*)(uintptr_t)h;
  }
  return rc;
}

int mc_p2p_destroy(mc_p2p_store_t* store) { return mcgo_p2p_destroy(handle_of(store)); }

int mc_p2p_register(mc_p2p_store_t* store, const char* name, void* const* addrs, const uint64_t* sizes,
                    size_t count, uint64_t max_shard_size, const char* location) {
  return mcgo_p2p_register(handle_of(store), (char*)name, (uintptr_t*)addrs, (uint64_t*)sizes, count, max_shard_size,
                           (char*)location);
}

int mc_p2p_unregister(mc_p2p_store_t* store, const char* name) {
  return mcgo_p2p_unregister(handle_of(store), (char*)name);
}

int mc_p2p_get_replica(mc_p2p_store_t* store, const char* name, void* const* addrs, const uint64_t* sizes,
                       size_t count) {
  return mcgo_p2p_get_replica(handle_of(store), (char*)name, (uintptr_t*)addrs, (uint64_t*)sizes, count);
}

int mc_p2p_delete_replica(mc_p2p_store_t* store, const char* name) {
  return mcgo_p2p_delete_replica(handle_of(store), (char*)name);
}

int mc_p2p_list(mc_p2p_store_t* store, const char* prefix, mc_buf_t* out) {
  return mcgo_p2p_list(handle_of(store), (char*)prefix, out);
}
