// Package pd is the Go half of the vLLM adapter's prefill/decode (P/D)
// disaggregation mode: the KV push between a prefill worker (Producer,
// kv_role kv_producer) and a decode worker (Consumer, kv_consumer),
// mirroring upstream vLLM's MooncakeConnector (push model, bootstrap
// server; see the vLLM KV connector spec, sections 4.4, 4.5, 6 and 8.1).
//
// Each worker (one per TP rank) runs a transfer engine (core/transfer) in
// P2P handshake mode (core/metadata/p2pmeta: no metadata server; segment
// name "host:port") over tcp, with its KV cache regions registered. The
// consumer's regions are remote-writable; the producer writes its blocks
// straight into the consumer's blocks, and a write is acknowledged only
// after its bytes landed.
//
// Call order (vLLM, sequential proxy):
//
//  1. Producer: NewProducer on every prefill worker. The worker with DP
//     rank 0 and TP rank 0 serves the bootstrap HTTP server
//     (BootstrapServer, port 8998 by default, as upstream's
//     VLLM_MOONCAKE_BOOTSTRAP_PORT) unless it is external; every worker
//     registers its side-channel address there (POST /register).
//  2. Producer: when a request finished prefill with a length cap
//     (request_finished → True), Ready(transfer_id, block ids). When it
//     finished otherwise (abort, stop), Drop(transfer_id).
//  3. Consumer: for a request with do_remote_prefill, Recv(transfer_id,
//     remote_bootstrap_addr, remote_engine_id, block ids to fill). The
//     consumer finds the producer worker with its own TP rank through GET
//     /query (cached per engine), connects to its side channel and sends
//     one request: transfer id, its segment name, TP rank and size, its
//     region bases and block sizes, and its block ids.
//  4. Producer: waits until Ready (bounded by AbortTimeout and by the
//     consumer's remaining budget), checks the shapes (same region count
//     and block sizes; if it holds more blocks than the consumer asked
//     for, the consumer had a local prefix hit and gets the producer's
//     last N blocks; fewer is an error), coalesces runs of consecutive
//     block ids on both sides into one write per run per region, writes,
//     and replies ok or an error. The transfer id is then reported by
//     Producer.Finished (its blocks may be freed), also on failure.
//  5. Consumer: Finished reports the transfer id, ok or failed, with the
//     failed block ids (vLLM's done_recving and
//     get_block_ids_with_load_errors).
//
// Guarantees: every Recv that was started is reported exactly once by the
// Consumer (landed, producer error, unreachable producer or bootstrap,
// timeout, Close); every Ready transfer is reported exactly once by the
// Producer (sent, failed, dropped, expired after AbortTimeout, Close).
// Block ids are checked on both sides: block 0 (vLLM's null block), ids
// outside [1, NumBlocks) and duplicates are refused, and the transfer
// engine refuses any write outside the consumer's registered regions.
//
// Side channel: one TCP connection per transfer, one request and one
// reply, each a 4-byte big-endian length and JSON (at most 16 MiB), with
// read/write deadlines. Upstream uses ZMQ and msgpack; the two are not
// wire compatible (both ends are ours).
//
// Limits: equal TP on both sides only (unequal → ErrUnsupported); PP 1;
// tcp only (host regions given as []byte, device regions through
// Config.CUDA); a consumer whose Recv timed out may still receive bytes
// from a producer that stays unresponsive past ReplyGrace.
//
// Concurrency: Producer and Consumer methods are safe for concurrent use;
// see each type for its goroutines and shutdown.
package pd
