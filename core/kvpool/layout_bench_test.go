package kvpool

import (
	"testing"
	"time"
)

// benchShape is a realistic block: 32 layers, block_size 16, 8 KV heads of
// 128, bf16: 32 * 2 * 16*8*128*2 = 2 MiB per block. benchBlocks blocks
// (64 MiB) are cycled so that, as in serving, the source is not cache-hot.
var benchShape = Shape{Layers: 32, Blocks: 32, BlockTokens: 16, KVHeads: 8, HeadDim: 128, ElemBytes: 2}

// benchMLAShape is DeepSeek-V3-like: 32 layers of 576-wide bf16 latents,
// 64-token blocks (2.25 MiB per block).
var benchMLAShape = Shape{Layers: 32, Blocks: 32, BlockTokens: 64, LatentDim: 576, ElemBytes: 2}

type benchLayout struct {
	name string
	s    Shape
	make func(s Shape) (Layout, error)
}

func perLayerBufs(s Shape, layerBytes int) [][]byte {
	bufs := make([][]byte, s.Layers)
	for i := range bufs {
		bufs[i] = filled(layerBytes)
	}
	return bufs
}

// filled returns n bytes of a non-zero pattern. Writing every page matters:
// reads of never-written pages hit the kernel's shared zero page and would
// measure the cache, not memory.
func filled(n int) []byte {
	b := make([]byte, n)
	if n == 0 {
		return b
	}
	b[0] = 1
	for i := 1; i < n; i *= 2 {
		copy(b[i:], b[:i])
	}
	for i := 0; i < n; i += 4093 {
		b[i] = byte(i)
	}
	return b
}

func benchLayouts() []benchLayout {
	m, a := benchShape, benchMLAShape
	tensor := m.Blocks * m.Layers * 2 * m.planeBytes()
	mlaTensor := a.Blocks * a.Layers * a.planeBytes()
	sg := func(layout SGLangLayout, n int) func(Shape) (Layout, error) {
		return func(s Shape) (Layout, error) { return NewSGLangHost(filled(n), layout, s) }
	}
	return []benchLayout{
		{"vllm-flash-attn", m, func(s Shape) (Layout, error) {
			return NewVLLMFlashAttn(perLayerBufs(s, 2*s.Blocks*s.planeBytes()), s)
		}},
		{"vllm-flashinfer", m, func(s Shape) (Layout, error) {
			return NewVLLMFlashInfer(perLayerBufs(s, 2*s.Blocks*s.planeBytes()), s)
		}},
		{"vllm-mla", a, func(s Shape) (Layout, error) { return NewVLLMMLA(perLayerBufs(s, s.Blocks*s.planeBytes()), s) }},
		{"sglang-layer_first", m, sg(SGLangLayerFirst, tensor)},
		{"sglang-page_first", m, sg(SGLangPageFirst, tensor)},
		{"sglang-page_first_direct", m, sg(SGLangPageFirstDirect, tensor)},
		{"sglang-layer_first-mla", a, sg(SGLangLayerFirst, mlaTensor)},
		{"sglang-page_first-mla", a, sg(SGLangPageFirst, mlaTensor)},
		{"sglang-page_first_direct-mla", a, sg(SGLangPageFirstDirect, mlaTensor)},
		{"lmcache-kv_2ltd", m, func(s Shape) (Layout, error) { return NewLMCacheChunks(filled(tensor), s) }},
		{"contiguous", m, func(s Shape) (Layout, error) { return NewContiguous(filled(tensor), s) }},
	}
}

func benchMove(b *testing.B, gather bool) {
	for _, bl := range benchLayouts() {
		b.Run(bl.name, func(b *testing.B) {
			lay, err := bl.make(bl.s)
			if err != nil {
				b.Fatal(err)
			}
			v := filled(lay.BlockBytes())
			b.SetBytes(int64(len(v)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if gather {
					err = lay.Gather(v, i%bl.s.Blocks)
				} else {
					err = lay.Scatter(v, i%bl.s.Blocks)
				}
				if err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkGather(b *testing.B)  { benchMove(b, true) }
func BenchmarkScatter(b *testing.B) { benchMove(b, false) }

// BenchmarkMemcpy is the bar for Gather and Scatter: one copy of a block's
// bytes out of (gather) or into (scatter) the same-sized pool, cycling
// through blocks the same way.
func BenchmarkMemcpy(b *testing.B) {
	for _, s := range []Shape{benchShape, benchMLAShape} {
		name := "mha"
		if s.MLA() {
			name = "mla"
		}
		blockBytes := s.Layers * s.kvs() * s.planeBytes()
		pool := filled(s.Blocks * blockBytes)
		v := filled(blockBytes)
		for _, dir := range []string{"gather", "scatter"} {
			b.Run(name+"-"+dir, func(b *testing.B) {
				b.SetBytes(int64(blockBytes))
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					blk := pool[(i%s.Blocks)*blockBytes:][:blockBytes]
					if dir == "gather" {
						copy(v, blk)
					} else {
						copy(blk, v)
					}
					i++
				}
			})
		}
	}
}

// BenchmarkVsMemcpy interleaves, block by block, a Gather (or Scatter) with
// a plain copy of the same bytes between a same-sized pool and a value, and
// reports their speed ratio as "x-memcpy" (1 = as fast as memcpy; the bar
// is 0.5). Interleaving keeps the ratio meaningful on a shared, noisy
// machine where separate runs drift.
func BenchmarkVsMemcpy(b *testing.B) {
	for _, dir := range []string{"gather", "scatter"} {
		for _, bl := range benchLayouts() {
			b.Run(dir+"/"+bl.name, func(b *testing.B) {
				lay, err := bl.make(bl.s)
				if err != nil {
					b.Fatal(err)
				}
				bb := lay.BlockBytes()
				pool := filled(bl.s.Blocks * bb)
				v := filled(bb)
				b.SetBytes(int64(bb))
				var tl, tm time.Duration
				i := 0
				for b.Loop() {
					blk := i % bl.s.Blocks
					t0 := time.Now()
					if dir == "gather" {
						err = lay.Gather(v, blk)
					} else {
						err = lay.Scatter(v, blk)
					}
					t1 := time.Now()
					if dir == "gather" {
						copy(v, pool[blk*bb:][:bb])
					} else {
						copy(pool[blk*bb:][:bb], v)
					}
					tm += time.Since(t1)
					tl += t1.Sub(t0)
					if err != nil {
						b.Fatal(err)
					}
					i++
				}
				b.ReportMetric(float64(tm)/float64(tl), "x-memcpy")
			})
		}
	}
}
