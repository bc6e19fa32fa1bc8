/*
 * mooncake/trtllm.h - C ABI behind the TensorRT-LLM KV-cache transfer agent
 * (symbol prefix mc_trtllm_), in libmooncake.so: package trtllm/capi over
 * connectors/xferagent (issue 17). Version 1.0: every function below is
 * exported.
 *
 * Who calls it: only our C++ shim libtensorrt_llm_mooncake_wrapper.so
 * (createMooncakeTransferAgent), which links libmooncake.so
 * (specs/trtllm-agent.md section 7). The shim implements BaseTransferAgent
 * and TransferStatus of the host's generation over these functions and
 * throws std::runtime_error(mc_last_error()) on an error status (except
 * from destructors and TransferStatus::wait, which reports kFAILURE).
 *
 * Conventions are those of common.h, plus: names and messages are pointer
 * and length (any bytes) and never retained; blobs handed back are
 * mc_buf_t the shim frees with mc_buf_free; a transfer's progress is a
 * state (MC_TRTLLM_STATE_*, TransferState's values), not a code. An agent
 * stays alive in Go until it is destroyed and all its transfers released,
 * so a TransferStatus that outlives its agent reads FAILURE instead of
 * crashing. Codes of this header: -3400 .. -3499.
 */
#ifndef MOONCAKE_TRTLLM_H
#define MOONCAKE_TRTLLM_H

#include "mooncake/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_TRTLLM_ABI_VERSION_MAJOR 1
#define MC_TRTLLM_ABI_VERSION_MINOR 0
#define MC_TRTLLM_ABI_VERSION ((uint32_t)((MC_TRTLLM_ABI_VERSION_MAJOR << 16) | MC_TRTLLM_ABI_VERSION_MINOR))

/* Memory types (TRT-LLM MemoryType values). */
#define MC_TRTLLM_MEM_DRAM 0
#define MC_TRTLLM_MEM_VRAM 1
#define MC_TRTLLM_MEM_BLK 2
#define MC_TRTLLM_MEM_OBJ 3
#define MC_TRTLLM_MEM_FILE 4

/* Operations (TransferOp values): src is local, dst remote, for both. */
#define MC_TRTLLM_OP_READ 0   /* dst (remote) -> src (local) */
#define MC_TRTLLM_OP_WRITE 1  /* src (local) -> dst (remote) */

/* Transfer states (TransferState values). */
#define MC_TRTLLM_STATE_IN_PROGRESS 0
#define MC_TRTLLM_STATE_SUCCESS 1
#define MC_TRTLLM_STATE_FAILURE 2

/* Flags of mc_trtllm_agent_create (BaseAgentConfig booleans). */
#define MC_TRTLLM_FLAG_PROG_THREAD 1
#define MC_TRTLLM_FLAG_MULTI_THREAD 2
#define MC_TRTLLM_FLAG_LISTEN_THREAD 4
#define MC_TRTLLM_FLAG_TELEMETRY 8

/* Codes of this header. */
#define MC_TRTLLM_ERR_UNKNOWN_AGENT (-3400)   /* no descriptor or connection info loaded for that name */
#define MC_TRTLLM_ERR_SIZE_MISMATCH (-3401)   /* src and dst lists differ in count or lengths */
#define MC_TRTLLM_ERR_HOST_GENERATION (-3402) /* mc_trtllm_check_host: TRT-LLM generation not supported */

typedef struct mc_trtllm_agent mc_trtllm_agent_t;

/* One memory descriptor (MemoryDesc fields; LP64, 24 bytes). */
typedef struct mc_trtllm_desc {
  uint64_t addr;
  uint64_t len;
  uint32_t dev_id;   /* CUDA ordinal for VRAM */
  uint32_t reserved; /* 0 */
} mc_trtllm_desc_t;

/* One backend parameter (BaseAgentConfig::backendParams entry); not NUL-terminated. */
typedef struct mc_trtllm_kv {
  const char* key;
  size_t key_len;
  const char* value;
  size_t value_len;
} mc_trtllm_kv_t;

/* mc_trtllm_abi_version returns MC_TRTLLM_ABI_VERSION of the library. */
uint32_t mc_trtllm_abi_version(void);

/* mc_trtllm_check_host tells whether the shim (built for shim_abi, this
 * header's version) may serve TRT-LLM generation `generation` (spec section
 * 0: MC_TRTLLM_GEN_G2B or MC_TRTLLM_GEN_G3); MC_TRTLLM_ERR_HOST_GENERATION
 * otherwise, also for a shim_abi of another major. (factory sanity check) */
#define MC_TRTLLM_GEN_G2B 2 /* wait(timeout) -> TransferState, AgentDesc of one string */
#define MC_TRTLLM_GEN_G3 3  /* + TransferStatus::release/getLastStatusStr, AgentDesc with VRAM regions */
int mc_trtllm_check_host(uint32_t shim_abi, uint32_t generation);

/* mc_trtllm_agent_create starts an agent named name[0..name_len) with
 * MC_TRTLLM_FLAG_* flags (informational: the agent runs its own
 * goroutines) and params (backendParams: the transfer agent's keys
 * "ip_addr", "cma", "request_timeout_ms", "workers"; an unknown key is
 * MC_ERR_INVALID_ARGUMENT naming it). The address comes from
 * TLLM_MOONCAKE_IP_ADDR, else the IPv4 address of interface
 * TRTLLM_MOONCAKE_INTERFACE, else "ip_addr", else the first non-loopback
 * IPv4 address (read through libc). (createMooncakeTransferAgent) */
int mc_trtllm_agent_create(const char* name, size_t name_len, uint32_t flags, const mc_trtllm_kv_t* params,
                           size_t n, mc_trtllm_agent_t** out);

/* mc_trtllm_agent_destroy stops the agent: in-flight transfers settle or
 * are cancelled; the handle becomes invalid. (destructor) */
int mc_trtllm_agent_destroy(mc_trtllm_agent_t* a);

/* mc_trtllm_register / mc_trtllm_deregister: make descs (of memory type
 * mem) remotely accessible, reference-counted by address; deregistering an
 * unknown address is ignored. (registerMemory, deregisterMemory) */
int mc_trtllm_register(mc_trtllm_agent_t* a, int mem, const mc_trtllm_desc_t* descs, size_t n);
int mc_trtllm_deregister(mc_trtllm_agent_t* a, int mem, const mc_trtllm_desc_t* descs, size_t n);

/* mc_trtllm_local_agent_desc fills *out with the self-contained blob a peer
 * loads to reach our registered memory. (getLocalAgentDesc) */
int mc_trtllm_local_agent_desc(mc_trtllm_agent_t* a, mc_buf_t* out);

/* mc_trtllm_local_conn_info fills *out with a short printable connection
 * string. (getLocalConnectionInfo) */
int mc_trtllm_local_conn_info(mc_trtllm_agent_t* a, mc_buf_t* out);

/* mc_trtllm_load_remote_desc loads a peer's agent descriptor.
 * (loadRemoteAgent(name, AgentDesc)) */
int mc_trtllm_load_remote_desc(mc_trtllm_agent_t* a, const char* name, size_t name_len, const void* blob,
                               size_t blob_len);

/* mc_trtllm_load_remote_conn makes a peer reachable from its connection
 * info (notifications work afterwards). (loadRemoteAgent(name, connInfo)) */
int mc_trtllm_load_remote_conn(mc_trtllm_agent_t* a, const char* name, size_t name_len, const char* info,
                               size_t info_len);

/* mc_trtllm_invalidate_remote forgets a peer; unknown names are MC_OK. (invalidateRemoteAgent) */
int mc_trtllm_invalidate_remote(mc_trtllm_agent_t* a, const char* name, size_t name_len);

/*
 * mc_trtllm_submit starts moving src[i] <-> dst[i] (n pairs of equal
 * length) with remote agent remote, and stores the transfer's id in
 * *out_xfer. msg (NULL for none) is delivered to the remote once, after the
 * data is visible there. The arrays are read during the call only. src
 * must lie in this agent's registrations (MC_ERR_INVALID_ARGUMENT); dst is
 * checked by the remote against its registrations when the bytes move (a
 * miss fails the transfer); unequal lengths: MC_TRTLLM_ERR_SIZE_MISMATCH;
 * an agent never loaded: MC_TRTLLM_ERR_UNKNOWN_AGENT.
 * (submitTransferRequests)
 */
int mc_trtllm_submit(mc_trtllm_agent_t* a, int op, int src_mem, const mc_trtllm_desc_t* src, int dst_mem,
                     const mc_trtllm_desc_t* dst, size_t n, const char* remote, size_t remote_len,
                     const void* msg, size_t msg_len, uint64_t* out_xfer);

/* mc_trtllm_xfer_test stores the transfer's state in *out_state without
 * blocking. (TransferStatus::isCompleted) */
int mc_trtllm_xfer_test(mc_trtllm_agent_t* a, uint64_t xfer, int32_t* out_state);

/* mc_trtllm_xfer_wait blocks up to timeout_ms (-1: forever) and stores the
 * state in *out_state (IN_PROGRESS on timeout). (TransferStatus::wait) */
int mc_trtllm_xfer_wait(mc_trtllm_agent_t* a, uint64_t xfer, int64_t timeout_ms, int32_t* out_state);

/* mc_trtllm_xfer_error fills *out with a finished transfer's failure text
 * ("" after success). (TransferStatus::getLastStatusStr) */
int mc_trtllm_xfer_error(mc_trtllm_agent_t* a, uint64_t xfer, mc_buf_t* out);

/* mc_trtllm_xfer_release gives the transfer back. (TransferStatus::release, destructor) */
int mc_trtllm_xfer_release(mc_trtllm_agent_t* a, uint64_t xfer);

/* mc_trtllm_notify sends msg to agent name (this agent's own name included). (notifySyncMessage) */
int mc_trtllm_notify(mc_trtllm_agent_t* a, const char* name, size_t name_len, const void* msg,
                     size_t msg_len);

/* mc_trtllm_get_notifs drains received messages into *out, packed as
 * (u32 name length, sender name, u32 message length, message)*, little
 * endian, arrival order; each message goes to exactly one caller.
 * (getNotifiedSyncMessages) */
int mc_trtllm_get_notifs(mc_trtllm_agent_t* a, mc_buf_t* out);

/* mc_trtllm_check_remote returns 1 when a transfer targeting descs (memory
 * type mem) on agent name would succeed now, 0 when not, or a negative
 * code. (checkRemoteDescs) */
int mc_trtllm_check_remote(mc_trtllm_agent_t* a, const char* name, size_t name_len, int mem,
                           const mc_trtllm_desc_t* descs, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_TRTLLM_H */
