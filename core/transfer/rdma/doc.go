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
// One Transport opens one or more devices (Config.Devices; default every
// device ibv_get_device_list returns, skipping those whose port is not
// active), with a protection domain and a target-side completion queue
// each, and serves a small TCP control channel (the handshake, upstream's
// RPC channel) on Config.BindAddr. Publish advertises that address as the
// segment's rpc_meta endpoint and sets protocol "rdma". Data moves with
// one-sided RDMA READ / RDMA WRITE on reliable-connected (RC) queue pairs;
// the target CPU never touches the bytes.
//
//   - Path selection (spec §1.7, topology.Selector). The transport holds a
//     priority matrix (Config.Matrix, default discovered from sysfs,
//     restricted to the opened devices): for each memory location the
//     preferred devices (same NUMA node / PCIe switch) and the others.
//     Each slice of a request picks its local device from the entry of
//     the local buffer's location (the Location it was registered with in
//     the engine's transfer.Registry; "*" = any device when unknown), and
//     its peer device from the peer's matrix entry for the target buffer's
//     location: a preferred device at random, or round-robin with
//     Config.RoundRobin; with Config.DestDeviceAffinity the peer device of
//     the same name when listed. The peer's matrix and device names come
//     from a "topology" control message, asked once per peer; the target
//     buffer's location comes with its rkeys.
//   - Retries: slices whose path failed (work-completion error, failed
//     post, QP that could not be connected) are resubmitted up to
//     Config.RetryCount times (MC_RETRY_CNT); retry k takes the k-th device
//     of the preferred-then-other walk on both sides, so a failing rail is
//     left. A refused range, a closed peer, an unreachable control channel
//     or a done context is not retried.
//   - Endpoints: a peer holds one endpoint per (local device, peer device)
//     path, created on first use, each with up to Config.QPsPerPeer QPs
//     (upstream MC_NUM_QP_PER_EP) and a completion queue per QP. The
//     slices of one request are grouped by path; each path's slices go on
//     one QP of its endpoint, paths in parallel.
//   - Connecting a QP exchanges {LID, GID, QPN, PSN, MTU} over the control
//     channel, naming the peer device that holds the other end; both sides
//     walk INIT -> RTR -> RTS.
//   - Memory regions are registered lazily, on every opened device (as
//     upstream registers each buffer with every NIC). Before the first
//     access to a remote range the initiator asks the target for its rkeys
//     (one per target device); the target checks the range against its
//     registered buffers (transfer.Target), so a peer can only obtain keys
//     for remote-accessible memory, and registers the whole containing
//     buffer when the Target can list its buffers (transfer.Registry can),
//     for remote reads and writes, or for remote reads only where peers
//     may only read it (a read-only registration: the answer says so and
//     the initiator refuses WRITEs to it with transfer.ErrRejected).
//     A registration that also grants remote writes never answers for a
//     read-only buffer, and an initiator that cached a read-only answer
//     asks again once before refusing a WRITE. Memory mapped shared and
//     read-only, which verbs refuse to register with write access
//     (EFAULT), is registered without local write access (Linux 6.2 and
//     later; older kernels pin every registration for writing and refuse
//     such a mapping too, so it is not served over rdma there) and can
//     then not be an RDMA READ's destination. The initiator registers its local
//     buffers the same way. Keys are cached on both sides.
//   - A request is split into Config.SliceSize work requests (upstream
//     MC_SLICE_SIZE), at most Config.MaxWR outstanding per QP, each
//     signalled; the request's goroutines poll their QPs' completion
//     queues. A WRITE returns after every slice completed, i.e. was
//     acknowledged by the target HCA. A failed completion or a cancelled
//     context destroys the QP; the next request on that path builds a new
//     one.
//
// Differences from upstream, on purpose or for now: the control messages
// are this package's own JSON lines, not upstream's handshake JSON, so it
// interoperates only with itself; rkeys and the priority matrix travel over
// the control channel instead of the segment descriptor (core/metadata has
// no rkey or priority_matrix fields); a failed rail is not paused
// (MC_RDMA_RAIL_PAUSE_SECONDS) and there is no slice timeout; endpoints
// are not evicted (MC_MAX_EP_PER_CTX); no GPUDirect (memory is registered
// with ibv_reg_mr, host memory only, so "cuda:N" entries of the matrix are
// unused). Memory regions stay registered until the buffer is
// unregistered (transfer.Engine.UnregisterLocalMemory calls
// DeregisterMemory, transfer.MemoryDeregisterer), or Close; a peer's
// cached rkey then fails with a remote access error once, and the peer
// asks for a new rkey on its next request.
//
// # What is tested
//
// Built and vetted with and without the tag; the no-device and no-tag
// paths, Config validation, the control-message codec, the memory region
// cache and the path selection glue (buffer location and attempt -> local
// device, peer device, grouping slices by path, the retry loop over failing
// paths; rails.go) are unit-tested everywhere. The verbs path (device
// open, PD/CQ/QP setup, QP state transitions, ibv_reg_mr, posting and
// polling READ/WRITE, several devices at once) compiles against rdma-core
// 44 but is UNTESTED: no RDMA hardware (or rdma_rxe soft-RoCE device) was
// available. Run transfertest's conformance suite on a host with a device
// (two, for multi-rail) before relying on it.
//
// Concurrency: a Transport and its peers are safe for concurrent use. A
// request owns one QP (and its CQ) per path it uses while it runs, one
// goroutine each; the memory-region caches and the selector have their own
// locks, and verbs calls are never made under a lock.
package rdma
