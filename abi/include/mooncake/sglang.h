/*
 * mooncake/sglang.h - C ABI of the SGLang HiCache storage backend (symbol
 * prefix mc_sglang_), in libmooncake.so, implemented by sglang/capi over
 * the Go package sglang.
 *
 * Who calls it: the Python backend class
 * mooncake_go.sglang.MooncakeGoHiCacheStorage (SGLang's "dynamic" storage
 * backend with interface_v1, specs/sglang-hicache.md), through the loader
 * of abi/python, lazily, in each TP/PP/CP rank's scheduler process: one
 * mc_sglang_backend_t per HiCacheStorage object. The shim turns host-pool
 * token indices into (pointer, size) lists with the host pool's
 * get_page_buffer_meta and calls the zero-copy functions below; Go owns
 * the pool client, the key decoration (model, dtype, object byte order,
 * page size, TP rank for MHA, PP stage, attention-CP rank, tenant; K and V
 * objects per MHA page, one object per MLA page), put-if-absent and the
 * time bound of every call.
 *
 * SGLang's rule that data-path methods never raise is the shim's: it
 * turns an error status into False / 0 / None. Per-page outcomes come
 * back in out_ok arrays with MC_OK; an error status means the whole call
 * failed (nothing moved). Conventions are those of common.h. Codes:
 * common.h's, store.h's (pool failures), and this header's from
 * -3100 .. -3199.
 *
 * History: 1.0 first exported version.
 */
#ifndef MOONCAKE_SGLANG_H
#define MOONCAKE_SGLANG_H

#include "mooncake/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_SGLANG_ABI_VERSION_MAJOR 1
#define MC_SGLANG_ABI_VERSION_MINOR 0
#define MC_SGLANG_ABI_VERSION ((uint32_t)((MC_SGLANG_ABI_VERSION_MAJOR << 16) | MC_SGLANG_ABI_VERSION_MINOR))

/* Codes of this header. */
#define MC_SGLANG_ERR_BAD_CONFIG (-3100)      /* config_json or pool_json unparsable, or a key with a bad value */
#define MC_SGLANG_ERR_NO_HOST_POOL (-3101)    /* a data call before mc_sglang_register_host_pool */
#define MC_SGLANG_ERR_BAD_LAYOUT (-3102)      /* a host pool layout not served, or buffers that do not fit the pool's pages */

/* Opaque backend handle. */
typedef struct mc_sglang_backend mc_sglang_backend_t;

/* Counters since the previous mc_sglang_take_stats (for get_stats). Pages
 * are SGLang pages (K and V of one page count once); seconds are summed
 * call durations. */
typedef struct mc_sglang_stats {
  uint64_t prefetch_pages;  /* pages read in full (batch_get*) */
  uint64_t backup_pages;    /* pages in the pool after a write call (batch_set*) */
  uint64_t prefetch_bytes;
  uint64_t backup_bytes;
  double prefetch_seconds;
  double backup_seconds;
  uint64_t failed_gets;     /* pages a read failed for a reason other than absence */
  uint64_t failed_sets;     /* pages a write call left out of the pool */
  uint64_t timeouts;        /* calls that ran out of their time bound */
  uint64_t exists_calls;
  uint64_t exists_errors;   /* batch_exists calls that failed (answered 0) */
} mc_sglang_stats_t;

/* mc_sglang_abi_version returns MC_SGLANG_ABI_VERSION of the library. */
uint32_t mc_sglang_abi_version(void);

/*
 * mc_sglang_create starts a backend and opens its pool client. config_json
 * is one JSON object: the HiCacheStorageConfig fields (tp_rank, tp_size,
 * pp_rank, pp_size, attn_cp_rank, attn_cp_size, dcp_size, is_mla_model,
 * should_split_heads, model_name), "host" (this process's address as pool
 * peers see it) and "extra_config" (the storage extra config: the pool
 * settings by SGLang's rules - master_server_address, metadata_server,
 * global_segment_size, protocol, ... else SGLANG_HICACHE_MOONCAKE_CONFIG_PATH,
 * else MOONCAKE_* variables - and the mc_* keys of sglang/README.md;
 * unknown keys are ignored). Errors: MC_SGLANG_ERR_BAD_CONFIG (the text
 * starts "unsupported:" for dcp_size > 1 and should_split_heads), the
 * pool's (unreachable master: MC_ERR_TIMEOUT or store.h's RPC codes;
 * protocol other than tcp: MC_ERR_UNSUPPORTED).
 */
int mc_sglang_create(const char* config_json, mc_sglang_backend_t** out);

/* mc_sglang_destroy unregisters the host pool and closes the pool client;
 * the host pool memory is the caller's. Call it after SGLang stopped its
 * storage threads (close). */
int mc_sglang_destroy(mc_sglang_backend_t* b);

/*
 * mc_sglang_register_host_pool registers the host KV pool [base,
 * base+size) (the whole kv_buffer) with the pool client for zero-copy
 * transfers, once (register_mem_pool_host); regions of 100+ GB are
 * expected. pool_json: {"layout": "layer_first" | "page_first" |
 * "page_first_direct", "dtype": "bfloat16" (torch's name, "torch."
 * prefix allowed), "page_size": tokens, "layer_num": layers, "page_bytes":
 * bytes of one page of this rank (K and V of every layer for MHA)}. The
 * memory must stay mapped until mc_sglang_destroy. Errors:
 * MC_SGLANG_ERR_BAD_LAYOUT (another layout), MC_SGLANG_ERR_BAD_CONFIG
 * (bad pool_json, a second call), MC_ERR_ADDRESS_OVERLAPPED.
 */
int mc_sglang_register_host_pool(mc_sglang_backend_t* b, const char* pool_json, void* base, size_t size);

/*
 * mc_sglang_batch_exists stores in *out_pages how many of the n pages keys
 * (SGLang's page hashes, in order) are in the pool from the first,
 * counting a page only when every object of it (K and V for MHA) is
 * (batch_exists). One existence RPC, bounded by the read time bound. n may
 * be 0 (keys may then be NULL). Errors: MC_SGLANG_ERR_NO_HOST_POOL, the
 * pool's (a dead master: store.h's RPC codes).
 */
int mc_sglang_batch_exists(mc_sglang_backend_t* b, const char* const* keys, size_t n, size_t* out_pages);

/*
 * mc_sglang_batch_get reads n pages into the host pool (batch_get_v1):
 * page i's buffers are ptrs[i*parts_per_page + j] of sizes[...] bytes, in
 * get_page_buffer_meta's order (MHA: K, V per page, or K0, V0, K1, V1, ...
 * per layer in layer_first; MLA: one per page, or one per layer), each
 * inside the registered host pool, adding up to the page's page_bytes.
 * out_ok[i] = 1 when every object of page i was read in full, else 0 (a
 * miss, a failure, or the time bound - 1 s + 0.25 s per 1,024 tokens by
 * default - ran out). The arrays are read during the call only; the pool
 * memory is written before it returns. Errors (whole call, nothing read):
 * MC_SGLANG_ERR_NO_HOST_POOL, MC_SGLANG_ERR_BAD_LAYOUT, invalid arguments.
 */
int mc_sglang_batch_get(mc_sglang_backend_t* b, const char* const* keys, size_t n, size_t parts_per_page,
                        void* const* ptrs, const size_t* sizes, uint8_t* out_ok);

/* mc_sglang_batch_set writes n pages (batch_set_v1), buffers as for
 * mc_sglang_batch_get; objects already in the pool are not written again
 * and count as written; out_ok[i] = 1 when page i is entirely in the pool
 * afterwards. An MLA rank other than TP rank 0 writes nothing (out_ok[i]
 * says whether page i is there already). Bounded by mc_set_timeout_ms
 * (30 s). Errors as mc_sglang_batch_get. */
int mc_sglang_batch_set(mc_sglang_backend_t* b, const char* const* keys, size_t n, size_t parts_per_page,
                        void* const* ptrs, const size_t* sizes, uint8_t* out_ok);

/*
 * mc_sglang_get_pages and mc_sglang_set_pages are the plain calls (get,
 * set, batch_get, batch_set of SGLang's generic path): ptrs[i] is one flat
 * page of sizes[i] == page_bytes bytes (get_data_page / a dummy flat page:
 * K half then V half for MHA), in any memory; it is registered with the
 * pool client for the call. The same pool objects as the zero-copy calls.
 * out_ok and errors as mc_sglang_batch_get / mc_sglang_batch_set.
 */
int mc_sglang_get_pages(mc_sglang_backend_t* b, const char* const* keys, size_t n, void* const* ptrs,
                        const size_t* sizes, uint8_t* out_ok);
int mc_sglang_set_pages(mc_sglang_backend_t* b, const char* const* keys, size_t n, void* const* ptrs,
                        const size_t* sizes, uint8_t* out_ok);

/* mc_sglang_clear removes every object of this backend's namespace (this
 * rank's shard, model, layout and tenant), leased ones included (clear);
 * *out_removed (may be NULL) gets the number of objects removed. Errors:
 * MC_SGLANG_ERR_NO_HOST_POOL, the pool's. */
int mc_sglang_clear(mc_sglang_backend_t* b, uint64_t* out_removed);

/* mc_sglang_take_stats stores the counters since the previous call in *out and resets them. */
int mc_sglang_take_stats(mc_sglang_backend_t* b, mc_sglang_stats_t* out);

/* mc_sglang_take_notes fills out (free with mc_buf_free) with a JSON array
 * of strings for SGLang's log: the pool config loader's remarks (once)
 * and the most recent data-call failure since the previous call. */
int mc_sglang_take_notes(mc_sglang_backend_t* b, mc_buf_t* out);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_SGLANG_H */
