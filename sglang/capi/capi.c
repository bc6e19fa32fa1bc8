// The public mc_sglang_* functions of mooncake/sglang.h. Each one is a
// trampoline to the Go export mcgo_sglang_* (exports.go): it converts the
// backend handle pointer to the integer handle it carries and addresses
// to uintptr_t, so Go code never holds them as pointers, and lets the C
// compiler check these definitions against the header's prototypes.

#include <stdint.h>

#include "mooncake/sglang.h"
#include "_cgo_export.h"

static inline uint64_t handle_of(const mc_sglang_backend_t* b) { return (uint64_t)(uintptr_t)b; }

uint32_t mc_sglang_abi_version(void) { return MC_SGLANG_ABI_VERSION; }

int mc_sglang_create(const char* config_json, mc_sglang_backend_t** out) {
  uint64_t h = 0;
  int rc = mcgo_sglang_create((char*)config_json, out != NULL ? &h : NULL);
  if (rc == MC_OK) {
    *out = (mc_sglang_backend_t*)(uintptr_t)h;
  }
  return rc;
}

int mc_sglang_destroy(mc_sglang_backend_t* b) { return mcgo_sglang_destroy(handle_of(b)); }

int mc_sglang_register_host_pool(mc_sglang_backend_t* b, const char* pool_json, void* base, size_t size) {
  return mcgo_sglang_register_host_pool(handle_of(b), (char*)pool_json, (uintptr_t)base, size);
}

int mc_sglang_batch_exists(mc_sglang_backend_t* b, const char* const* keys, size_t n, size_t* out_pages) {
  return mcgo_sglang_batch_exists(handle_of(b), (char**)keys, n, out_pages);
}

int mc_sglang_batch_get(mc_sglang_backend_t* b, const char* const* keys, size_t n, size_t parts_per_page,
                        void* const* ptrs, const size_t* sizes, uint8_t* out_ok) {
  return mcgo_sglang_transfer(handle_of(b), 0, (char**)keys, n, parts_per_page, (uintptr_t*)ptrs, (size_t*)sizes, out_ok);
}

int mc_sglang_batch_set(mc_sglang_backend_t* b, const char* const* keys, size_t n, size_t parts_per_page,
                        void* const* ptrs, const size_t* sizes, uint8_t* out_ok) {
  return mcgo_sglang_transfer(handle_of(b), 1, (char**)keys, n, parts_per_page, (uintptr_t*)ptrs, (size_t*)sizes, out_ok);
}

int mc_sglang_get_pages(mc_sglang_backend_t* b, const char* const* keys, size_t n, void* const* ptrs,
                        const size_t* sizes, uint8_t* out_ok) {
  return mcgo_sglang_transfer(handle_of(b), 2, (char**)keys, n, 1, (uintptr_t*)ptrs, (size_t*)sizes, out_ok);
}

int mc_sglang_set_pages(mc_sglang_backend_t* b, const char* const* keys, size_t n, void* const* ptrs,
                        const size_t* sizes, uint8_t* out_ok) {
  return mcgo_sglang_transfer(handle_of(b), 3, (char**)keys, n, 1, (uintptr_t*)ptrs, (size_t*)sizes, out_ok);
}

int mc_sglang_clear(mc_sglang_backend_t* b, uint64_t* out_removed) { return mcgo_sglang_clear(handle_of(b), out_removed); }

int mc_sglang_take_stats(mc_sglang_backend_t* b, mc_sglang_stats_t* out) { return mcgo_sglang_take_stats(handle_of(b), out); }

int mc_sglang_take_notes(mc_sglang_backend_t* b, mc_buf_t* out) { return mcgo_sglang_take_notes(handle_of(b), out); }
