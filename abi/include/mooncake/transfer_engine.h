/*
 * mooncake/transfer_engine.h - C ABI of the mooncake-go transfer engine
 * (symbol prefix mc_te_), in libmooncake.so.
 *
 * It mirrors upstream Mooncake's transfer_engine_c.h: create an engine,
 * register local memory, open a peer's segment by name, then move bytes in
 * batches: allocate a batch, submit requests, poll each request's status,
 * free the batch. Names differ (mc_te_ prefix) and every call returns an int
 * status (common.h); values of opcodes, statuses and error codes are
 * upstream's.
 *
 * Typical sequence:
 *
 *     mc_te_engine_t* e;
 *     mc_te_create("http://10.0.0.1:8080/metadata", "node-a", "10.0.0.2", 0, 0, &e);
 *     mc_te_register_local_memory(e, buf, len, "cpu:0", 1);
 *     int32_t peer;  mc_te_open_segment(e, "node-b", &peer);
 *     uint64_t b;    mc_te_allocate_batch(e, 64, &b);
 *     mc_te_submit(e, b, reqs, n);
 *     ... mc_te_get_status(e, b, i, &st) until st.status is COMPLETED or FAILED ...
 *     mc_te_free_batch(e, b);
 *     mc_te_close_segment(e, peer);
 *     mc_te_unregister_local_memory(e, buf);
 *     mc_te_destroy(e);
 *
 * Since 1.1 the engine also works in upstream's other metadata modes (etcd,
 * P2PHANDSHAKE), runs a handshake endpoint (probes, notifications), and
 * lets callers read a segment's buffer list, re-read a peer's descriptor
 * and wait for a whole batch (mc_te_wait_batch) instead of polling each
 * request.
 *
 * Conventions (status codes, mc_last_error, threads, string ownership) are
 * those of common.h. In short: strings are never retained; handles are
 * opaque; memory you register stays yours: the engine reads and writes it
 * (and lets peers write it, when remote_accessible) until you unregister it,
 * so unregister before you free or unmap it, and never free memory that a
 * request still in flight uses.
 */
#ifndef MOONCAKE_TRANSFER_ENGINE_H
#define MOONCAKE_TRANSFER_ENGINE_H

#include "mooncake/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_TE_ABI_VERSION_MAJOR 1
#define MC_TE_ABI_VERSION_MINOR 1
#define MC_TE_ABI_VERSION ((uint32_t)((MC_TE_ABI_VERSION_MAJOR << 16) | MC_TE_ABI_VERSION_MINOR))

/* Segment id of the engine's own segment (upstream LOCAL_SEGMENT). */
#define MC_TE_LOCAL_SEGMENT 0
/* Never returned as a batch id (upstream INVALID_BATCH). */
#define MC_TE_INVALID_BATCH UINT64_MAX

/* Request opcodes (upstream OPCODE_READ / OPCODE_WRITE). */
#define MC_TE_OPCODE_READ 0   /* copy target -> source (local) */
#define MC_TE_OPCODE_WRITE 1  /* copy source (local) -> target */

/* Request statuses (upstream TransferStatusEnum). */
#define MC_TE_STATUS_WAITING 0    /* queued or moving */
#define MC_TE_STATUS_PENDING 1    /* not used */
#define MC_TE_STATUS_INVALID 2    /* not used */
#define MC_TE_STATUS_CANCELED 3   /* not used */
#define MC_TE_STATUS_COMPLETED 4  /* every byte landed */
#define MC_TE_STATUS_TIMEOUT 5    /* not used: a request past its deadline is FAILED */
#define MC_TE_STATUS_FAILED 6     /* failed; mc_last_error() after mc_te_get_status says why */

/* Opaque engine handle. Not a pointer to memory: never dereference it. */
typedef struct mc_te_engine mc_te_engine_t;

/*
 * One transfer (upstream struct transfer_request): `length` bytes between the
 * local address `source` (inside memory registered with this engine) and the
 * address `target_offset` in segment `target_id` (from mc_te_open_segment,
 * or MC_TE_LOCAL_SEGMENT), which must lie inside one buffer the target
 * registered as remote_accessible (target_offset is the target process's
 * virtual address, as upstream).
 */
typedef struct mc_te_request {
  int opcode;              /* MC_TE_OPCODE_READ or MC_TE_OPCODE_WRITE (else the request FAILS) */
  void* source;            /* local address; not retained beyond the request */
  int32_t target_id;       /* segment id */
  uint64_t target_offset;  /* address in the target segment */
  uint64_t length;         /* bytes, > 0 */
} mc_te_request_t;

/* Status of one request (upstream struct transfer_status). */
typedef struct mc_te_status {
  int status;                  /* MC_TE_STATUS_* */
  uint64_t transferred_bytes;  /* bytes known to have landed; length once COMPLETED */
} mc_te_status_t;

/* mc_te_abi_version returns MC_TE_ABI_VERSION of the library: (major << 16) | minor. */
uint32_t mc_te_abi_version(void);

/*
 * mc_te_create starts an engine and stores its handle in *out.
 *
 * metadata_conn_string: where segment descriptors are published and looked
 *   up, as upstream:
 *   - "http://host:port/path" or "https://..." (upstream's HTTP metadata
 *     protocol; `mooncake master` serves one at http://host:8080/metadata);
 *   - "etcd://h1:2379,h2:2379" or a bare "h1:2379" list (',' or ';'
 *     separated): an etcd cluster (since 1.1);
 *   - "P2PHANDSHAKE": no metadata service; each engine serves its own
 *     descriptor on its handshake port and peers fetch it when they open
 *     the segment, whose name is then "host:port" (since 1.1; see
 *     local_server_name).
 *   "redis://..." is recognised but not built: MC_ERR_UNSUPPORTED. Anything
 *   else: MC_ERR_INVALID_ARGUMENT. Required.
 * local_server_name: this engine's segment name, unique in the cluster
 *   (peers pass it to mc_te_open_segment). Required, non-empty. In
 *   P2PHANDSHAKE mode it is replaced, as upstream, by
 *   "<ip_or_host_name>:<handshake port>" (read it with
 *   mc_te_get_local_name).
 * ip_or_host_name: host peers dial. The TCP data port and the handshake
 *   endpoint bind the host of $MC_TCP_BIND_ADDRESS when that is set
 *   (upstream's variable), else ip_or_host_name when it is an IP address,
 *   else every interface. NULL, "" or an unspecified address (0.0.0.0)
 *   publishes this host's first non-loopback IPv4 address (127.0.0.1 if it
 *   has none); a host name is published as given.
 * rpc_port: TCP data port to bind, 0 for an ephemeral one; at most 65535.
 *   The handshake endpoint always takes an ephemeral port
 *   (mc_te_get_rpc_port).
 * auto_discover: accepted for compatibility; the TCP transport is installed
 *   whatever its value (see mc_te_install_transport).
 * out: receives the handle; required.
 *
 * The engine publishes its (still empty) segment descriptor before this
 * returns (with a metadata service, also its handshake address, under the
 * Mooncake-Go key "mooncake/mc_handshake/<name>"). Errors:
 * MC_ERR_INVALID_ARGUMENT, MC_ERR_UNSUPPORTED, MC_ERR_METADATA (service
 * unreachable or failing), MC_ERR_SOCKET or MC_ERR_DNS (cannot bind). No
 * string is retained.
 */
int mc_te_create(const char* metadata_conn_string, const char* local_server_name,
                 const char* ip_or_host_name, uint64_t rpc_port, int auto_discover,
                 mc_te_engine_t** out);

/*
 * mc_te_destroy stops the engine: stops taking requests, waits for the ones
 * running (each is bounded by a 60 s deadline), closes its connections and
 * listener, and removes its descriptor from the metadata service. After it
 * returns the engine touches no registered memory and the handle is invalid
 * (a second destroy returns MC_ERR_INVALID_HANDLE). Registered memory is not
 * freed: it was never the engine's. NULL: MC_ERR_INVALID_ARGUMENT.
 */
int mc_te_destroy(mc_te_engine_t* engine);

/*
 * mc_te_install_transport: mc_te_create already installs the TCP transport
 * (the only one built), so "tcp" returns MC_OK and changes nothing, which
 * keeps upstream's create-then-installTransport("tcp") sequence working.
 * Any other protocol ("rdma", "nvlink", ...) returns MC_ERR_UNSUPPORTED.
 * proto is not retained.
 */
int mc_te_install_transport(mc_te_engine_t* engine, const char* proto);

/*
 * mc_te_register_local_memory registers [addr, addr+length) with the engine;
 * with remote_accessible != 0 it is published so peers can read and write
 * it. The memory stays owned by the caller and must stay mapped, at the same
 * address, until mc_te_unregister_local_memory(engine, addr) returns.
 * location is a tag such as "cpu:0" (NULL or "" means "*"); not retained.
 * Errors: MC_ERR_INVALID_ARGUMENT (NULL addr, zero length, range past the end
 * of the address space), MC_ERR_ADDRESS_OVERLAPPED, MC_ERR_METADATA (the
 * registration is rolled back).
 */
int mc_te_register_local_memory(mc_te_engine_t* engine, void* addr, size_t length,
                                const char* location, int remote_accessible);

/*
 * mc_te_unregister_local_memory removes the registration that starts at addr
 * and republishes the descriptor. Requests in flight on that memory must have
 * finished first (caller's duty, as upstream). Errors:
 * MC_ERR_ADDRESS_NOT_REGISTERED, MC_ERR_METADATA.
 */
int mc_te_unregister_local_memory(mc_te_engine_t* engine, void* addr);

/*
 * mc_te_open_segment resolves the segment published as name and stores its id
 * in *out_id (the engine's own name gives MC_TE_LOCAL_SEGMENT; opening a name
 * twice gives the same id). The peer's buffer list is read now: memory it
 * registers later is not reachable through this id until it is closed and
 * opened again. name is not retained. Errors: MC_ERR_NOT_FOUND (nothing
 * published under name), MC_ERR_METADATA, MC_ERR_UNSUPPORTED (peer speaks
 * another protocol), MC_ERR_SOCKET (cannot connect).
 */
int mc_te_open_segment(mc_te_engine_t* engine, const char* name, int32_t* out_id);

/* mc_te_close_segment forgets a segment id and closes its connections.
 * Errors: MC_ERR_NOT_FOUND for an id not open. */
int mc_te_close_segment(mc_te_engine_t* engine, int32_t segment_id);

/*
 * mc_te_allocate_batch creates a batch that holds up to batch_size requests
 * (over all its mc_te_submit calls) and stores its id in *out_batch (never
 * MC_TE_INVALID_BATCH). Errors: MC_ERR_INVALID_ARGUMENT for batch_size 0.
 */
int mc_te_allocate_batch(mc_te_engine_t* engine, size_t batch_size, uint64_t* out_batch);

/*
 * mc_te_submit queues count requests from reqs[0..count) in batch and
 * returns at once; the requests run asynchronously. Their task ids are their
 * positions in the batch across all submits (first submit: 0..count-1).
 * reqs is read during the call only; the memory the requests name must stay
 * registered until each request is COMPLETED or FAILED. A request that is
 * itself invalid (zero length, unregistered source, unknown target id, range
 * outside the target's published buffers, bad opcode) is still queued and
 * reports FAILED, so ids stay stable. count 0 is a no-op (reqs may be NULL).
 * Errors: MC_ERR_INVALID_HANDLE (unknown batch), MC_ERR_TOO_MANY_REQUESTS
 * (nothing queued), MC_ERR_INVALID_ARGUMENT (reqs NULL with count > 0).
 */
int mc_te_submit(mc_te_engine_t* engine, uint64_t batch, const mc_te_request_t* reqs,
                 size_t count);

/*
 * mc_te_get_status stores the status of request task_id of batch in *out.
 * Returns MC_OK whatever the request's state; when out->status is
 * MC_TE_STATUS_FAILED, mc_last_error() on this thread holds the reason
 * (otherwise ""). Errors: MC_ERR_INVALID_HANDLE (unknown batch),
 * MC_ERR_INVALID_ARGUMENT (task_id never submitted, out NULL).
 */
int mc_te_get_status(mc_te_engine_t* engine, uint64_t batch, size_t task_id,
                     mc_te_status_t* out);

/*
 * mc_te_free_batch releases batch. Errors: MC_ERR_BATCH_BUSY while any of its
 * requests is WAITING (nothing is freed; poll and retry),
 * MC_ERR_INVALID_HANDLE (unknown or already freed batch).
 */
int mc_te_free_batch(mc_te_engine_t* engine, uint64_t batch);

/* ---- 1.1 ---------------------------------------------------------------- */

/* One buffer of a segment (upstream BufferDesc's address and length). */
typedef struct mc_te_buffer {
  uint64_t addr;    /* virtual address in the segment owner's process */
  uint64_t length;  /* bytes */
} mc_te_buffer_t;

/*
 * mc_te_get_local_name fills *out (mc_buf_t, common.h; free it with
 * mc_buf_free) with this engine's segment name, NUL-terminated (len counts
 * the NUL): local_server_name as given, or in P2PHANDSHAKE mode the
 * "host:port" the engine took. Errors: MC_ERR_INVALID_ARGUMENT (out NULL),
 * MC_ERR_INVALID_HANDLE.
 */
int mc_te_get_local_name(mc_te_engine_t* engine, mc_buf_t* out);

/*
 * mc_te_get_rpc_port stores the port of the engine's handshake endpoint in
 * *out_port (upstream getRpcPort: in P2PHANDSHAKE mode the port of the
 * segment name). Errors: MC_ERR_INVALID_ARGUMENT (out_port NULL),
 * MC_ERR_INVALID_HANDLE.
 */
int mc_te_get_rpc_port(mc_te_engine_t* engine, int32_t* out_port);

/*
 * mc_te_refresh_segment re-reads the descriptor of an open peer segment, so
 * buffers it registered since mc_te_open_segment become reachable through
 * the same id (upstream syncSegmentCache). MC_TE_LOCAL_SEGMENT: MC_OK,
 * nothing to do. Errors: MC_ERR_NOT_FOUND (id not open, or the peer's
 * descriptor is gone), MC_ERR_METADATA.
 */
int mc_te_refresh_segment(mc_te_engine_t* engine, int32_t segment_id);

/*
 * mc_te_get_segment_buffers copies the buffers of segment segment_id into
 * out[0..capacity) and stores how many the segment has in *out_count (which
 * may exceed capacity: call again with a larger array; out may be NULL when
 * capacity is 0). For MC_TE_LOCAL_SEGMENT these are the engine's
 * remote-accessible registrations, sorted by address; for a peer, the
 * buffers of its descriptor as last read (mc_te_open_segment or
 * mc_te_refresh_segment), in the descriptor's order. Errors:
 * MC_ERR_INVALID_ARGUMENT (out_count NULL, or out NULL with capacity > 0),
 * MC_ERR_NOT_FOUND (id not open).
 */
int mc_te_get_segment_buffers(mc_te_engine_t* engine, int32_t segment_id, mc_te_buffer_t* out,
                              size_t capacity, size_t* out_count);

/*
 * mc_te_wait_batch waits up to timeout_ms milliseconds (0: does not wait)
 * for every request submitted so far to batch to finish, then stores their
 * combined state in *out (upstream getBatchTransferStatus): FAILED if any
 * failed (mc_last_error() then names the first failed task and why, and
 * the call still returns MC_OK), else WAITING if any is still running (the
 * timeout passed), else COMPLETED (also for a batch with nothing
 * submitted); transferred_bytes is the sum over the requests. The batch is
 * not freed. Errors: MC_ERR_INVALID_HANDLE (unknown batch),
 * MC_ERR_INVALID_ARGUMENT (out NULL).
 */
int mc_te_wait_batch(mc_te_engine_t* engine, uint64_t batch, uint64_t timeout_ms,
                     mc_te_status_t* out);

/*
 * mc_te_probe checks that the engine published as segment_name is alive by
 * exchanging a Probe frame with its handshake endpoint (upstream
 * sendProbe). MC_OK when it answers. Errors: MC_ERR_NOT_FOUND (no such
 * engine published, or nothing listens at its address; in P2PHANDSHAKE
 * mode also a name that is not host:port), MC_ERR_SOCKET (unreachable),
 * MC_ERR_REJECT_HANDSHAKE / MC_ERR_MALFORMED_JSON (it answered wrongly),
 * MC_ERR_METADATA, MC_ERR_INVALID_ARGUMENT (segment_name NULL or empty).
 * segment_name is not retained.
 */
int mc_te_probe(mc_te_engine_t* engine, const char* segment_name);

/*
 * mc_te_send_notify delivers the notification {notify_name, notify_msg}
 * to the engine published as segment_name, which queues it for its
 * mc_te_get_notifies (upstream's NotifyDesc, which submitTransferWithNotify
 * sends after a transfer; here the caller sends it, typically once its
 * transfer COMPLETED). notify_name is conventionally the sender's segment
 * name; both may be empty (not NULL); no string is retained. Errors: as
 * mc_te_probe; MC_ERR_REJECT_HANDSHAKE also when the receiver's queue
 * (65536 notifications) is full.
 */
int mc_te_send_notify(mc_te_engine_t* engine, const char* segment_name, const char* notify_name,
                      const char* notify_msg);

/*
 * mc_te_get_notifies fills *out (free it with mc_buf_free) with the
 * notifications received since the last call, oldest first, and forgets
 * them (upstream getNotifies): a JSON array of objects
 * {"name": ..., "notify_msg": ...}, "[]" when there are none; not
 * NUL-terminated. Errors: MC_ERR_INVALID_ARGUMENT (out NULL),
 * MC_ERR_INVALID_HANDLE.
 */
int mc_te_get_notifies(mc_te_engine_t* engine, mc_buf_t* out);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_TRANSFER_ENGINE_H */
