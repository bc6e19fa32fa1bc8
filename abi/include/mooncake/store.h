/*
 * mooncake/store.h - C ABI of the mooncake-go KV-cache pool client (symbol
 * prefix mc_store_), in libmooncake.so.
 *
 * It mirrors upstream Mooncake's store client (MooncakeDistributedStore and
 * store_c.h): set a client up against a master, optionally contribute DRAM
 * to the pool, then put and get values by key, either copying (mc_store_put,
 * mc_store_get) or zero copy between the pool and memory registered with
 * mc_store_register_buffer (mc_store_put_from, mc_store_get_into and their
 * batch forms).
 *
 * Typical sequence:
 *
 *     mc_store_t* s;
 *     mc_store_setup("10.0.0.2", "http://10.0.0.1:8080/metadata",
 *                    0, 16 << 20, "tcp", "", "10.0.0.1:50051", &s);
 *     mc_store_register_buffer(s, buf, len);
 *     mc_store_batch_put_from(s, keys, ptrs, sizes, n, codes);
 *     mc_store_batch_is_exist(s, keys, n, present);
 *     mc_store_batch_get_into(s, keys, ptrs, sizes, n, results);
 *     mc_store_unregister_buffer(s, buf);
 *     mc_store_destroy(s);
 *
 * Conventions are those of common.h (status codes, mc_last_error, threads,
 * string ownership), with two additions stated where they apply:
 *
 *  - mc_store_is_exist returns 1 or 0 (found or not) instead of MC_OK.
 *  - The batch functions return MC_OK when the batch was carried out,
 *    whatever each key's outcome; the per-key outcome is in the caller's
 *    out array, and mc_last_error() then says how many keys failed and why
 *    the first one did ("" when none failed). They return an error (and
 *    write nothing) only when the call itself is unusable: unknown handle,
 *    NULL arrays with n > 0, an array running past the end of the address
 *    space.
 *
 * Keys are bytes, 1 to MC_STORE_MAX_KEY_LEN of them: any byte value, not
 * necessarily UTF-8 (upstream's keys are std::string). The plain functions
 * take a key as a NUL-terminated string, as upstream's store_c.h (so it
 * cannot hold NUL); each has an _n twin (ABI 1.1, at the end of this
 * header) that takes the key as a pointer and a length, for keys with any
 * byte. NULL, "" or a zero length is MC_ERR_INVALID_ARGUMENT, a longer key
 * MC_STORE_ERR_INVALID_KEY. Keys and values are never retained. Values
 * are 1 byte or more (a zero-length value is MC_ERR_INVALID_ARGUMENT, as
 * upstream rejects zero-length puts). A key, once stored, keeps its value:
 * putting an existing key succeeds and changes nothing (upstream's
 * OBJECT_ALREADY_EXISTS is a no-op success); remove it first to replace it.
 *
 * History: 1.0 the functions up to mc_store_get_size; 1.1 the _n
 * functions (keys by pointer and length); 1.2 (for the upstream-compatible
 * Python module mooncake.store) replication settings
 * per put (mc_store_replicate_config_t), copying batch puts and gets,
 * put_parts, multi-buffer (scatter/gather) zero-copy batches, ranged reads,
 * batch and bulk removal, replica descriptors, the health check, and a
 * client port in [MC_STORE_CLIENT_MIN_PORT, MC_STORE_CLIENT_MAX_PORT] when
 * local_hostname names none.
 *
 * Memory: the zero-copy functions require every [ptr, ptr+size) to lie
 * inside one buffer registered on the same handle with
 * mc_store_register_buffer (else MC_ERR_ADDRESS_NOT_REGISTERED, with no
 * transfer attempted). Registered memory stays the caller's: the client
 * reads and writes it only during the calls that name it, and it must stay
 * mapped until mc_store_unregister_buffer returns and no call using it is in
 * flight. The copying functions accept any readable (put) or writable (get)
 * memory, read or written during the call only.
 */
#ifndef MOONCAKE_STORE_H
#define MOONCAKE_STORE_H

#include "mooncake/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_STORE_ABI_VERSION_MAJOR 1
#define MC_STORE_ABI_VERSION_MINOR 3 /* 1: the _n functions (keys by pointer and length); 2: mooncake.store calls; 3: mc_store_batch_get_alloc */
#define MC_STORE_ABI_VERSION ((uint32_t)((MC_STORE_ABI_VERSION_MAJOR << 16) | MC_STORE_ABI_VERSION_MINOR))

/* Longest key accepted, in bytes (the master's limit). */
#define MC_STORE_MAX_KEY_LEN 4096

/*
 * Store error codes. mc_store_ functions return upstream Mooncake Store's
 * ErrorCode values (mooncake-store/include/types.h) unchanged, so what an
 * adapter logs ("error_codes=[-704]") and the checks upstream integrations
 * make (-704 missing, -705 exists, -200-style back-pressure) read the same,
 * EXCEPT where upstream's value is already taken by a common.h code:
 *
 *   upstream                       here
 *   INTERNAL_ERROR          (-1)   MC_ERR_INTERNAL      (-1000)
 *   SEGMENT_NOT_FOUND     (-101)   MC_STORE_ERR_SEGMENT_NOT_FOUND      (-1101)
 *   SEGMENT_ALREADY_EXISTS(-102)   MC_STORE_ERR_SEGMENT_ALREADY_EXISTS (-1102)
 *   CLIENT_NOT_FOUND      (-103)   MC_STORE_ERR_CLIENT_NOT_FOUND       (-1103)
 *   NO_AVAILABLE_HANDLE   (-200)   MC_STORE_ERR_NO_AVAILABLE_HANDLE    (-1200)
 *   UNAVAILABLE_IN_CURRENT_MODE (-1011), NOT_SUPPORTED (-1012)
 *                                  MC_ERR_UNSUPPORTED   (-303)
 *
 * (-1101 .. -1200 are -1000 plus upstream's value, in the range common.h
 * reserves for mc_store_.) Every other value below is upstream's own.
 * Failures of the ABI layer itself keep their common.h codes: a NULL or
 * empty argument is MC_ERR_INVALID_ARGUMENT (-1), a bad handle
 * MC_ERR_INVALID_HANDLE, an unregistered zero-copy range
 * MC_ERR_ADDRESS_NOT_REGISTERED, an unsupported protocol or metadata mode
 * MC_ERR_UNSUPPORTED; MC_STORE_ERR_INVALID_PARAMS (-600) is what the pool
 * itself rejected.
 */
#define MC_STORE_ERR_BUFFER_OVERFLOW (-10)              /* a buffer is too small for the value (or the local buffer for a copy) */
#define MC_STORE_ERR_INVALID_KEY (-400)                 /* key longer than MC_STORE_MAX_KEY_LEN */
#define MC_STORE_ERR_WRITE_FAIL (-500)                  /* write failed */
#define MC_STORE_ERR_INVALID_PARAMS (-600)              /* the pool rejected a parameter */
#define MC_STORE_ERR_ILLEGAL_CLIENT (-601)              /* the master does not know this client (or it expired) */
#define MC_STORE_ERR_INVALID_WRITE (-700)               /* write to an object in a state that does not allow it */
#define MC_STORE_ERR_INVALID_READ (-701)                /* read of an object in a state that does not allow it */
#define MC_STORE_ERR_INVALID_REPLICA (-702)             /* no usable replica */
#define MC_STORE_ERR_REPLICA_IS_NOT_READY (-703)        /* the object is still being written */
#define MC_STORE_ERR_OBJECT_NOT_FOUND (-704)            /* no object under that key */
#define MC_STORE_ERR_OBJECT_ALREADY_EXISTS (-705)       /* key exists (puts report it as success; see above) */
#define MC_STORE_ERR_OBJECT_HAS_LEASE (-706)            /* leased by a reader: remove it with force */
#define MC_STORE_ERR_LEASE_EXPIRED (-707)               /* a read finished after its lease; the bytes read are undefined */
#define MC_STORE_ERR_TRANSFER_FAIL (-800)               /* moving the bytes failed (every replica, for a read) */
#define MC_STORE_ERR_RPC_FAIL (-900)                    /* the master could not be reached or failed the call */
#define MC_STORE_ERR_RPC_TIMEOUT (-901)                 /* a master call timed out */
#define MC_STORE_ERR_SEGMENT_NOT_FOUND (-1101)          /* upstream -101 */
#define MC_STORE_ERR_SEGMENT_ALREADY_EXISTS (-1102)     /* upstream -102 */
#define MC_STORE_ERR_CLIENT_NOT_FOUND (-1103)           /* upstream -103 */
#define MC_STORE_ERR_NO_AVAILABLE_HANDLE (-1200)        /* upstream -200: no space in the pool now (back-pressure) */

/* Opaque client handle. Not a pointer to memory: never dereference it. */
typedef struct mc_store mc_store_t;

/* mc_store_abi_version returns MC_STORE_ABI_VERSION of the library: (major << 16) | minor. */
uint32_t mc_store_abi_version(void);

/*
 * mc_store_setup starts a pool client (upstream setup()) and stores its
 * handle in *out.
 *
 * local_hostname: this client's host, "host" or "host:port"; required,
 *   non-empty; host is an IP address ("[ipv6]:port" with a port) or a host
 *   name of letters, digits, '-', '_' and '.' (anything else:
 *   MC_ERR_INVALID_ARGUMENT, naming it). The client's transfer engine listens on that host (on every
 *   interface when host is not an IP address, publishing host for peers to
 *   dial; MC_TCP_BIND_ADDRESS, when set, overrides the listen address) and
 *   on port, or, when none is given (since 1.2), on a free port picked at
 *   random in [$MC_STORE_CLIENT_MIN_PORT, $MC_STORE_CLIENT_MAX_PORT]
 *   (default 12300..14300, upstream's range and variables; before 1.2 any
 *   free port). Its segment name (unique
 *   in the cluster) is "host:port" with the port it listens on, as upstream
 *   appends a port to a bare host; mc_store_get_hostname returns it.
 * metadata_server: where transfer-engine segment descriptors live:
 *   "http://host:port/path" (`mooncake master` serves one at
 *   http://host:8080/metadata), "etcd://h1:2379,h2:2379" or a bare
 *   "host:port" (etcd), or "P2PHANDSHAKE" (no server: each client serves
 *   its own descriptor, and the segment name is "host:port" of that
 *   handshake listener; every member of the pool must then use
 *   P2PHANDSHAKE). "redis://..." is MC_ERR_UNSUPPORTED; anything else
 *   MC_ERR_INVALID_ARGUMENT.
 * global_segment_size: bytes of DRAM this client contributes to the pool
 *   (mapped, registered and mounted now); 0 = a pure client.
 * local_buffer_size: bytes of the client's own registered staging buffer,
 *   used by the copying mc_store_put / mc_store_get (a value larger than it
 *   cannot be copied in or out: MC_STORE_ERR_BUFFER_OVERFLOW); 0 = only the
 *   zero-copy functions work.
 * protocol: "tcp" (the only transport built; NULL or "" also mean tcp;
 *   peers on the same host are reached over shared memory, unless
 *   MC_FORCE_TCP (upstream's variable) is "true"/"1"/"yes"/"on").
 *   "rdma" and others: MC_ERR_UNSUPPORTED.
 * device_name: RDMA device list; ignored for tcp; may be NULL.
 * master_server_addr: the master's RPC address, "host:port"; required.
 *   "etcd://..." (master discovery for HA) is MC_ERR_UNSUPPORTED.
 * out: receives the handle; required.
 *
 * Blocks until the master answered a first heartbeat and the segment (if
 * any) is mounted. Errors: MC_ERR_INVALID_ARGUMENT, MC_ERR_UNSUPPORTED,
 * MC_ERR_METADATA (metadata service unreachable), MC_STORE_ERR_RPC_FAIL /
 * MC_STORE_ERR_RPC_TIMEOUT (master unreachable), MC_ERR_SOCKET / MC_ERR_DNS
 * (cannot listen), MC_ERR_MEMORY (cannot map the sizes asked for); nothing
 * is left running on error. No string is retained.
 */
int mc_store_setup(const char* local_hostname, const char* metadata_server,
                   uint64_t global_segment_size, uint64_t local_buffer_size,
                   const char* protocol, const char* device_name,
                   const char* master_server_addr, mc_store_t** out);

/*
 * mc_store_destroy closes the client: it waits for calls in flight on the
 * handle to return, unmounts its segment (objects stored there vanish from
 * the pool), stops the heartbeat and the transfer engine, unmaps the memory
 * it mapped and releases the handle. Buffers the caller registered are not
 * freed (they were never the client's). A second destroy, or any call with
 * the handle afterwards, returns MC_ERR_INVALID_HANDLE. Returns the unmount
 * error, if any, after tearing everything down anyway.
 */
int mc_store_destroy(mc_store_t* store);

/*
 * mc_store_get_hostname copies the client's segment name (see
 * mc_store_setup) into buf as a NUL-terminated string and its length,
 * without the NUL, into *out_len. Errors: MC_STORE_ERR_BUFFER_OVERFLOW when
 * cap is not larger than the length.
 */
int mc_store_get_hostname(mc_store_t* store, char* buf, size_t cap, size_t* out_len);

/*
 * mc_store_register_buffer registers [ptr, ptr+size) for the zero-copy
 * functions (upstream register_buffer). The memory stays the caller's (see
 * the top of this header). Errors: MC_ERR_INVALID_ARGUMENT (NULL ptr, zero
 * size, range past the end of the address space),
 * MC_ERR_ADDRESS_OVERLAPPED (overlaps a registered buffer).
 */
int mc_store_register_buffer(mc_store_t* store, void* ptr, size_t size);

/*
 * mc_store_unregister_buffer removes the registration that starts at ptr.
 * No zero-copy call on that memory may be in flight (caller's duty).
 * Errors: MC_ERR_ADDRESS_NOT_REGISTERED.
 */
int mc_store_unregister_buffer(mc_store_t* store, void* ptr);

/*
 * mc_store_put stores a copy of value[0..size) under key (upstream put),
 * staging it through the local buffer. Errors: MC_STORE_ERR_BUFFER_OVERFLOW
 * (size exceeds what the local buffer has free now),
 * MC_STORE_ERR_NO_AVAILABLE_HANDLE (pool full), MC_STORE_ERR_TRANSFER_FAIL,
 * MC_STORE_ERR_RPC_FAIL, key and argument errors.
 */
int mc_store_put(mc_store_t* store, const char* key, const void* value, size_t size);

/*
 * mc_store_get copies key's value into buf[0..cap) (upstream get) and its
 * size into *out_size. Errors: MC_STORE_ERR_OBJECT_NOT_FOUND,
 * MC_STORE_ERR_BUFFER_OVERFLOW (the value is larger than cap, or than the
 * local buffer; mc_last_error() gives the value's size; mc_store_get_size
 * asks for it first), MC_STORE_ERR_REPLICA_IS_NOT_READY,
 * MC_STORE_ERR_LEASE_EXPIRED, MC_STORE_ERR_TRANSFER_FAIL. buf is written
 * only on success.
 */
int mc_store_get(mc_store_t* store, const char* key, void* buf, size_t cap, size_t* out_size);

/*
 * mc_store_put_from stores ptr[0..size), inside a registered buffer, under
 * key with no intermediate copy (upstream put_from). Errors as mc_store_put,
 * plus MC_ERR_ADDRESS_NOT_REGISTERED; never BUFFER_OVERFLOW.
 */
int mc_store_put_from(mc_store_t* store, const char* key, void* ptr, size_t size);

/*
 * mc_store_get_into reads key's value straight into ptr[0..size), inside a
 * registered buffer (upstream get_into), and stores the bytes read in
 * *out_read. Errors as mc_store_get (BUFFER_OVERFLOW when the value is
 * larger than size), plus MC_ERR_ADDRESS_NOT_REGISTERED. After
 * MC_STORE_ERR_LEASE_EXPIRED or MC_STORE_ERR_TRANSFER_FAIL the content of
 * ptr[0..size) is undefined.
 */
int mc_store_get_into(mc_store_t* store, const char* key, void* ptr, size_t size, int64_t* out_read);

/*
 * mc_store_batch_put_from stores n values, ptrs[i][0..sizes[i]) in
 * registered memory, under keys[i] (upstream batch_put_from) and sets
 * out_codes[i] to MC_OK or the key's negative code (a bad key, NULL ptr,
 * zero size or unregistered range fails that key alone). See the top of
 * this header for the return value and mc_last_error. n == 0 is a no-op
 * (the arrays may then be NULL). The arrays are read during the call only.
 */
int mc_store_batch_put_from(mc_store_t* store, const char* const* keys, void* const* ptrs,
                            const size_t* sizes, size_t n, int32_t* out_codes);

/*
 * mc_store_batch_get_into reads n values, keys[i] into ptrs[i][0..sizes[i])
 * in registered memory (upstream batch_get_into), and sets out_results[i] to
 * the bytes read or the key's negative code (as mc_store_get_into). The same
 * key may appear more than once: every destination is filled. Return value
 * and n == 0 as mc_store_batch_put_from.
 */
int mc_store_batch_get_into(mc_store_t* store, const char* const* keys, void* const* ptrs,
                            const size_t* sizes, size_t n, int64_t* out_results);

/*
 * mc_store_is_exist returns 1 when key has a readable replica, 0 when it has
 * none (absent, or still being written), or a negative code (key errors,
 * MC_STORE_ERR_RPC_FAIL, ...) (upstream is_exist). A 1 grants the key a
 * lease, as upstream. mc_last_error() is "" after 1 or 0.
 */
int mc_store_is_exist(mc_store_t* store, const char* key);

/*
 * mc_store_batch_is_exist sets out[i] to 1, 0 or a negative code for keys[i]
 * (upstream batch_is_exist; a bad key fails that key alone, and a failure
 * of the master call is every key's code). Return value and n == 0 as
 * mc_store_batch_put_from.
 */
int mc_store_batch_is_exist(mc_store_t* store, const char* const* keys, size_t n, int32_t* out);

/*
 * mc_store_remove deletes key (upstream remove(key, force)). Errors:
 * MC_STORE_ERR_OBJECT_NOT_FOUND, MC_STORE_ERR_OBJECT_HAS_LEASE (a reader
 * holds a lease and force is 0), MC_STORE_ERR_REPLICA_IS_NOT_READY.
 */
int mc_store_remove(mc_store_t* store, const char* key, int force);

/*
 * mc_store_get_size stores the size in bytes of key's value in *out_size
 * (upstream get_size). Like a read, it grants the key a lease. Errors:
 * MC_STORE_ERR_OBJECT_NOT_FOUND, MC_STORE_ERR_REPLICA_IS_NOT_READY.
 */
int mc_store_get_size(mc_store_t* store, const char* key, uint64_t* out_size);

/*
 * Keys by pointer and length (ABI 1.1). Each function below is its
 * namesake without _n, with the key given as key[0..key_len) instead of a
 * NUL-terminated string, so that it may hold any byte, NUL included. key is
 * read during the call only and need not be NUL-terminated. key NULL or
 * key_len 0 is MC_ERR_INVALID_ARGUMENT, key_len above MC_STORE_MAX_KEY_LEN
 * MC_STORE_ERR_INVALID_KEY (the key is then not read). The batch forms take
 * key_lens[i] as the length of keys[i]; a bad key fails its position
 * alone, and key_lens NULL with n > 0 fails the call
 * (MC_ERR_INVALID_ARGUMENT). Everything else (codes, mc_last_error, memory
 * rules) is as the plain function's.
 */
int mc_store_put_n(mc_store_t* store, const char* key, size_t key_len, const void* value, size_t size);
int mc_store_get_n(mc_store_t* store, const char* key, size_t key_len, void* buf, size_t cap, size_t* out_size);
int mc_store_put_from_n(mc_store_t* store, const char* key, size_t key_len, void* ptr, size_t size);
int mc_store_get_into_n(mc_store_t* store, const char* key, size_t key_len, void* ptr, size_t size,
                        int64_t* out_read);
int mc_store_batch_put_from_n(mc_store_t* store, const char* const* keys, const size_t* key_lens,
                              void* const* ptrs, const size_t* sizes, size_t n, int32_t* out_codes);
int mc_store_batch_get_into_n(mc_store_t* store, const char* const* keys, const size_t* key_lens,
                              void* const* ptrs, const size_t* sizes, size_t n, int64_t* out_results);
int mc_store_is_exist_n(mc_store_t* store, const char* key, size_t key_len);
int mc_store_batch_is_exist_n(mc_store_t* store, const char* const* keys, const size_t* key_lens, size_t n,
                              int32_t* out);
int mc_store_remove_n(mc_store_t* store, const char* key, size_t key_len, int force);
int mc_store_get_size_n(mc_store_t* store, const char* key, size_t key_len, uint64_t* out_size);

/*
 * ---- ABI 1.2: the calls of upstream's Python MooncakeDistributedStore ----
 *
 * Every function below takes keys by pointer and length, as the _n
 * functions (keys[i][0..key_lens[i]), any bytes; key_lens NULL with n > 0
 * fails the call with MC_ERR_INVALID_ARGUMENT; a bad key fails its
 * position alone).
 */

/*
 * Replication settings of a put (upstream ReplicateConfig). Every put
 * function of 1.2 takes a const pointer to one; NULL means all defaults
 * (one replica, no pins, no preferred segment). Read during the call only.
 *
 * replica_num: replicas wanted, on distinct segments; 0 = the client's
 *   default (1). The master places fewer when fewer segments have room,
 *   and the put still succeeds (upstream does the same).
 * with_hard_pin: non-zero = never evicted; removed only by a forced remove
 *   or by remove_all.
 * with_soft_pin: non-zero = soft-pinned (upstream SoftPinAction.ENABLE):
 *   evicted only when nothing else can go, while read within the master's
 *   soft-pin TTL (`mooncake master --default_kv_soft_pin_ttl`); there is no
 *   per-object TTL.
 * preferred_segments / n_preferred_segments: segment names tried first, in
 *   order (NULL with 0 = none); placement falls back to the master's
 *   strategy when none of them has room. Each entry must be a non-NULL
 *   NUL-terminated string.
 */
typedef struct mc_store_replicate_config {
  uint32_t replica_num;
  int32_t with_hard_pin;
  int32_t with_soft_pin;
  const char* const* preferred_segments;
  size_t n_preferred_segments;
} mc_store_replicate_config_t;

/*
 * mc_store_batch_put stores a copy of each values[i][0..sizes[i]) (any
 * readable memory) under keys[i] (upstream put_batch; n == 1 is put with a
 * config), staging each value through the local buffer. out_codes[i] is
 * MC_OK or the key's code: MC_STORE_ERR_BUFFER_OVERFLOW (the value does
 * not fit the local buffer's free space now), MC_STORE_ERR_INVALID_PARAMS
 * (zero size), MC_STORE_ERR_NO_AVAILABLE_HANDLE, MC_STORE_ERR_TRANSFER_FAIL,
 * key errors. An existing key keeps its value (MC_OK). Return value,
 * mc_last_error and n == 0 as mc_store_batch_put_from.
 */
int mc_store_batch_put(mc_store_t* store, const char* const* keys, const size_t* key_lens,
                       const void* const* values, const size_t* sizes, size_t n,
                       const mc_store_replicate_config_t* config, int32_t* out_codes);

/*
 * mc_store_put_parts stores under key a copy of the concatenation of
 * parts[i][0..sizes[i]), i < n_parts (any readable memory, in order),
 * gathered once into the local buffer (upstream put_parts). Zero-size parts
 * are skipped; a zero total is MC_STORE_ERR_INVALID_PARAMS. Errors
 * otherwise as mc_store_put.
 */
int mc_store_put_parts(mc_store_t* store, const char* key, size_t key_len, const void* const* parts,
                       const size_t* sizes, size_t n_parts, const mc_store_replicate_config_t* config);

/*
 * mc_store_batch_put_from_config is mc_store_batch_put_from_n with
 * replication settings (upstream batch_put_from / put_from with a
 * ReplicateConfig). config NULL is mc_store_batch_put_from_n.
 */
int mc_store_batch_put_from_config(mc_store_t* store, const char* const* keys, const size_t* key_lens,
                                   void* const* ptrs, const size_t* sizes, size_t n,
                                   const mc_store_replicate_config_t* config, int32_t* out_codes);

/*
 * mc_store_batch_put_from_parts stores under keys[i] the concatenation of
 * key i's parts, all in registered memory, with no gathering copy
 * (upstream batch_put_from_multi_buffers). The parts of all keys are given
 * flattened: key i owns part_counts[i] consecutive entries of part_ptrs and
 * part_sizes, in order (so the arrays hold sum(part_counts) entries; they
 * may be NULL when that sum is 0). A key whose parts are not all inside
 * registered buffers fails alone (MC_ERR_ADDRESS_NOT_REGISTERED), and so
 * does one with a zero total (MC_STORE_ERR_INVALID_PARAMS). out_codes,
 * return value and n == 0 as mc_store_batch_put_from.
 */
int mc_store_batch_put_from_parts(mc_store_t* store, const char* const* keys, const size_t* key_lens,
                                  void* const* part_ptrs, const size_t* part_sizes,
                                  const size_t* part_counts, size_t n,
                                  const mc_store_replicate_config_t* config, int32_t* out_codes);

/*
 * mc_store_batch_get_into_parts reads keys[i] into key i's parts (registered
 * memory, filled in order), with no scattering copy (upstream
 * batch_get_into_multi_buffers); the parts are flattened as in
 * mc_store_batch_put_from_parts. out_results[i] is the bytes read or the
 * key's code (MC_STORE_ERR_BUFFER_OVERFLOW when the parts hold less than
 * the value). Return value and n == 0 as mc_store_batch_get_into.
 */
int mc_store_batch_get_into_parts(mc_store_t* store, const char* const* keys, const size_t* key_lens,
                                  void* const* part_ptrs, const size_t* part_sizes,
                                  const size_t* part_counts, size_t n, int64_t* out_results);

/*
 * mc_store_batch_get reads a copy of each keys[i] (upstream get_batch /
 * batch_get_buffer): the library allocates out_bufs[i] (mc_buf_t, to be
 * released with mc_buf_free) holding the value, and sets out_results[i]
 * to its size, or to the key's negative code with out_bufs[i] = {NULL, 0}
 * (MC_STORE_ERR_OBJECT_NOT_FOUND, MC_STORE_ERR_BUFFER_OVERFLOW when the
 * value does not fit the local buffer's free space now, read errors as
 * mc_store_get). Values are staged through the local buffer. Return value
 * and n == 0 as mc_store_batch_get_into; on an error return nothing was
 * allocated.
 */
int mc_store_batch_get(mc_store_t* store, const char* const* keys, const size_t* key_lens, size_t n,
                       mc_buf_t* out_bufs, int64_t* out_results);

/*
 * mc_store_alloc_fn hands mc_store_batch_get_alloc the destination of
 * keys[i]'s value, size bytes, once that size is known: a pointer to at
 * least size writable bytes (size may be 0), or NULL when it cannot (the
 * key then fails with MC_ERR_NO_MEMORY). ctx is the caller's, passed
 * through unchanged.
 */
typedef void* (*mc_store_alloc_fn)(void* ctx, size_t i, size_t size);

/*
 * mc_store_batch_get_alloc (1.3) is mc_store_batch_get with destinations
 * the caller allocates: for each key found, alloc(ctx, i, size) is called
 * once, on the calling thread, before any byte moves, and the value is
 * copied there from the local buffer (one copy; mc_store_batch_get makes
 * a library buffer the caller copies again). out_results[i] is the value's
 * size or the key's negative code (as mc_store_batch_get); a destination
 * alloc returned for a key that then fails holds undefined bytes and stays
 * the caller's. Return value and n == 0 as mc_store_batch_get_into; a NULL
 * alloc is MC_ERR_INVALID_ARGUMENT.
 */
int mc_store_batch_get_alloc(mc_store_t* store, const char* const* keys, const size_t* key_lens, size_t n,
                             mc_store_alloc_fn alloc, void* ctx, int64_t* out_results);

/*
 * mc_store_batch_get_ranges reads, for each i < n, the bytes
 * [src_offsets[i], src_offsets[i]+sizes[i]) of keys[i]'s value into
 * dsts[i] (registered memory; sizes[i] == 0 reads nothing and dsts[i] may
 * then be NULL) (upstream get_into_ranges, flattened to one range per
 * entry). Each key is looked up once however many entries name it, and
 * only the ranged bytes move. out_results[i] is sizes[i] or the entry's
 * code: MC_STORE_ERR_INVALID_PARAMS (the range runs past the end of the
 * value), MC_STORE_ERR_OBJECT_NOT_FOUND, MC_ERR_ADDRESS_NOT_REGISTERED,
 * read errors as mc_store_get_into. Return value and n == 0 as
 * mc_store_batch_get_into.
 */
int mc_store_batch_get_ranges(mc_store_t* store, const char* const* keys, const size_t* key_lens,
                              void* const* dsts, const uint64_t* src_offsets, const size_t* sizes,
                              size_t n, int64_t* out_results);

/*
 * mc_store_batch_remove deletes each keys[i] (upstream batch_remove) and
 * sets out_codes[i] to MC_OK or the key's code (as mc_store_remove).
 * Return value and n == 0 as mc_store_batch_put_from.
 */
int mc_store_batch_remove(mc_store_t* store, const char* const* keys, const size_t* key_lens, size_t n,
                          int force, int32_t* out_codes);

/*
 * mc_store_remove_by_regex deletes every object whose key matches regex
 * (RE2 syntax, unanchored) and stores how many in *out_count (upstream
 * remove_by_regex). Objects being written are skipped, and leased or
 * hard-pinned ones unless force. Errors: MC_STORE_ERR_INVALID_PARAMS (bad
 * expression), MC_STORE_ERR_RPC_FAIL.
 */
int mc_store_remove_by_regex(mc_store_t* store, const char* regex, int force, int64_t* out_count);

/*
 * mc_store_remove_all deletes every complete object of the pool (leased
 * ones only with force; hard pins do not protect) and stores how many in
 * *out_count (upstream remove_all). Errors: MC_STORE_ERR_RPC_FAIL.
 */
int mc_store_remove_all(mc_store_t* store, int force, int64_t* out_count);

/*
 * mc_store_get_replica_desc describes the replicas of keys[0..n) (upstream
 * get_replica_desc / batch_get_replica_desc) as JSON text (UTF-8, not
 * NUL-terminated) in *out, which the caller releases with mc_buf_free: an
 * array with one object per key, in the order of keys:
 *
 *   {"code": 0,
 *    "replicas": [{"status": "COMPLETE", "kind": "memory", "size": 5,
 *                  "segment": "host:port", "address": 140087220240394,
 *                  "slices": [{"segment": "host:port", "address": ..., "size": 5}]}]}
 *
 * code is 0 or the key's negative code (then "replicas" is []). kind is
 * "memory" or "local_disk"; address is the buffer address in the segment
 * owner's process (0 for local_disk); slices lists the pieces of a replica
 * striped over several segments, in value order (one slice otherwise).
 * Like a read, a found key gets a lease. Return value and n == 0 (an empty
 * array) as mc_store_batch_get_into.
 */
int mc_store_get_replica_desc(mc_store_t* store, const char* const* keys, const size_t* key_lens, size_t n,
                              mc_buf_t* out);

/*
 * mc_store_health_check asks the master whether it serves this client (a
 * heartbeat ping; upstream health_check). MC_OK when it answered; errors:
 * MC_STORE_ERR_RPC_FAIL / MC_STORE_ERR_RPC_TIMEOUT (unreachable), the
 * master's status (MC_STORE_ERR_CLIENT_NOT_FOUND ...), MC_ERR_INVALID_HANDLE
 * (closed).
 */
int mc_store_health_check(mc_store_t* store);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_STORE_H */
