// Package rdma is the transfer engine's RDMA transport over libibverbs
// (InfiniBand and RoCE), built only with the `rdma` build tag:
//
//	go build -tags rdma ./...   # needs cgo and libibverbs (Debian/Ubuntu: apt-get install libibverbs-dev)
//
// Without the tag the package is a pure-Go twin with the same API whose
// Available and New return ErrNotBuilt ("unsupported: rdma (built without
// the rdma tag)"), so callers fall back to TCP as upstream does when no HCA
// is found. With the tag but no RDMA device, they return ErrNoDevice
// ("unsupported: rdma: no RDMA device"). Both wrap transfer.ErrUnsupported.
//
// # Design
//
// One Transport opens one device (Config.Device, or the first one listed
// by ibv_get_device_list), allocates a protection domain and serves a small
// TCP control channel (the handshake, upstream's RPC channel) on
// Config.BindAddr. Publish advertises that address as the segment's
// rpc_meta endpoint and sets protocol "rdma". Data moves with one-sided
// RDMA READ / RDMA WRITE on reliable-connected (RC) queue pairs; the target
// CPU never touches the bytes.
//
//   - Dial opens the control connection. Queue pairs are created lazily,
//     up to Config.QPsPerPeer per peer (upstream MC_NUM_QP_PER_EP), each
//     with its own completion queue; a request holds one QP for its
//     duration, so a peer runs up to QPsPerPeer requests in parallel.
//   - Connecting a QP exchanges {LID, GID, QPN, PSN, MTU} over the control
//     channel; both sides walk INIT -> RTR -> RTS.
//   - Memory regions are registered lazily. Before the first access to a
//     remote range the initiator asks the target for an rkey; the target
//     checks the range against its registered buffers (transfer.Target), so
//     a peer can only obtain keys for remote-accessible memory, and
//     registers the whole containing buffer when the Target can list its
//     buffers (transfer.Registry can). The initiator registers its local
//     buffers the same way. Keys are cached on both sides.
//   - A request is split into Config.SliceSize work requests (upstream
//     MC_SLICE_SIZE), at most Config.MaxWR outstanding, each signalled;
//     the caller's goroutine polls the QP's completion queue. A WRITE
//     returns after every slice completed, i.e. was acknowledged by the
//     target HCA. A failed completion or a cancelled context destroys the
//     QP; the next request builds a new one.
//
// Differences from upstream, on purpose or for now: the control messages
// are this package's own JSON lines, not upstream's handshake JSON, so it
// interoperates only with itself; rkeys travel over the control channel
// instead of the segment descriptor (core/metadata has no rkey fields); one
// device per transport (no multi-rail priority matrix, no rail failover);
// no GPUDirect (memory is registered with ibv_reg_mr, host memory only).
// Memory regions stay registered until Close or DeregisterMemory: the
// engine does not yet tell the transport when a buffer is unregistered, so
// a peer holding a cached rkey could still reach it — call
// DeregisterMemory before unmapping a buffer.
//
// # What is tested
//
// Built and vetted with and without the tag; the no-device and no-tag
// paths, Config validation, the control-message codec and the memory
// region cache are unit-tested everywhere. The verbs path (device open,
// PD/CQ/QP setup, QP state transitions, ibv_reg_mr, posting and polling
// READ/WRITE) compiles against rdma-core 44 but is UNTESTED: no RDMA
// hardware (or rdma_rxe soft-RoCE device) was available. Run
// transfertest's conformance suite on a host with a device before relying
// on it.
//
// Concurrency: a Transport and its peers are safe for concurrent use. A
// request owns one QP and its CQ while it runs; the memory-region caches
// have their own locks, and verbs calls are never made under a lock.
package rdma
