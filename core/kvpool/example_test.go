package kvpool_test

import (
	"context"
	"fmt"

	"github.com/mooncake-go/mooncake/core/kvpool"
)

// setExister is an in-memory kvpool.Exister.
type setExister map[string]bool

func (s setExister) BatchIsExist(_ context.Context, keys []string) ([]bool, error) {
	out := make([]bool, len(keys))
	for i, k := range keys {
		out[i] = s[k]
	}
	return out, nil
}

func Example() {
	ns := kvpool.Namespace{
		Model: "meta-llama/Llama-3.1-8B", DType: "bfloat16", Layout: "vllm-flashinfer",
		TPRank: 0, TPSize: 1, BlockTokens: 16,
	}
	if err := ns.Validate(); err != nil {
		panic(err)
	}
	fmt.Println(ns.KeyUint64(0xbeef))

	// A vLLM FlashInfer cache of 2 layers, 4 blocks of 16 tokens, 1 KV head
	// of 8 bf16 elements: one tensor per layer.
	shape := kvpool.Shape{Layers: 2, Blocks: 4, BlockTokens: 16, KVHeads: 1, HeadDim: 8, ElemBytes: 2}
	layers := [][]byte{make([]byte, 4*2*16*8*2), make([]byte, 4*2*16*8*2)}
	lay, err := kvpool.NewVLLMFlashInfer(layers, shape)
	if err != nil {
		panic(err)
	}
	value := make([]byte, lay.BlockBytes())
	if err := lay.Gather(value, 3); err != nil {
		panic(err)
	}
	fmt.Println(len(value), "bytes per block,", lay.LayerBytes(), "per layer")

	// Longest cached prefix: one batched existence check.
	hashes := [][]byte{{1}, {2}, {3}}
	keys := ns.Keys(hashes)
	store := setExister{keys[0]: true, keys[1]: true}
	n, err := kvpool.LongestPrefix(context.Background(), store, keys)
	if err != nil {
		panic(err)
	}
	fmt.Println(n, "blocks cached")
	// Output:
	// mc/v1/meta-llama%2FLlama-3.1-8B/bfloat16/vllm-flashinfer/tp0of1/pp0of1/bt16/000000000000beef
	// 1024 bytes per block, 512 per layer
	// 2 blocks cached
}
