// Package p2p is a client-only store for large, temporary objects such as
// model checkpoints (upstream Mooncake's mooncake-p2p-store): there is no
// master; object metadata lives in etcd and the bytes move over the
// transfer engine (core/transfer, tcp transport). Every node that fetched a
// shard of an object serves it to the next ones, so the source's outbound
// traffic stays near one copy of the object however many nodes fetch it.
//
// Operations (upstream P2PStore's): Register publishes memory the caller
// owns as an object without copying it (the buffers become segments of this
// store's engine); Unregister stops serving a registered object; List
// returns the objects whose name has a prefix; GetReplica fetches an object
// into memory the caller owns and then serves it; DeleteReplica stops
// serving a fetched object. Objects are split into shards of at most
// maxShardSize bytes (default DefaultMaxShardSize, 64 MiB), shards never
// crossing a buffer boundary; each shard's CRC-32C (Castagnoli) is stored
// with the object's metadata.
//
// etcd layout, under Config.Prefix (default DefaultPrefix):
//
//	<prefix>objects/<name>                  object metadata (JSON), no lease
//	<prefix>holders/<gen>/<shard>/<segment>  one holder of one shard, under the holder's lease
//
// <gen> is a random id chosen when the object is registered, so holders of
// an earlier object of the same name never mix with a new one. A holder
// key is written only after the shard is complete in the holder's memory
// and its checksum verified (the registering store writes all of them at
// Register), so no shard is fetched from a node that does not have all of
// it. Every Store holds one etcd lease (Config.LeaseTTL, kept alive in the
// background); a store that dies stops renewing it and its holder keys
// vanish within the TTL. The object key has no lease: it outlives its
// holders (as upstream's payload outlives its gold copy) and is deleted by
// the last store that explicitly stops serving the object (Unregister or
// DeleteReplica leaving no holder key).
//
// GetReplica fetches shards in parallel (Config.Concurrency at once). The
// next shard is one some peer already holds (random among those), else one
// that nobody is fetching from the origin, claimed under this store's
// lease at <prefix>claims/<gen>/<shard>, else (every remaining shard is
// being fetched by others) it waits for those to land, up to
// Config.ClaimWait, so the origin sends each shard about once. A shard is
// read from a holder picked at random among its current holders,
// preferring peers over the object's origin (upstream tries replicas
// before the gold copy). A failed read or a
// checksum mismatch excludes that holder for that shard and the shard is
// fetched from another; a shard with no usable holder is re-listed with
// backoff until Config.HolderWait passes, then GetReplica fails with
// ErrNoHolder. Each shard is announced as soon as it has landed and been
// verified.
//
// Memory contract: buffers given to Register or GetReplica must stay
// allocated, unmoved and unmodified (Register) until Unregister,
// DeleteReplica or Close returns; peers read them at any time in between.
// Off-heap memory (core/memory.Map) is the intended kind. A peer that is
// still reading when the memory is reused gets torn bytes; its checksum
// check rejects them and it fetches the shard elsewhere.
//
// Concurrency: a Store is safe for concurrent use; operations on different
// names run in parallel, and a second GetReplica or Register of a name this
// store already holds fails with ErrOpened. One mutex guards the set of held
// objects; no I/O runs under it.
package p2p
