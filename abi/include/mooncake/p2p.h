/*
 * mooncake/p2p.h - C ABI of the P2P Store (symbol prefix mc_p2p_), in
 * libmooncake.so: package abi/p2p over core/p2p (issue 20). Version 1.0.
 *
 * The operations of upstream's mooncake-p2p-store (Go) for C and Python
 * callers: a store is an etcd session plus a transfer engine (tcp); an
 * object is a list of buffers, split into shards (CRC-32C each) that every
 * node which fetched them serves to the next ones. There is no master.
 *
 * Conventions are those of common.h. Strings are NUL-terminated and never
 * retained. Memory passed to mc_p2p_register or mc_p2p_get_replica stays
 * the caller's, but peers read it until mc_p2p_unregister,
 * mc_p2p_delete_replica or mc_p2p_destroy returns: keep it allocated and
 * unmodified until then. Codes of this header: -3500 .. -3599.
 */
#ifndef MOONCAKE_P2P_H
#define MOONCAKE_P2P_H

#include "mooncake/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_P2P_ABI_VERSION_MAJOR 1
#define MC_P2P_ABI_VERSION_MINOR 0
#define MC_P2P_ABI_VERSION ((uint32_t)((MC_P2P_ABI_VERSION_MAJOR << 16) | MC_P2P_ABI_VERSION_MINOR))

#define MC_P2P_ERR_EXISTS (-3500)     /* register: another store registered that name (upstream Create fails) */
#define MC_P2P_ERR_OPENED (-3501)     /* this store already registered or fetched that name (upstream ErrPayloadOpened) */
#define MC_P2P_ERR_NOT_OPENED (-3502) /* unregister/delete_replica of a name this store does not hold that way (ErrPayloadNotOpened) */
#define MC_P2P_ERR_NO_HOLDER (-3503)  /* get_replica: a shard had no holder that served it intact (ErrTooManyRetries) */
#define MC_P2P_ERR_SIZE (-3504)       /* get_replica: buffer sizes differ from the object's size list */
/* Also: MC_ERR_NOT_FOUND (no such object), MC_ERR_METADATA (etcd unreachable or failing),
   MC_ERR_INVALID_ARGUMENT, MC_ERR_INVALID_HANDLE, MC_ERR_CLOSED. */

typedef struct mc_p2p_store mc_p2p_store_t;

/* mc_p2p_abi_version returns MC_P2P_ABI_VERSION of the library. */
uint32_t mc_p2p_abi_version(void);

/*
 * mc_p2p_create is upstream's NewP2PStore: metadata_uri is an etcd endpoint
 * list ("h1:2379,h2:2379", an "etcd://" prefix allowed), local_segment_name
 * this store's segment name (unique; NULL or "" for a generated one). The
 * data plane listens on 127.0.0.1 unless MC_TCP_BIND_ADDRESS names a host.
 * Waits up to 5 s for etcd (MC_ERR_METADATA when it does not answer).
 */
int mc_p2p_create(const char* metadata_uri, const char* local_segment_name, mc_p2p_store_t** out);

/*
 * mc_p2p_destroy stops serving everything (the store's etcd lease is
 * revoked, so it leaves every holder list at once), stops the engine and
 * frees the handle. Registered and fetched memory is the caller's again.
 */
int mc_p2p_destroy(mc_p2p_store_t* store);

/*
 * mc_p2p_register publishes count buffers (addrs[i], sizes[i] bytes, each
 * > 0) as object name without copying them (upstream Register): shards of
 * max_shard_size bytes (0: 64 MiB), checksummed now, served from this
 * memory. location is the memory's kind ("cpu:0"; NULL means "cpu:0").
 */
int mc_p2p_register(mc_p2p_store_t* store, const char* name, void* const* addrs, const uint64_t* sizes,
                    size_t count, uint64_t max_shard_size, const char* location);

/* mc_p2p_unregister stops serving an object this store registered (upstream Unregister). */
int mc_p2p_unregister(mc_p2p_store_t* store, const char* name);

/*
 * mc_p2p_get_replica fetches object name into count buffers whose sizes
 * equal the object's size list (upstream GetReplica), shards in parallel
 * from random holders, each verified by its checksum and then served to
 * peers. Blocks until done (each shard waits at most 10 s for a holder).
 */
int mc_p2p_get_replica(mc_p2p_store_t* store, const char* name, void* const* addrs, const uint64_t* sizes,
                       size_t count);

/* mc_p2p_delete_replica stops serving an object this store fetched (upstream DeleteReplica). */
int mc_p2p_delete_replica(mc_p2p_store_t* store, const char* name);

/*
 * mc_p2p_list fills *out (free with mc_buf_free) with a JSON array of the
 * objects whose name starts with prefix (NULL or "" for all), sorted by
 * name: [{"name", "total_size", "max_shard_size", "size_list", "shards",
 * "holders", "origin"}], sizes in bytes (upstream List's PayloadInfo).
 */
int mc_p2p_list(mc_p2p_store_t* store, const char* prefix, mc_buf_t* out);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_P2P_H */
