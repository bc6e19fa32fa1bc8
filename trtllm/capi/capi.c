// The public mc_trtllm_* functions of mooncake/trtllm.h: trampolines to the
// Go exports mcgo_trtllm_* (exports.go). They turn the agent pointer into
// the integer handle it carries and byte pointers into uintptr_t, so Go
// never holds them as pointers, and let the C compiler check these
// definitions against the header.

#include <stdint.h>

#include "mooncake/trtllm.h"
#include "_cgo_export.h"

static inline uint64_t handle_of(const mc_trtllm_agent_t* a) { return (uint64_t)(uintptr_t)a; }

uint32_t mc_trtllm_abi_version(void) { return MC_TRTLLM_ABI_VERSION; }

int mc_trtllm_check_host(uint32_t shim_abi, uint32_t generation) { return mcgo_trtllm_check_host(shim_abi, generation); }

int mc_trtllm_agent_create(const char* name, size_t name_len, uint32_t flags, const mc_trtllm_kv_t* params, size_t n,
                           mc_trtllm_agent_t** out) {
  uint64_t h = 0;
  int rc = mcgo_trtllm_agent_create((char*)name, name_len, flags, (mc_trtllm_kv_t*)params, n, out != NULL ? &h : NULL);
  if (rc == MC_OK) {
    *out = (mc_trtllm_agent_t*)(uintptr_t)h;
  }
  return rc;
}

int mc_trtllm_agent_destroy(mc_trtllm_agent_t* a) { return mcgo_trtllm_agent_destroy(handle_of(a)); }

int mc_trtllm_register(mc_trtllm_agent_t* a, int mem, const mc_trtllm_desc_t* descs, size_t n) {
  return mcgo_trtllm_register(handle_of(a), mem, (mc_trtllm_desc_t*)descs, n);
}

int mc_trtllm_deregister(mc_trtllm_agent_t* a, int mem, const mc_trtllm_desc_t* descs, size_t n) {
  return mcgo_trtllm_deregister(handle_of(a), mem, (mc_trtllm_desc_t*)descs, n);
}

int mc_trtllm_local_agent_desc(mc_trtllm_agent_t* a, mc_buf_t* out) {
  return mcgo_trtllm_local_agent_desc(handle_of(a), out);
}

int mc_trtllm_local_conn_info(mc_trtllm_agent_t* a, mc_buf_t* out) {
  return mcgo_trtllm_local_conn_info(handle_of(a), out);
}

int mc_trtllm_load_remote_desc(mc_trtllm_agent_t* a, const char* name, size_t name_len, const void* blob,
                               size_t blob_len) {
  return mcgo_trtllm_load_remote_desc(handle_of(a), (char*)name, name_len, (uintptr_t)blob, blob_len);
}

int mc_trtllm_load_remote_conn(mc_trtllm_agent_t* a, const char* name, size_t name_len, const char* info,
                               size_t info_len) {
  return mcgo_trtllm_load_remote_conn(handle_of(a), (char*)name, name_len, (char*)info, info_len);
}

int mc_trtllm_invalidate_remote(mc_trtllm_agent_t* a, const char* name, size_t name_len) {
  return mcgo_trtllm_invalidate_remote(handle_of(a), (char*)name, name_len);
}

int mc_trtllm_submit(mc_trtllm_agent_t* a, int op, int src_mem, const mc_trtllm_desc_t* src, int dst_mem,
                     const mc_trtllm_desc_t* dst, size_t n, const char* remote, size_t remote_len, const void* msg,
                     size_t msg_len, uint64_t* out_xfer) {
  return mcgo_trtllm_submit(handle_of(a), op, src_mem, (mc_trtllm_desc_t*)src, dst_mem, (mc_trtllm_desc_t*)dst, n,
                            (char*)remote, remote_len, (uintptr_t)msg, msg_len, msg != NULL, out_xfer);
}

int mc_trtllm_xfer_test(mc_trtllm_agent_t* a, uint64_t xfer, int32_t* out_state) {
  return mcgo_trtllm_xfer_test(handle_of(a), xfer, out_state);
}

int mc_trtllm_xfer_wait(mc_trtllm_agent_t* a, uint64_t xfer, int64_t timeout_ms, int32_t* out_state) {
  return mcgo_trtllm_xfer_wait(handle_of(a), xfer, timeout_ms, out_state);
}

int mc_trtllm_xfer_error(mc_trtllm_agent_t* a, uint64_t xfer, mc_buf_t* out) {
  return mcgo_trtllm_xfer_error(handle_of(a), xfer, out);
}

int mc_trtllm_xfer_release(mc_trtllm_agent_t* a, uint64_t xfer) { return mcgo_trtllm_xfer_release(handle_of(a), xfer); }

int mc_trtllm_notify(mc_trtllm_agent_t* a, const char* name, size_t name_len, const void* msg, size_t msg_len) {
  return mcgo_trtllm_notify(handle_of(a), (char*)name, name_len, (uintptr_t)msg, msg_len);
}

int mc_trtllm_get_notifs(mc_trtllm_agent_t* a, mc_buf_t* out) { return mcgo_trtllm_get_notifs(handle_of(a), out); }

int mc_trtllm_check_remote(mc_trtllm_agent_t* a, const char* name, size_t name_len, int mem,
                           const mc_trtllm_desc_t* descs, size_t n) {
  return mcgo_trtllm_check_remote(handle_of(a), (char*)name, name_len, mem, (mc_trtllm_desc_t*)descs, n);
}
