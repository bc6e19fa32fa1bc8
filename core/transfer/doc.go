// Package transfer is the transfer engine: it moves bytes between registered
// memory segments of processes, mirroring upstream Mooncake's Transfer Engine
// batch API (allocateBatchID / submitTransfer / getTransferStatus /
// freeBatchID).
//
// A segment is the set of buffers one engine has registered; peers address
// them by virtual address (TargetOffset), exactly as upstream's RAM segments.
// A request is (READ|WRITE, local source address, target segment, target
// address, length). The engine resolves the local address against its own
// registry, checks the remote range against the peer's published descriptor,
// and hands the request to a Transport (tcp across processes, loopback in
// tests). The target side checks every incoming range again against its own
// registry, so a peer can never touch memory outside a registered region.
//
// Device memory: with Config.CUDA (a DeviceRuntime, e.g. *cuda.Runtime) an
// engine registers GPU memory with RegisterDeviceMemory as a buffer with
// location "cuda:N", published under that name like any buffer; its bytes
// are not host-addressable, so the registry keeps no []byte for it and
// Resolve refuses it. Requests whose local side is device memory stage it
// through pooled host staging slices (Config.DeviceSlice, 2 MiB, pinned
// when the runtime can, the device copy of one slice overlapping the
// transfer of the other) for the network
// transport; on the target side a transport that supports DeviceTarget
// (tcp) copies into or out of the device buffer through its own bounce
// buffer (a WRITE's copies overlapping its receipt), acknowledging a WRITE
// only once it landed. Within one engine
// copies use the matching cudaMemcpy kind. For a peer on the same host
// (equal HostID) whose device buffer carries an IPC token
// (metadata.BufferDesc.IPCHandle), the engine maps the buffer once
// (cached per segment, unmapped on CloseSegment, Close, or a refresh that
// shows it changed) and copies directly, device to device or host to
// device; if the mapping cannot be opened the request takes the network
// path. Without a runtime, RegisterDeviceMemory fails with "unsupported: no
// CUDA runtime" (ErrUnsupported), and a peer's requests to a device range
// this engine does not hold are rejected like any unregistered range.
// Host-only requests pay for none of this: device memory is detected only
// after a host lookup failed.
//
// Concurrency: every Engine method is safe for concurrent use. A batch may be
// submitted to and polled from several goroutines. Requests run on goroutines
// owned by the engine; Close waits for them.
//
// Shutdown order: Close stops accepting submissions, waits for running
// requests, closes peers and the transport listener, then removes this
// engine's metadata keys. Memory is owned by the caller (see package memory).
package transfer
