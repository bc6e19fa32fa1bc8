// Package sglang is the Go side of mooncake-go's SGLang HiCache storage
// backend (mooncake_go.sglang, loaded by SGLang 0.5.23's
// StorageBackendFactory as backend "dynamic" with interface_v1): SGLang's
// L3 tier on the KV-cache pool. The Python shim
// (sglang/python/mooncake_go/sglang) turns SGLang's calls into the C ABI of
// abi/include/mooncake/sglang.h (package sglang/capi), which calls
// Backend.
//
// Pages and keys: SGLang hands over one opaque hash per page of page_size
// tokens. An MHA page is two pool objects, K and V (keys ".../<hash>/k"
// and "/v"), an MLA page one ("/kv"); the key prefix is a
// core/kvpool.Namespace of the model, the KV dtype, the object byte order
// and layer count (layer_first and page_first_direct store the same bytes
// per object and share pages; page_first does not), the TP shard ("mla"
// for MLA, whose pages every rank reads and only TP rank 0 writes), the
// PP stage, the attention-CP rank, the page size and a tenant. A page
// counts as present only when all its objects are.
//
// Data path: RegisterHostPool registers SGLang's whole host KV pool with
// the store client once, and BatchGet/BatchSet move the buffers
// get_page_buffer_meta names straight between it and the pool (no copy);
// the plain calls (GetPages/SetPages: SGLang's generic get/set path)
// register their page buffers for the duration of the call. Writes are
// put-if-absent. Every call is bounded in time (reads: SGLang's prefetch
// timeout formula, 1 s + 0.25 s per 1,024 tokens by default) and answers
// per page; failures are counted in Stats and never returned as
// exceptions by the shim.
//
// Concurrency: a Backend is safe for concurrent use, except Close, which
// runs after SGLang stopped its storage threads.
package sglang
