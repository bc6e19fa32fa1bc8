// The public mc_vllm_* functions of mooncake/vllm.h. Each one is a
// trampoline to the Go export mcgo_vllm_* (exports.go): it converts the
// connector handle pointer to the integer handle it carries and addresses
// to uintptr_t, so Go code never holds them as pointers, and lets the C
// compiler check these definitions against the header's prototypes.

#include <stdint.h>

#include "mooncake/vllm.h"
#include "_cgo_export.h"

static inline uint64_t handle_of(const mc_vllm_connector_t* c) { return (uint64_t)(uintptr_t)c; }

uint32_t mc_vllm_abi_version(void) { return MC_VLLM_ABI_VERSION; }

int mc_vllm_create(const char* settings_json, int role, mc_vllm_connector_t** out) {
  uint64_t h = 0;
  int rc = mcgo_vllm_create((char*)settings_json, role, out != NULL ? &h : NULL);
  if (rc == MC_OK) {
    *out = (mc_vllm_connector_t*)(uintptr_t)h;
  }
  return rc;
}

int mc_vllm_destroy(mc_vllm_connector_t* c) { return mcgo_vllm_destroy(handle_of(c)); }

int mc_vllm_lookup(mc_vllm_connector_t* c, const char* args_json, int64_t* out_tokens, int32_t* out_async) {
  return mcgo_vllm_lookup(handle_of(c), (char*)args_json, out_tokens, out_async);
}

int mc_vllm_update_after_alloc(mc_vllm_connector_t* c, const char* args_json) {
  return mcgo_vllm_update_after_alloc(handle_of(c), (char*)args_json);
}

int mc_vllm_plan_save(mc_vllm_connector_t* c, const char* args_json, int64_t* out_blocks) {
  return mcgo_vllm_plan_save(handle_of(c), (char*)args_json, out_blocks);
}

int mc_vllm_preempted(mc_vllm_connector_t* c, const char* ids_json) {
  return mcgo_vllm_preempted(handle_of(c), (char*)ids_json);
}

int mc_vllm_request_finished(mc_vllm_connector_t* c, const char* args_json, mc_buf_t* out) {
  return mcgo_vllm_request_finished(handle_of(c), (char*)args_json, out);
}

int mc_vllm_build_meta(mc_vllm_connector_t* c, mc_buf_t* out) { return mcgo_vllm_build_meta(handle_of(c), out); }

int mc_vllm_pool_error(mc_vllm_connector_t* c, mc_buf_t* out) { return mcgo_vllm_pool_error(handle_of(c), out); }

int mc_vllm_take_stats_json(mc_vllm_connector_t* c, mc_buf_t* out) { return mcgo_vllm_take_stats_json(handle_of(c), out); }

int mc_vllm_take_notes(mc_vllm_connector_t* c, mc_buf_t* out) { return mcgo_vllm_take_notes(handle_of(c), out); }

int mc_vllm_load_failed(mc_vllm_connector_t* c, const char* hashes_json) {
  return mcgo_vllm_load_failed(handle_of(c), (char*)hashes_json);
}

int mc_vllm_reset(mc_vllm_connector_t* c, int64_t* out_removed) {
  return mcgo_vllm_reset(handle_of(c), out_removed);
}

int mc_vllm_register_kv_caches(mc_vllm_connector_t* c, const mc_vllm_region_t* regions, size_t n) {
  return mcgo_vllm_register_kv_caches(handle_of(c), (mc_vllm_region_t*)regions, n);
}

int mc_vllm_start_load(mc_vllm_connector_t* c, const void* meta, size_t len) {
  return mcgo_vllm_start_load(handle_of(c), (uintptr_t)meta, len);
}

int mc_vllm_save_layer(mc_vllm_connector_t* c, int32_t layer) { return mcgo_vllm_save_layer(handle_of(c), layer); }

int mc_vllm_wait_layer_load(mc_vllm_connector_t* c, int32_t layer) {
  return mcgo_vllm_wait_layer_load(handle_of(c), layer);
}

int mc_vllm_handle_preemptions(mc_vllm_connector_t* c, const char* ids_json) {
  return mcgo_vllm_handle_preemptions(handle_of(c), (char*)ids_json);
}

int mc_vllm_wait_for_save(mc_vllm_connector_t* c) { return mcgo_vllm_wait_for_save(handle_of(c)); }

int mc_vllm_wait_idle(mc_vllm_connector_t* c) { return mcgo_vllm_wait_idle(handle_of(c)); }

int mc_vllm_get_finished(mc_vllm_connector_t* c, mc_buf_t* out) { return mcgo_vllm_get_finished(handle_of(c), out); }

int mc_vllm_take_stats(mc_vllm_connector_t* c, mc_vllm_stats_t* out) { return mcgo_vllm_take_stats(handle_of(c), out); }
