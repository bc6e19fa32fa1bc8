// Package ha makes the pool's master highly available: several masters
// share one etcd; one leads and serves, the others stand by; the object
// table is replicated through etcd, so that a new leader serves every
// object the old one had committed (upstream Mooncake without its OpLog
// loses all metadata on failover, upstream issue #1871).
//
// # Election
//
// Elector campaigns with go.etcd.io/etcd/client/v3/concurrency: a session
// (an etcd lease, DefaultSessionTTL = 5 s as upstream, kept alive) and an
// election on mooncake-store/<cluster_id>/master_view whose value is the
// candidate's RPC address. Clients find the leader as the election key with
// the lowest create revision (Leader, WatchLeader). A Term ends when its
// session does: a leader that cannot refresh its lease stops leading, and
// a standby takes over once the lease expired (at once after Resign).
//
// # Replication
//
// Replicator is the leader's master.Observer. Each committed mutation
// (segment mounted or unmounted, object committed or removed) gets the next
// sequence number and is queued; a flusher appends the queue to the
// operation log in etcd, mooncake-store/<cluster_id>/oplog/<seq, 20 digits>,
// each value a JSON array of events starting at that sequence number, in
// as few writes as possible (group commit). Every write is an etcd
// transaction conditional on the term's election key (Term.Fence): once
// another master leads, nothing the old one writes lands.
//
// Durability before visibility: the server calls Replicator.Sync after
// every RPC and before answering it. Sync waits until every event observed
// so far is durable, so no answer - a successful put, a read of a freshly
// committed object, space handed out after a removal - reflects state that
// a new leader would not have. The etcd I/O happens outside the master's
// lock; one write serves all the RPCs that arrived meanwhile. The cost is
// one etcd round trip (a Raft commit) added to each mutating RPC.
// A write that fails or is refused fails the replicator for good (Failed);
// the server then stops serving and campaigns again with a fresh master.
//
// Snapshots: after SnapshotEvery events or every SnapshotInterval, the
// replicator dumps the table under the master's lock (master.Dump; the
// sequence number of the last event observed then is exactly what the dump
// reflects), writes it as JSON chunks under snapshot-data/<seq>/, then the
// manifest mooncake-store/<cluster_id>/snapshot, and deletes older chunks
// and the log keys the snapshot covers.
//
// A segment's mount event and snapshot record carry its kind
// (master.Segment.Kind, which placement reads) as "kind": "standalone",
// left out for embedded segments: a log or snapshot written before kinds
// existed loads every segment as embedded.
//
// Object keys are bytes; JSON strings are UTF-8. An event or snapshot
// record carries a UTF-8 key as "key", exactly as before keys were bytes
// (so logs and snapshots written then load unchanged), and any other key
// as "key_bytes", the base64 of its bytes, with "key" left out. A master
// built before keys were bytes refuses such a record (it reads an empty
// key: ErrCorrupt) rather than restore a wrong key.
//
// Takeover: a new leader loads the latest snapshot and replays the log
// after it into a fresh master through the master's Restore methods (Load)
// before it serves anything; the new leader's first sequence number
// follows the last one loaded. Because the old leader's writes are fenced,
// the log is complete once the new leader's election key leads.
//
// Not replicated (see core/store/master's replication notes): leases and
// read recency, soft-pin deadlines, and writes not yet committed; an
// unfinished put fails at PutEnd on the new leader with OBJECT_NOT_FOUND
// and its writer retries it. Restored objects are leased for one lease TTL
// and restored segments' clients get a fresh TTL.
//
// Transport security: every byte of the election and the replicated table
// goes through the etcd client the caller builds; give it TLS
// (core/tlsconfig.LoadClient, server.HAConfig.EtcdTLS) to run HA over an
// etcd that requires client certificates. There is no other stream
// between masters.
//
// Concurrency: Elector, Term and Replicator are safe for concurrent use.
// The Replicator's Observer methods are called under the master's lock and
// only queue; its Do callback takes that lock, and the replicator's own
// mutex is always taken after it.
package ha
