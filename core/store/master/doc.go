// Package master is the KV-cache pool's master as pure logic: the object
// table, space allocation over mounted segments, replicas, leases, client
// liveness and eviction. It mirrors upstream Mooncake Store's MasterService
// (PutStart / PutEnd / PutRevoke, GetReplicaList with leases, ExistKey,
// Remove, RemoveByRegex, RemoveAll, GetSize, MountSegment / ReMountSegment /
// UnmountSegment, Ping) with the same error codes, plus operator reads that
// grant no lease (Stat, ListKeys, ListSegments, QuerySegment). Placement
// follows Config.AllocationStrategy (placement.go), filling segments that
// outlive their client (Segment.Kind standalone: storage nodes) before
// those of applications embedding a client (ours, not upstream's); a value
// larger than any segment is striped over several (Replica.Slices). Soft and hard pins
// change the eviction order (pins.go). With Config.EnableOffload, owners
// attach disk tiers (upstream LOCAL_DISK, storage_root_dir) to their
// segments and the master moves objects there and back through tasks it
// hands them (tier.go).
//
// Client liveness: only Ping and the mounts create a client, and Ping
// answers need_remount until the client has mounted or remounted its
// segments (none for a client without any) since the master learnt of it;
// puts and other calls from a client the master does not know (it
// restarted, or the client's TTL passed) are served but register nothing
// (master.go).
//
// Determinism: a Master does no I/O, starts no goroutines and reads time only
// through Config.Now and randomness only through Config.Rand, so a sequence
// of calls replays identically (tests, traces). The server package owns the
// loops (periodic Tick) and the lock.
//
// Memory: about 180 bytes of heap per object, key included, at a million
// objects (object.go explains the layout; BenchmarkMasterMemoryPerObject
// measures it), and the tables that grow with the object count shrink
// again after mass removal.
//
// Concurrency: a Master is NOT safe for concurrent use; the caller serialises
// calls (the server holds one mutex around every call).
//
// Invariants: every replica's range (each piece of a striped one) is
// allocated in its segment's allocator exactly once; replicas of one object,
// and the pieces of all of them, lie on distinct segments; only
// complete objects are on the LRU list; an object whose lease has not expired
// is never evicted, and neither is one being written or hard-pinned, nor
// one whose disk tier task is in flight; an object is in the table only
// while it has a DRAM replica, a LOCAL_DISK replica or a write in progress.
package master
