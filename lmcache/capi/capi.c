// The public mc_lmcache_* functions of mooncake/lmcache.h. Each one is a
// trampoline to the Go export mcgo_lmcache_* (exports.go): it converts the
// connector handle pointer to the integer handle it carries and addresses
// (and arrays of them) to uintptr_t, so Go code never holds them as
// pointers, and lets the C compiler check these definitions against the
// header's prototypes.

#include <stdint.h>

#include "mooncake/lmcache.h"
#include "_cgo_export.h"

static inline uint64_t handle_of(const mc_lmcache_connector_t* c) { return (uint64_t)(uintptr_t)c; }

uint32_t mc_lmcache_abi_version(void) { return MC_LMCACHE_ABI_VERSION; }

int mc_lmcache_create(const char* url, const char* config_json, mc_lmcache_connector_t** out) {
  uint64_t h = 0;
  int rc = mcgo_lmcache_create((char*)url, (char*)config_json, out != NULL ? &h : NULL);
  if (rc == MC_OK) {
    *out = (mc_lmcache_connector_t*)(uintptr_t)h;
  }
  return rc;
}

int mc_lmcache_destroy(mc_lmcache_connector_t* c) { return mcgo_lmcache_destroy(handle_of(c)); }

int mc_lmcache_notes(mc_lmcache_connector_t* c, mc_buf_t* out) { return mcgo_lmcache_notes(handle_of(c), out); }

int mc_lmcache_register_buffer(mc_lmcache_connector_t* c, void* ptr, size_t size) {
  return mcgo_lmcache_register_buffer(handle_of(c), (uintptr_t)ptr, size);
}

int mc_lmcache_unregister_buffer(mc_lmcache_connector_t* c, void* ptr) {
  return mcgo_lmcache_unregister_buffer(handle_of(c), (uintptr_t)ptr);
}

int mc_lmcache_exists(mc_lmcache_connector_t* c, const char* key) {
  return mcgo_lmcache_exists(handle_of(c), (char*)key);
}

int mc_lmcache_batched_contains(mc_lmcache_connector_t* c, const char* const* keys, size_t n, int pin,
                                size_t* out_prefix) {
  return mcgo_lmcache_batched_contains(handle_of(c), (char**)keys, n, pin, out_prefix);
}

int mc_lmcache_batched_put(mc_lmcache_connector_t* c, const char* const* keys, void* const* ptrs,
                           const size_t* sizes, size_t n, int32_t* out_codes) {
  return mcgo_lmcache_batched_put(handle_of(c), (char**)keys, (uintptr_t*)ptrs, (size_t*)sizes, n, out_codes);
}

int mc_lmcache_batched_get(mc_lmcache_connector_t* c, const char* const* keys, void* const* ptrs,
                           const size_t* caps, size_t n, int64_t* out_results) {
  return mcgo_lmcache_batched_get(handle_of(c), (char**)keys, (uintptr_t*)ptrs, (size_t*)caps, n, out_results);
}

int mc_lmcache_remove(mc_lmcache_connector_t* c, const char* key) {
  return mcgo_lmcache_remove(handle_of(c), (char*)key);
}

int mc_lmcache_list(mc_lmcache_connector_t* c, mc_buf_t* out) { return mcgo_lmcache_list(handle_of(c), out); }

int mc_lmcache_ping(mc_lmcache_connector_t* c) { return mcgo_lmcache_ping(handle_of(c)); }
