// The public mc_nixl_* functions of mooncake/nixl.h. Each one is a
// trampoline to the Go export mcgo_nixl_* (exports.go): it converts the
// engine pointer to the integer handle it carries, so Go code never holds
// it as a pointer, and lets the C compiler check these definitions against
// the header's prototypes.

#include <stdint.h>

#include "mooncake/nixl.h"
#include "_cgo_export.h"

static inline uint64_t handle_of(const mc_nixl_engine_t* e) { return (uint64_t)(uintptr_t)e; }

uint32_t mc_nixl_abi_version(void) { return MC_NIXL_ABI_VERSION; }

int mc_nixl_check_host(uint32_t shim_abi, uint32_t nixl_family) { return mcgo_nixl_check_host(shim_abi, nixl_family); }

int mc_nixl_backend_options(mc_buf_t* out) { return mcgo_nixl_backend_options(out); }

int mc_nixl_create(const char* agent, size_t agent_len, const mc_nixl_kv_t* params, size_t n, uint32_t flags,
                   uint64_t pthr_delay_us, mc_nixl_engine_t** out) {
  uint64_t h = 0;
  int rc = mcgo_nixl_create((char*)agent, agent_len, (mc_nixl_kv_t*)params, n, flags, pthr_delay_us,
                            out != NULL ? &h : NULL);
  if (rc == MC_OK) {
    *out = (mc_nixl_engine_t*)(uintptr_t)h;
  }
  return rc;
}

int mc_nixl_destroy(mc_nixl_engine_t* e) { return mcgo_nixl_destroy(handle_of(e)); }

int mc_nixl_caps(mc_nixl_engine_t* e, uint32_t* out) { return mcgo_nixl_caps(handle_of(e), out); }

int mc_nixl_register(mc_nixl_engine_t* e, uint64_t addr, uint64_t len, uint64_t dev_id, int mem, const void* meta,
                     size_t meta_len, uint64_t* out_md) {
  return mcgo_nixl_register(handle_of(e), addr, len, dev_id, mem, (uintptr_t)meta, meta_len, out_md);
}

int mc_nixl_deregister(mc_nixl_engine_t* e, uint64_t md) { return mcgo_nixl_deregister(handle_of(e), md); }

int mc_nixl_public_data(mc_nixl_engine_t* e, uint64_t md, mc_buf_t* out) {
  return mcgo_nixl_public_data(handle_of(e), md, out);
}

int mc_nixl_conn_info(mc_nixl_engine_t* e, mc_buf_t* out) { return mcgo_nixl_conn_info(handle_of(e), out); }

int mc_nixl_load_remote_conn(mc_nixl_engine_t* e, const char* agent, size_t agent_len, const void* info,
                             size_t info_len) {
  return mcgo_nixl_load_remote_conn(handle_of(e), (char*)agent, agent_len, (uintptr_t)info, info_len);
}

int mc_nixl_connect(mc_nixl_engine_t* e, const char* agent, size_t agent_len) {
  return mcgo_nixl_connect(handle_of(e), (char*)agent, agent_len);
}

int mc_nixl_disconnect(mc_nixl_engine_t* e, const char* agent, size_t agent_len) {
  return mcgo_nixl_disconnect(handle_of(e), (char*)agent, agent_len);
}

int mc_nixl_load_remote_md(mc_nixl_engine_t* e, uint64_t addr, uint64_t len, uint64_t dev_id, int mem,
                           const void* blob, size_t blob_len, const char* agent, size_t agent_len,
                           uint64_t* out_md) {
  return mcgo_nixl_load_remote_md(handle_of(e), addr, len, dev_id, mem, (uintptr_t)blob, blob_len, (char*)agent,
                                  agent_len, out_md);
}

int mc_nixl_load_local_md(mc_nixl_engine_t* e, uint64_t reg_md, uint64_t* out_md) {
  return mcgo_nixl_load_local_md(handle_of(e), reg_md, out_md);
}

int mc_nixl_unload_md(mc_nixl_engine_t* e, uint64_t md) { return mcgo_nixl_unload_md(handle_of(e), md); }

int mc_nixl_prep_xfer(mc_nixl_engine_t* e, int op, int lmem, const mc_nixl_desc_t* local, size_t n_local, int rmem,
                      const mc_nixl_desc_t* remote, size_t n_remote, const char* agent, size_t agent_len,
                      const void* custom, size_t custom_len, uint64_t* out_req) {
  return mcgo_nixl_prep_xfer(handle_of(e), op, lmem, (mc_nixl_desc_t*)local, n_local, rmem, (mc_nixl_desc_t*)remote,
                             n_remote, (char*)agent, agent_len, (uintptr_t)custom, custom_len, out_req);
}

int mc_nixl_post_xfer(mc_nixl_engine_t* e, uint64_t req, int op, const mc_nixl_desc_t* local, size_t n_local,
                      const mc_nixl_desc_t* remote, size_t n_remote, int has_notif, const void* notif,
                      size_t notif_len, int32_t* out_state) {
  return mcgo_nixl_post_xfer(handle_of(e), req, op, (mc_nixl_desc_t*)local, n_local, (mc_nixl_desc_t*)remote, n_remote,
                             has_notif, (uintptr_t)notif, notif_len, out_state);
}

int mc_nixl_check_xfer(mc_nixl_engine_t* e, uint64_t req, int32_t* out_state) {
  return mcgo_nixl_check_xfer(handle_of(e), req, out_state);
}

int mc_nixl_release_req(mc_nixl_engine_t* e, uint64_t req) { return mcgo_nixl_release_req(handle_of(e), req); }

int mc_nixl_get_notifs(mc_nixl_engine_t* e, mc_buf_t* out) { return mcgo_nixl_get_notifs(handle_of(e), out); }

int mc_nixl_gen_notif(mc_nixl_engine_t* e, const char* agent, size_t agent_len, const void* msg, size_t msg_len) {
  return mcgo_nixl_gen_notif(handle_of(e), (char*)agent, agent_len, (uintptr_t)msg, msg_len);
}
