/*
 * mooncake/vllm.h - C ABI of the vLLM v1 KV connector (symbol prefix
 * mc_vllm_), in libmooncake.so. DRAFT: not implemented yet; see issue 6
 * (the vLLM adapter, vllm/capi). Nothing declared here is exported by the
 * library yet, not even mc_vllm_abi_version: a library without the symbol
 * has no vLLM adapter; one that has it returns a major of at least 1.
 * Until then the declarations may change without a major bump.
 *
 * Who calls it: the Python connector class mooncake_go.vllm (loaded by vLLM
 * through kv_connector_module_path), through the loader of abi/python,
 * lazily, in the process that constructs it. vLLM builds the connector once
 * with the SCHEDULER role in the EngineCore process and once with the
 * WORKER role in every GPU worker (specs/vllm-kv-connector.md section 1);
 * each instance creates one mc_vllm_connector_t of that role.
 *
 * Division of labour: the shim translates vLLM objects (requests, block
 * tables, KV cache tensors, metadata it ships from scheduler to workers);
 * Go owns the pool client, key naming (namespace + block hash + TP shard,
 * as the MooncakeStoreConnector scheme of spec section 8.2), lookups,
 * saves and loads, and their threads. Blocks move between GPU (or host)
 * memory and the pool without an extra copy, one pool object per block.
 *
 * Conventions are those of common.h. Codes: common.h's, store.h's (a
 * job's failed blocks carry the store code of their failure), and this
 * header's from the range -3000 .. -3099.
 */
#ifndef MOONCAKE_VLLM_H
#define MOONCAKE_VLLM_H

#include "mooncake/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_VLLM_ABI_VERSION_MAJOR 0
#define MC_VLLM_ABI_VERSION_MINOR 1
#define MC_VLLM_ABI_VERSION ((uint32_t)((MC_VLLM_ABI_VERSION_MAJOR << 16) | MC_VLLM_ABI_VERSION_MINOR))

/* Roles (vLLM's KVConnectorRole values). */
#define MC_VLLM_ROLE_SCHEDULER 0
#define MC_VLLM_ROLE_WORKER 1

/* mc_vllm_lookup's answer while an asynchronous lookup is still running
 * (vLLM's "None": ask again next step). */
#define MC_VLLM_LOOKUP_PENDING (-1)

/* Job states (mc_vllm_poll). */
#define MC_VLLM_JOB_DONE 1    /* every block moved */
#define MC_VLLM_JOB_FAILED 2  /* finished; some or all blocks failed (mc_vllm_job_failed_blocks) */

/* Codes of this header. */
#define MC_VLLM_ERR_WRONG_ROLE (-3000)       /* a scheduler-only call on a worker connector, or the reverse */
#define MC_VLLM_ERR_NOT_REGISTERED (-3001)   /* save/load before mc_vllm_register_kv_caches */
#define MC_VLLM_ERR_BAD_CONFIG (-3002)       /* config_json unparsable, or a key with a bad value */

/* Opaque connector handle. */
typedef struct mc_vllm_connector mc_vllm_connector_t;

/*
 * One KV cache region of a worker: num_blocks blocks of block_bytes each,
 * block b at base + b * block_bytes. A layer's tensor gives one region
 * (blocks-first layouts) or two (the K and V halves of the FlashAttention
 * layout); the shim derives them from strides and de-duplicates shared
 * storage (spec section 5). A block's pool value is the concatenation, in
 * region order, of its bytes in every region.
 */
typedef struct mc_vllm_region {
  void* base;            /* device or host address; must stay allocated until destroy */
  uint64_t block_bytes;  /* > 0 */
  uint64_t num_blocks;   /* > 0 */
  int32_t device_id;     /* CUDA ordinal, or -1 for host memory */
  uint32_t reserved;     /* 0 */
} mc_vllm_region_t;

/* Counters since the previous mc_vllm_take_stats (for get_kv_connector_stats). */
typedef struct mc_vllm_stats {
  uint64_t lookups;
  uint64_t lookup_blocks;      /* blocks asked about */
  uint64_t hit_blocks;         /* blocks found */
  uint64_t saved_blocks;
  uint64_t loaded_blocks;
  uint64_t failed_blocks;      /* saves and loads */
  uint64_t saved_bytes;
  uint64_t loaded_bytes;
  double save_seconds;         /* summed job durations */
  double load_seconds;
} mc_vllm_stats_t;

/* mc_vllm_abi_version returns MC_VLLM_ABI_VERSION of the library. Not exported yet (draft). */
uint32_t mc_vllm_abi_version(void);

/*
 * mc_vllm_create starts a connector of role (MC_VLLM_ROLE_*). config_json
 * is one JSON object: the pool settings (the keys of upstream's
 * MOONCAKE_CONFIG_PATH file: metadata_server, master_server_address,
 * protocol, global_segment_size, local_buffer_size, ...) merged with
 * kv_connector_extra_config, plus what the shim knows of the engine:
 * model, kv_role, block_size, tp_rank, tp_size, pp_rank, dcp/pcp ranks,
 * KV cache group layout. The adapter's documentation lists the keys;
 * unknown keys are ignored. Workers with global_segment_size > 0
 * contribute memory to the pool. Errors: MC_VLLM_ERR_BAD_CONFIG, and
 * mc_store_setup's.
 */
int mc_vllm_create(const char* config_json, int role, mc_vllm_connector_t** out);

/* mc_vllm_destroy waits for (or cancels) running jobs, then closes the
 * connector; the handle becomes invalid. Registered regions are not freed. */
int mc_vllm_destroy(mc_vllm_connector_t* c);

/*
 * Scheduler side. mc_vllm_lookup answers get_num_new_matched_tokens for
 * request req_id: hashes holds n block hashes of hash_len bytes each (the
 * request's block_hashes, in order); *out_hit_blocks receives the length of
 * the longest prefix of them whose every TP shard is in the pool, or
 * MC_VLLM_LOOKUP_PENDING while a lookup started by an earlier call for the
 * same req_id is still running (config lookup_async). The shim converts
 * blocks to tokens and applies vLLM's rules (leave one token to compute).
 * Idempotent per req_id until mc_vllm_forget.
 */
int mc_vllm_lookup(mc_vllm_connector_t* c, const char* req_id, const uint8_t* hashes,
                   size_t hash_len, size_t n, int64_t* out_hit_blocks);

/* mc_vllm_forget drops the lookup state of req_id (request_finished). Unknown ids: MC_OK. */
int mc_vllm_forget(mc_vllm_connector_t* c, const char* req_id);

/* mc_vllm_reset removes every object of this connector's namespace from the pool (reset_cache). */
int mc_vllm_reset(mc_vllm_connector_t* c);

/*
 * Worker side. mc_vllm_register_kv_caches registers the worker's KV cache
 * regions (register_kv_caches), once, before any save or load; the array is
 * read during the call only.
 */
int mc_vllm_register_kv_caches(mc_vllm_connector_t* c, const mc_vllm_region_t* regions, size_t n);

/*
 * mc_vllm_save starts writing n blocks of request req_id to the pool:
 * block_ids[i] (a GPU block id, never 0) holds the block whose hash is
 * hashes[i*hash_len .. (i+1)*hash_len). Blocks already in the pool are
 * skipped and count as saved. Returns at once with a job id in *out_job; the
 * job reads the blocks until mc_vllm_poll reports it, so the caller keeps
 * them allocated until then (request_finished returns True meanwhile). The
 * arrays are read during the call only.
 */
int mc_vllm_save(mc_vllm_connector_t* c, const char* req_id, const uint8_t* hashes, size_t hash_len,
                 const int64_t* block_ids, size_t n, uint64_t* out_job);

/* mc_vllm_load starts reading n blocks of request req_id from the pool into
 * block_ids (as mc_vllm_save, the other way); the blocks must not be used
 * until mc_vllm_poll reports the job. */
int mc_vllm_load(mc_vllm_connector_t* c, const char* req_id, const uint8_t* hashes, size_t hash_len,
                 const int64_t* block_ids, size_t n, uint64_t* out_job);

/*
 * mc_vllm_poll drains up to cap finished jobs (get_finished): their ids
 * into out_jobs and MC_VLLM_JOB_* states into out_states, *out_n = how many.
 * Never blocks; each job is reported once.
 */
int mc_vllm_poll(mc_vllm_connector_t* c, uint64_t* out_jobs, int32_t* out_states, size_t cap,
                 size_t* out_n);

/*
 * mc_vllm_job_failed_blocks copies up to cap block ids whose save or load
 * failed in a finished job into out_block_ids (*out_n = how many; all of
 * them when cap suffices, MC_STORE_ERR_BUFFER_OVERFLOW otherwise)
 * (get_block_ids_with_load_errors). Valid until mc_vllm_job_release.
 */
int mc_vllm_job_failed_blocks(mc_vllm_connector_t* c, uint64_t job, int64_t* out_block_ids, size_t cap,
                              size_t* out_n);

/* mc_vllm_job_release forgets a finished job. Errors: MC_ERR_INVALID_HANDLE (unknown job). */
int mc_vllm_job_release(mc_vllm_connector_t* c, uint64_t job);

/*
 * mc_vllm_cancel stops the jobs of req_id (handle_preemptions) and returns
 * once none of them touches its blocks any more; they are then reported by
 * mc_vllm_poll as FAILED (a load) or DONE with what was saved (a save).
 */
int mc_vllm_cancel(mc_vllm_connector_t* c, const char* req_id);

/* mc_vllm_take_stats stores the counters since the previous call in *out and resets them. */
int mc_vllm_take_stats(mc_vllm_connector_t* c, mc_vllm_stats_t* out);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_VLLM_H */
