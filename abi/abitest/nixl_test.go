package abitest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nixlKV mirrors mc_nixl_kv_t (four 8-byte fields; 32 bytes); pointers are
// integers into Go memory kept alive by the test (purego passes only the
// struct's address).
type nixlKV struct {
	Key, KeyLen, Value, ValueLen uintptr
}

// nixlDesc mirrors mc_nixl_desc_t (32 bytes).
type nixlDesc struct {
	Addr, Len, DevID, MD uint64
}

// nixlLib holds the mc_nixl_* functions, typed as nixl.h declares them.
type nixlLib struct {
	abiVersion func() uint32
	checkHost  func(shim, family uint32) int32
	options    func(out *cbuf) int32
	create     func(agent *byte, agentLen uintptr, params *nixlKV, n uintptr, flags uint32, pthr uint64, out *uintptr) int32
	destroy    func(e uintptr) int32
	caps       func(e uintptr, out *uint32) int32
	register   func(e uintptr, addr, n, dev uint64, mem int32, meta *byte, metaLen uintptr, out *uint64) int32
	connInfo   func(e uintptr, out *cbuf) int32
	loadConn   func(e uintptr, agent *byte, agentLen uintptr, info *byte, infoLen uintptr) int32
	prep       func(e uintptr, op, lmem int32, l *nixlDesc, nl uintptr, rmem int32, r *nixlDesc, nr uintptr, agent *byte, agentLen uintptr, custom *byte, customLen uintptr, out *uint64) int32
	release    func(e uintptr, req uint64) int32
	notifs     func(e uintptr, out *cbuf) int32
	unload     func(e uintptr, md uint64) int32
}

func loadNixl(t *testing.T, l *lib) *nixlLib {
	t.Helper()
	path := os.Getenv(EnvLibrary)
	if path == "" {
		path = filepath.Join(repoRoot(), "build", "libmooncake.so")
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL) // the same handle load's
	require.NoError(t, err)
	n := &nixlLib{}
	for name, fp := range map[string]any{
		"mc_nixl_abi_version": &n.abiVersion, "mc_nixl_check_host": &n.checkHost, "mc_nixl_backend_options": &n.options,
		"mc_nixl_create": &n.create, "mc_nixl_destroy": &n.destroy, "mc_nixl_caps": &n.caps, "mc_nixl_register": &n.register,
		"mc_nixl_conn_info": &n.connInfo, "mc_nixl_load_remote_conn": &n.loadConn, "mc_nixl_prep_xfer": &n.prep,
		"mc_nixl_release_req": &n.release, "mc_nixl_get_notifs": &n.notifs, "mc_nixl_unload_md": &n.unload,
	} {
		sym, err := purego.Dlsym(h, name)
		require.NoError(t, err, name)
		purego.RegisterFunc(fp, sym)
	}
	return n
}

// bytesArg returns a pointer to a copy of s (not NUL-terminated) and its
// length, for (pointer, length) arguments; the slice keeps it alive.
func bytesArg(s string) (*byte, uintptr, []byte) {
	b := []byte(s + "\x00")
	return &b[0], uintptr(len(s)), b
}

// TestNixlABI drives mc_nixl_* through the C ABI: versions, the host
// check, options, creation refusals, and the error codes of bad calls.
func TestNixlABI(t *testing.T) {
	l := load(t)
	n := loadNixl(t, l)
	assert.Equal(t, uint32(l.c(t, "MC_NIXL_ABI_VERSION_MAJOR"))<<16|uint32(l.c(t, "MC_NIXL_ABI_VERSION_MINOR")), n.abiVersion())
	l.expect(t, "check_host(D)", n.checkHost(n.abiVersion(), uint32(l.c(t, "MC_NIXL_FAMILY_D"))), "MC_OK")
	l.expect(t, "check_host(old family)", n.checkHost(n.abiVersion(), 2), "MC_NIXL_ERR_HOST_FAMILY")
	l.expect(t, "check_host(other major)", n.checkHost(0x20000, uint32(l.c(t, "MC_NIXL_FAMILY_D"))), "MC_NIXL_ERR_HOST_FAMILY")

	var opts cbuf
	l.expect(t, "backend_options", n.options(&opts), "MC_OK")
	assert.Contains(t, string(l.readBuf(&opts)), "ip_addr")
	l.expect(t, "backend_options(NULL)", n.options(nil), "MC_ERR_INVALID_ARGUMENT")

	agent, agentLen, keep := bytesArg("agent\x00A")
	defer func() { _ = keep }()
	var e uintptr
	l.expect(t, "create(NULL agent)", n.create(nil, 3, nil, 0, 0, 0, &e), "MC_ERR_INVALID_ARGUMENT")
	l.expect(t, "create(empty agent)", n.create(agent, 0, nil, 0, 0, 0, &e), "MC_ERR_INVALID_ARGUMENT")
	l.expect(t, "create(NULL out)", n.create(agent, agentLen, nil, 0, 0, 0, nil), "MC_ERR_INVALID_ARGUMENT")
	// Parameter strings live off the Go heap (cstrings): the kv structs
	// hold their addresses as integers.
	ps := cstrings(t, "bogus", "1", "ip_addr", "127.0.0.1")
	kv := []nixlKV{{Key: ps[0], KeyLen: 5, Value: ps[1], ValueLen: 1}}
	msg := l.expect(t, "create(unknown param)", n.create(agent, agentLen, &kv[0], 1, 0, 0, &e), "MC_ERR_INVALID_ARGUMENT")
	assert.Contains(t, msg, "bogus")

	kv = []nixlKV{{Key: ps[2], KeyLen: 7, Value: ps[3], ValueLen: 9}}
	l.expect(t, "create", n.create(agent, agentLen, &kv[0], 1, 0, 0, &e), "MC_OK")
	require.NotZero(t, e)

	var caps uint32
	l.expect(t, "caps", n.caps(e, &caps), "MC_OK")
	want := uint32(l.c(t, "MC_NIXL_CAP_REMOTE") | l.c(t, "MC_NIXL_CAP_LOCAL") | l.c(t, "MC_NIXL_CAP_NOTIF"))
	assert.Equal(t, want, caps&0xff)
	assert.NotZero(t, caps&(1<<(8+l.c(t, "MC_NIXL_MEM_DRAM"))), "DRAM")
	var ci cbuf
	l.expect(t, "conn_info", n.connInfo(e, &ci), "MC_OK")
	assert.True(t, strings.HasPrefix(string(l.readBuf(&ci)), "mcgo-nixl1:127.0.0.1:"))

	var md uint64
	l.expect(t, "register(NULL addr)", n.register(e, 0, 4096, 0, l.c(t, "MC_NIXL_MEM_DRAM"), nil, 0, &md), "MC_ERR_INVALID_ARGUMENT")
	l.expect(t, "register(FILE)", n.register(e, 1<<20, 4096, 3, l.c(t, "MC_NIXL_MEM_FILE"), nil, 0, &md), "MC_ERR_UNSUPPORTED")
	vram := l.expect(t, "register(VRAM)", n.register(e, 1<<20, 4096, 0, l.c(t, "MC_NIXL_MEM_VRAM"), nil, 0, &md), "MC_ERR_UNSUPPORTED")
	assert.Contains(t, vram, "unsupported")

	peer, peerLen, pb := bytesArg("B")
	junk, junkLen, jb := bytesArg("ucx:not-ours")
	l.expect(t, "load_remote_conn(not ours)", n.loadConn(e, peer, peerLen, junk, junkLen), "MC_NIXL_ERR_MISMATCH")
	_, _ = pb, jb
	d := []nixlDesc{{Addr: 1 << 20, Len: 16, MD: 1}}
	var req uint64
	l.expect(t, "prep_xfer(unknown agent)", n.prep(e, 1, 0, &d[0], 1, 0, &d[0], 1, peer, peerLen, nil, 0, &req), "MC_ERR_NOT_FOUND")
	l.expect(t, "prep_xfer(NULL out)", n.prep(e, 1, 0, &d[0], 1, 0, &d[0], 1, peer, peerLen, nil, 0, nil), "MC_ERR_INVALID_ARGUMENT")
	l.expect(t, "release_req(unknown)", n.release(e, 777), "MC_ERR_NOT_FOUND")
	l.expect(t, "unload_md(unknown)", n.unload(e, 777), "MC_OK")
	var nb cbuf
	l.expect(t, "get_notifs", n.notifs(e, &nb), "MC_OK")
	assert.Empty(t, l.readBuf(&nb))

	l.expect(t, "caps(bad handle)", n.caps(12345, &caps), "MC_ERR_INVALID_HANDLE")
	l.expect(t, "destroy", n.destroy(e), "MC_OK")
	l.expect(t, "destroy again", n.destroy(e), "MC_ERR_INVALID_HANDLE")
}
