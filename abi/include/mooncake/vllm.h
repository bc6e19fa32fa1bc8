/*
 * mooncake/vllm.h - C ABI of the vLLM v1 KV connector (symbol prefix
 * mc_vllm_), in libmooncake.so, implemented by vllm/capi over the Go
 * package vllm.
 *
 * Who calls it: the Python connector class
 * mooncake_go.vllm.MooncakeGoConnector (loaded by vLLM through
 * kv_connector_module_path), through the loader of abi/python, lazily, in
 * the process that constructs it. vLLM builds the connector once with the
 * SCHEDULER role in the EngineCore process and once with the WORKER role
 * in every GPU worker (specs/vllm-kv-connector.md section 1); each
 * instance creates one mc_vllm_connector_t of that role.
 *
 * Division of labour: the shim translates vLLM objects (Request,
 * KVCacheBlocks, SchedulerOutput, KV cache tensors) into the small JSON
 * objects below and back; Go owns the pool client, the P/D transfers, key
 * naming, lookups, saves, loads and their threads. The connector metadata
 * the scheduler half builds (mc_vllm_build_meta) is opaque bytes that vLLM
 * ships to every worker, which hands them to mc_vllm_start_load.
 *
 * JSON arguments are UTF-8 objects whose keys are those of the Go types
 * named (vllm.LookupArgs, ...); block hashes are base64 strings; unknown
 * keys are ignored. Results that are JSON come back in an mc_buf_t the
 * caller frees with mc_buf_free.
 *
 * Conventions are those of common.h. Codes: common.h's, store.h's (pool
 * failures), and this header's from the range -3000 .. -3099.
 */
#ifndef MOONCAKE_VLLM_H
#define MOONCAKE_VLLM_H

#include "mooncake/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_VLLM_ABI_VERSION_MAJOR 1
#define MC_VLLM_ABI_VERSION_MINOR 3
#define MC_VLLM_ABI_VERSION ((uint32_t)((MC_VLLM_ABI_VERSION_MAJOR << 16) | MC_VLLM_ABI_VERSION_MINOR))

/* Roles (vLLM's KVConnectorRole values). */
#define MC_VLLM_ROLE_SCHEDULER 0
#define MC_VLLM_ROLE_WORKER 1

/* Codes of this header. */
#define MC_VLLM_ERR_WRONG_ROLE (-3000)       /* a scheduler-only call on a worker connector, or the reverse */
#define MC_VLLM_ERR_NOT_REGISTERED (-3001)   /* transfers before mc_vllm_register_kv_caches */
#define MC_VLLM_ERR_BAD_CONFIG (-3002)       /* settings unparsable, or a key with a bad value */
#define MC_VLLM_ERR_BAD_INPUT (-3003)        /* engine input that breaks the contract (block id out of range, bad metadata) */

/* Opaque connector handle. */
typedef struct mc_vllm_connector mc_vllm_connector_t;

/*
 * One KV cache region of a worker: num_blocks blocks of block_bytes each,
 * block b at base + b * block_bytes. A layer's tensor gives one region
 * (blocks-first layouts) or two (the K and V halves of the FlashAttention
 * layout); the shim derives them from strides. A block's pool value is
 * the concatenation, in region order, of its bytes in every region.
 */
typedef struct mc_vllm_region {
  void* base;            /* host address, or CUDA device address when device_id >= 0; must stay allocated until destroy */
  uint64_t block_bytes;  /* > 0 */
  uint64_t num_blocks;   /* > 0, the same for every region */
  int32_t device_id;     /* -1: host memory; N >= 0: GPU memory of CUDA device N (since 1.3; needs a CUDA runtime: MC_ERR_UNSUPPORTED "unsupported: no CUDA runtime" without one) */
  uint32_t layer;        /* the attention layer (0-based) the region belongs to; read in layer-wise mode */
} mc_vllm_region_t;

/* Counters since the previous mc_vllm_take_stats (get_kv_connector_stats). */
typedef struct mc_vllm_stats {
  uint64_t saved_blocks;
  uint64_t loaded_blocks;
  uint64_t failed_blocks;  /* saves, loads and P/D receives */
  uint64_t saved_bytes;
  uint64_t loaded_bytes;
} mc_vllm_stats_t;

/* mc_vllm_abi_version returns MC_VLLM_ABI_VERSION of the library. */
uint32_t mc_vllm_abi_version(void);

/*
 * mc_vllm_create starts a connector of role (MC_VLLM_ROLE_*). settings_json
 * is a vllm.Settings object: kv_role, engine_id, model, kv_dtype, layout,
 * block_size (tokens), tp_rank, tp_size, pp_rank, pp_size, use_mla, host,
 * num_layers, and kv_connector_extra_config (mc_mode "store" or "pd",
 * load_async, mc_layerwise, cache_prefix, ...). Store mode reads the pool settings from the file
 * named by MOONCAKE_CONFIG_PATH, else from the extra config. A scheduler
 * connects to the master at once; a worker opens its pool client at
 * mc_vllm_register_kv_caches. Errors: MC_VLLM_ERR_BAD_CONFIG, the pool's.
 */
int mc_vllm_create(const char* settings_json, int role, mc_vllm_connector_t** out);

/* mc_vllm_destroy cancels and waits for running jobs, then closes the
 * connector; the handle becomes invalid. Registered regions are not freed. */
int mc_vllm_destroy(mc_vllm_connector_t* c);

/*
 * Scheduler side (MC_VLLM_ERR_WRONG_ROLE on a worker).
 *
 * mc_vllm_lookup answers get_num_new_matched_tokens for a vllm.LookupArgs
 * (req_id, hashes, num_tokens, num_computed_tokens, params): the tokens
 * beyond the local hit the connector supplies and whether they load
 * asynchronously (1) or within the step (0). On a pool failure it returns
 * the failure with *out_tokens = 0 (the shim logs it and computes).
 */
int mc_vllm_lookup(mc_vllm_connector_t* c, const char* args_json, int64_t* out_tokens, int32_t* out_async);

/* mc_vllm_update_after_alloc is update_state_after_alloc for a
 * vllm.AllocArgs (req_id, block_ids, unhashed_block_ids,
 * num_external_tokens, params). */
int mc_vllm_update_after_alloc(mc_vllm_connector_t* c, const char* args_json);

/* mc_vllm_plan_save plans the saves of a running request at the end of a
 * step (vllm.SaveArgs); *out_blocks (may be NULL) = blocks planned. */
int mc_vllm_plan_save(mc_vllm_connector_t* c, const char* args_json, int64_t* out_blocks);

/* mc_vllm_preempted records the requests vLLM preempted (a JSON array of
 * request ids). */
int mc_vllm_preempted(mc_vllm_connector_t* c, const char* ids_json);

/* mc_vllm_request_finished is request_finished for a vllm.FinishArgs
 * (req_id, block_ids, length_capped, params); *out receives a
 * vllm.FinishResult: {"hold": bool, "params": object or null}. */
int mc_vllm_request_finished(mc_vllm_connector_t* c, const char* args_json, mc_buf_t* out);

/* mc_vllm_build_meta is build_connector_meta: *out receives this step's
 * metadata bytes (opaque to the shim). */
int mc_vllm_build_meta(mc_vllm_connector_t* c, mc_buf_t* out);

/* mc_vllm_reset removes every object of this connector's namespace from
 * the pool (reset_cache); *out_removed (may be NULL) = objects removed. */
int mc_vllm_reset(mc_vllm_connector_t* c, int64_t* out_removed);

/*
 * Worker side (MC_VLLM_ERR_WRONG_ROLE on a scheduler).
 *
 * mc_vllm_register_kv_caches registers the worker's KV cache regions
 * (register_kv_caches), once, before any transfer; the array is read
 * during the call only. Regions in GPU memory (device_id >= 0) load the
 * CUDA runtime ($MC_CUDART_PATH, else libcudart.so, .so.12, .so.11.0);
 * blocks move through pinned host staging, and the caller must have
 * finished the CUDA work writing a block before the save that reads it
 * starts (mc_vllm_wait_for_save, mc_vllm_save_layer): the Python shim
 * synchronises the current stream first. A load's blocks are on the
 * device (copies synchronised) when it reports them.
 */
int mc_vllm_register_kv_caches(mc_vllm_connector_t* c, const mc_vllm_region_t* regions, size_t n);

/* mc_vllm_start_load runs a step's metadata (bind_connector_metadata and
 * start_load_kv): fences preempted requests, starts loads (synchronous
 * ones have landed, or are reported failed, when it returns) and P/D
 * sends and receives. meta may be NULL with len 0 (no work). */
int mc_vllm_start_load(mc_vllm_connector_t* c, const void* meta, size_t len);

/* Layer-wise mode (kv_connector_extra_config "mc_layerwise": true; both
 * are no-ops otherwise). mc_vllm_save_layer is save_kv_layer: the forward
 * wrote layer `layer` of this step's blocks, whose saves may now put it.
 * mc_vllm_wait_layer_load is wait_for_layer_load: it returns once every
 * synchronous load of this step has that layer in place or failed (failed
 * blocks come back from mc_vllm_get_finished), bounded by the load
 * timeout. */
int mc_vllm_save_layer(mc_vllm_connector_t* c, int32_t layer);
int mc_vllm_wait_layer_load(mc_vllm_connector_t* c, int32_t layer);

/* mc_vllm_handle_preemptions fences preempted requests (a JSON array of
 * request ids) before vLLM reuses their blocks (handle_preemptions): their
 * loads are cancelled and it returns once none of their jobs touches the
 * blocks. Requests listed in a step's metadata are also fenced by
 * mc_vllm_start_load. */
int mc_vllm_handle_preemptions(mc_vllm_connector_t* c, const char* ids_json);

/* mc_vllm_wait_for_save is wait_for_save: the forward wrote this step's
 * blocks; the step's saves start (in the background). */
int mc_vllm_wait_for_save(mc_vllm_connector_t* c);

/* mc_vllm_wait_idle (since 1.2), worker side: called in get_finished of a
 * step that schedules no tokens; waits at most mc_idle_wait_ms (default 5)
 * until one of the store-mode loads or saves in flight has something for
 * mc_vllm_get_finished to report, or (pd mode) a P/D send or receive ends,
 * so that the empty steps vLLM runs while finished requests' blocks are
 * held for saves or sends (or requests wait for async loads or pushed KV)
 * sleep instead of spinning on the CPU the transfers need. Returns at
 * once when nothing is in flight or with mc_idle_wait_ms 0. Returns 1 when
 * something is to report, 0 when not, a negative MC_ERR_* code on a bad
 * handle. */
int mc_vllm_wait_idle(mc_vllm_connector_t* c);

/* mc_vllm_get_finished is get_finished plus get_block_ids_with_load_errors:
 * *out receives {"sending": [req ids], "recving": [req ids],
 * "failed_blocks": [block ids]}, each reported once. */
int mc_vllm_get_finished(mc_vllm_connector_t* c, mc_buf_t* out);

/* mc_vllm_take_stats stores the counters since the previous call in *out
 * and resets them. */
int mc_vllm_take_stats(mc_vllm_connector_t* c, mc_vllm_stats_t* out);

/* mc_vllm_take_stats_json (since 1.1) is mc_vllm_take_stats as a JSON
 * object in *out (free it with mc_buf_free), with two more counters:
 * {"saved_blocks", "loaded_blocks", "failed_blocks", "saved_bytes",
 * "loaded_bytes", "load_busy_ns", "save_busy_ns"}; the busy times are the
 * wall time (ns) during which at least one pool load (save) of the worker
 * was in flight, so loaded_bytes / load_busy_ns is its load throughput.
 * Both calls take (reset) the same counters. Worker side only. */
int mc_vllm_take_stats_json(mc_vllm_connector_t* c, mc_buf_t* out);

/* mc_vllm_load_failed (since 1.1), scheduler side: hashes_json is a JSON
 * array of the base64 block hashes (as in lookups) of blocks whose load
 * failed (vLLM's invalid_block_ids); for 30 s this connector's lookups
 * answer them absent, so vLLM recomputes them instead of loading them
 * again (a crashed storage node's blocks stay listed until the master
 * drops the node). Store mode; a no-op in pd mode. */
int mc_vllm_load_failed(mc_vllm_connector_t* c, const char* hashes_json);

/* mc_vllm_take_notes (since 1.1), either role: *out receives, once, a JSON
 * array of strings, the remarks on the pool config an operator should see
 * in the engine's log (a key of the MOONCAKE_CONFIG_PATH file no
 * integration reads, a key only another integration reads, loader
 * warnings); [] when there are none. Free it with mc_buf_free. */
int mc_vllm_take_notes(mc_vllm_connector_t* c, mc_buf_t* out);

/* mc_vllm_pool_error (since 1.1), either role: *out receives the message
 * of the error that left a store-mode connector without its pool
 * ("mc_pool_required": false in kv_connector_extra_config, so creation or
 * mc_vllm_register_kv_caches succeeded and the connector serves without
 * the cache: lookups miss, loads are reported failed, saves are dropped),
 * or stays empty (len 0) while the pool is open. Free it with mc_buf_free. */
int mc_vllm_pool_error(mc_vllm_connector_t* c, mc_buf_t* out);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_VLLM_H */
