package kvpool

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// Errors returned by the layout constructors and methods; match with
// errors.Is.
var (
	// ErrInvalidLayout: a Shape field out of range, a buffer of the wrong
	// size, or a layout that does not fit the shape (MHA vs MLA).
	ErrInvalidLayout = errors.New("kvpool: invalid layout")
	// ErrOutOfRange: a block or layer index outside the layout.
	ErrOutOfRange = errors.New("kvpool: index out of range")
	// ErrSizeMismatch: a dst or src whose length is not BlockBytes (or
	// LayerBytes for the layer forms).
	ErrSizeMismatch = errors.New("kvpool: buffer size mismatch")
)

// Shape gives the dimensions of a KV cache, in elements, as the engine
// allocated it on this worker. Set KVHeads and HeadDim for MHA/GQA, or
// LatentDim for MLA (then each token stores one latent vector per layer and
// there is no K/V split).
type Shape struct {
	// Layers is the number of layers the buffers hold (this PP stage's,
	// plus any MTP draft layers packed into the same pool).
	Layers int
	// Blocks is the number of blocks (vLLM blocks, SGLang pages, LMCache
	// chunks) the buffers hold. For SGLang host pools it is the pool's
	// page count, so host token slots = Blocks * BlockTokens.
	Blocks int
	// BlockTokens is the tokens per block: vLLM block_size, SGLang
	// page_size, LMCache chunk_size.
	BlockTokens int
	// KVHeads is the number of KV heads on this rank (MHA/GQA).
	KVHeads int
	// HeadDim is the head size in elements (MHA/GQA).
	HeadDim int
	// LatentDim is the MLA per-token width in elements (kv_lora_rank +
	// qk_rope_head_dim: 576 for DeepSeek-V2/V3), or for a packed format the
	// per-token bytes with ElemBytes 1 (vLLM fp8_ds_mla: 656).
	LatentDim int
	// ElemBytes is the size of one element: 2 for bf16/fp16, 1 for fp8.
	ElemBytes int
}

// MLA reports whether s describes an MLA cache (LatentDim set).
func (s Shape) MLA() bool { return s.LatentDim > 0 }

// Layout moves one block between an engine's KV buffers and a contiguous
// value. The value of a block is in the canonical order: layer-major, and
// within a layer the K plane then the V plane (MLA: the one latent plane),
// each plane holding the block's BlockTokens tokens:
//
//	value = for l in 0..Layers: K[l] ‖ V[l]      (MLA: C[l])
//	plane = BlockTokens × KVHeads × HeadDim × ElemBytes bytes
//	        (MLA: BlockTokens × LatentDim × ElemBytes)
//
// so layer l of a block is value[l*LayerBytes():(l+1)*LayerBytes()], and
// is exactly what GatherLayer(dst, block, l) produces.
//
// Implementations are immutable after construction and safe for concurrent
// use; concurrent calls on distinct blocks never touch the same bytes, and
// the caller orders a Scatter against any other access to the same block.
// Methods copy whole contiguous runs and allocate nothing.
type Layout interface {
	// Shape returns the shape the layout was built with.
	Shape() Shape
	// BlockBytes is the size of one block's value, all layers.
	BlockBytes() int
	// LayerBytes is the size of one layer of one block (BlockBytes/Layers).
	LayerBytes() int
	// Gather copies block into dst (len(dst) == BlockBytes()).
	Gather(dst []byte, block int) error
	// Scatter copies src (len(src) == BlockBytes()) into block.
	Scatter(src []byte, block int) error
	// GatherLayer copies one layer of block into dst (len LayerBytes()).
	GatherLayer(dst []byte, block, layer int) error
	// ScatterLayer copies src (len LayerBytes()) into one layer of block.
	ScatterLayer(src []byte, block, layer int) error
}

// SGLangLayout names an SGLang host-pool layout (--hicache-mem-layout).
type SGLangLayout string

// The SGLang host-pool layouts supported by NewSGLangHost.
const (
	SGLangLayerFirst      SGLangLayout = "layer_first"
	SGLangPageFirst       SGLangLayout = "page_first"
	SGLangPageFirstDirect SGLangLayout = "page_first_direct"
)

// NewVLLMFlashAttn describes vLLM's FlashAttention cache: one tensor per
// layer, layers[l], of shape [2, num_blocks, block_size, num_kv_heads,
// head_size]. The K plane of block b is at b*B and the V plane at
// (num_blocks+b)*B, B = block_size*num_kv_heads*head_size*elem. Each
// buffer must be exactly the tensor's size (num_blocks fixes where the V
// half starts). The plane is copied as is, so the NHD and HND stride
// orders both work (both ends must use the same one).
func NewVLLMFlashAttn(layers [][]byte, s Shape) (Layout, error) {
	const name = "vllm flash-attn"
	if err := s.validate(name, wantMHA); err != nil {
		return nil, err
	}
	row, plane := s.rowBytes(), s.planeBytes()
	g := geom{kvStride: s.Blocks * plane, blockStride: plane, tokStride: row, rowBytes: row}
	dims := []dim{{"2", 2}, {"num_blocks", s.Blocks}, {"block_size", s.BlockTokens}, {"num_kv_heads", s.KVHeads}, {"head_size", s.HeadDim}}
	return newPerLayer(name, s, layers, dims, true, g)
}

// NewVLLMFlashInfer describes the blocks-first cache of vLLM's FlashInfer,
// Triton and most other backends: one tensor per layer of shape
// [num_blocks, 2, block_size, num_kv_heads, head_size]; block b is one
// region at b*2*B, K then V. Buffers may be longer than the tensor.
func NewVLLMFlashInfer(layers [][]byte, s Shape) (Layout, error) {
	const name = "vllm flashinfer"
	if err := s.validate(name, wantMHA); err != nil {
		return nil, err
	}
	row, plane := s.rowBytes(), s.planeBytes()
	g := geom{kvStride: plane, blockStride: 2 * plane, tokStride: row, rowBytes: row}
	dims := []dim{{"num_blocks", s.Blocks}, {"2", 2}, {"block_size", s.BlockTokens}, {"num_kv_heads", s.KVHeads}, {"head_size", s.HeadDim}}
	return newPerLayer(name, s, layers, dims, false, g)
}

// NewVLLMMLA describes vLLM's MLA cache (FlashMLA, CUTLASS MLA, Triton MLA,
// FlashInfer MLA): one tensor per layer of shape [num_blocks, block_size,
// head_size], head_size = LatentDim; block b is at b*block_size*head_size*
// elem, with no K/V split. Buffers may be longer than the tensor.
func NewVLLMMLA(layers [][]byte, s Shape) (Layout, error) {
	const name = "vllm mla"
	if err := s.validate(name, wantMLA); err != nil {
		return nil, err
	}
	row, plane := s.rowBytes(), s.planeBytes()
	g := geom{blockStride: plane, tokStride: row, rowBytes: row}
	dims := []dim{{"num_blocks", s.Blocks}, {"block_size", s.BlockTokens}, {"head_size(latent)", s.LatentDim}}
	return newPerLayer(name, s, layers, dims, false, g)
}

// NewSGLangHost describes an SGLang host KV pool (HostKVCache.kv_buffer,
// one tensor) in the given layout, with S = Blocks*BlockTokens token slots,
// P = BlockTokens (page size), N = Blocks (page_num), L = Layers:
//
//	layout             MHA shape              MLA shape
//	layer_first        [2, L, S, H, D]        [L, S, 1, C]
//	page_first         [2, S, L, H, D]        [S, L, 1, C]
//	page_first_direct  [2, N, L, P, H, D]     [N, L, P, 1, C]
//
// Block b is page b, token slots b*P .. b*P+P-1. The buffer must be
// exactly the tensor's size when S or N sets a stride (every MHA layout,
// MLA layer_first), and at least that size otherwise.
func NewSGLangHost(buf []byte, layout SGLangLayout, s Shape) (Layout, error) {
	name := "sglang host " + string(layout)
	if err := s.validate(name, wantAny); err != nil {
		return nil, err
	}
	row, plane := s.rowBytes(), s.planeBytes()
	n, p, l, slots := s.Blocks, s.BlockTokens, s.Layers, s.Blocks*s.BlockTokens
	var g geom
	var dims []dim
	exact := true
	switch {
	case layout == SGLangLayerFirst && !s.MLA():
		g = geom{kvStride: l * slots * row, layerStride: slots * row, blockStride: plane, tokStride: row}
		dims = []dim{{"2", 2}, {"layers", l}, {"slots", slots}, {"kv_heads", s.KVHeads}, {"head_dim", s.HeadDim}}
	case layout == SGLangLayerFirst:
		g = geom{layerStride: slots * row, blockStride: plane, tokStride: row}
		dims = []dim{{"layers", l}, {"slots", slots}, {"1", 1}, {"latent_dim", s.LatentDim}}
	case layout == SGLangPageFirst && !s.MLA():
		g = geom{kvStride: slots * l * row, layerStride: row, blockStride: p * l * row, tokStride: l * row}
		dims = []dim{{"2", 2}, {"slots", slots}, {"layers", l}, {"kv_heads", s.KVHeads}, {"head_dim", s.HeadDim}}
	case layout == SGLangPageFirst:
		g = geom{layerStride: row, blockStride: p * l * row, tokStride: l * row}
		dims = []dim{{"slots", slots}, {"layers", l}, {"1", 1}, {"latent_dim", s.LatentDim}}
		exact = false
	case layout == SGLangPageFirstDirect && !s.MLA():
		g = geom{kvStride: n * l * plane, layerStride: plane, blockStride: l * plane, tokStride: row}
		dims = []dim{{"2", 2}, {"pages", n}, {"layers", l}, {"page_size", p}, {"kv_heads", s.KVHeads}, {"head_dim", s.HeadDim}}
	case layout == SGLangPageFirstDirect:
		g = geom{layerStride: plane, blockStride: l * plane, tokStride: row}
		dims = []dim{{"pages", n}, {"layers", l}, {"page_size", p}, {"1", 1}, {"latent_dim", s.LatentDim}}
		exact = false
	default:
		return nil, fmt.Errorf("%w: sglang host layout %q, want %q, %q or %q", ErrInvalidLayout, layout, SGLangLayerFirst, SGLangPageFirst, SGLangPageFirstDirect)
	}
	g.rowBytes = row
	return newSingle(name, s, buf, dims, exact, g)
}

// NewLMCacheChunks describes Blocks LMCache chunks stored back to back, each
// a MemoryObj payload in LMCache's own format: KV_2LTD [2, num_layers,
// chunk_size, num_kv_heads*head_size] for MHA, KV_MLA_FMT [1, num_layers,
// chunk_size, latent_dim] for MLA. KV_2LTD is K-major, so Gather reorders
// it into the canonical layer-major value (2*Layers runs of a plane each);
// an MLA chunk is already canonical and gathers in one copy. buf may be
// longer than the chunks.
func NewLMCacheChunks(buf []byte, s Shape) (Layout, error) {
	const name = "lmcache chunks"
	if err := s.validate(name, wantAny); err != nil {
		return nil, err
	}
	row, plane, kvs := s.rowBytes(), s.planeBytes(), s.kvs()
	g := geom{kvStride: s.Layers * plane, layerStride: plane, blockStride: kvs * s.Layers * plane, tokStride: row, rowBytes: row}
	dims := []dim{{"chunks", s.Blocks}, {"2", kvs}, {"num_layers", s.Layers}, {"chunk_size", s.BlockTokens}, {"hidden", s.rowElems()}}
	if s.MLA() {
		dims[1].name = "1"
	}
	return newSingle(name, s, buf, dims, false, g)
}

// NewContiguous describes Blocks values stored back to back in the
// canonical order ([num_blocks, layers, 2, block_tokens, kv_heads,
// head_dim], MLA [num_blocks, layers, block_tokens, latent_dim]): a staging
// buffer, or a cross-layer cache whose blocks already hold all layers in
// that order. Gather and Scatter are one copy. buf may be longer.
func NewContiguous(buf []byte, s Shape) (Layout, error) {
	const name = "contiguous"
	if err := s.validate(name, wantAny); err != nil {
		return nil, err
	}
	row, plane, kvs := s.rowBytes(), s.planeBytes(), s.kvs()
	g := geom{kvStride: plane, layerStride: kvs * plane, blockStride: s.Layers * kvs * plane, tokStride: row, rowBytes: row}
	dims := []dim{{"num_blocks", s.Blocks}, {"layers", s.Layers}, {"2", kvs}, {"block_tokens", s.BlockTokens}, {"hidden", s.rowElems()}}
	if s.MLA() {
		dims[2].name = "1"
	}
	return newSingle(name, s, buf, dims, false, g)
}

// geom gives, in bytes, where token t of plane kv of layer l of block b
// starts: kv*kvStride + b*blockStride + l*layerStride + t*tokStride, in the
// layer's buffer. rowBytes (one token of one plane) are contiguous there.
type geom struct {
	kvStride, blockStride, layerStride, tokStride, rowBytes int
}

// dim is one dimension of an engine tensor, for sizes and error messages.
type dim struct {
	name string
	n    int
}

// seg is one contiguous run of n bytes: at off in the buffer (relative to
// a base) and at voff in the value.
type seg struct{ off, voff, n int }

// strided is every Layout here: the runs of one layer are the same for
// every block and layer up to a base offset, so they are computed once.
type strided struct {
	name  string
	shape Shape
	// bufs[l] holds layer l; single-tensor layouts repeat one slice.
	bufs        [][]byte
	blockStride int
	layerStride int
	// layerSegs are one layer's runs relative to block*blockStride +
	// layer*layerStride in bufs[layer] and to the layer's value.
	layerSegs []seg
	// blockSegs, for single-tensor layouts, are the whole block's runs
	// relative to block*blockStride in bufs[0], sorted by buffer offset so
	// that the engine's memory is swept in address order (the value is
	// small enough to stay in cache; the pool is not).
	blockSegs  []seg
	layerBytes int
	blockBytes int
}

type wantKind int

const (
	wantAny wantKind = iota
	wantMHA
	wantMLA
)

func (s Shape) validate(name string, want wantKind) error {
	fields := []dim{{"Layers", s.Layers}, {"Blocks", s.Blocks}, {"BlockTokens", s.BlockTokens}, {"ElemBytes", s.ElemBytes}}
	switch {
	case s.LatentDim != 0 && (s.KVHeads != 0 || s.HeadDim != 0):
		return fmt.Errorf("%w: %s: set LatentDim (MLA) or KVHeads and HeadDim (MHA), not both (LatentDim %d, KVHeads %d, HeadDim %d)",
			ErrInvalidLayout, name, s.LatentDim, s.KVHeads, s.HeadDim)
	case s.MLA():
		if want == wantMHA {
			return fmt.Errorf("%w: %s needs an MHA shape (KVHeads, HeadDim), got MLA LatentDim %d", ErrInvalidLayout, name, s.LatentDim)
		}
		fields = append(fields, dim{"LatentDim", s.LatentDim})
	default:
		if want == wantMLA {
			return fmt.Errorf("%w: %s needs an MLA shape (LatentDim), got KVHeads %d, HeadDim %d", ErrInvalidLayout, name, s.KVHeads, s.HeadDim)
		}
		fields = append(fields, dim{"KVHeads", s.KVHeads}, dim{"HeadDim", s.HeadDim})
	}
	for _, f := range fields {
		if f.n <= 0 || f.n > math.MaxInt32 {
			return fmt.Errorf("%w: %s: %s is %d, want 1..%d", ErrInvalidLayout, name, f.name, f.n, math.MaxInt32)
		}
	}
	// The whole cache must be addressable, so that no stride or offset
	// computed from these dimensions overflows int.
	total := append(fields, dim{"kv", s.kvs()})
	if _, ok := product(total); !ok {
		return fmt.Errorf("%w: %s: shape %+v is too large for int", ErrInvalidLayout, name, s)
	}
	return nil
}

// kvs is the number of planes per layer: 2 (K, V), or 1 for MLA.
func (s Shape) kvs() int {
	if s.MLA() {
		return 1
	}
	return 2
}

// rowElems is one token of one plane, in elements.
func (s Shape) rowElems() int {
	if s.MLA() {
		return s.LatentDim
	}
	return s.KVHeads * s.HeadDim
}

func (s Shape) rowBytes() int   { return s.rowElems() * s.ElemBytes }
func (s Shape) planeBytes() int { return s.BlockTokens * s.rowBytes() }

// product multiplies the dims, reporting false on int overflow.
func product(dims []dim) (int, bool) {
	p := uint64(1)
	for _, d := range dims {
		hi, lo := bits.Mul64(p, uint64(d.n))
		if hi != 0 || lo > math.MaxInt {
			return 0, false
		}
		p = lo
	}
	return int(p), true
}

// checkBuf verifies that buf holds the tensor dims of elem-byte elements:
// exactly when exact (a stride depends on the tensor's extent), at least
// otherwise.
func checkBuf(name, which string, buf []byte, dims []dim, elem int, exact bool) error {
	want, ok := product(append(dims[:len(dims):len(dims)], dim{"elem", elem}))
	if ok && (len(buf) == want || !exact && len(buf) > want) {
		return nil
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range dims {
		if i > 0 {
			b.WriteString(", ")
		}
		if d.name == strconv.Itoa(d.n) {
			b.WriteString(d.name)
		} else {
			b.WriteString(d.name + "=" + strconv.Itoa(d.n))
		}
	}
	b.WriteString("] x " + strconv.Itoa(elem) + " B")
	rel := "at least"
	if exact {
		rel = "exactly"
	}
	if !ok {
		return fmt.Errorf("%w: %s: %s %s overflows int", ErrInvalidLayout, name, which, b.String())
	}
	return fmt.Errorf("%w: %s: %s is %d bytes, want %s %s = %d bytes", ErrInvalidLayout, name, which, len(buf), rel, b.String(), want)
}

func newPerLayer(name string, s Shape, layers [][]byte, dims []dim, exact bool, g geom) (Layout, error) {
	if len(layers) != s.Layers {
		return nil, fmt.Errorf("%w: %s: %d layer buffers for Layers %d", ErrInvalidLayout, name, len(layers), s.Layers)
	}
	for l, buf := range layers {
		if err := checkBuf(name, "layer "+strconv.Itoa(l)+" buffer", buf, dims, s.ElemBytes, exact); err != nil {
			return nil, err
		}
	}
	return build(name, s, layers, g, false), nil
}

func newSingle(name string, s Shape, buf []byte, dims []dim, exact bool, g geom) (Layout, error) {
	if err := checkBuf(name, "buffer", buf, dims, s.ElemBytes, exact); err != nil {
		return nil, err
	}
	bufs := make([][]byte, s.Layers)
	for l := range bufs {
		bufs[l] = buf
	}
	return build(name, s, bufs, g, true), nil
}

// maxBlockSegs bounds the precomputed whole-block run list; a layout with
// more runs (huge pages of token-interleaved layers) copies layer by layer.
const maxBlockSegs = 1 << 16

func build(name string, s Shape, bufs [][]byte, g geom, single bool) *strided {
	var ls []seg
	for kv := range s.kvs() {
		for t := range s.BlockTokens {
			ls = appendSeg(ls, seg{off: kv*g.kvStride + t*g.tokStride, voff: (kv*s.BlockTokens + t) * g.rowBytes, n: g.rowBytes})
		}
	}
	st := &strided{
		name: name, shape: s, bufs: bufs,
		blockStride: g.blockStride, layerStride: g.layerStride,
		layerSegs:  ls,
		layerBytes: s.kvs() * s.planeBytes(),
	}
	st.blockBytes = s.Layers * st.layerBytes
	if single && s.Layers*len(ls) <= maxBlockSegs {
		all := make([]seg, 0, s.Layers*len(ls))
		for l := range s.Layers {
			for _, sg := range ls {
				all = append(all, seg{off: l*g.layerStride + sg.off, voff: l*st.layerBytes + sg.voff, n: sg.n})
			}
		}
		slices.SortFunc(all, func(a, b seg) int { return cmp.Compare(a.off, b.off) })
		var bs []seg
		for _, sg := range all {
			bs = appendSeg(bs, sg)
		}
		st.blockSegs = slices.Clip(bs)
	}
	return st
}

// appendSeg appends g to segs, merging it into the last run when it
// continues that run in both the buffer and the value.
func appendSeg(segs []seg, g seg) []seg {
	if n := len(segs); n > 0 && segs[n-1].off+segs[n-1].n == g.off && segs[n-1].voff+segs[n-1].n == g.voff {
		segs[n-1].n += g.n
		return segs
	}
	return append(segs, g)
}

func (s *strided) String() string { return s.name }

func (s *strided) Shape() Shape     { return s.shape }
func (s *strided) BlockBytes() int  { return s.blockBytes }
func (s *strided) LayerBytes() int  { return s.layerBytes }
func (s *strided) runs() (int, int) { return len(s.layerSegs), len(s.blockSegs) }

func (s *strided) Gather(dst []byte, block int) error {
	if err := s.check("dst", len(dst), s.blockBytes, block, 0); err != nil {
		return err
	}
	s.move(dst, block, true)
	return nil
}

func (s *strided) Scatter(src []byte, block int) error {
	if err := s.check("src", len(src), s.blockBytes, block, 0); err != nil {
		return err
	}
	s.move(src, block, false)
	return nil
}

func (s *strided) GatherLayer(dst []byte, block, layer int) error {
	if err := s.check("dst", len(dst), s.layerBytes, block, layer); err != nil {
		return err
	}
	s.moveLayer(dst, block, layer, true)
	return nil
}

func (s *strided) ScatterLayer(src []byte, block, layer int) error {
	if err := s.check("src", len(src), s.layerBytes, block, layer); err != nil {
		return err
	}
	s.moveLayer(src, block, layer, false)
	return nil
}

func (s *strided) check(which string, n, want, block, layer int) error {
	switch {
	case block < 0 || block >= s.shape.Blocks:
		return fmt.Errorf("%w: %s: block %d outside [0, %d)", ErrOutOfRange, s.name, block, s.shape.Blocks)
	case layer < 0 || layer >= s.shape.Layers:
		return fmt.Errorf("%w: %s: layer %d outside [0, %d)", ErrOutOfRange, s.name, layer, s.shape.Layers)
	case n != want:
		return fmt.Errorf("%w: %s: %s is %d bytes, want %d", ErrSizeMismatch, s.name, which, n, want)
	}
	return nil
}

// move copies the whole block between p (the value) and the buffers.
func (s *strided) move(p []byte, block int, gather bool) {
	if s.blockSegs != nil {
		copySegs(p, s.bufs[0][block*s.blockStride:], s.blockSegs, gather)
		return
	}
	for l := range s.shape.Layers {
		s.moveLayer(p[l*s.layerBytes:(l+1)*s.layerBytes], block, l, gather)
	}
}

func (s *strided) moveLayer(p []byte, block, layer int, gather bool) {
	copySegs(p, s.bufs[layer][block*s.blockStride+layer*s.layerStride:], s.layerSegs, gather)
}

// copySegs copies each run of segs from buf to p (gather) or back.
func copySegs(p, buf []byte, segs []seg, gather bool) {
	for _, g := range segs {
		v, b := p[g.voff:g.voff+g.n], buf[g.off:g.off+g.n]
		if gather {
			copy(v, b)
		} else {
			copy(b, v)
		}
	}
}
