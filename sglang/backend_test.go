package sglang

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

const testTimeout = 30 * time.Second

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// settings parses a small valid settings object overridden by over.
func settings(t testing.TB, over map[string]any) Settings {
	t.Helper()
	m := map[string]any{"tp_rank": 0, "tp_size": 1, "model_name": "org/tiny-llama"}
	for k, v := range over {
		m[k] = v
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	s, err := ParseSettings(b)
	require.NoError(t, err)
	return s
}

func startPool(t testing.TB) *localcluster.Cluster {
	t.Helper()
	cl, err := localcluster.Start(testContext(t), localcluster.Options{Nodes: 1, SegmentSize: 64 << 20})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

var clientSeq atomic.Int64

func poolClient(t testing.TB, cl *localcluster.Cluster) *client.Client {
	t.Helper()
	c, err := cl.NewClient(testContext(t), client.Config{LocalHostname: fmt.Sprintf("sglang-test-%d", clientSeq.Add(1)), RPCTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// hostPool is a fake MHA or MLA host pool: pages of layers × elem bytes
// per object, in SGLang's layer_first or page_first layout, and what
// get_page_buffer_meta returns for it.
type hostPool struct {
	buf    []byte
	layout string
	mla    bool
	pages  int
	layers int
	row    int // bytes of one layer of one page of one object (K, V or the MLA latent)
}

func newHostPool(t testing.TB, layout string, mla bool, pages, layers, row int) *hostPool {
	t.Helper()
	objs := 2
	if mla {
		objs = 1
	}
	r, err := memory.Map(objs * pages * layers * row)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return &hostPool{buf: r.Bytes(), layout: layout, mla: mla, pages: pages, layers: layers, row: row}
}

func (h *hostPool) objs() int {
	if h.mla {
		return 1
	}
	return 2
}

func (h *hostPool) geometry() Geometry {
	return Geometry{Layout: h.layout, DType: "torch.bfloat16", PageSize: 4, Layers: h.layers, PageBytes: int64(h.objs() * h.layers * h.row)}
}

// meta is get_page_buffer_meta for pages: layer_first gives, per page and
// layer, K then V (MLA: the latent row); page_first (and
// page_first_direct) gives K then V (MLA: one) per page, all layers.
func (h *hostPool) meta(pages []int) (parts [][]byte, perPage int) {
	half := h.pages * h.layers * h.row // offset of the V half
	for _, p := range pages {
		if h.layout == "layer_first" {
			for l := range h.layers {
				off := (l*h.pages + p) * h.row
				parts = append(parts, h.buf[off:off+h.row])
				if !h.mla {
					parts = append(parts, h.buf[half+off:half+off+h.row])
				}
			}
			continue
		}
		off := p * h.layers * h.row
		n := h.layers * h.row
		parts = append(parts, h.buf[off:off+n])
		if !h.mla {
			parts = append(parts, h.buf[half+off:half+off+n])
		}
	}
	return parts, len(parts) / len(pages)
}

// fill writes bytes that depend on (page, seed) into pages' buffers.
func (h *hostPool) fill(pages []int, seed byte) {
	parts, per := h.meta(pages)
	for i, p := range parts {
		for j := range p {
			p[j] = byte(pages[i/per]*31) ^ seed ^ byte(i%per*7) ^ byte(j)
		}
	}
}

func (h *hostPool) snapshot(pages []int) []byte {
	parts, _ := h.meta(pages)
	return bytes.Join(parts, nil)
}

func (h *hostPool) clear() { clear(h.buf) }

func ids(n, from int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%064x", from+i)
	}
	return out
}

func seq(lo, hi int) []int {
	var out []int
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

func newBackend(t testing.TB, cl *localcluster.Cluster, s Settings, h *hostPool) *Backend {
	t.Helper()
	b, err := New(s, poolClient(t, cl), nil)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	require.NoError(t, b.RegisterHostPool(testContext(t), h.geometry(), h.buf))
	return b
}

func TestRoundTripLayouts(t *testing.T) {
	cl := startPool(t)
	for _, c := range []struct {
		layout string
		mla    bool
	}{{"layer_first", false}, {"page_first", false}, {"page_first_direct", false}, {"layer_first", true}, {"page_first", true}, {"page_first_direct", true}} {
		t.Run(fmt.Sprintf("%s/mla=%v", c.layout, c.mla), func(t *testing.T) {
			ctx := testContext(t)
			h := newHostPool(t, c.layout, c.mla, 8, 3, 64)
			b := newBackend(t, cl, settings(t, map[string]any{"is_mla_model": c.mla, "model_name": "m-" + c.layout}), h)
			pages := []int{1, 3, 4, 6}
			h.fill(pages, 0x5a)
			want := h.snapshot(pages)
			parts, per := h.meta(pages)
			keys := ids(len(pages), 100)
			ok, err := b.BatchSet(ctx, keys, parts, per)
			require.NoError(t, err)
			assert.Equal(t, []bool{true, true, true, true}, ok)
			h.clear()
			n, err := b.BatchExists(ctx, keys)
			require.NoError(t, err)
			assert.Equal(t, 4, n)
			ok, err = b.BatchGet(ctx, keys, parts, per)
			require.NoError(t, err)
			assert.Equal(t, []bool{true, true, true, true}, ok)
			assert.True(t, bytes.Equal(want, h.snapshot(pages)), "pages read back differ")
			// Into other slots of the pool: same bytes.
			other := []int{0, 2, 5, 7}
			parts2, _ := h.meta(other)
			ok, err = b.BatchGet(ctx, keys, parts2, per)
			require.NoError(t, err)
			assert.Equal(t, []bool{true, true, true, true}, ok)
			assert.True(t, bytes.Equal(want, h.snapshot(other)), "pages read into other slots differ")
			st := b.TakeStats()
			assert.Equal(t, uint64(4), st.BackupPages)
			assert.Equal(t, uint64(8), st.PrefetchPages)
			assert.Equal(t, uint64(8)*uint64(h.geometry().PageBytes), st.PrefetchBytes)
			assert.Zero(t, st.FailedGets+st.FailedSets+st.Timeouts)
		})
	}
}

func TestObjectOrderSharedAcrossLayouts(t *testing.T) {
	// layer_first and page_first_direct store the same object bytes, so
	// they share pages; page_first does not.
	cl := startPool(t)
	ctx := testContext(t)
	lf := newHostPool(t, "layer_first", false, 4, 3, 32)
	pfd := newHostPool(t, "page_first_direct", false, 4, 3, 32)
	pf := newHostPool(t, "page_first", false, 4, 3, 32)
	blf := newBackend(t, cl, settings(t, nil), lf)
	bpfd := newBackend(t, cl, settings(t, nil), pfd)
	bpf := newBackend(t, cl, settings(t, nil), pf)
	lf.fill([]int{2}, 1)
	parts, per := lf.meta([]int{2})
	ok, err := blf.BatchSet(ctx, ids(1, 7), parts, per)
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ok)

	parts, per = pfd.meta([]int{1})
	ok, err = bpfd.BatchGet(ctx, ids(1, 7), parts, per)
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ok)
	// page_first_direct's page 1 K object is [layer][token] as layer_first's.
	assert.True(t, bytes.Equal(bytes.Join(parts[:1], nil), joinEvery(lf.meta, 2, 0)))

	n, err := bpf.BatchExists(ctx, ids(1, 7))
	require.NoError(t, err)
	assert.Zero(t, n, "page_first must not see layer_first's pages")
}

// joinEvery concatenates every step-th buffer from first of meta(page).
func joinEvery(meta func([]int) ([][]byte, int), page, first int) []byte {
	parts, _ := meta([]int{page})
	var out []byte
	for i := first; i < len(parts); i += 2 {
		out = append(out, parts[i]...)
	}
	return out
}

func TestBatchExistsLeadingPages(t *testing.T) {
	cl := startPool(t)
	ctx := testContext(t)
	h := newHostPool(t, "page_first", false, 8, 2, 64)
	c := poolClient(t, cl)
	b, err := New(settings(t, nil), c, nil)
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.RegisterHostPool(ctx, h.geometry(), h.buf))
	keys := ids(6, 0)
	h.fill(seq(0, 6), 3)
	parts, per := h.meta(seq(0, 6))
	// Pages 0, 1, 2 and 4 stored; page 3 has only its K object.
	ok, err := b.BatchSet(ctx, []string{keys[0], keys[1], keys[2], keys[4]}, append(append([][]byte{}, parts[:6]...), parts[8:10]...), per)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true, true}, ok)
	k3, err := b.Keys(keys[3:4])
	require.NoError(t, err)
	require.Len(t, k3, 2)
	require.NoError(t, c.PutFrom(ctx, k3[0], parts[6], nil))

	for _, tc := range []struct {
		keys []string
		want int
	}{{keys, 3}, {keys[:2], 2}, {keys[3:], 0}, {keys[4:5], 1}, {nil, 0}} {
		n, err := b.BatchExists(ctx, tc.keys)
		require.NoError(t, err)
		assert.Equal(t, tc.want, n, "batch_exists of %d keys", len(tc.keys))
	}
	// batch_get reads the leading pages; page 3 (half there) and 5 (absent) fail.
	h.clear()
	got, err := b.BatchGet(ctx, keys, parts, per)
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true, true, false, true, false}, got)
	st := b.TakeStats()
	assert.Zero(t, st.FailedGets, "misses are not failures")
}

func TestMLAOneWriter(t *testing.T) {
	cl := startPool(t)
	ctx := testContext(t)
	h0 := newHostPool(t, "page_first", true, 4, 2, 64)
	h1 := newHostPool(t, "page_first", true, 4, 2, 64)
	b0 := newBackend(t, cl, settings(t, map[string]any{"is_mla_model": true, "tp_rank": 0, "tp_size": 2}), h0)
	b1 := newBackend(t, cl, settings(t, map[string]any{"is_mla_model": true, "tp_rank": 1, "tp_size": 2}), h1)
	h1.fill([]int{0, 1}, 9)
	parts, per := h1.meta([]int{0, 1})
	ok, err := b1.BatchSet(ctx, ids(2, 50), parts, per)
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false}, ok, "rank 1 writes nothing under MLA")
	n, err := b0.BatchExists(ctx, ids(2, 50))
	require.NoError(t, err)
	assert.Zero(t, n)

	h0.fill([]int{0, 1}, 9)
	parts0, _ := h0.meta([]int{0, 1})
	ok, err = b0.BatchSet(ctx, ids(2, 50), parts0, per)
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true}, ok)
	// Rank 1 reads rank 0's pages (same rank-free keys).
	want := h0.snapshot([]int{0, 1})
	h1.clear()
	ok, err = b1.BatchGet(ctx, ids(2, 50), parts, per)
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true}, ok)
	assert.True(t, bytes.Equal(want, h1.snapshot([]int{0, 1})))
	ok, err = b1.BatchSet(ctx, ids(2, 50), parts, per)
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true}, ok, "pages there already count as written")
}

func TestTPRanksKeyedApart(t *testing.T) {
	s0 := settings(t, map[string]any{"tp_rank": 0, "tp_size": 2})
	s1 := settings(t, map[string]any{"tp_rank": 1, "tp_size": 2})
	g := Geometry{Layout: "page_first", DType: "bfloat16", PageSize: 64, Layers: 32, PageBytes: 1 << 20}
	n0, err := s0.Namespace(g)
	require.NoError(t, err)
	n1, err := s1.Namespace(g)
	require.NoError(t, err)
	assert.NotEqual(t, n0.Prefix(), n1.Prefix())
	assert.Contains(t, n0.Prefix(), "tp0of2")
	assert.Contains(t, n0.Prefix(), "org%2Ftiny-llama")
	assert.Contains(t, n0.Prefix(), "/bfloat16/")
	assert.Contains(t, n0.Prefix(), "/bt64/")
	m0, err := settings(t, map[string]any{"tp_rank": 0, "tp_size": 2, "is_mla_model": true}).Namespace(g)
	require.NoError(t, err)
	m1, err := settings(t, map[string]any{"tp_rank": 1, "tp_size": 2, "is_mla_model": true}).Namespace(g)
	require.NoError(t, err)
	assert.Equal(t, m0.Prefix(), m1.Prefix())
	cp, err := settings(t, map[string]any{"attn_cp_rank": 1, "attn_cp_size": 2}).Namespace(g)
	require.NoError(t, err)
	assert.Contains(t, cp.Prefix(), "cp1of2")
	tn, err := settings(t, map[string]any{"extra_config": map[string]any{"mc_tenant": "acme"}}).Namespace(g)
	require.NoError(t, err)
	assert.Contains(t, tn.Prefix(), "/t=acme/")
	tag, err := settings(t, map[string]any{"extra_config": map[string]any{"extra_backend_tag": "blue"}}).Namespace(g)
	require.NoError(t, err)
	assert.Contains(t, tag.Prefix(), "/t=blue/")
}

func TestBadInputs(t *testing.T) {
	cl := startPool(t)
	ctx := testContext(t)
	h := newHostPool(t, "page_first", false, 4, 2, 64)
	b, err := New(settings(t, nil), poolClient(t, cl), nil)
	require.NoError(t, err)
	defer b.Close()
	_, err = b.BatchExists(ctx, ids(1, 0))
	require.ErrorIs(t, err, ErrNoHostPool)
	_, err = b.BatchGet(ctx, ids(1, 0), nil, 2)
	require.ErrorIs(t, err, ErrNoHostPool)
	g := h.geometry()
	g.Layout = "page_head"
	require.ErrorIs(t, b.RegisterHostPool(ctx, g, h.buf), ErrBadLayout)
	require.NoError(t, b.RegisterHostPool(ctx, h.geometry(), h.buf))
	require.Error(t, b.RegisterHostPool(ctx, h.geometry(), h.buf), "twice")

	parts, per := h.meta([]int{0})
	for name, c := range map[string]struct {
		parts [][]byte
		per   int
	}{
		"count mismatch": {parts[:1], per},
		"odd per page":   {parts[:1], 1},
		"short page":     {[][]byte{parts[0][:8], parts[1]}, per},
		"outside pool":   {[][]byte{make([]byte, len(parts[0])), parts[1]}, per},
	} {
		t.Run(name, func(t *testing.T) {
			ok, err := b.BatchSet(ctx, ids(1, 0), c.parts, c.per)
			require.ErrorIs(t, err, ErrBadLayout)
			assert.Equal(t, []bool{false}, ok)
		})
	}
	_, err = b.BatchExists(ctx, []string{""})
	require.ErrorIs(t, err, ErrBadLayout)
	st := b.TakeStats()
	assert.Equal(t, uint64(4), st.FailedSets)
	assert.Equal(t, uint64(1), st.ExistsErrors)
	assert.Contains(t, b.TakeLastError(), "batch_exists")
	assert.Empty(t, b.TakeLastError())
}

func TestParseSettings(t *testing.T) {
	s := settings(t, nil)
	assert.Equal(t, time.Second, s.GetTimeoutBase)
	assert.Equal(t, 250*time.Millisecond, s.GetTimeoutPerKiToken)
	assert.Equal(t, 30*time.Second, s.SetTimeout)
	assert.True(t, s.Writer())
	s = settings(t, map[string]any{"extra_config": map[string]any{"mc_get_timeout_base_ms": 50, "mc_get_timeout_per_ki_token_ms": 0, "mc_set_timeout_ms": 75}})
	assert.Equal(t, 50*time.Millisecond, s.GetTimeoutBase)
	assert.Zero(t, s.GetTimeoutPerKiToken)
	assert.Equal(t, 75*time.Millisecond, s.SetTimeout)
	for name, js := range map[string]string{
		"not json":    `{`,
		"no model":    `{"tp_size": 1}`,
		"bad tp":      `{"model_name": "m", "tp_rank": 2, "tp_size": 2}`,
		"bad pp":      `{"model_name": "m", "pp_rank": 1}`,
		"bad cp":      `{"model_name": "m", "attn_cp_rank": 3, "attn_cp_size": 2}`,
		"dcp":         `{"model_name": "m", "dcp_size": 2}`,
		"split heads": `{"model_name": "m", "should_split_heads": true}`,
		"timeout":     `{"model_name": "m", "extra_config": {"mc_set_timeout_ms": 0}}`,
		"extra type":  `{"model_name": "m", "extra_config": {"mc_tenant": 5}}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseSettings([]byte(js))
			require.ErrorIs(t, err, ErrBadConfig)
		})
	}
	_, err := ParseSettings([]byte(`{"model_name": "m", "dcp_size": 2}`))
	require.ErrorContains(t, err, "unsupported:")
}

func TestPoolConfig(t *testing.T) {
	s := settings(t, map[string]any{"tp_size": 2, "pp_size": 2, "extra_config": map[string]any{
		"backend_name": "mooncake_go", "module_path": "mooncake_go.sglang", "class_name": "MooncakeGoStore", "interface_v1": 1,
		"master_server_address": "127.0.0.1:5", "global_segment_size": 4 << 20,
	}})
	cfg, _, err := s.PoolConfig(map[string]string{})
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:5", cfg.MasterServerAddress)
	assert.Equal(t, int64(1<<20), cfg.GlobalSegmentSize, "split over tp_size × pp_size ranks")
	assert.Equal(t, "tcp", cfg.Protocol)
	// From the environment, as SGLang's own backend.
	s = settings(t, nil)
	cfg, _, err = s.PoolConfig(map[string]string{"MOONCAKE_MASTER": "127.0.0.1:6", "MOONCAKE_GLOBAL_SEGMENT_SIZE": "0"})
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:6", cfg.MasterServerAddress)
	_, _, err = s.PoolConfig(map[string]string{})
	require.Error(t, err)
}

func TestPlainPagesInteropWithV1(t *testing.T) {
	cl := startPool(t)
	ctx := testContext(t)
	for _, mla := range []bool{false, true} {
		t.Run(fmt.Sprintf("mla=%v", mla), func(t *testing.T) {
			h := newHostPool(t, "page_first", mla, 4, 2, 64)
			b := newBackend(t, cl, settings(t, map[string]any{"is_mla_model": mla, "model_name": fmt.Sprintf("plain-%v", mla)}), h)
			// A flat page off the pool (SGLang's get_data_page copy): K half then V half.
			flat, err := memory.Map(int(h.geometry().PageBytes))
			require.NoError(t, err)
			defer flat.Close()
			for i := range flat.Bytes() {
				flat.Bytes()[i] = byte(i * 13)
			}
			ok, err := b.SetPages(ctx, ids(1, 900), [][]byte{flat.Bytes()})
			require.NoError(t, err)
			require.Equal(t, []bool{true}, ok)
			// v1 reads it into the pool: page_first's page bytes are the flat page.
			parts, per := h.meta([]int{2})
			ok, err = b.BatchGet(ctx, ids(1, 900), parts, per)
			require.NoError(t, err)
			require.Equal(t, []bool{true}, ok)
			assert.True(t, bytes.Equal(flat.Bytes(), h.snapshot([]int{2})))
			// v1 write, plain read into a fresh buffer.
			h.fill([]int{3}, 77)
			parts, _ = h.meta([]int{3})
			ok, err = b.BatchSet(ctx, ids(1, 901), parts, per)
			require.NoError(t, err)
			require.Equal(t, []bool{true}, ok)
			clear(flat.Bytes())
			ok, err = b.GetPages(ctx, ids(2, 901), [][]byte{flat.Bytes(), make([]byte, 0)})
			require.ErrorIs(t, err, ErrBadLayout, "a short page buffer")
			assert.Equal(t, []bool{false, false}, ok)
			ok, err = b.GetPages(ctx, ids(1, 901), [][]byte{flat.Bytes()})
			require.NoError(t, err)
			require.Equal(t, []bool{true}, ok)
			assert.True(t, bytes.Equal(h.snapshot([]int{3}), flat.Bytes()))
			// The temporary registration is gone: it can be registered again.
			ok, err = b.GetPages(ctx, ids(1, 901), [][]byte{flat.Bytes()})
			require.NoError(t, err)
			require.Equal(t, []bool{true}, ok)
		})
	}
}

func TestClearOwnNamespaceOnly(t *testing.T) {
	cl := startPool(t)
	ctx := testContext(t)
	h := newHostPool(t, "page_first", false, 4, 2, 64)
	a := newBackend(t, cl, settings(t, map[string]any{"extra_config": map[string]any{"mc_tenant": "a"}}), h)
	h2 := newHostPool(t, "page_first", false, 4, 2, 64)
	other := newBackend(t, cl, settings(t, map[string]any{"extra_config": map[string]any{"mc_tenant": "b"}}), h2)
	h.fill(seq(0, 3), 1)
	h2.fill(seq(0, 3), 1)
	parts, per := h.meta(seq(0, 3))
	parts2, _ := h2.meta(seq(0, 3))
	_, err := a.BatchSet(ctx, ids(3, 0), parts, per)
	require.NoError(t, err)
	_, err = other.BatchSet(ctx, ids(3, 0), parts2, per)
	require.NoError(t, err)
	n, err := a.Clear(ctx)
	require.NoError(t, err)
	assert.Equal(t, 6, n, "3 pages of K and V")
	got, err := a.BatchExists(ctx, ids(3, 0))
	require.NoError(t, err)
	assert.Zero(t, got)
	got, err = other.BatchExists(ctx, ids(3, 0))
	require.NoError(t, err)
	assert.Equal(t, 3, got)
}

func TestDeadMasterGivesMissesInTime(t *testing.T) {
	cl := startPool(t)
	ctx := testContext(t)
	h := newHostPool(t, "page_first", false, 4, 2, 64)
	s := settings(t, map[string]any{"extra_config": map[string]any{"mc_get_timeout_base_ms": 500, "mc_set_timeout_ms": 1000}})
	b := newBackend(t, cl, s, h)
	h.fill(seq(0, 2), 4)
	parts, per := h.meta(seq(0, 2))
	ok, err := b.BatchSet(ctx, ids(2, 0), parts, per)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, ok)

	cl.Master.Close()
	cl.Master = nil
	bound := s.GetTimeoutBase + 3*time.Second // the call's bound plus scheduling slack
	start := time.Now()
	n, err := b.BatchExists(ctx, ids(2, 0))
	assert.Error(t, err)
	assert.Zero(t, n)
	assert.Less(t, time.Since(start), bound)
	start = time.Now()
	ok, err = b.BatchGet(ctx, ids(2, 0), parts, per)
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false}, ok)
	assert.Less(t, time.Since(start), bound)
	start = time.Now()
	ok, err = b.BatchSet(ctx, ids(2, 10), parts, per)
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false}, ok)
	assert.Less(t, time.Since(start), s.SetTimeout+3*time.Second)
	st := b.TakeStats()
	assert.Equal(t, uint64(2), st.FailedGets)
	assert.Equal(t, uint64(2), st.FailedSets)
	assert.Equal(t, uint64(1), st.ExistsErrors)
}
