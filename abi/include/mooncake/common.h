/*
 * mooncake/common.h - status codes and per-thread error text shared by every
 * C ABI of libmooncake.so (mc_te_, mc_store_, mc_vllm_, ...).
 *
 * Conventions that hold for every mc_ function of every header:
 *
 *  - A function that can fail returns an int status: MC_OK (0) on success,
 *    a negative MC_ERR_* code on failure. Out parameters are written only on
 *    MC_OK.
 *  - Such a function also sets this thread's last-error text: the reason on
 *    failure, "" on success (unless its header says otherwise). Read it with
 *    mc_last_error() on the same thread.
 *  - Handles are opaque pointers. They are never addresses of memory the
 *    caller may read or write, and they stay valid until the matching
 *    destroy/free call; using one afterwards returns an error (never a crash,
 *    within the limits of what a stale value can be told apart from a live one).
 *  - Strings passed in are NUL-terminated, read during the call only and never
 *    retained. Strings returned are owned by the library (see each function).
 *  - Every pointer and length is validated; a NULL pointer where one is
 *    required, or a length that is zero or runs past the end of the address
 *    space, returns MC_ERR_INVALID_ARGUMENT.
 *  - No Go panic crosses into C: an internal failure returns MC_ERR_INTERNAL
 *    and the process keeps running.
 *  - Every function is safe to call from any thread, concurrently.
 *
 * Versioning: mc_abi_version() returns (major << 16) | minor of this header;
 * additions bump the minor, any other change bumps the major. Each adapter
 * header has its own *_abi_version(). A header whose major is 0 is a draft:
 * declared, not implemented, and free to change (see the header).
 *
 * History: 1.0 codes, mc_last_error, mc_abi_version; 1.1 mc_buf_t and
 * mc_buf_free.
 */
#ifndef MOONCAKE_COMMON_H
#define MOONCAKE_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MC_ABI_VERSION_MAJOR 1
#define MC_ABI_VERSION_MINOR 1
#define MC_ABI_VERSION ((uint32_t)((MC_ABI_VERSION_MAJOR << 16) | MC_ABI_VERSION_MINOR))

/*
 * Status codes. -1 .. -999 are upstream Mooncake's values: the MC_ERR_ codes
 * below mirror the Transfer Engine's include/error.h value for value, so
 * code written against upstream's transfer_engine_c.h can keep its checks;
 * mc_store_ functions also return upstream Mooncake Store's ErrorCode values
 * that the Transfer Engine does not use (-10, -400 .. -901; see store.h).
 * -1000 and below are mooncake-go's own. Adapters add codes only in ranges
 * this header reserves for them.
 */
#define MC_OK 0

/* Upstream TE codes (include/error.h). */
#define MC_ERR_INVALID_ARGUMENT (-1)        /* bad parameter: NULL pointer, zero or overflowing length, bad value */
#define MC_ERR_TOO_MANY_REQUESTS (-2)       /* more requests than the batch was allocated for */
#define MC_ERR_ADDRESS_NOT_REGISTERED (-3)  /* local or remote range outside every registered buffer */
#define MC_ERR_BATCH_BUSY (-4)              /* freeing a batch with requests still in flight */
#define MC_ERR_DEVICE_NOT_FOUND (-6)        /* no usable device/NIC */
#define MC_ERR_ADDRESS_OVERLAPPED (-7)      /* registration overlaps a registered buffer */
#define MC_ERR_DNS (-101)                   /* host name not resolvable */
#define MC_ERR_SOCKET (-102)                /* socket error (bind, listen, connect) */
#define MC_ERR_MALFORMED_JSON (-103)        /* malformed descriptor/handshake payload */
#define MC_ERR_REJECT_HANDSHAKE (-104)      /* peer refused the connection */
#define MC_ERR_METADATA (-200)              /* metadata service failed or unreachable */
#define MC_ERR_ENDPOINT (-201)              /* endpoint creation/use failure */
#define MC_ERR_CONTEXT (-202)               /* device context failure */
#define MC_ERR_NUMA (-300)                  /* no NUMA support */
#define MC_ERR_CLOCK (-301)                 /* no usable clock */
#define MC_ERR_MEMORY (-302)                /* out of memory */
#define MC_ERR_UNSUPPORTED (-303)           /* upstream ERR_NOT_IMPLEMENTED: feature, protocol or mode not available */

/* mooncake-go codes (-1000 .. -1099). */
#define MC_ERR_INTERNAL (-1000)             /* bug or unexpected failure (a caught panic, for one) */
#define MC_ERR_INVALID_HANDLE (-1001)       /* handle or id unknown, already released, or of another kind */
#define MC_ERR_NOT_FOUND (-1002)            /* named object absent (e.g. no segment published under that name) */
#define MC_ERR_CLOSED (-1003)               /* the object is shutting down or was destroyed meanwhile */
#define MC_ERR_TIMEOUT (-1004)              /* the call gave up waiting (metadata service, peer) */

/*
 * Reserved for adapters (each header defines its codes in its range):
 *   mc_store_   -1100 .. -1999  (store codes whose upstream value a TE code already has)
 *   mc_vllm_    -3000 .. -3099
 *   mc_sglang_  -3100 .. -3199
 *   mc_lmcache_ -3200 .. -3299
 *   mc_nixl_    -3300 .. -3399
 *   mc_trtllm_  -3400 .. -3499
 *   mc_p2p_     -3500 .. -3599
 * Below -3599: unallocated.
 */

/*
 * A byte buffer the library allocated and hands over to the caller (a
 * function that fills one says so). data is NULL when len is 0. The caller
 * owns it and releases it with mc_buf_free; the bytes need not be text and
 * are not NUL-terminated unless the function says so.
 */
typedef struct mc_buf {
  void* data;
  size_t len;
} mc_buf_t;

/*
 * mc_buf_free frees buf->data and sets buf to {NULL, 0}; NULL buf, or a buf
 * already freed, is a no-op. Only for buffers filled by mc_ functions.
 * Returns nothing and leaves mc_last_error() unchanged.
 */
void mc_buf_free(mc_buf_t* buf);

/*
 * mc_last_error returns the text of the last status this thread got from an
 * mc_ function: the reason after a failure, "" after a success. Never NULL.
 * The string is owned by the library, stored per thread, and valid until the
 * next mc_ call on the same thread (copy it to keep it). It is truncated to
 * a bounded size (about 1 KiB). Calling mc_last_error itself changes nothing.
 */
const char* mc_last_error(void);

/* mc_abi_version returns MC_ABI_VERSION of the library: (major << 16) | minor. */
uint32_t mc_abi_version(void);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_COMMON_H */
