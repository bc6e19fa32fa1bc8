// The public mc_store_* functions of mooncake/store.h. Each one is a
// trampoline to the Go export mcgo_store_* (exports.go): it converts the
// store handle pointer to the integer handle it carries and void* addresses
// (single ones and arrays of them) to uintptr_t, so Go code never holds
// them as pointers, and lets the C compiler check these definitions against
// the header's prototypes.

#include <stdint.h>
#include <stdlib.h>

#include "mooncake/store.h"
#include "_cgo_export.h"

// The pointer arrays are read as uintptr_t arrays.
_Static_assert(sizeof(void*) == sizeof(uintptr_t), "void* and uintptr_t differ in size");

static inline uint64_t handle_of(const mc_store_t* s) { return (uint64_t)(uintptr_t)s; }

uint32_t mc_store_abi_version(void) { return MC_STORE_ABI_VERSION; }

int mc_store_setup(const char* local_hostname, const char* metadata_server,
                   uint64_t global_segment_size, uint64_t local_buffer_size,
                   const char* protocol, const char* device_name,
                   const char* master_server_addr, mc_store_t** out) {
  uint64_t h = 0;
  int rc = mcgo_store_setup((char*)local_hostname, (char*)metadata_server, global_segment_size,
                            local_buffer_size, (char*)protocol, (char*)device_name,
                            (char*)master_server_addr, out != NULL ? &h : NULL);
  if (rc == MC_OK) {
    *out = (mc_store_t*)(uintptr_t)h;
  }
  return rc;
}

int mc_store_destroy(mc_store_t* store) { return mcgo_store_destroy(handle_of(store)); }

int mc_store_get_hostname(mc_store_t* store, char* buf, size_t cap, size_t* out_len) {
  return mcgo_store_get_hostname(handle_of(store), (uintptr_t)buf, cap, out_len);
}

int mc_store_register_buffer(mc_store_t* store, void* ptr, size_t size) {
  return mcgo_store_register_buffer(handle_of(store), (uintptr_t)ptr, size);
}

int mc_store_unregister_buffer(mc_store_t* store, void* ptr) {
  return mcgo_store_unregister_buffer(handle_of(store), (uintptr_t)ptr);
}

// The key functions come in two forms (store.h): a NUL-terminated key
// (by_len 0: the Go side measures it, reading at most
// MC_STORE_MAX_KEY_LEN + 1 bytes) and a key given by pointer and length
// (the _n forms, by_len 1).
#define CSTR 0, 0
#define BYLEN(len) (len), 1

int mc_store_put(mc_store_t* store, const char* key, const void* value, size_t size) {
  return mcgo_store_put(handle_of(store), (char*)key, CSTR, (uintptr_t)value, size);
}

int mc_store_put_n(mc_store_t* store, const char* key, size_t key_len, const void* value, size_t size) {
  return mcgo_store_put(handle_of(store), (char*)key, BYLEN(key_len), (uintptr_t)value, size);
}

int mc_store_get(mc_store_t* store, const char* key, void* buf, size_t cap, size_t* out_size) {
  return mcgo_store_get(handle_of(store), (char*)key, CSTR, (uintptr_t)buf, cap, out_size);
}

int mc_store_get_n(mc_store_t* store, const char* key, size_t key_len, void* buf, size_t cap, size_t* out_size) {
  return mcgo_store_get(handle_of(store), (char*)key, BYLEN(key_len), (uintptr_t)buf, cap, out_size);
}

int mc_store_put_from(mc_store_t* store, const char* key, void* ptr, size_t size) {
  return mcgo_store_put_from(handle_of(store), (char*)key, CSTR, (uintptr_t)ptr, size);
}

int mc_store_put_from_n(mc_store_t* store, const char* key, size_t key_len, void* ptr, size_t size) {
  return mcgo_store_put_from(handle_of(store), (char*)key, BYLEN(key_len), (uintptr_t)ptr, size);
}

int mc_store_get_into(mc_store_t* store, const char* key, void* ptr, size_t size, int64_t* out_read) {
  return mcgo_store_get_into(handle_of(store), (char*)key, CSTR, (uintptr_t)ptr, size, out_read);
}

int mc_store_get_into_n(mc_store_t* store, const char* key, size_t key_len, void* ptr, size_t size,
                        int64_t* out_read) {
  return mcgo_store_get_into(handle_of(store), (char*)key, BYLEN(key_len), (uintptr_t)ptr, size, out_read);
}

int mc_store_batch_put_from(mc_store_t* store, const char* const* keys, void* const* ptrs,
                            const size_t* sizes, size_t n, int32_t* out_codes) {
  return mcgo_store_batch_put_from(handle_of(store), (char**)keys, NULL, 0, (uintptr_t*)ptrs, (size_t*)sizes, n,
                                   out_codes);
}

int mc_store_batch_put_from_n(mc_store_t* store, const char* const* keys, const size_t* key_lens,
                              void* const* ptrs, const size_t* sizes, size_t n, int32_t* out_codes) {
  return mcgo_store_batch_put_from(handle_of(store), (char**)keys, (size_t*)key_lens, 1, (uintptr_t*)ptrs,
                                   (size_t*)sizes, n, out_codes);
}

int mc_store_batch_get_into(mc_store_t* store, const char* const* keys, void* const* ptrs,
                            const size_t* sizes, size_t n, int64_t* out_results) {
  return mcgo_store_batch_get_into(handle_of(store), (char**)keys, NULL, 0, (uintptr_t*)ptrs, (size_t*)sizes, n,
                                   out_results);
}

int mc_store_batch_get_into_n(mc_store_t* store, const char* const* keys, const size_t* key_lens,
                              void* const* ptrs, const size_t* sizes, size_t n, int64_t* out_results) {
  return mcgo_store_batch_get_into(handle_of(store), (char**)keys, (size_t*)key_lens, 1, (uintptr_t*)ptrs,
                                   (size_t*)sizes, n, out_results);
}

int mc_store_is_exist(mc_store_t* store, const char* key) {
  return mcgo_store_is_exist(handle_of(store), (char*)key, CSTR);
}

int mc_store_is_exist_n(mc_store_t* store, const char* key, size_t key_len) {
  return mcgo_store_is_exist(handle_of(store), (char*)key, BYLEN(key_len));
}

int mc_store_batch_is_exist(mc_store_t* store, const char* const* keys, size_t n, int32_t* out) {
  return mcgo_store_batch_is_exist(handle_of(store), (char**)keys, NULL, 0, n, out);
}

int mc_store_batch_is_exist_n(mc_store_t* store, const char* const* keys, const size_t* key_lens, size_t n,
                              int32_t* out) {
  return mcgo_store_batch_is_exist(handle_of(store), (char**)keys, (size_t*)key_lens, 1, n, out);
}

int mc_store_remove(mc_store_t* store, const char* key, int force) {
  return mcgo_store_remove(handle_of(store), (char*)key, CSTR, force);
}

int mc_store_remove_n(mc_store_t* store, const char* key, size_t key_len, int force) {
  return mcgo_store_remove(handle_of(store), (char*)key, BYLEN(key_len), force);
}

int mc_store_get_size(mc_store_t* store, const char* key, uint64_t* out_size) {
  return mcgo_store_get_size(handle_of(store), (char*)key, CSTR, out_size);
}

int mc_store_get_size_n(mc_store_t* store, const char* key, size_t key_len, uint64_t* out_size) {
  return mcgo_store_get_size(handle_of(store), (char*)key, BYLEN(key_len), out_size);
}

/* ---- 1.2: keys by pointer and length ---- */

int mc_store_batch_put(mc_store_t* store, const char* const* keys, const size_t* key_lens,
                       const void* const* values, const size_t* sizes, size_t n,
                       const mc_store_replicate_config_t* config, int32_t* out_codes) {
  return mcgo_store_batch_put(handle_of(store), (char**)keys, (size_t*)key_lens, (uintptr_t*)values,
                              (size_t*)sizes, n, (mc_store_replicate_config_t*)config, out_codes);
}

int mc_store_put_parts(mc_store_t* store, const char* key, size_t key_len, const void* const* parts,
                       const size_t* sizes, size_t n_parts, const mc_store_replicate_config_t* config) {
  return mcgo_store_put_parts(handle_of(store), (char*)key, key_len, (uintptr_t*)parts, (size_t*)sizes,
                              n_parts, (mc_store_replicate_config_t*)config);
}

int mc_store_batch_put_from_config(mc_store_t* store, const char* const* keys, const size_t* key_lens,
                                   void* const* ptrs, const size_t* sizes, size_t n,
                                   const mc_store_replicate_config_t* config, int32_t* out_codes) {
  return mcgo_store_batch_put_from_config(handle_of(store), (char**)keys, (size_t*)key_lens, (uintptr_t*)ptrs,
                                          (size_t*)sizes, n, (mc_store_replicate_config_t*)config, out_codes);
}

int mc_store_batch_put_from_parts(mc_store_t* store, const char* const* keys, const size_t* key_lens,
                                  void* const* part_ptrs, const size_t* part_sizes,
                                  const size_t* part_counts, size_t n,
                                  const mc_store_replicate_config_t* config, int32_t* out_codes) {
  return mcgo_store_batch_put_from_parts(handle_of(store), (char**)keys, (size_t*)key_lens, (uintptr_t*)part_ptrs,
                                         (size_t*)part_sizes, (size_t*)part_counts, n,
                                         (mc_store_replicate_config_t*)config, out_codes);
}

int mc_store_batch_get_into_parts(mc_store_t* store, const char* const* keys, const size_t* key_lens,
                                  void* const* part_ptrs, const size_t* part_sizes,
                                  const size_t* part_counts, size_t n, int64_t* out_results) {
  return mcgo_store_batch_get_into_parts(handle_of(store), (char**)keys, (size_t*)key_lens, (uintptr_t*)part_ptrs,
                                         (size_t*)part_sizes, (size_t*)part_counts, n, out_results);
}

int mc_store_batch_get(mc_store_t* store, const char* const* keys, const size_t* key_lens, size_t n,
                       mc_buf_t* out_bufs, int64_t* out_results) {
  return mcgo_store_batch_get(handle_of(store), (char**)keys, (size_t*)key_lens, n, out_bufs, out_results);
}

int mc_store_batch_get_alloc(mc_store_t* store, const char* const* keys, const size_t* key_lens, size_t n,
                             mc_store_alloc_fn alloc, void* ctx, int64_t* out_results) {
  return mcgo_store_batch_get_alloc(handle_of(store), (char**)keys, (size_t*)key_lens, n, alloc, (uintptr_t)ctx, out_results);
}

int mc_store_batch_get_ranges(mc_store_t* store, const char* const* keys, const size_t* key_lens,
                              void* const* dsts, const uint64_t* src_offsets, const size_t* sizes,
                              size_t n, int64_t* out_results) {
  return mcgo_store_batch_get_ranges(handle_of(store), (char**)keys, (size_t*)key_lens, (uintptr_t*)dsts,
                                     (uint64_t*)src_offsets, (size_t*)sizes, n, out_results);
}

int mc_store_batch_remove(mc_store_t* store, const char* const* keys, const size_t* key_lens, size_t n,
                          int force, int32_t* out_codes) {
  return mcgo_store_batch_remove(handle_of(store), (char**)keys, (size_t*)key_lens, n, force, out_codes);
}

int mc_store_remove_by_regex(mc_store_t* store, const char* regex, int force, int64_t* out_count) {
  return mcgo_store_remove_by_regex(handle_of(store), (char*)regex, force, out_count);
}

int mc_store_remove_all(mc_store_t* store, int force, int64_t* out_count) {
  return mcgo_store_remove_all(handle_of(store), force, out_count);
}

int mc_store_get_replica_desc(mc_store_t* store, const char* const* keys, const size_t* key_lens, size_t n,
                              mc_buf_t* out) {
  return mcgo_store_get_replica_desc(handle_of(store), (char**)keys, (size_t*)key_lens, n, out);
}

int mc_store_health_check(mc_store_t* store) { return mcgo_store_health_check(handle_of(store)); }

/* Internal (not exported by the version script): a library-owned buffer
 * for mc_buf_t out parameters, released by the caller with mc_buf_free.
 * Returns its address, or 0 when malloc failed (b is then {NULL, 0}). */
uintptr_t mcgo_store_buf_alloc(mc_buf_t* b, size_t n) {
  b->data = malloc(n > 0 ? n : 1);
  b->len = b->data != NULL ? n : 0;
  return (uintptr_t)b->data;
}

/* Internal: calls the caller's mc_store_alloc_fn (cgo cannot call a C
 * function pointer itself). */
uintptr_t mcgo_store_call_alloc(mc_store_alloc_fn f, uintptr_t ctx, size_t i, size_t n) {
  return (uintptr_t)f((void*)ctx, i, n);
}
