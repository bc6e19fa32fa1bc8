// Package kvpool turns an inference engine's KV cache into pool objects:
// it names blocks (keys), finds how much of a prompt's prefix is cached
// (one batched existence check), and moves a block between the engine's
// strided KV buffers and one contiguous value (gather for a put, scatter
// after a get). It is pure Go over []byte views; the caller owns every
// buffer (typically registered memory from core/memory, or memory a host
// engine handed over) and keeps it alive and unmoved while a Layout uses it.
//
// # Keys
//
// A Namespace pins everything that changes a block's bytes: model, dtype,
// layout, TP shard (or "mla" when every rank holds the same KV), PP stage
// and stage count, block size in tokens, and an optional tenant or salt.
// Keys are
//
//	mc/v1/<model>/<dtype>/<layout>/tp<r>of<s>|mla/pp<r>of<s>/bt<n>/[t=<tenant>/]<hex hash>[/l<layer>]
//
// with every string field percent-escaped outside A-Z a-z 0-9 - . _ ~, so
// a model path such as "meta-llama/Llama-3.1-8B" cannot inject a separator
// and distinct namespaces never share a key. The hash is the engine's own
// chained block hash (vLLM block_hashes, SGLang page hashes, LMCache chunk
// hashes), passed through as bytes or as a 64-bit integer; this package
// never hashes tokens. "/l<layer>" marks a per-layer object (LayerKey).
//
// # Longest prefix
//
// LongestPrefix asks an Exister (the store client) about all keys of a
// prompt in one BatchIsExist call and counts the leading hits: because each
// hash commits to the whole prefix, a block past the first miss is useless.
//
// # Values and layouts
//
// A block's value is in one canonical order whatever the engine layout:
// layer-major, and within a layer the K plane then the V plane (MLA: one
// latent plane), each plane BlockTokens token rows of KVHeads*HeadDim
// (MLA: LatentDim) elements. So a layer of a block is a contiguous slice
// of the value and equals the per-layer value (GatherLayer), and two
// layouts with the same Shape produce the same bytes. A plane of the vLLM
// layouts is copied as an opaque region, so vLLM's NHD and HND stride
// orders both work (both ends must use the same one; put it in
// Namespace.Layout).
//
// Each constructor takes the engine tensor(s) as []byte plus a Shape (in
// elements, with ElemBytes per element; N = Blocks, P = BlockTokens,
// L = Layers, S = N*P token slots, H = KVHeads, D = HeadDim, C = LatentDim)
// and validates that the buffers match the tensor size, naming the
// dimensions in the error. Tensor shapes, row-major, as checked in the
// engines' public sources:
//
//	NewVLLMFlashAttn   per layer [2, N, P, H, D]  vllm/v1/attention/backends/flash_attn.py
//	                                              FlashAttentionBackend.get_kv_cache_shape
//	NewVLLMFlashInfer  per layer [N, 2, P, H, D]  vllm/v1/attention/backends/flashinfer.py
//	                                              (also Triton attention); stride order
//	                                              NHD (0,1,2,3,4) or HND (0,1,3,2,4)
//	NewVLLMMLA         per layer [N, P, C]        vllm/v1/attention/backends/mla/*
//	                                              get_kv_cache_shape; C = 576 for DeepSeek
//	                                              V2/V3; fp8_ds_mla packs 656 B/token
//	                                              (pass LatentDim 656, ElemBytes 1)
//	NewSGLangHost      one tensor                 sglang python/sglang/srt/mem_cache/pool_host/
//	                                              mha.py and mla.py init_kv_buffer
//	  layer_first        MHA [2, L, S, H, D]      MLA [L, S, 1, C]
//	  page_first         MHA [2, S, L, H, D]      MLA [S, L, 1, C]
//	  page_first_direct  MHA [2, N, L, P, H, D]   MLA [N, L, P, 1, C]
//	NewLMCacheChunks   N chunks back to back      LMCache MemoryFormat.KV_2LTD
//	                   MHA [N][2, L, P, H*D]      (lmcache/v1/memory_management.py; its
//	                   MLA [N][1, L, P, C]        docstrings sit under the member they
//	                                              follow) and KV_MLA_FMT; the vLLM GPU
//	                                              connector fills [2, L, T, H*D]
//	NewContiguous      [N, L, 2, P, H, D]         the canonical value, back to back
//	                   MLA [N, L, P, C]
//
// Block b of an SGLang pool is page b, slots b*P .. b*P+P-1 (SGLang's
// host size is page aligned: size = page_num * page_size). SGLang's
// layouts page_head (head-major, for heterogeneous TP), page_first_kv_split
// (Ascend) and pools with head_dim != v_head_dim (two tensors) are not
// supported. The spec's table in specs/sglang-hicache.md §5.1 agrees with
// the source above.
//
// LMCache's KV_2LTD is K-major ([2, L, ...]), not layer-major, so
// NewLMCacheChunks reorders on gather (2*L runs of one plane each) rather
// than copying a chunk whole; an MLA chunk ([1, L, P, C]) is already in
// canonical order and moves in one copy, as does NewContiguous. Where the
// value must be LMCache's own byte format (interoperating with LMCache's
// remote backends), store the MemoryObj bytes directly instead.
//
// Gather and Scatter copy the largest contiguous runs the layout allows,
// precomputed at construction: one plane (P*H*D*elem bytes) for vLLM
// FlashAttention, SGLang layer_first and page_first_direct, and LMCache
// KV_2LTD; a block's K and V together for FlashInfer; one token row
// (H*D*elem) for SGLang page_first, whose pages interleave layers per
// token; one copy per block where the value is already contiguous. Runs in
// single-tensor layouts are visited in address order of the engine buffer.
//
// # Concurrency
//
// Namespace is a value; its methods are pure. Layouts are immutable after
// construction and safe for concurrent use; Gather/Scatter of distinct
// blocks touch disjoint bytes. The caller orders a Scatter against any
// other access to the same block (and against the engine's own use of
// it). Gather, Scatter and the layer forms allocate nothing.
package kvpool
