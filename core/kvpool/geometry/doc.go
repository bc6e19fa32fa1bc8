// Package geometry describes the shape of a model's KV cache: how many
// bytes one token of KV occupies across all layers, for a few preset
// models, and how to parse and print byte sizes such as "4GiB".
//
// For multi-head and grouped-query attention (MHA/GQA) a token stores a
// key and a value vector per KV head per layer:
//
//	2 * layers * kv_heads * head_dim * dtype_bytes
//
// For multi-head latent attention (MLA, DeepSeek-V2/V3) a token stores one
// compressed latent vector per layer (kv_lora_rank 512 plus the 64-wide
// decoupled RoPE key, 576 values for DeepSeek-V3):
//
//	layers * mla_dim * dtype_bytes
//
// These are per-model totals, before tensor-parallel sharding.
//
// # Concurrency
//
// Everything here is pure and safe for concurrent use; the preset table is
// immutable and Lookup returns copies.
package geometry
