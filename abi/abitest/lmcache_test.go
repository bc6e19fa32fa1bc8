package abitest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ebitengine/purego"
)

// lmcacheLib holds lmcache.h's functions, typed as the header declares
// them (keys and addresses as integers: no Go pointer sits in memory C
// reads, except the NUL-terminated key copies passed for the call).
type lmcacheLib struct {
	version    func() uint32
	create     func(url, cfg *byte, out *uintptr) int32
	destroy    func(c uintptr) int32
	register   func(c, ptr, size uintptr) int32
	exists     func(c uintptr, key *byte) int32
	contains   func(c uintptr, keys *uintptr, n uintptr, pin int32, out *uintptr) int32
	put        func(c uintptr, keys, ptrs, sizes *uintptr, n uintptr, codes *int32) int32
	get        func(c uintptr, keys, ptrs, caps *uintptr, n uintptr, results *int64) int32
	remove     func(c uintptr, key *byte) int32
	list       func(c uintptr, out *cbuf) int32
	ping       func(c uintptr) int32
	unregister func(c, ptr uintptr) int32
}

func loadLMCache(t *testing.T) *lmcacheLib {
	t.Helper()
	path := os.Getenv(EnvLibrary)
	if path == "" {
		path = filepath.Join(repoRoot(), "build", "libmooncake.so")
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL) // load(t) opened it: the same handle
	if err != nil {
		t.Fatal(err)
	}
	m := &lmcacheLib{}
	for name, fp := range map[string]any{
		"mc_lmcache_abi_version": &m.version, "mc_lmcache_create": &m.create, "mc_lmcache_destroy": &m.destroy,
		"mc_lmcache_register_buffer": &m.register, "mc_lmcache_exists": &m.exists,
		"mc_lmcache_batched_contains": &m.contains, "mc_lmcache_batched_put": &m.put, "mc_lmcache_batched_get": &m.get,
		"mc_lmcache_remove": &m.remove, "mc_lmcache_list": &m.list, "mc_lmcache_ping": &m.ping,
		"mc_lmcache_unregister_buffer": &m.unregister,
	} {
		sym, err := purego.Dlsym(h, name)
		if err != nil {
			t.Fatalf("dlsym %s: %v", name, err)
		}
		purego.RegisterFunc(fp, sym)
	}
	return m
}

func TestLMCacheArguments(t *testing.T) {
	l := load(t)
	m := loadLMCache(t)
	if v := m.version(); v>>16 != 1 {
		t.Fatalf("mc_lmcache_abi_version = %#x, want major 1", v)
	}
	var c uintptr
	msg := l.expect(t, "create with a mooncakestore URL", m.create(cstr("mooncakestore://127.0.0.1:50051"), cstr("{}"), &c), "MC_LMCACHE_ERR_BAD_URL")
	if !strings.Contains(msg, "plugin://<name>") {
		t.Errorf("bad URL message %q", msg)
	}
	msg = l.expect(t, "create without a master", m.create(cstr("plugin://mooncake_go"), cstr(`{"extra_config": {"remote_storage_plugin.mooncake_go.metadata_server": "P2PHANDSHAKE"}}`), &c), "MC_LMCACHE_ERR_BAD_CONFIG")
	if !strings.Contains(msg, "remote_storage_plugin.mooncake_go.master_server_address is missing") {
		t.Errorf("missing key message %q", msg)
	}
	l.expect(t, "create with NULL url", m.create(nil, cstr("{}"), &c), "MC_ERR_INVALID_ARGUMENT")
	l.expect(t, "create with NULL out", m.create(cstr("plugin://mooncake_go"), cstr("{}"), nil), "MC_ERR_INVALID_ARGUMENT")
	l.expect(t, "exists on NULL", m.exists(0, cstr("k")), "MC_ERR_INVALID_ARGUMENT")
	l.expect(t, "exists on a stale handle", m.exists(1<<40, cstr("k")), "MC_ERR_INVALID_HANDLE")
	l.expect(t, "ping on a stale handle", m.ping(1<<40), "MC_ERR_INVALID_HANDLE")
	l.expect(t, "destroy of a stale handle", m.destroy(1<<40), "MC_ERR_INVALID_HANDLE")
}

func TestLMCacheRoundTrip(t *testing.T) {
	l := load(t)
	m := loadLMCache(t)
	p := startMaster(t)
	cfg, _ := json.Marshal(map[string]any{"role": "worker", "extra_config": map[string]any{
		"remote_storage_plugin.t.master_server_address": p.RPCAddr,
		"remote_storage_plugin.t.metadata_server":       p.MetadataURL,
		"remote_storage_plugin.t.global_segment_size":   16 << 20,
		"remote_storage_plugin.t.key_prefix":            "abitest/",
	}})
	var c uintptr
	l.expect(t, "create", m.create(cstr("plugin://t"), cstr(string(cfg)), &c), "MC_OK")
	defer func() { l.expect(t, "destroy", m.destroy(c), "MC_OK") }()

	r := region(t, 3<<16) // off the Go heap: two 64 KiB sources, one destination
	mem, b := uintptr(r.Addr()), r.Bytes()
	for i := range 2 << 16 {
		b[i] = byte(i*7 + i>>8)
	}
	l.expect(t, "register", m.register(c, mem, 2<<16), "MC_OK")
	keys := cstrings(t, "full", "partial", "empty-size")
	ptrs := []uintptr{mem, mem + 1<<16, mem}
	sizes := []uintptr{1 << 16, 1000, 0}
	codes := make([]int32, 3)
	msg := l.expectPartial(t, "batched_put", m.put(c, &keys[0], &ptrs[0], &sizes[0], 3, &codes[0]))
	if codes[0] != 0 || codes[1] != 0 || codes[2] != int32(l.c(t, "MC_ERR_INVALID_ARGUMENT")) || !strings.Contains(msg, "1 of 3 keys failed") {
		t.Fatalf("put codes %v, message %q", codes, msg)
	}
	var prefix uintptr
	l.expect(t, "batched_contains", m.contains(c, &keys[0], 3, 1, &prefix), "MC_OK")
	if prefix != 2 {
		t.Fatalf("prefix %d, want 2", prefix)
	}
	if rc := m.exists(c, cstr("partial")); rc != 1 {
		t.Fatalf("exists(partial) = %d", rc)
	}
	if rc := m.exists(c, cstr("nope")); rc != 0 {
		t.Fatalf("exists(nope) = %d", rc)
	}
	// Read "partial" into an unregistered full-size destination: the
	// exact stored length comes back.
	dst := mem + 2<<16
	gptrs, caps := []uintptr{dst, dst}, []uintptr{1 << 16, 1 << 16}
	gkeys := cstrings(t, "partial", "nope")
	res := make([]int64, 2)
	l.expectPartial(t, "batched_get", m.get(c, &gkeys[0], &gptrs[0], &caps[0], 2, &res[0]))
	if res[0] != 1000 || res[1] != int64(l.c(t, "MC_STORE_ERR_OBJECT_NOT_FOUND")) {
		t.Fatalf("get results %v", res)
	}
	if !bytes.Equal(b[2<<16:2<<16+1000], b[1<<16:1<<16+1000]) {
		t.Fatal("partial chunk bytes differ")
	}
	var out cbuf
	l.expect(t, "list", m.list(c, &out), "MC_OK")
	var listed []string
	if err := json.Unmarshal(l.readBuf(&out), &listed); err != nil || len(listed) != 2 {
		t.Fatalf("list = %v (%v)", listed, err)
	}
	l.expect(t, "remove", m.remove(c, cstr("full")), "MC_OK")
	l.expect(t, "remove again", m.remove(c, cstr("full")), "MC_STORE_ERR_OBJECT_NOT_FOUND")
	l.expect(t, "ping", m.ping(c), "MC_OK")
	l.expect(t, "unregister", m.unregister(c, mem), "MC_OK")
	l.expect(t, "unregister again", m.unregister(c, mem), "MC_ERR_INVALID_ARGUMENT")
}
