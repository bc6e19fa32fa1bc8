// The public mc_te_* functions of mooncake/transfer_engine.h. Each one is a
// trampoline to the Go export mcgo_te_* (exports.go): it converts the engine
// handle pointer to the integer handle it carries and void* addresses to
// uintptr_t, so Go code never holds them as pointers, and lets the C compiler
// check these definitions against the header's prototypes.

#include <stdint.h>

#include "mooncake/transfer_engine.h"
#include "_cgo_export.h"

static inline uint64_t handle_of(const mc_te_engine_t* e) { return (uint64_t)(uintptr_t)e; }

uint32_t mc_te_abi_version(void) { return MC_TE_ABI_VERSION; }

int mc_te_create(const char* metadata_conn_string, const char* local_server_name,
                 const char* ip_or_host_name, uint64_t rpc_port, int auto_discover,
                 mc_te_engine_t** out) {
  uint64_t h = 0;
  int rc = mcgo_te_create((char*)metadata_conn_string, (char*)local_server_name,
                          (char*)ip_or_host_name, rpc_port, auto_discover, out != NULL ? &h : NULL);
  if (rc == MC_OK) {
    *out = (mc_te_engine_t*)(uintptr_t)h;
  }
  return rc;
}

int mc_te_destroy(mc_te_engine_t* engine) { return mcgo_te_destroy(handle_of(engine)); }

int mc_te_install_transport(mc_te_engine_t* engine, const char* proto) {
  return mcgo_te_install_transport(handle_of(engine), (char*)proto);
}

int mc_te_register_local_memory(mc_te_engine_t* engine, void* addr, size_t length,
                                const char* location, int remote_accessible) {
  return mcgo_te_register_local_memory(handle_of(engine), (uintptr_t)addr, length, (char*)location,
                                       remote_accessible);
}

int mc_te_unregister_local_memory(mc_te_engine_t* engine, void* addr) {
  return mcgo_te_unregister_local_memory(handle_of(engine), (uintptr_t)addr);
}

int mc_te_open_segment(mc_te_engine_t* engine, const char* name, int32_t* out_id) {
  return mcgo_te_open_segment(handle_of(engine), (char*)name, out_id);
}

int mc_te_close_segment(mc_te_engine_t* engine, int32_t segment_id) {
  return mcgo_te_close_segment(handle_of(engine), segment_id);
}

int mc_te_allocate_batch(mc_te_engine_t* engine, size_t batch_size, uint64_t* out_batch) {
  return mcgo_te_allocate_batch(handle_of(engine), batch_size, out_batch);
}

int mc_te_submit(mc_te_engine_t* engine, uint64_t batch, const mc_te_request_t* reqs, size_t count) {
  return mcgo_te_submit(handle_of(engine), batch, (mc_te_request_t*)reqs, count);
}

int mc_te_get_status(mc_te_engine_t* engine, uint64_t batch, size_t task_id, mc_te_status_t* out) {
  return mcgo_te_get_status(handle_of(engine), batch, task_id, out);
}

int mc_te_free_batch(mc_te_engine_t* engine, uint64_t batch) {
  return mcgo_te_free_batch(handle_of(engine), batch);
}

/* 1.1 */

int mc_te_get_local_name(mc_te_engine_t* engine, mc_buf_t* out) {
  return mcgo_te_get_local_name(handle_of(engine), out);
}

int mc_te_get_rpc_port(mc_te_engine_t* engine, int32_t* out_port) {
  return mcgo_te_get_rpc_port(handle_of(engine), out_port);
}

int mc_te_refresh_segment(mc_te_engine_t* engine, int32_t segment_id) {
  return mcgo_te_refresh_segment(handle_of(engine), segment_id);
}

int mc_te_get_segment_buffers(mc_te_engine_t* engine, int32_t segment_id, mc_te_buffer_t* out,
                              size_t capacity, size_t* out_count) {
  return mcgo_te_get_segment_buffers(handle_of(engine), segment_id, out, capacity, out_count);
}

int mc_te_wait_batch(mc_te_engine_t* engine, uint64_t batch, uint64_t timeout_ms,
                     mc_te_status_t* out) {
  return mcgo_te_wait_batch(handle_of(engine), batch, timeout_ms, out);
}

int mc_te_probe(mc_te_engine_t* engine, const char* segment_name) {
  return mcgo_te_probe(handle_of(engine), (char*)segment_name);
}

int mc_te_send_notify(mc_te_engine_t* engine, const char* segment_name, const char* notify_name,
                      const char* notify_msg) {
  return mcgo_te_send_notify(handle_of(engine), (char*)segment_name, (char*)notify_name,
                             (char*)notify_msg);
}

int mc_te_get_notifies(mc_te_engine_t* engine, mc_buf_t* out) {
  return mcgo_te_get_notifies(handle_of(engine), out);
}
