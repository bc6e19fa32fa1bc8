package abitest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/ebitengine/purego"
)

// sglangLib holds the mc_sglang_* functions of sglang.h.
type sglangLib struct {
	version   func() uint32
	create    func(config *byte, out *uintptr) int32
	destroy   func(b uintptr) int32
	register  func(b uintptr, pool *byte, base, size uintptr) int32
	exists    func(b uintptr, keys *uintptr, n uintptr, out *uintptr) int32
	batchGet  func(b uintptr, keys *uintptr, n, perPage uintptr, ptrs, sizes *uintptr, ok *byte) int32
	batchSet  func(b uintptr, keys *uintptr, n, perPage uintptr, ptrs, sizes *uintptr, ok *byte) int32
	getPages  func(b uintptr, keys *uintptr, n uintptr, ptrs, sizes *uintptr, ok *byte) int32
	clear     func(b uintptr, removed *uint64) int32
	takeStats func(b uintptr, out *sglangStats) int32
	takeNotes func(b uintptr, out *cbuf) int32
}

// sglangStats is mc_sglang_stats_t.
type sglangStats struct {
	PrefetchPages, BackupPages, PrefetchBytes, BackupBytes      uint64
	PrefetchSeconds, BackupSeconds                              float64
	FailedGets, FailedSets, Timeouts, ExistsCalls, ExistsErrors uint64
}

func loadSGLang(t *testing.T) (*lib, *sglangLib) {
	t.Helper()
	l := load(t)
	path := os.Getenv(EnvLibrary)
	if path == "" {
		path = filepath.Join(repoRoot(), "build", "libmooncake.so")
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL) // the same handle as load's
	if err != nil {
		t.Fatal(err)
	}
	s := &sglangLib{}
	for name, fp := range map[string]any{
		"mc_sglang_abi_version": &s.version, "mc_sglang_create": &s.create, "mc_sglang_destroy": &s.destroy,
		"mc_sglang_register_host_pool": &s.register, "mc_sglang_batch_exists": &s.exists,
		"mc_sglang_batch_get": &s.batchGet, "mc_sglang_batch_set": &s.batchSet, "mc_sglang_get_pages": &s.getPages,
		"mc_sglang_clear": &s.clear, "mc_sglang_take_stats": &s.takeStats, "mc_sglang_take_notes": &s.takeNotes,
	} {
		purego.RegisterLibFunc(fp, h, name)
	}
	return l, s
}

func jsonC(t *testing.T, v any) *byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return cstr(string(b))
}

// TestSGLangABI drives mc_sglang_* as the Python shim does: a backend on a
// master (in this test's runtime), an MHA page_first host pool of 4 pages
// (2 layers x 64 bytes per K and V object), pages written, zeroed, read
// back; the header's codes for bad input.
func TestSGLangABI(t *testing.T) {
	l, s := loadSGLang(t)
	if got, want := s.version(), uint32(l.c(t, "MC_SGLANG_ABI_VERSION_MAJOR"))<<16|uint32(l.c(t, "MC_SGLANG_ABI_VERSION_MINOR")); got != want {
		t.Fatalf("mc_sglang_abi_version = %#x, want %#x", got, want)
	}
	m := startMaster(t)
	var b uintptr
	l.expect(t, "mc_sglang_create(NULL)", s.create(nil, &b), "MC_ERR_INVALID_ARGUMENT")
	l.expect(t, "mc_sglang_create(bad json)", s.create(cstr("{"), &b), "MC_SGLANG_ERR_BAD_CONFIG")
	if msg := l.expect(t, "mc_sglang_create(dcp)", s.create(jsonC(t, map[string]any{"model_name": "m", "dcp_size": 2}), &b), "MC_SGLANG_ERR_BAD_CONFIG"); !bytes.Contains([]byte(msg), []byte("unsupported:")) {
		t.Errorf("dcp_size 2: %q does not say unsupported:", msg)
	}
	extra := map[string]any{"master_server_address": m.RPCAddr, "metadata_server": m.MetadataURL, "global_segment_size": 16 << 20, "local_hostname": "127.0.0.1", "zz_unknown_key": 1}
	l.expect(t, "mc_sglang_create", s.create(jsonC(t, map[string]any{"model_name": "org/m", "tp_size": 1, "extra_config": extra}), &b), "MC_OK")
	defer func() {
		if b != 0 {
			s.destroy(b)
		}
	}()

	const pages, layers, row = 4, 2, 64
	obj := layers * row // one K (or V) object of a page_first page
	host := region(t, 2*pages*obj)
	keys := cstrings(t, "00aa", "00bb")
	var n uintptr
	l.expect(t, "mc_sglang_batch_exists before registering", s.exists(b, &keys[0], 2, &n), "MC_SGLANG_ERR_NO_HOST_POOL")
	pool := map[string]any{"layout": "page_first", "dtype": "bfloat16", "page_size": 4, "layer_num": layers, "page_bytes": 2 * obj}
	bad := map[string]any{"layout": "page_head", "dtype": "bfloat16", "page_size": 4, "layer_num": layers, "page_bytes": 2 * obj}
	l.expect(t, "mc_sglang_register_host_pool(page_head)", s.register(b, jsonC(t, bad), uintptr(host.Addr()), uintptr(len(host.Bytes()))), "MC_SGLANG_ERR_BAD_LAYOUT")
	l.expect(t, "mc_sglang_register_host_pool(NULL base)", s.register(b, jsonC(t, pool), 0, 16), "MC_ERR_INVALID_ARGUMENT")
	l.expect(t, "mc_sglang_register_host_pool", s.register(b, jsonC(t, pool), uintptr(host.Addr()), uintptr(len(host.Bytes()))), "MC_OK")

	// Pages 0 and 1: K at page*obj, V in the second half.
	base, half := uintptr(host.Addr()), uintptr(pages*obj)
	meta := func(first int) ([]uintptr, []uintptr) {
		var ptrs, sizes []uintptr
		for p := first; p < first+2; p++ {
			ptrs = append(ptrs, base+uintptr(p*obj), base+half+uintptr(p*obj))
			sizes = append(sizes, uintptr(obj), uintptr(obj))
		}
		return ptrs, sizes
	}
	for i := range host.Bytes() {
		host.Bytes()[i] = byte(i*7 + 3)
	}
	ptrs, sizes := meta(0)
	want := [][]byte{host.Bytes()[:2*obj], host.Bytes()[half : half+uintptr(2*obj)]}
	want = [][]byte{bytes.Clone(want[0]), bytes.Clone(want[1])}
	ok := make([]byte, 2)
	l.expect(t, "mc_sglang_batch_set", s.batchSet(b, &keys[0], 2, 2, &ptrs[0], &sizes[0], &ok[0]), "MC_OK")
	if !bytes.Equal(ok, []byte{1, 1}) {
		t.Fatalf("batch_set ok = %v", ok)
	}
	l.expect(t, "mc_sglang_batch_exists", s.exists(b, &keys[0], 2, &n), "MC_OK")
	if n != 2 {
		t.Fatalf("batch_exists = %d, want 2", n)
	}
	clear(host.Bytes())
	dptrs, dsizes := meta(2)
	l.expect(t, "mc_sglang_batch_get", s.batchGet(b, &keys[0], 2, 2, &dptrs[0], &dsizes[0], &ok[0]), "MC_OK")
	if !bytes.Equal(ok, []byte{1, 1}) {
		t.Fatalf("batch_get ok = %v", ok)
	}
	if got := [][]byte{host.Bytes()[2*obj : 4*obj], host.Bytes()[half+uintptr(2*obj) : half+uintptr(4*obj)]}; !bytes.Equal(got[0], want[0]) || !bytes.Equal(got[1], want[1]) {
		t.Fatal("pages read back differ")
	}
	// Bad buffers: one outside the host pool, a zero parts_per_page, a short page.
	outside := region(t, obj)
	optrs := []uintptr{uintptr(outside.Addr()), dptrs[1]}
	l.expect(t, "mc_sglang_batch_get(outside)", s.batchGet(b, &keys[0], 1, 2, &optrs[0], &dsizes[0], &ok[0]), "MC_SGLANG_ERR_BAD_LAYOUT")
	l.expect(t, "mc_sglang_batch_get(0 per page)", s.batchGet(b, &keys[0], 1, 0, &dptrs[0], &dsizes[0], &ok[0]), "MC_ERR_INVALID_ARGUMENT")
	l.expect(t, "mc_sglang_batch_get(NULL sizes)", s.batchGet(b, &keys[0], 1, 2, &dptrs[0], nil, &ok[0]), "MC_ERR_INVALID_ARGUMENT")
	short := []uintptr{8, 8}
	l.expect(t, "mc_sglang_batch_set(short)", s.batchSet(b, &keys[0], 1, 2, &dptrs[0], &short[0], &ok[0]), "MC_SGLANG_ERR_BAD_LAYOUT")
	// A plain read of an absent page is a miss, not an error.
	absent := cstrings(t, "00cc")
	flat := region(t, 2*obj)
	fp, fs := []uintptr{uintptr(flat.Addr())}, []uintptr{uintptr(2 * obj)}
	l.expect(t, "mc_sglang_get_pages", s.getPages(b, &absent[0], 1, &fp[0], &fs[0], &ok[0]), "MC_OK")
	if ok[0] != 0 {
		t.Fatal("get_pages of an absent page reported a hit")
	}

	var st sglangStats
	l.expect(t, "mc_sglang_take_stats", s.takeStats(b, &st), "MC_OK")
	if st.BackupPages != 2 || st.PrefetchPages != 2 || st.PrefetchBytes != uint64(4*obj) || st.FailedSets != 1 || st.ExistsCalls != 1 {
		t.Errorf("stats = %+v", st)
	}
	var notes cbuf
	l.expect(t, "mc_sglang_take_notes", s.takeNotes(b, &notes), "MC_OK")
	var ns []string
	if err := json.Unmarshal(l.readBuf(&notes), &ns); err != nil || len(ns) == 0 {
		t.Errorf("notes = %q (%v)", ns, err)
	}
	var removed uint64
	l.expect(t, "mc_sglang_clear", s.clear(b, &removed), "MC_OK")
	if removed != 4 {
		t.Errorf("clear removed %d objects, want 4 (K and V of 2 pages)", removed)
	}
	l.expect(t, "mc_sglang_destroy", s.destroy(b), "MC_OK")
	l.expect(t, "mc_sglang_destroy again", s.destroy(b), "MC_ERR_INVALID_HANDLE")
	b = 0
}
