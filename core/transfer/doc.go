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
// Concurrency: every Engine method is safe for concurrent use. A batch may be
// submitted to and polled from several goroutines. Requests run on goroutines
// owned by the engine; Close waits for them.
//
// Shutdown order: Close stops accepting submissions, waits for running
// requests, closes peers and the transport listener, then removes this
// engine's metadata keys. Memory is owned by the caller (see package memory).
package transfer
