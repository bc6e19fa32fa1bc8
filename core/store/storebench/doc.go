// Package storebench measures the KV-cache pool the way redis-benchmark
// measures redis-server: Concurrency workers, each with its own client,
// store values of ValueSize bytes under distinct keys (zero-copy PutFrom
// from a registered memfd buffer), then read them back (GetInto into
// another), for a fixed number of operations or a fixed duration per phase.
// It reports per phase operations per second, GB/s (1e9 bytes) of value
// payload, and p50/p99 latency of one operation.
//
// The pool need not hold everything the put phase writes: once it is full
// the master evicts the least recently used objects, as a cache would. The
// get phase reads, round robin, the newest keys the workers wrote that are
// still resident, at most half the pool's capacity in all (half leaves room
// for the watermark eviction that may follow the put phase), shared by all
// workers. Each worker checks every value it reads by a 16-byte header
// (writer, sequence number) and the first value it reads byte for byte.
//
// Concurrency: Run starts its own goroutines and returns when they end; the
// clients must not be closed while it runs. Run leaves the keys it wrote in
// the pool (they carry a random prefix, so runs do not collide).
package storebench
