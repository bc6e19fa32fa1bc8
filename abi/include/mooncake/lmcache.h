/*
 * mooncake/lmcache.h - C ABI of the LMCache remote connector (symbol prefix
 * mc_lmcache_), in libmooncake.so. DRAFT: not implemented yet; see issue
 * a later issue (the LMCache adapter, lmcache/capi). Nothing declared here is
 * exported by the library yet, not even mc_lmcache_abi_version: a library
 * without the symbol has no LMCache adapter; one that has it returns a
 * major of at least 1. Until then the declarations may change without a
 * major bump.
 *
 * Who calls it: the RemoteConnector subclass of mooncake_go.lmcache,
 * through the loader of abi/python, lazily, off LMCache's event loop (the
 * calls block). specs/lmcache-remote.md. The shim owns LMCache objects
 * (CacheEngineKey, MemoryObj, reference counts: never decremented for a
 * put's input); Go owns the pool client and key namespacing. Values are
 * raw chunk payloads of exact length (save_chunk_meta false); the 28-byte
 * RemoteMetadata header path is the shim's business (it is part of the
 * bytes it passes).
 *
 * Conventions are those of common.h. Codes: common.h's, store.h's (per-key
 * codes), and this header's from -3200 .. -3299.
 */
#ifndef MOONCAKE_LMCACHE_H
#define MOONCAKE_LMCACHE_H

#include "mooncake/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_LMCACHE_ABI_VERSION_MAJOR 0
#define MC_LMCACHE_ABI_VERSION_MINOR 1
#define MC_LMCACHE_ABI_VERSION ((uint32_t)((MC_LMCACHE_ABI_VERSION_MAJOR << 16) | MC_LMCACHE_ABI_VERSION_MINOR))

/* Codes of this header. */
#define MC_LMCACHE_ERR_BAD_URL (-3200)     /* the remote URL is not ours, or malformed */
#define MC_LMCACHE_ERR_BAD_CONFIG (-3201)  /* config_json unparsable, or a key with a bad value */

typedef struct mc_lmcache_connector mc_lmcache_connector_t;

/* mc_lmcache_abi_version returns MC_LMCACHE_ABI_VERSION of the library. Not exported yet (draft). */
uint32_t mc_lmcache_abi_version(void);

/*
 * mc_lmcache_create connects to the pool named by url (our own scheme with
 * an explicit port, e.g. "kvpool://10.0.0.1:50051/?metadata=...") with the
 * settings of config_json (the remote_storage_plugin.<name>.* keys and
 * extra_config, as one JSON object; unknown keys ignored). Errors:
 * MC_LMCACHE_ERR_BAD_URL, MC_LMCACHE_ERR_BAD_CONFIG, mc_store_setup's.
 */
int mc_lmcache_create(const char* url, const char* config_json, mc_lmcache_connector_t** out);

/* mc_lmcache_destroy unregisters what the connector registered and closes it (close). */
int mc_lmcache_destroy(mc_lmcache_connector_t* c);

/* mc_lmcache_register_buffer / mc_lmcache_unregister_buffer: LMCache's
 * pinned buffer, registered once for zero copy (as mc_store_register_buffer). */
int mc_lmcache_register_buffer(mc_lmcache_connector_t* c, void* ptr, size_t size);
int mc_lmcache_unregister_buffer(mc_lmcache_connector_t* c, void* ptr);

/* mc_lmcache_exists returns 1 when key can be read now, 0 when not, or a
 * negative code (the shim maps errors to False, never to a hit). */
int mc_lmcache_exists(mc_lmcache_connector_t* c, const char* key);

/*
 * mc_lmcache_batched_contains stores in *out_prefix how many of the n keys
 * exist from the start (batched_contains / batched_async_contains). With
 * pin != 0 the found keys are kept readable (leased) for the load that
 * follows.
 */
int mc_lmcache_batched_contains(mc_lmcache_connector_t* c, const char* const* keys, size_t n, int pin,
                                size_t* out_prefix);

/*
 * mc_lmcache_batched_put stores n values, ptrs[i][0..sizes[i]) in
 * registered memory, under keys[i]; out_codes[i] = MC_OK or the key's code.
 * The source memory is read completely before the call returns (the shim
 * may release it then). Return value as mc_store_batch_put_from.
 */
int mc_lmcache_batched_put(mc_lmcache_connector_t* c, const char* const* keys, void* const* ptrs,
                           const size_t* sizes, size_t n, int32_t* out_codes);

/*
 * mc_lmcache_batched_get reads n values into ptrs[i][0..caps[i]) in
 * registered memory; out_results[i] = bytes read (a short chunk reads less
 * than caps[i]) or the key's negative code. Return value as
 * mc_store_batch_get_into.
 */
int mc_lmcache_batched_get(mc_lmcache_connector_t* c, const char* const* keys, void* const* ptrs,
                           const size_t* caps, size_t n, int64_t* out_results);

/* mc_lmcache_remove deletes key (remove_sync). Errors: MC_STORE_ERR_OBJECT_NOT_FOUND, ... */
int mc_lmcache_remove(mc_lmcache_connector_t* c, const char* key);

/* mc_lmcache_ping returns MC_OK when the pool answers (ping), else its code. */
int mc_lmcache_ping(mc_lmcache_connector_t* c);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_LMCACHE_H */
