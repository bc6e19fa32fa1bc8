/*
 * mooncake/sglang.h - C ABI of the SGLang HiCache storage backend (symbol
 * prefix mc_sglang_), in libmooncake.so. DRAFT: not implemented yet; see
 * a later issue (the SGLang adapter, sglang/capi). Nothing declared here is
 * exported by the library yet, not even mc_sglang_abi_version: a library
 * without the symbol has no SGLang adapter; one that has it returns a major
 * of at least 1. Until then the declarations may change without a major
 * bump.
 *
 * Who calls it: the Python backend class of mooncake_go.sglang (SGLang's
 * "dynamic" storage backend, interface_v1), through the loader of
 * abi/python, lazily, in each TP rank's scheduler process
 * (specs/sglang-hicache.md). The shim turns host-pool indices into
 * (pointer, size) lists with get_page_buffer_meta and calls the zero-copy
 * functions below; Go owns the pool client, key decoration (model, layout
 * fingerprint, TP rank for MHA, K/V suffixes) and put-if-absent.
 *
 * SGLang's rule that data-path methods never raise is the shim's: it turns
 * an error status into False / 0 / None. Conventions are those of common.h.
 * Codes: common.h's, store.h's (per-object codes), and this header's from
 * -3100 .. -3199.
 */
#ifndef MOONCAKE_SGLANG_H
#define MOONCAKE_SGLANG_H

#include "mooncake/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_SGLANG_ABI_VERSION_MAJOR 0
#define MC_SGLANG_ABI_VERSION_MINOR 1
#define MC_SGLANG_ABI_VERSION ((uint32_t)((MC_SGLANG_ABI_VERSION_MAJOR << 16) | MC_SGLANG_ABI_VERSION_MINOR))

/* Codes of this header. */
#define MC_SGLANG_ERR_BAD_CONFIG (-3100)      /* config_json unparsable, or a key with a bad value */
#define MC_SGLANG_ERR_NO_HOST_POOL (-3101)    /* a data call before mc_sglang_register_host_pool */
#define MC_SGLANG_ERR_BAD_LAYOUT (-3102)      /* objs_per_page does not match the configured layout */

typedef struct mc_sglang_backend mc_sglang_backend_t;

/* Counters since the previous mc_sglang_take_stats (for get_stats). */
typedef struct mc_sglang_stats {
  uint64_t prefetch_pages;
  uint64_t backup_pages;
  uint64_t prefetch_bytes;
  uint64_t backup_bytes;
  double prefetch_seconds;  /* summed call durations */
  double backup_seconds;
} mc_sglang_stats_t;

/* mc_sglang_abi_version returns MC_SGLANG_ABI_VERSION of the library. Not exported yet (draft). */
uint32_t mc_sglang_abi_version(void);

/*
 * mc_sglang_create starts a backend. config_json is one JSON object: the
 * HiCacheStorageConfig fields (tp_rank, tp_size, is_mla_model, model_name,
 * page_size, ...), the storage extra_config keys and the pool settings
 * (upstream's MOONCAKE_* keys; the adapter's documentation lists them;
 * unknown keys are ignored). Errors: MC_SGLANG_ERR_BAD_CONFIG and
 * mc_store_setup's.
 */
int mc_sglang_create(const char* config_json, mc_sglang_backend_t** out);

/* mc_sglang_destroy closes the backend; the host pool is not freed. */
int mc_sglang_destroy(mc_sglang_backend_t* b);

/* mc_sglang_register_host_pool registers the host KV pool [base, base+size)
 * (register_mem_pool_host), once; regions of 100+ GB are expected. */
int mc_sglang_register_host_pool(mc_sglang_backend_t* b, void* base, size_t size);

/*
 * mc_sglang_batch_exists stores in *out_pages how many of the n pages keys
 * (page hashes, in order) exist from the start, counting a page only when
 * every object of it (K and V for MHA) exists (batch_exists).
 */
int mc_sglang_batch_exists(mc_sglang_backend_t* b, const char* const* keys, size_t n, size_t* out_pages);

/*
 * mc_sglang_batch_get reads n pages into the host pool (batch_get_v1):
 * page i's objects are ptrs[i*objs_per_page + j] with sizes likewise (the
 * order of get_page_buffer_meta: K then V for MHA, one for MLA); out_ok[i]
 * = 1 when every object of page i was read, else 0. The arrays are read
 * during the call only; the pool memory is written before it returns.
 */
int mc_sglang_batch_get(mc_sglang_backend_t* b, const char* const* keys, size_t n, size_t objs_per_page,
                        void* const* ptrs, const size_t* sizes, uint8_t* out_ok);

/* mc_sglang_batch_set writes n pages (batch_set_v1), laid out as for
 * mc_sglang_batch_get; objects already in the pool are skipped and count as
 * written; out_ok[i] = 1 when page i is entirely in the pool afterwards. */
int mc_sglang_batch_set(mc_sglang_backend_t* b, const char* const* keys, size_t n, size_t objs_per_page,
                        void* const* ptrs, const size_t* sizes, uint8_t* out_ok);

/* mc_sglang_clear removes every object of this backend's namespace (clear). */
int mc_sglang_clear(mc_sglang_backend_t* b);

/* mc_sglang_take_stats stores the counters since the previous call in *out and resets them. */
int mc_sglang_take_stats(mc_sglang_backend_t* b, mc_sglang_stats_t* out);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_SGLANG_H */
