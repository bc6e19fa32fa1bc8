// Package p2pmeta is upstream Mooncake's P2P handshake metadata mode
// (connection string "P2PHANDSHAKE") as a metadata.Store: there is no
// metadata server; every engine serves its own segment descriptor on its
// handshake/RPC port and peers fetch it when they open the segment. The
// engine itself is unchanged: it publishes to and reads from this Store like
// any other.
//
// Naming. Listen binds the handshake listener (default 127.0.0.1:0; with
// WithPortRange(MinRPCPort, MaxRPCPort) a free port of upstream's range) and
// Name returns "<ip>:<port>" ("[<ipv6>]:<port>"). The engine must use exactly
// that as its segment name (transfer.Config.Name), and a peer's segment name
// is that peer's "host:port", learned out of band.
//
// Keys. Only "mooncake/[<cluster>/]ram/<name>" and
// "mooncake/[<cluster>/]rpc_meta/<name>" are accepted, <name> being host:port;
// anything else fails with metadata.ErrInvalidKey.
//
//   - The engine's own keys (<name> == Name()) live in memory: Put, Get and
//     Delete behave as in memmeta. The segment key last Put is the
//     descriptor served to peers.
//   - Get of a peer's ram key connects to <name>, sends this engine's
//     descriptor (or {} before there is one) in a Metadata frame and returns
//     the peer's descriptor from the reply. An empty reply ({} or null), or a
//     refused connection (nothing listens there), is metadata.ErrNotFound;
//     other connect failures are ErrUnreachable. Nothing is cached (the
//     engine caches opened segments).
//   - Get of a peer's rpc_meta key returns {"ip_or_host_name": host,
//     "rpc_port": port} derived from the name, without I/O.
//   - Put and Delete of a peer's key fail with ErrPeerKey.
//
// Wire format (upstream handshake channel, spec section 1.6): each frame is
// a little-endian uint64 length (1 + payload bytes), a uint8 type (0
// Connection, 1 Metadata, 2 Notify, 3 Probe) and a JSON payload; a legacy
// frame has no type byte (length = payload bytes) and is a Connection. The
// reply uses the request's framing and type. A frame longer than the limit
// (WithMaxFrame, default 1 MiB, upstream MC_HANDSHAKE_MAX_LENGTH) is rejected
// before its body is read; an unknown type byte or a payload that is not
// JSON closes the connection. The listener answers Metadata (its
// descriptor), Probe ({"status":"success"}), Notify (queued for Notifies,
// reply notify_msg "success") and Connection (a reply_msg error: RDMA queue
// pairs are not set up here). The client side (Get, Probe, SendNotify) sends
// one frame per connection, as upstream, bounded by the connect timeout
// (default 5 s, upstream MC_HANDSHAKE_CONNECT_TIMEOUT), the I/O timeout
// (default 60 s) and the caller's ctx.
//
// Concurrency: a Store is safe for concurrent use. One mutex guards the own
// keys, the notification queue and the set of accepted connections; no I/O
// happens under it. Each accepted connection has its own goroutine. Close
// stops the listener, closes accepted connections, aborts outbound requests
// and waits for every goroutine the Store started; own keys remain usable
// afterwards so an engine closed after its Store can still delete them.
package p2pmeta
