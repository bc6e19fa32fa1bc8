package transfer

import (
	"context"

	"github.com/mooncake-go/mooncake/core/metadata"
)

// Transport moves bytes for one protocol. An engine installs one transport;
// the transport serves incoming requests against the engine's Target and
// dials peers from their published descriptors. Implementations: tcp (real
// sockets, upstream's v2 acknowledged framing) and loopback (in-memory, with
// fault injection for tests).
type Transport interface {
	// Protocol is the name published in segment descriptors ("tcp", "loopback").
	Protocol() string
	// Listen starts serving incoming requests for the segment named name,
	// checking each against t. Called once by the engine.
	Listen(name string, t Target) error
	// Publish fills the protocol-specific fields of this engine's descriptor
	// and rpc_meta entry (e.g. tcp_data_port, ip_or_host_name).
	Publish(d *metadata.SegmentDesc, rpc *metadata.RPCMeta)
	// Dial returns a Peer for a remote segment described by d and rpc.
	Dial(ctx context.Context, d metadata.SegmentDesc, rpc metadata.RPCMeta) (Peer, error)
	// Close stops the listener and closes idle connections. Errors: none
	// beyond the listener's own.
	Close() error
}

// MemoryDeregisterer is implemented by transports that register memory
// with hardware on first use and keep it registered (rdma: memory regions
// and the rkeys peers hold). The engine calls DeregisterMemory with a
// buffer's range when the buffer is unregistered, so that no registration
// outlives it and peers' keys to it stop working; it returns how many
// registrations it dropped.
type MemoryDeregisterer interface {
	DeregisterMemory(addr, length uint64) int
}

// Peer performs requests against one remote segment.
type Peer interface {
	// Do performs one whole request synchronously: Write sends local to
	// [remoteAddr, +len(local)) and returns only once the target reported the
	// bytes landed; Read fills local from the remote range. Errors wrap
	// ErrRejected when the target refused the range, ErrClosed after Close,
	// or the I/O error; ctx bounds the wait.
	Do(ctx context.Context, op Opcode, local []byte, remoteAddr uint64) error
	// Close releases the peer's connections.
	Close() error
}

// VectorPeer is an optional Peer feature: DoV performs one request whose
// local side is the concatenation of the buffers local (in order; none
// empty) and whose remote side is [remoteAddr, +total), as Do would for one
// contiguous buffer, with the same acknowledgement and errors. A transport
// that implements it moves a scatter-gather Request with as few messages
// as a contiguous one (tcp) or under one lookup of the remote range (shm);
// for other peers the engine calls Do once per buffer.
type VectorPeer interface {
	DoV(ctx context.Context, op Opcode, local [][]byte, remoteAddr uint64) error
}

// Prober is an optional Transport feature: Probe reports whether a live
// engine answers at the address a descriptor publishes (nil = alive). The
// engine uses it to refuse a segment name that a running peer already owns.
type Prober interface {
	Probe(ctx context.Context, d metadata.SegmentDesc, rpc metadata.RPCMeta) error
}
