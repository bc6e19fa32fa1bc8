// Package policy holds cache eviction policies that can be replayed
// offline on request traces (see core/replay/trace) to bound what a KV
// cache of a given size could reuse.
//
// LRUBound simulates a block-level least-recently-used cache whose capacity
// is counted in tokens, and reports prefix hit ratios by blocks and by
// tokens. It is deterministic: the same request sequence always gives the
// same result.
//
// OPT is the offline optimum (Belady's MIN with bypass) of block prefix
// hits for a cache of whole blocks: the bound no policy can beat.
//
// # Concurrency
//
// Values in this package do no I/O, start no goroutines and are not safe
// for concurrent use; callers serialize access.
package policy
