// Package writepolicy decides which of an engine's KV blocks are written
// to the pool and when, as SGLang's HiCache write policies do:
//
//   - WriteThrough stores every block offered.
//   - WriteThroughSelective stores a block only on its second Offer (its
//     second hit), so blocks used once never cost a put.
//   - WriteBack tracks offered blocks and stores one only when the engine
//     evicts it from its own tier (OnEvict).
//
// A Writer never blocks the engine: Offer and OnEvict take a short lock,
// touch in-memory sets and append to a bounded queue; a full queue drops
// the block and counts it. The I/O happens in Flush, which takes a batch
// from the queue, asks an Exister (the store client's BatchIsExist) which
// keys the pool already holds, and stores the rest with the injected
// StoreFunc (a batch put). Run is the thin loop that calls Flush when work
// arrives; tests call Flush directly, so every decision is deterministic.
//
// # De-duplication
//
// A key is stored at most once while the Writer remembers it: a key in the
// recent set (stored, or found in the pool, by this Writer; bounded, oldest
// forgotten first), queued, being flushed, or (write-back) already tracked
// is skipped at Offer; a key the Exister reports present is skipped at
// Flush. The recent set is a cache: a key the pool evicted later is stored
// again only once the set has forgotten it.
//
// # Counters
//
// Stats returns a Counters snapshot: Offered and Evicted count calls;
// every accepted block ends in exactly one of Stored, DedupSkipped or
// Failed (or DroppedFull at OnEvict when the queue is full, or Discarded);
// DroppedFull counts blocks refused because the queue (or the write-back
// tracked set) was full; FirstHitDeferred counts first hits under
// WriteThroughSelective and Tracked counts blocks held for eviction under
// WriteBack.
//
// # Block lifetime
//
// A block is whatever the StoreFunc needs to read the bytes (an engine
// block id, a buffer). The Writer holds it from the Offer that returned
// Queued or Tracked until it calls Config.OnDone for the key (after the
// store, the skip, the failure, the drop, or Discard); the caller keeps
// the block's bytes valid until then, for example by pinning the engine
// block, and releases it in OnDone.
//
// # Concurrency
//
// A Writer is safe for concurrent use. Flush calls may overlap (each takes
// its own batch). OnDone runs on the goroutine that calls Flush, OnEvict
// or Discard, never under the Writer's lock.
package writepolicy
