// Package shm is the transfer engine's shared-memory transport for peers on
// the same host. The target's buffers are memory files (memfd, made by
// memory.MapShared); an initiator asks the target once per buffer for the
// file's descriptor over a unix socket, maps the whole buffer read-write
// (MAP_SHARED) and from then on every READ and WRITE is a bounds-checked
// copy() between the caller's local bytes and that mapping: no syscall, no
// socket, no extra copy.
//
// # Addressing and publication
//
// Listen binds a SOCK_SEQPACKET unix socket: by default in the abstract
// namespace, "@mooncake-shm-<name>-<random>", or, with Config.SocketDir, a
// file "<dir>/mooncake-shm-<name>-<random>.sock" (mode 0600, removed by
// Close). metadata.SegmentDesc has no field for a socket address, so Publish
// writes protocol "shm" into the descriptor and the socket address into the
// rpc_meta entry: ip_or_host_name = "unix:" + address (an abstract address
// keeps its leading '@'), rpc_port = 0. Dial reads it back from there.
//
// # Wire protocol
//
// One packet per message, little-endian, 32 bytes each way. Request: uint32
// magic "MCSH" (0x4D435348), uint8 version 1, uint8 op 1 (descriptor
// request), uint16 zero, uint64 request id, uint64 addr, uint64 length.
// Response: uint32 magic, uint32 status, uint64 the request's id, uint64
// base, uint64 size. Status 0 (OK) carries exactly one descriptor as
// SCM_RIGHTS ancillary data: the memory file of the buffer [base, base+size)
// holding [addr, addr+length), the file's byte 0 being base. Other statuses
// carry none: 1 the range is not inside one registered, remote-accessible
// buffer; 2 that buffer is not backed by a memory file; 3 the target refused
// to share it (see below). A malformed request drops the connection. A
// peer drops it likewise on a malformed reply, one with the wrong number of
// descriptors, or one answering a request it never sent (id 0 or past its
// last id); a late reply to a request it abandoned is discarded.
//
// # Trust model
//
// A process that receives a buffer's descriptor can read and write the whole
// registered buffer for as long as it keeps the mapping, but nothing outside
// it: the target only hands out a descriptor whose file is exactly the
// buffer (file size == buffer length, checked with fstat) and is sealed
// against resizing (F_SEAL_SHRINK|F_SEAL_GROW, as memory.MapShared leaves
// it), so the peer cannot shrink the file under the target's own mapping and
// crash it with SIGBUS. Buffers registered from anonymous memory, files that
// are larger than the buffer (a buffer registered from part of a region) and
// unsealed files (plain files under /dev/shm) are refused. This is the same
// guarantee as the tcp transport's target-side check, at buffer granularity
// instead of per request. The initiator checks every request against the
// buffer's bounds before copying (overflow-safe), so a request that leaves
// the buffer fails with transfer.ErrRejected without touching memory.
//
// By default the target serves only connections from processes running as
// its own effective user id (SO_PEERCRED); Config.AllowOtherUsers lifts
// that. Anyone allowed to connect can obtain any memfd-backed,
// remote-accessible buffer, exactly as anyone who can reach a tcp target's
// port can read and write its buffers.
//
// Access is not revoked when the target unregisters a buffer: a peer that
// mapped it keeps reading and writing the same pages until it closes the
// segment (Peer.Close) or sees the target's transport close. The pages stay
// valid for both sides (the file lives while any mapping does), so this
// never faults, but the target must not reuse an unregistered buffer for
// other data while peers may still hold it, and should close the region
// rather than recycle it.
//
// # Liveness
//
// A peer keeps its control connection open. When the target's transport
// closes, the connection drops and the peer fails every later request with
// ErrPeerGone, even for buffers it has mapped; a copy racing with the close
// may still land in the (then orphaned) pages. A peer that cannot reach the
// socket fails at once with the dial error. Every blocking step (dial,
// request, reply) honours the caller's context.
//
// # Concurrency
//
// A Transport and its peers are safe for concurrent use. Copies run in
// parallel under a read lock; the first request for an unmapped buffer asks
// the target (one descriptor request in flight per peer; concurrent callers
// for the same buffer wait and reuse its mapping). Peer.Close waits for
// running copies, then unmaps everything. Transport.Close stops the
// listener, closes served connections and waits for their handlers; peers
// dialled from the transport are closed by their owners (the engine).
//
// The target must implement FDSource in addition to transfer.Target; Listen
// refuses a target that does not.
package shm
