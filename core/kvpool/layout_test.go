package kvpool

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// refCase describes one layout by its tensor shape formula, independently
// of the strides layout.go derives: tensor gives the engine tensor's dims
// (in elements) and index the tensor index of element (h, d) of token t of
// plane kv of layer l of block b (MLA: h = 0, d = latent index).
type refCase struct {
	name     string
	perLayer bool
	mha, mla bool // which shapes the layout accepts
	make     func(bufs [][]byte, s Shape) (Layout, error)
	tensor   func(s Shape) []int
	index    func(s Shape, l, kv, b, t, h, d int) []int
}

func slots(s Shape) int { return s.Blocks * s.BlockTokens }

// heads and hdim are the (h, d) extents of a token row: (H, D), or (1, C).
func heads(s Shape) int {
	if s.MLA() {
		return 1
	}
	return s.KVHeads
}

func hdim(s Shape) int {
	if s.MLA() {
		return s.LatentDim
	}
	return s.HeadDim
}

func sglang(layout SGLangLayout) func([][]byte, Shape) (Layout, error) {
	return func(bufs [][]byte, s Shape) (Layout, error) { return NewSGLangHost(bufs[0], layout, s) }
}

func refCases() []refCase {
	return []refCase{
		{
			name: "vllm-flash-attn", perLayer: true, mha: true, make: NewVLLMFlashAttn,
			tensor: func(s Shape) []int { return []int{2, s.Blocks, s.BlockTokens, s.KVHeads, s.HeadDim} },
			index:  func(s Shape, l, kv, b, t, h, d int) []int { return []int{kv, b, t, h, d} },
		},
		{
			name: "vllm-flashinfer", perLayer: true, mha: true, make: NewVLLMFlashInfer,
			tensor: func(s Shape) []int { return []int{s.Blocks, 2, s.BlockTokens, s.KVHeads, s.HeadDim} },
			index:  func(s Shape, l, kv, b, t, h, d int) []int { return []int{b, kv, t, h, d} },
		},
		{
			name: "vllm-mla", perLayer: true, mla: true, make: NewVLLMMLA,
			tensor: func(s Shape) []int { return []int{s.Blocks, s.BlockTokens, s.LatentDim} },
			index:  func(s Shape, l, kv, b, t, h, d int) []int { return []int{b, t, d} },
		},
		{
			name: "sglang-layer_first", mha: true, make: sglang(SGLangLayerFirst),
			tensor: func(s Shape) []int { return []int{2, s.Layers, slots(s), s.KVHeads, s.HeadDim} },
			index:  func(s Shape, l, kv, b, t, h, d int) []int { return []int{kv, l, b*s.BlockTokens + t, h, d} },
		},
		{
			name: "sglang-layer_first-mla", mla: true, make: sglang(SGLangLayerFirst),
			tensor: func(s Shape) []int { return []int{s.Layers, slots(s), 1, s.LatentDim} },
			index:  func(s Shape, l, kv, b, t, h, d int) []int { return []int{l, b*s.BlockTokens + t, 0, d} },
		},
		{
			name: "sglang-page_first", mha: true, make: sglang(SGLangPageFirst),
			tensor: func(s Shape) []int { return []int{2, slots(s), s.Layers, s.KVHeads, s.HeadDim} },
			index:  func(s Shape, l, kv, b, t, h, d int) []int { return []int{kv, b*s.BlockTokens + t, l, h, d} },
		},
		{
			name: "sglang-page_first-mla", mla: true, make: sglang(SGLangPageFirst),
			tensor: func(s Shape) []int { return []int{slots(s), s.Layers, 1, s.LatentDim} },
			index:  func(s Shape, l, kv, b, t, h, d int) []int { return []int{b*s.BlockTokens + t, l, 0, d} },
		},
		{
			name: "sglang-page_first_direct", mha: true, make: sglang(SGLangPageFirstDirect),
			tensor: func(s Shape) []int { return []int{2, s.Blocks, s.Layers, s.BlockTokens, s.KVHeads, s.HeadDim} },
			index:  func(s Shape, l, kv, b, t, h, d int) []int { return []int{kv, b, l, t, h, d} },
		},
		{
			name: "sglang-page_first_direct-mla", mla: true, make: sglang(SGLangPageFirstDirect),
			tensor: func(s Shape) []int { return []int{s.Blocks, s.Layers, s.BlockTokens, 1, s.LatentDim} },
			index:  func(s Shape, l, kv, b, t, h, d int) []int { return []int{b, l, t, 0, d} },
		},
		{
			name: "lmcache-kv_2ltd", mha: true,
			make:   func(bufs [][]byte, s Shape) (Layout, error) { return NewLMCacheChunks(bufs[0], s) },
			tensor: func(s Shape) []int { return []int{s.Blocks, 2, s.Layers, s.BlockTokens, s.KVHeads * s.HeadDim} },
			index:  func(s Shape, l, kv, b, t, h, d int) []int { return []int{b, kv, l, t, h*s.HeadDim + d} },
		},
		{
			name: "lmcache-kv_mla_fmt", mla: true,
			make:   func(bufs [][]byte, s Shape) (Layout, error) { return NewLMCacheChunks(bufs[0], s) },
			tensor: func(s Shape) []int { return []int{s.Blocks, 1, s.Layers, s.BlockTokens, s.LatentDim} },
			index:  func(s Shape, l, kv, b, t, h, d int) []int { return []int{b, 0, l, t, d} },
		},
		{
			name: "contiguous", mha: true, mla: true,
			make: func(bufs [][]byte, s Shape) (Layout, error) { return NewContiguous(bufs[0], s) },
			tensor: func(s Shape) []int {
				return []int{s.Blocks, s.Layers, s.kvs(), s.BlockTokens, heads(s), hdim(s)}
			},
			index: func(s Shape, l, kv, b, t, h, d int) []int { return []int{b, l, kv, t, h, d} },
		},
	}
}

// flat is the row-major flat index of idx in a tensor of dims.
func flat(dims, idx []int) int {
	if len(dims) != len(idx) {
		panic("rank mismatch")
	}
	f := 0
	for i, n := range dims {
		if idx[i] < 0 || idx[i] >= n {
			panic("index out of tensor")
		}
		f = f*n + idx[i]
	}
	return f
}

func numel(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

// valueIndex is the canonical position of an element in a block's value:
// [layers, kvs, block_tokens, heads, hdim].
func valueIndex(s Shape, l, kv, t, h, d int) int {
	return flat([]int{s.Layers, s.kvs(), s.BlockTokens, heads(s), hdim(s)}, []int{l, kv, t, h, d})
}

// forEachElem calls f with the buffer index, the byte offset in that buffer
// and the byte offset in the layer value, for every element of one layer of
// block b, per the case's shape formula.
func (rc refCase) forEachElem(s Shape, b, l int, f func(buf, off, voff int)) {
	dims := rc.tensor(s)
	buf := 0
	if rc.perLayer {
		buf = l
	}
	for kv := range s.kvs() {
		for t := range s.BlockTokens {
			for h := range heads(s) {
				for d := range hdim(s) {
					off := flat(dims, rc.index(s, l, kv, b, t, h, d)) * s.ElemBytes
					voff := (valueIndex(s, l, kv, t, h, d) - valueIndex(s, l, 0, 0, 0, 0)) * s.ElemBytes
					f(buf, off, voff)
				}
			}
		}
	}
}

// refGatherLayer is the naive element-by-element gather of one layer.
func (rc refCase) refGatherLayer(s Shape, bufs [][]byte, b, l int) []byte {
	out := make([]byte, s.kvs()*s.BlockTokens*heads(s)*hdim(s)*s.ElemBytes)
	e := s.ElemBytes
	rc.forEachElem(s, b, l, func(buf, off, voff int) { copy(out[voff:voff+e], bufs[buf][off:off+e]) })
	return out
}

func (rc refCase) refScatterLayer(s Shape, bufs [][]byte, b, l int, v []byte) {
	e := s.ElemBytes
	rc.forEachElem(s, b, l, func(buf, off, voff int) { copy(bufs[buf][off:off+e], v[voff:voff+e]) })
}

func (rc refCase) refGather(s Shape, bufs [][]byte, b int) []byte {
	var out []byte
	for l := range s.Layers {
		out = append(out, rc.refGatherLayer(s, bufs, b, l)...)
	}
	return out
}

// newBufs allocates the case's buffers for s filled with random bytes.
func (rc refCase) newBufs(s Shape, r *rand.Rand) [][]byte {
	n := 1
	if rc.perLayer {
		n = s.Layers
	}
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = randBytes(r, numel(rc.tensor(s))*s.ElemBytes)
	}
	return bufs
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func cloneBufs(bufs [][]byte) [][]byte {
	out := make([][]byte, len(bufs))
	for i, b := range bufs {
		out[i] = bytes.Clone(b)
	}
	return out
}

func equalBufs(a, b [][]byte) bool {
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// testShapes are small, odd-sized shapes: every dimension differs, so a
// swapped stride shows.
func testShapes(rc refCase) []Shape {
	var out []Shape
	if rc.mha {
		out = append(out,
			Shape{Layers: 3, Blocks: 5, BlockTokens: 4, KVHeads: 2, HeadDim: 3, ElemBytes: 2},
			Shape{Layers: 1, Blocks: 2, BlockTokens: 1, KVHeads: 1, HeadDim: 5, ElemBytes: 1},
			Shape{Layers: 4, Blocks: 3, BlockTokens: 2, KVHeads: 3, HeadDim: 2, ElemBytes: 4},
		)
	}
	if rc.mla {
		out = append(out,
			Shape{Layers: 3, Blocks: 5, BlockTokens: 4, LatentDim: 7, ElemBytes: 2},
			Shape{Layers: 2, Blocks: 1, BlockTokens: 3, LatentDim: 5, ElemBytes: 1},
		)
	}
	return out
}

func TestLayoutsMatchReference(t *testing.T) {
	for _, rc := range refCases() {
		for _, s := range testShapes(rc) {
			t.Run(rc.name+"/"+shapeName(s), func(t *testing.T) {
				r := rand.New(rand.NewPCG(1, uint64(s.Layers*1000+s.Blocks)))
				bufs := rc.newBufs(s, r)
				lay, err := rc.make(bufs, s)
				if err != nil {
					t.Fatal(err)
				}
				if lay.Shape() != s {
					t.Fatalf("Shape() = %+v, want %+v", lay.Shape(), s)
				}
				lb := s.kvs() * s.BlockTokens * heads(s) * hdim(s) * s.ElemBytes
				if lay.LayerBytes() != lb || lay.BlockBytes() != s.Layers*lb {
					t.Fatalf("LayerBytes, BlockBytes = %d, %d; want %d, %d", lay.LayerBytes(), lay.BlockBytes(), lb, s.Layers*lb)
				}
				orig := cloneBufs(bufs)
				for b := range s.Blocks {
					want := rc.refGather(s, bufs, b)
					got := make([]byte, lay.BlockBytes())
					if err := lay.Gather(got, b); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("Gather(block %d) differs from the reference", b)
					}
					for l := range s.Layers {
						gl := make([]byte, lay.LayerBytes())
						if err := lay.GatherLayer(gl, b, l); err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(gl, want[l*lb:(l+1)*lb]) {
							t.Fatalf("GatherLayer(block %d, layer %d) is not layer %d of the block value", b, l, l)
						}
					}
				}
				if !equalBufs(bufs, orig) {
					t.Fatal("Gather modified the buffers")
				}

				// Scatter: exactly the reference's elements change.
				for b := range s.Blocks {
					v := randBytes(r, lay.BlockBytes())
					if err := lay.Scatter(v, b); err != nil {
						t.Fatal(err)
					}
					for l := range s.Layers {
						rc.refScatterLayer(s, orig, b, l, v[l*lb:(l+1)*lb])
					}
					if !equalBufs(bufs, orig) {
						t.Fatalf("Scatter(block %d) differs from the reference", b)
					}
					l := r.IntN(s.Layers)
					vl := randBytes(r, lay.LayerBytes())
					if err := lay.ScatterLayer(vl, b, l); err != nil {
						t.Fatal(err)
					}
					rc.refScatterLayer(s, orig, b, l, vl)
					if !equalBufs(bufs, orig) {
						t.Fatalf("ScatterLayer(block %d, layer %d) differs from the reference", b, l)
					}
				}
			})
		}
	}
}

func shapeName(s Shape) string {
	var b strings.Builder
	if s.MLA() {
		b.WriteString("mla")
	} else {
		b.WriteString("mha")
	}
	for _, n := range []int{s.Layers, s.Blocks, s.BlockTokens, s.KVHeads, s.HeadDim, s.LatentDim, s.ElemBytes} {
		b.WriteByte('-')
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

// TestRoundTrip scatters random values into every block in random order,
// then gathers each back: the values come back unchanged, so blocks never
// overlap.
func TestRoundTrip(t *testing.T) {
	for _, rc := range refCases() {
		for _, s := range testShapes(rc) {
			t.Run(rc.name+"/"+shapeName(s), func(t *testing.T) {
				r := rand.New(rand.NewPCG(2, uint64(s.Blocks)))
				lay, err := rc.make(rc.newBufs(s, r), s)
				if err != nil {
					t.Fatal(err)
				}
				vals := make([][]byte, s.Blocks)
				for _, b := range r.Perm(s.Blocks) {
					vals[b] = randBytes(r, lay.BlockBytes())
					if err := lay.Scatter(vals[b], b); err != nil {
						t.Fatal(err)
					}
				}
				got := make([]byte, lay.BlockBytes())
				for b, want := range vals {
					if err := lay.Gather(got, b); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("block %d: Gather after Scatter differs", b)
					}
				}
				// Layer-wise round trip, then a whole-block gather.
				lb := lay.LayerBytes()
				for b := range s.Blocks {
					for _, l := range r.Perm(s.Layers) {
						if err := lay.ScatterLayer(vals[(b+1)%s.Blocks][l*lb:(l+1)*lb], b, l); err != nil {
							t.Fatal(err)
						}
					}
				}
				for b := range s.Blocks {
					if err := lay.Gather(got, b); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, vals[(b+1)%s.Blocks]) {
						t.Fatalf("block %d: Gather after ScatterLayer differs", b)
					}
				}
			})
		}
	}
}

func TestLayoutIndexErrors(t *testing.T) {
	s := Shape{Layers: 2, Blocks: 3, BlockTokens: 2, KVHeads: 1, HeadDim: 2, ElemBytes: 2}
	rc := refCases()[0]
	lay, err := rc.make(rc.newBufs(s, rand.New(rand.NewPCG(3, 3))), s)
	if err != nil {
		t.Fatal(err)
	}
	bb, lb := lay.BlockBytes(), lay.LayerBytes()
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"gather block -1", func() error { return lay.Gather(make([]byte, bb), -1) }, ErrOutOfRange},
		{"gather block n", func() error { return lay.Gather(make([]byte, bb), 3) }, ErrOutOfRange},
		{"scatter block n", func() error { return lay.Scatter(make([]byte, bb), 3) }, ErrOutOfRange},
		{"gather short dst", func() error { return lay.Gather(make([]byte, bb-1), 0) }, ErrSizeMismatch},
		{"gather long dst", func() error { return lay.Gather(make([]byte, bb+1), 0) }, ErrSizeMismatch},
		{"scatter short src", func() error { return lay.Scatter(make([]byte, lb), 0) }, ErrSizeMismatch},
		{"layer -1", func() error { return lay.GatherLayer(make([]byte, lb), 0, -1) }, ErrOutOfRange},
		{"layer n", func() error { return lay.ScatterLayer(make([]byte, lb), 0, 2) }, ErrOutOfRange},
		{"layer block n", func() error { return lay.GatherLayer(make([]byte, lb), 3, 0) }, ErrOutOfRange},
		{"layer dst is block-sized", func() error { return lay.GatherLayer(make([]byte, bb), 0, 0) }, ErrSizeMismatch},
		{"layer src short", func() error { return lay.ScatterLayer(nil, 0, 1) }, ErrSizeMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, tt.want) {
				t.Fatalf("error = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestLayoutConstructorErrors(t *testing.T) {
	mha := Shape{Layers: 2, Blocks: 4, BlockTokens: 16, KVHeads: 2, HeadDim: 8, ElemBytes: 2}
	mla := Shape{Layers: 2, Blocks: 4, BlockTokens: 16, LatentDim: 9, ElemBytes: 1}
	faBytes := 2 * 4 * 16 * 2 * 8 * 2
	fa := func(n, size int) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = make([]byte, size)
		}
		return out
	}
	sgBytes := 2 * 2 * 4 * 16 * 2 * 8 * 2
	tests := []struct {
		name    string
		call    func() (Layout, error)
		errPart string // "" for success
	}{
		{"fa ok", func() (Layout, error) { return NewVLLMFlashAttn(fa(2, faBytes), mha) }, ""},
		{"fa short layer", func() (Layout, error) {
			b := fa(2, faBytes)
			b[1] = b[1][:faBytes-1]
			return NewVLLMFlashAttn(b, mha)
		}, "vllm flash-attn: layer 1 buffer is 4095 bytes, want exactly [2, num_blocks=4, block_size=16, num_kv_heads=2, head_size=8] x 2 B = 4096 bytes"},
		{"fa long layer", func() (Layout, error) { return NewVLLMFlashAttn(fa(2, faBytes+2), mha) }, "want exactly"},
		{"fa layer count", func() (Layout, error) { return NewVLLMFlashAttn(fa(3, faBytes), mha) }, "3 layer buffers for Layers 2"},
		{"fa mla shape", func() (Layout, error) { return NewVLLMFlashAttn(fa(2, faBytes), mla) }, "needs an MHA shape"},
		{"flashinfer long ok", func() (Layout, error) { return NewVLLMFlashInfer(fa(2, faBytes+64), mha) }, ""},
		{"flashinfer short", func() (Layout, error) { return NewVLLMFlashInfer(fa(2, 100), mha) }, "want at least [num_blocks=4, 2, block_size=16"},
		{"mla mha shape", func() (Layout, error) { return NewVLLMMLA(fa(2, 4096), mha) }, "needs an MLA shape"},
		{"mla ok", func() (Layout, error) { return NewVLLMMLA(fa(2, 4*16*9), mla) }, ""},
		{"both mha and mla", func() (Layout, error) {
			s := mha
			s.LatentDim = 576
			return NewContiguous(make([]byte, 1<<20), s)
		}, "not both"},
		{"zero block tokens", func() (Layout, error) {
			s := mha
			s.BlockTokens = 0
			return NewContiguous(make([]byte, 1<<20), s)
		}, "BlockTokens is 0"},
		{"zero elem", func() (Layout, error) {
			s := mla
			s.ElemBytes = 0
			return NewContiguous(make([]byte, 1<<20), s)
		}, "ElemBytes is 0"},
		{"negative layers", func() (Layout, error) {
			s := mha
			s.Layers = -1
			return NewContiguous(nil, s)
		}, "Layers is -1"},
		{"huge shape", func() (Layout, error) {
			s := mha
			s.Blocks, s.BlockTokens, s.KVHeads = 1<<30, 1<<30, 1<<30
			return NewContiguous(nil, s)
		}, "too large"},
		{"sglang ok", func() (Layout, error) { return NewSGLangHost(make([]byte, sgBytes), SGLangPageFirst, mha) }, ""},
		{"sglang unknown layout", func() (Layout, error) { return NewSGLangHost(make([]byte, sgBytes), "page_head", mha) }, `sglang host layout "page_head"`},
		{"sglang slots mismatch", func() (Layout, error) {
			return NewSGLangHost(make([]byte, 2*sgBytes), SGLangLayerFirst, mha)
		}, "want exactly [2, layers=2, slots=64, kv_heads=2, head_dim=8] x 2 B = 8192 bytes"},
		{"sglang mla page_first longer ok", func() (Layout, error) {
			return NewSGLangHost(make([]byte, 4*16*2*9+7), SGLangPageFirst, mla)
		}, ""},
		{"lmcache short", func() (Layout, error) { return NewLMCacheChunks(make([]byte, 10), mla) }, "[chunks=4, 1, num_layers=2, chunk_size=16, hidden=9] x 1 B = 1152 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lay, err := tt.call()
			if tt.errPart == "" {
				if err != nil || lay == nil {
					t.Fatalf("got %v, %v; want a layout", lay, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidLayout) || !strings.Contains(err.Error(), tt.errPart) {
				t.Fatalf("error = %v, want ErrInvalidLayout containing %q", err, tt.errPart)
			}
		})
	}
}

// TestRuns checks that copies use the largest contiguous runs the layout
// allows.
func TestRuns(t *testing.T) {
	mha := Shape{Layers: 4, Blocks: 3, BlockTokens: 16, KVHeads: 2, HeadDim: 8, ElemBytes: 2}
	mla := Shape{Layers: 4, Blocks: 3, BlockTokens: 16, LatentDim: 9, ElemBytes: 2}
	tests := []struct {
		name              string
		s                 Shape
		case_             string
		layerRuns, blockR int // blockR 0: per-layer loop
	}{
		{"flash-attn: K and V planes", mha, "vllm-flash-attn", 2, 0},
		{"flashinfer: one run per layer", mha, "vllm-flashinfer", 1, 0},
		{"vllm mla: one run per layer", mla, "vllm-mla", 1, 0},
		{"layer_first: K and V planes", mha, "sglang-layer_first", 2, 8},
		{"page_first: one token row per run", mha, "sglang-page_first", 32, 128},
		{"page_first mla: one token row per run", mla, "sglang-page_first-mla", 16, 64},
		{"page_first_direct: K and V planes", mha, "sglang-page_first_direct", 2, 8},
		{"page_first_direct mla: one run per block", mla, "sglang-page_first_direct-mla", 1, 1},
		{"lmcache kv_2ltd: K and V planes", mha, "lmcache-kv_2ltd", 2, 8},
		{"lmcache mla: one run per block", mla, "lmcache-kv_mla_fmt", 1, 1},
		{"contiguous: one run per block", mha, "contiguous", 1, 1},
	}
	cases := map[string]refCase{}
	for _, rc := range refCases() {
		cases[rc.name] = rc
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := cases[tt.case_]
			lay, err := rc.make(rc.newBufs(tt.s, rand.New(rand.NewPCG(4, 4))), tt.s)
			if err != nil {
				t.Fatal(err)
			}
			lr, br := lay.(*strided).runs()
			if lr != tt.layerRuns || br != tt.blockR {
				t.Fatalf("runs per layer, per block = %d, %d; want %d, %d", lr, br, tt.layerRuns, tt.blockR)
			}
		})
	}
}

func TestGatherAllocatesNothing(t *testing.T) {
	s := Shape{Layers: 4, Blocks: 3, BlockTokens: 16, KVHeads: 2, HeadDim: 8, ElemBytes: 2}
	for _, rc := range refCases() {
		if !rc.mha {
			continue
		}
		lay, err := rc.make(rc.newBufs(s, rand.New(rand.NewPCG(5, 5))), s)
		if err != nil {
			t.Fatal(err)
		}
		v := make([]byte, lay.BlockBytes())
		if n := testing.AllocsPerRun(10, func() {
			_ = lay.Gather(v, 1)
			_ = lay.Scatter(v, 2)
			_ = lay.GatherLayer(v[:lay.LayerBytes()], 0, 3)
		}); n != 0 {
			t.Errorf("%s: %v allocations per Gather+Scatter+GatherLayer", rc.name, n)
		}
	}
}

// TestManyRuns covers a single-tensor layout with too many runs for a
// precomputed block list: it copies layer by layer instead.
func TestManyRuns(t *testing.T) {
	s := Shape{Layers: 2, Blocks: 2, BlockTokens: maxBlockSegs/4 + 1, KVHeads: 1, HeadDim: 1, ElemBytes: 1}
	var rc refCase
	for _, c := range refCases() {
		if c.name == "sglang-page_first" {
			rc = c
		}
	}
	r := rand.New(rand.NewPCG(6, 6))
	bufs := rc.newBufs(s, r)
	lay, err := rc.make(bufs, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, br := lay.(*strided).runs(); br != 0 {
		t.Fatalf("%d precomputed block runs, want none", br)
	}
	got := make([]byte, lay.BlockBytes())
	if err := lay.Gather(got, 1); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, rc.refGather(s, bufs, 1)) {
		t.Fatal("Gather differs from the reference")
	}
	v := randBytes(r, lay.BlockBytes())
	if err := lay.Scatter(v, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rc.refGather(s, bufs, 0), v) {
		t.Fatal("Scatter differs from the reference")
	}
}
