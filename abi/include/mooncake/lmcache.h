/*
 * mooncake/lmcache.h - C ABI of the LMCache remote connector (symbol prefix
 * mc_lmcache_), in libmooncake.so (lmcache/capi over package lmcache).
 *
 * Who calls it: the RemoteConnector subclass of mooncake_go.lmcache (the
 * remote-storage plugin that LMCache 0.5.6 loads through
 * remote_storage_plugins), through the loader of abi/python, lazily, off
 * LMCache's event loop (the calls block). specs/lmcache-remote.md. The shim
 * owns LMCache objects (CacheEngineKey, MemoryObj, reference counts: never
 * decremented for a put's input); Go owns the pool client and the key
 * prefix. Values are raw chunk payloads of exact length (LMCache's
 * save_chunk_meta false form): a partial chunk reads back shorter than its
 * full-chunk buffer, and the reader learns its length from the bytes read.
 *
 *     mc_lmcache_connector_t* c;
 *     mc_lmcache_create("plugin://mooncake_go",
 *                       "{\"role\": \"worker\", \"extra_config\": {...}}", &c);
 *     mc_lmcache_register_buffer(c, pinned, pinned_len);   // LMCache's CPU buffer
 *     mc_lmcache_batched_put(c, keys, ptrs, sizes, n, codes);
 *     mc_lmcache_batched_contains(c, keys, n, 0, &prefix);
 *     mc_lmcache_batched_get(c, keys, ptrs, caps, n, results);
 *     mc_lmcache_destroy(c);
 *
 * Conventions are those of common.h, with the additions of store.h:
 * mc_lmcache_exists returns 1 or 0 instead of MC_OK; the batched put and
 * get return MC_OK when the batch was carried out, whatever each key's
 * outcome (the per-key outcome is in the out array; mc_last_error() then
 * says how many keys failed and why the first did), and an error only when
 * the call itself is unusable. Keys are NUL-terminated strings (LMCache's
 * CacheEngineKey.to_string()). Buffers should lie in memory registered with
 * mc_lmcache_register_buffer (zero copy); one that does not is registered
 * for the call alone (slower; fails that key if it overlaps a registered
 * buffer without lying inside it).
 *
 * Codes: common.h's, store.h's (per-key and pool codes), and this header's
 * from -3200 .. -3299.
 *
 * History: 1.0 the first exported version.
 */
#ifndef MOONCAKE_LMCACHE_H
#define MOONCAKE_LMCACHE_H

#include "mooncake/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_LMCACHE_ABI_VERSION_MAJOR 1
#define MC_LMCACHE_ABI_VERSION_MINOR 0
#define MC_LMCACHE_ABI_VERSION ((uint32_t)((MC_LMCACHE_ABI_VERSION_MAJOR << 16) | MC_LMCACHE_ABI_VERSION_MINOR))

/* Codes of this header. */
#define MC_LMCACHE_ERR_BAD_URL (-3200)     /* the connector URL is not plugin://<name> */
#define MC_LMCACHE_ERR_BAD_CONFIG (-3201)  /* config_json unparsable, or a plugin key unknown, missing or bad (named) */

typedef struct mc_lmcache_connector mc_lmcache_connector_t;

/* mc_lmcache_abi_version returns MC_LMCACHE_ABI_VERSION of the library. */
uint32_t mc_lmcache_abi_version(void);

/*
 * mc_lmcache_create opens a connector: url is "plugin://<name>" (what
 * LMCache's RemoteBackend builds for the remote_storage_plugins entry
 * <name>); config_json is {"role": "worker" | "scheduler", "host": this
 * host's address (default "127.0.0.1"), "extra_config": LMCache's whole
 * extra_config object}. The store settings come from the upstream Mooncake
 * JSON file named by MOONCAKE_CONFIG_PATH (read from libc's environment)
 * when set, else from the keys remote_storage_plugin.<name>.* of
 * extra_config (master_server_address and metadata_server required;
 * local_hostname defaults to host); the adapter's own keys key_prefix,
 * replica_num, lookup_timeout_ms, timeout_ms, connect_timeout_ms come from
 * that scope in both cases (lmcache/README.md). A scheduler mounts no
 * memory. *out is written on MC_OK. Errors: MC_LMCACHE_ERR_BAD_URL,
 * MC_LMCACHE_ERR_BAD_CONFIG (the message names the key or file),
 * MC_ERR_UNSUPPORTED (protocol other than tcp), the pool's (master or
 * metadata server unreachable within connect_timeout_ms: MC_ERR_TIMEOUT,
 * MC_STORE_ERR_RPC_FAIL, MC_ERR_METADATA, ...).
 */
int mc_lmcache_create(const char* url, const char* config_json, mc_lmcache_connector_t** out);

/* mc_lmcache_destroy unregisters every buffer the connector registered and
 * closes its store client (close). The handle is invalid afterwards. */
int mc_lmcache_destroy(mc_lmcache_connector_t* c);

/*
 * mc_lmcache_notes fills *out (the caller frees it with mc_buf_free) with a
 * JSON array of strings: remarks on the settings for the engine's log
 * (keys ignored and why, loader warnings); "[]" when none.
 */
int mc_lmcache_notes(mc_lmcache_connector_t* c, mc_buf_t* out);

/* mc_lmcache_register_buffer registers [ptr, ptr+size) (LMCache's pinned
 * CPU buffer; the caller keeps it mapped until it is unregistered or the
 * connector destroyed) for zero-copy puts and gets. Errors:
 * MC_ERR_INVALID_ARGUMENT, MC_ERR_ADDRESS_OVERLAPPED. */
int mc_lmcache_register_buffer(mc_lmcache_connector_t* c, void* ptr, size_t size);

/* mc_lmcache_unregister_buffer undoes mc_lmcache_register_buffer for the
 * buffer starting at ptr. Errors: MC_ERR_INVALID_ARGUMENT for a ptr it
 * never registered, the engine's. */
int mc_lmcache_unregister_buffer(mc_lmcache_connector_t* c, void* ptr);

/*
 * mc_lmcache_exists returns 1 when key can be read now, 0 when not, or a
 * negative code: the pool's, for the lookup that finds the master not
 * answering (the shim maps any code to "absent", never to a hit). After
 * such a failure, lookups answer 0 at once, without asking the master,
 * until a background probe (every second) gets an answer.
 */
int mc_lmcache_exists(mc_lmcache_connector_t* c, const char* key);

/*
 * mc_lmcache_batched_contains stores in *out_prefix how many of the n keys
 * exist from the first on, with one master call (batched_async_contains,
 * batched_contains: LMCache's prefix lookup). The found keys get a lease
 * (kept readable for the load that follows), whatever pin says; pin is
 * accepted for LMCache's signature. Errors as mc_lmcache_exists (then
 * nothing is written); n == 0 stores 0 (keys may then be NULL).
 */
int mc_lmcache_batched_contains(mc_lmcache_connector_t* c, const char* const* keys, size_t n, int pin,
                                size_t* out_prefix);

/*
 * mc_lmcache_batched_put stores n values, ptrs[i][0..sizes[i]) (a memory
 * object's bytes, exact length), under keys[i]; out_codes[i] = MC_OK or the
 * key's code (a key that exists already keeps its value: MC_OK, as
 * upstream). The source memory is read completely before the call returns
 * (the shim may release it then). n == 0 is a no-op.
 */
int mc_lmcache_batched_put(mc_lmcache_connector_t* c, const char* const* keys, void* const* ptrs,
                           const size_t* sizes, size_t n, int32_t* out_codes);

/*
 * mc_lmcache_batched_get reads n values into ptrs[i][0..caps[i]) (a
 * full-chunk memory object each); out_results[i] = the bytes read (the
 * stored length; a partial chunk reads less than caps[i]) or the key's
 * negative code (MC_STORE_ERR_OBJECT_NOT_FOUND, MC_STORE_ERR_BUFFER_OVERFLOW
 * when the value is longer than caps[i], ...). n == 0 is a no-op.
 */
int mc_lmcache_batched_get(mc_lmcache_connector_t* c, const char* const* keys, void* const* ptrs,
                           const size_t* caps, size_t n, int64_t* out_results);

/* mc_lmcache_remove deletes key, leased or not (remove_sync). Errors:
 * MC_STORE_ERR_OBJECT_NOT_FOUND, the pool's. */
int mc_lmcache_remove(mc_lmcache_connector_t* c, const char* key);

/* mc_lmcache_list fills *out (freed with mc_buf_free) with a JSON array of
 * the keys of the pool's complete objects under this connector's
 * key_prefix, the prefix stripped (list). Errors: the pool's. */
int mc_lmcache_list(mc_lmcache_connector_t* c, mc_buf_t* out);

/* mc_lmcache_ping returns MC_OK when the master answers (ping), else its
 * code. */
int mc_lmcache_ping(mc_lmcache_connector_t* c);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_LMCACHE_H */
