// Package replay replays a Mooncake request trace against a KV-cache pool:
// for each request, in file order, it finds the longest cached prefix of its
// 512-token blocks (one BatchIsExist), reads the hit blocks into a registered
// buffer (BatchGetInto) and writes the missed ones (BatchPutFrom). Block
// bytes are a deterministic function of the hash id (a prefix of one
// pseudo-random stream per id, so any length verifies), and every read is
// checked. Alongside, two offline figures judge the pool's hit ratio
// (core/store/policy): the "LRU reference", an LRU over blocks with the
// same capacity in tokens, and the "OPT bound", Belady's optimum with
// bypass over the same capacity in whole 512-token blocks, which no
// eviction policy can beat.
//
// RunRouted replays a trace over several engine instances (Replayers on
// one shared pool, or each on its own), routing each request at random,
// round-robin, to the least loaded instance or to the one caching its
// longest prefix (Mooncake's Conductor), over a simple prefill-queue model.
//
// Concurrency: Run issues one request at a time (the order decides what is
// cached); a Replayer is not safe for concurrent use.
package replay
