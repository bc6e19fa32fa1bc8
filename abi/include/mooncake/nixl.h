/*
 * mooncake/nixl.h - C ABI behind the NIXL backend plugin (symbol prefix
 * mc_nixl_), in libmooncake.so: package nixl/capi over package nixl (issue
 * 14). Version 1.0: every function below is exported.
 *
 * Who calls it: only our C++ shim libplugin_<NAME>.so, which NIXL loads from
 * NIXL_PLUGIN_DIR and which links libmooncake.so (specs/nixl-plugin.md
 * section 6). The shim is the only code that sees NIXL's C++ types: it
 * implements nixlBackendEngine's virtual methods by converting descriptor
 * lists to flat arrays of mc_nixl_desc_t, calling these functions, and
 * converting back; it catches every exception. Each function below names
 * the engine method it backs.
 *
 * Conventions are those of common.h, plus: strings that may hold any byte
 * (agent names, blobs, notification messages) are passed as pointer and
 * length and never retained; blobs handed back are mc_buf_t the shim frees
 * with mc_buf_free; transfer progress is reported as a state, not a code.
 * The shim maps status codes to nixl_status_t: MC_ERR_INVALID_ARGUMENT ->
 * NIXL_ERR_INVALID_PARAM, MC_ERR_NOT_FOUND -> NIXL_ERR_NOT_FOUND,
 * MC_ERR_UNSUPPORTED -> NIXL_ERR_NOT_SUPPORTED, this header's codes -> the
 * NIXL status of the same name, anything else -> NIXL_ERR_BACKEND. Codes of
 * this header: -3300 .. -3399.
 */
#ifndef MOONCAKE_NIXL_H
#define MOONCAKE_NIXL_H

#include "mooncake/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_NIXL_ABI_VERSION_MAJOR 1
#define MC_NIXL_ABI_VERSION_MINOR 0
#define MC_NIXL_ABI_VERSION ((uint32_t)((MC_NIXL_ABI_VERSION_MAJOR << 16) | MC_NIXL_ABI_VERSION_MINOR))

/* Memory types (nixl_mem_t values). */
#define MC_NIXL_MEM_DRAM 0
#define MC_NIXL_MEM_VRAM 1
#define MC_NIXL_MEM_BLK 2
#define MC_NIXL_MEM_OBJ 3
#define MC_NIXL_MEM_FILE 4

/* Transfer operations (nixl_xfer_op_t values). */
#define MC_NIXL_OP_READ 0   /* remote -> local */
#define MC_NIXL_OP_WRITE 1  /* local -> remote */

/* Transfer states (mc_nixl_post_xfer, mc_nixl_check_xfer; NIXL_SUCCESS / NIXL_IN_PROG). */
#define MC_NIXL_XFER_DONE 0
#define MC_NIXL_XFER_IN_PROGRESS 1

/* Capability bits (mc_nixl_caps), plus bit (8 + mem type) per supported memory type. */
#define MC_NIXL_CAP_REMOTE 1
#define MC_NIXL_CAP_LOCAL 2
#define MC_NIXL_CAP_NOTIF 4

/* Codes of this header (named after the nixl_status_t they become). */
#define MC_NIXL_ERR_REMOTE_DISCONNECT (-3300)  /* the peer is gone: NIXL invalidates it */
#define MC_NIXL_ERR_REPOST_ACTIVE (-3301)      /* post or release of a request still in flight */
#define MC_NIXL_ERR_MISMATCH (-3302)           /* a blob (public data, conn info) is not ours or is corrupt */
#define MC_NIXL_ERR_NOT_ALLOWED (-3303)        /* e.g. a peer's conn info changed */
#define MC_NIXL_ERR_CANCELED (-3304)           /* the request was released before it finished */
#define MC_NIXL_ERR_HOST_FAMILY (-3305)        /* mc_nixl_check_host: NIXL ABI family not supported */

/* Opaque engine handle (one per nixlBackendEngine). */
typedef struct mc_nixl_engine mc_nixl_engine_t;

/* One descriptor of a transfer list (nixlMetaDesc flattened; LP64, 32 bytes). */
typedef struct mc_nixl_desc {
  uint64_t addr;    /* address (DRAM/VRAM), offset (FILE, BLK) */
  uint64_t len;     /* bytes, > 0 */
  uint64_t dev_id;  /* devId: CUDA ordinal for VRAM, fd for FILE, ... */
  uint64_t md;      /* metadata id from mc_nixl_register / mc_nixl_load_*_md, 0 for none */
} mc_nixl_desc_t;

/* One backend parameter (nixl_b_params_t entry); not NUL-terminated. */
typedef struct mc_nixl_kv {
  const char* key;
  size_t key_len;
  const char* value;
  size_t value_len;
} mc_nixl_kv_t;

/* mc_nixl_abi_version returns MC_NIXL_ABI_VERSION of the library. */
uint32_t mc_nixl_abi_version(void);

/* mc_nixl_check_host tells whether the shim (built for shim_abi, this
 * header's version) may run against NIXL ABI family nixl_family (spec
 * section 0; family D, NIXL 1.0 to 1.5, is 4 and the only one built);
 * MC_NIXL_ERR_HOST_FAMILY otherwise, also when shim_abi's major is not this
 * library's. (nixl_plugin_init) */
#define MC_NIXL_FAMILY_D 4
int mc_nixl_check_host(uint32_t shim_abi, uint32_t nixl_family);

/* mc_nixl_backend_options fills *out with the default parameters, packed
 * as (u32 key length, key, u32 value length, value)*, little endian. (get_backend_options) */
int mc_nixl_backend_options(mc_buf_t* out);

/*
 * mc_nixl_create starts an engine for local agent name agent[0..agent_len)
 * with params[0..n) (nixlBackendInitParams: customParams; enable_prog_thread
 * and telemetry as flags bit 0 and bit 1; pthr_delay_us; the engine runs
 * its own goroutines whatever they say). Parameters: "ip_addr" (listen and
 * publish address; default the first non-loopback IPv4 address, else
 * 127.0.0.1), "request_timeout_ms" (default 60000), "workers" (default
 * 16); an unknown key or a bad value is MC_ERR_INVALID_ARGUMENT naming it.
 * (constructor; an error makes the shim set initErr)
 */
int mc_nixl_create(const char* agent, size_t agent_len, const mc_nixl_kv_t* params, size_t n,
                   uint32_t flags, uint64_t pthr_delay_us, mc_nixl_engine_t** out);

/* mc_nixl_destroy stops the engine and waits for its threads. (destructor) */
int mc_nixl_destroy(mc_nixl_engine_t* e);

/* mc_nixl_caps stores MC_NIXL_CAP_* bits in *out. (supportsRemote/Local/Notif, getSupportedMems) */
int mc_nixl_caps(mc_nixl_engine_t* e, uint32_t* out);

/* mc_nixl_register registers [addr, addr+len) of memory type mem on device
 * dev_id (meta: the descriptor's metaInfo) and stores its id in *out_md. (registerMem) */
int mc_nixl_register(mc_nixl_engine_t* e, uint64_t addr, uint64_t len, uint64_t dev_id, int mem,
                     const void* meta, size_t meta_len, uint64_t* out_md);

/* mc_nixl_deregister undoes mc_nixl_register. (deregisterMem) */
int mc_nixl_deregister(mc_nixl_engine_t* e, uint64_t md);

/* mc_nixl_public_data fills *out with the (non-empty) blob peers need to
 * reach registration md. (getPublicData) */
int mc_nixl_public_data(mc_nixl_engine_t* e, uint64_t md, mc_buf_t* out);

/* mc_nixl_conn_info fills *out with this engine's (non-empty, printable) connection info. (getConnInfo) */
int mc_nixl_conn_info(mc_nixl_engine_t* e, mc_buf_t* out);

/* mc_nixl_load_remote_conn records agent's connection info. (loadRemoteConnInfo) */
int mc_nixl_load_remote_conn(mc_nixl_engine_t* e, const char* agent, size_t agent_len, const void* info,
                             size_t info_len);

/* mc_nixl_connect / mc_nixl_disconnect: (connect, disconnect); disconnecting an unknown agent is MC_OK. */
int mc_nixl_connect(mc_nixl_engine_t* e, const char* agent, size_t agent_len);
int mc_nixl_disconnect(mc_nixl_engine_t* e, const char* agent, size_t agent_len);

/* mc_nixl_load_remote_md turns a peer's public data into a metadata id. (loadRemoteMD) */
int mc_nixl_load_remote_md(mc_nixl_engine_t* e, uint64_t addr, uint64_t len, uint64_t dev_id, int mem,
                           const void* blob, size_t blob_len, const char* agent, size_t agent_len,
                           uint64_t* out_md);

/* mc_nixl_load_local_md returns a distinct metadata id for a local registration. (loadLocalMD) */
int mc_nixl_load_local_md(mc_nixl_engine_t* e, uint64_t reg_md, uint64_t* out_md);

/* mc_nixl_unload_md forgets a loaded metadata id; unknown ids are MC_OK. (unloadMD) */
int mc_nixl_unload_md(mc_nixl_engine_t* e, uint64_t md);

/*
 * mc_nixl_prep_xfer prepares a request moving local[i] <-> remote[i] of
 * agent (op MC_NIXL_OP_*, memory types lmem and rmem; n_local == n_remote
 * and lengths pairwise equal) and stores its id in *out_req; custom is
 * optional backend data. The arrays are read during the call only.
 * (prepXfer)
 */
int mc_nixl_prep_xfer(mc_nixl_engine_t* e, int op, int lmem, const mc_nixl_desc_t* local, size_t n_local,
                      int rmem, const mc_nixl_desc_t* remote, size_t n_remote, const char* agent,
                      size_t agent_len, const void* custom, size_t custom_len, uint64_t* out_req);

/*
 * mc_nixl_post_xfer starts (or restarts) request req with the lists given
 * again (never trusted from a cache); with has_notif the message
 * notif[0..notif_len) (any bytes, possibly empty) reaches the peer once,
 * after all the data is visible there. *out_state: MC_NIXL_XFER_DONE or
 * MC_NIXL_XFER_IN_PROGRESS. Errors: MC_NIXL_ERR_REPOST_ACTIVE,
 * MC_NIXL_ERR_REMOTE_DISCONNECT, ... (postXfer)
 */
int mc_nixl_post_xfer(mc_nixl_engine_t* e, uint64_t req, int op, const mc_nixl_desc_t* local,
                      size_t n_local, const mc_nixl_desc_t* remote, size_t n_remote, int has_notif,
                      const void* notif, size_t notif_len, int32_t* out_state);

/* mc_nixl_check_xfer stores req's state in *out_state, or fails with the
 * request's error. (checkXfer) */
int mc_nixl_check_xfer(mc_nixl_engine_t* e, uint64_t req, int32_t* out_state);

/* mc_nixl_release_req releases req without blocking: MC_OK once nothing
 * will touch its buffers, else MC_NIXL_ERR_REPOST_ACTIVE (retry later). (releaseReqH) */
int mc_nixl_release_req(mc_nixl_engine_t* e, uint64_t req);

/* mc_nixl_get_notifs drains the notifications received since the previous
 * call into *out, packed as (u32 name length, sender agent name, u32 message
 * length, message)*, little endian, in arrival order. (getNotifs) */
int mc_nixl_get_notifs(mc_nixl_engine_t* e, mc_buf_t* out);

/* mc_nixl_gen_notif sends msg to agent (which may be this engine's own
 * agent). (genNotif) */
int mc_nixl_gen_notif(mc_nixl_engine_t* e, const char* agent, size_t agent_len, const void* msg,
                      size_t msg_len);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_NIXL_H */
