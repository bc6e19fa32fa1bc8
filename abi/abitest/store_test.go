package abitest

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store/server"
)

// startMaster runs a master (gRPC and HTTP metadata server on loopback) in
// the test's own Go runtime; the library's clients reach it over TCP.
func startMaster(t *testing.T) *server.Process {
	t.Helper()
	p, err := server.Start(server.ProcessConfig{RPCAddr: "127.0.0.1:0", MetadataAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// newStore sets up a store client on 127.0.0.1 contributing segment bytes;
// it is destroyed at cleanup unless the test did it.
func newStore(t *testing.T, l *lib, m *server.Process, segment, local uint64) uintptr {
	t.Helper()
	var s uintptr
	l.expect(t, "mc_store_setup", l.storeSetup(cstr("127.0.0.1"), cstr(m.MetadataURL), segment, local, cstr("tcp"), nil, cstr(m.RPCAddr), &s), "MC_OK")
	if s == 0 {
		t.Fatal("mc_store_setup returned MC_OK and a NULL handle")
	}
	t.Cleanup(func() { l.storeDestroy(s) })
	return s
}

// cstrings copies strs, NUL-terminated, into memory off the Go heap and
// returns their addresses: a const char* const* array with no Go pointers.
func cstrings(t *testing.T, strs ...string) []uintptr {
	t.Helper()
	n := 1
	for _, s := range strs {
		n += len(s) + 1
	}
	r := region(t, n)
	out := make([]uintptr, len(strs))
	off := 0
	for i, s := range strs {
		copy(r.Bytes()[off:], s)
		r.Bytes()[off+len(s)] = 0
		out[i] = uintptr(r.Addr()) + uintptr(off)
		off += len(s) + 1
	}
	return out
}

func TestStoreABI(t *testing.T) {
	l := load(t)
	lockThread(t)
	if got, want := l.storeABIVersion(), uint32(l.c(t, "MC_STORE_ABI_VERSION_MAJOR")<<16|l.c(t, "MC_STORE_ABI_VERSION_MINOR")); got != want {
		t.Fatalf("mc_store_abi_version = %#x, want %#x", got, want)
	}
	m := startMaster(t)
	s := newStore(t, l, m, 32*mib, 4*mib)

	name := make([]byte, 128)
	var nameLen uintptr
	l.expect(t, "get_hostname", l.storeHostname(s, &name[0], uintptr(len(name)), &nameLen), "MC_OK")
	if got := string(name[:nameLen]); !strings.HasPrefix(got, "127.0.0.1:") || name[nameLen] != 0 {
		t.Fatalf("hostname %q", got)
	}

	// Copying put and get from foreign memory.
	r := region(t, 64<<10)
	val := r.Bytes()[:40000]
	for i := range val {
		val[i] = byte(i % 241)
	}
	l.expect(t, "put", l.storePut(s, cstr("abi-copy"), uintptr(r.Addr()), uintptr(len(val))), "MC_OK")
	out := region(t, 64<<10)
	var n uintptr
	l.expect(t, "get", l.storeGet(s, cstr("abi-copy"), uintptr(out.Addr()), 64<<10, &n), "MC_OK")
	if n != uintptr(len(val)) || !bytes.Equal(out.Bytes()[:n], val) {
		t.Fatalf("get: %d bytes, equal %v", n, bytes.Equal(out.Bytes()[:n], val))
	}
	msg := l.expect(t, "get into a small buffer", l.storeGet(s, cstr("abi-copy"), uintptr(out.Addr()), 100, &n), "MC_STORE_ERR_BUFFER_OVERFLOW")
	if !strings.Contains(msg, "40000") {
		t.Fatalf("BUFFER_OVERFLOW message %q does not give the size", msg)
	}
	var size uint64
	l.expect(t, "get_size", l.storeGetSize(s, cstr("abi-copy"), &size), "MC_OK")
	if size != uint64(len(val)) {
		t.Fatalf("get_size = %d", size)
	}
	l.expect(t, "put existing key", l.storePut(s, cstr("abi-copy"), uintptr(r.Addr()), 10), "MC_OK")
	l.expect(t, "get_size after put of an existing key", l.storeGetSize(s, cstr("abi-copy"), &size), "MC_OK")
	if size != uint64(len(val)) {
		t.Fatalf("put of an existing key changed its size to %d", size)
	}

	// Zero copy, in batches, through registered memory.
	const blocks, blk = 32, 64 << 10
	src, dst := region(t, blocks*blk), region(t, blocks*blk)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*31 + i>>14)
	}
	l.expect(t, "register src", l.storeRegister(s, uintptr(src.Addr()), blocks*blk), "MC_OK")
	l.expect(t, "register dst", l.storeRegister(s, uintptr(dst.Addr()), blocks*blk), "MC_OK")
	names := make([]string, blocks)
	sptrs, dptrs, sizes := make([]uintptr, blocks), make([]uintptr, blocks), make([]uintptr, blocks)
	for i := range blocks {
		names[i] = fmt.Sprintf("abi-blk-%d", i)
		sptrs[i], dptrs[i], sizes[i] = uintptr(src.Addr())+uintptr(i*blk), uintptr(dst.Addr())+uintptr(i*blk), blk
	}
	keys := cstrings(t, names...)
	codes := make([]int32, blocks)
	l.expect(t, "batch_put_from", l.storeBatchPutFrom(s, &keys[0], &sptrs[0], &sizes[0], blocks, &codes[0]), "MC_OK")
	present := make([]int32, blocks)
	l.expect(t, "batch_is_exist", l.storeBatchIsExist(s, &keys[0], blocks, &present[0]), "MC_OK")
	results := make([]int64, blocks)
	l.expect(t, "batch_get_into", l.storeBatchGetInto(s, &keys[0], &dptrs[0], &sizes[0], blocks, &results[0]), "MC_OK")
	for i := range blocks {
		if codes[i] != 0 || present[i] != 1 || results[i] != blk {
			t.Fatalf("key %d: put %d, exists %d, read %d", i, codes[i], present[i], results[i])
		}
	}
	if !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatal("bytes differ after batch_put_from / batch_get_into")
	}
	clear(dst.Bytes()[:blk])
	var read int64
	l.expect(t, "get_into", l.storeGetInto(s, cstr("abi-blk-0"), uintptr(dst.Addr()), blk, &read), "MC_OK")
	if read != blk || !bytes.Equal(dst.Bytes()[:blk], src.Bytes()[:blk]) {
		t.Fatalf("get_into read %d", read)
	}
	l.expect(t, "put_from", l.storePutFrom(s, cstr("abi-single"), uintptr(src.Addr())+7, 1000), "MC_OK")
	if rc := l.storeIsExist(s, cstr("abi-single")); rc != 1 || l.lastError() != "" {
		t.Fatalf("is_exist = %d (%q), want 1", rc, l.lastError())
	}
	if rc := l.storeIsExist(s, cstr("abi-none")); rc != 0 || l.lastError() != "" {
		t.Fatalf("is_exist missing = %d (%q), want 0", rc, l.lastError())
	}

	// A batch with bad entries: each fails alone, the call succeeds and
	// mc_last_error summarises.
	mixed := cstrings(t, "abi-blk-1", "", strings.Repeat("k", 4097), "abi-blk-2", "abi-missing")
	mptrs := []uintptr{dptrs[1], dptrs[2], dptrs[3], uintptr(r.Addr()), dptrs[4]}
	msizes := []uintptr{blk, blk, blk, blk, blk}
	mres := make([]int64, 5)
	msg = l.expectPartial(t, "batch_get_into with bad entries", l.storeBatchGetInto(s, &mixed[0], &mptrs[0], &msizes[0], 5, &mres[0]))
	want := []int64{blk, int64(l.c(t, "MC_ERR_INVALID_ARGUMENT")), int64(l.c(t, "MC_STORE_ERR_INVALID_KEY")),
		int64(l.c(t, "MC_ERR_ADDRESS_NOT_REGISTERED")), int64(l.c(t, "MC_STORE_ERR_OBJECT_NOT_FOUND"))}
	for i := range want {
		if mres[i] != want[i] {
			t.Fatalf("mixed batch result %d = %d, want %d (%s)", i, mres[i], want[i], msg)
		}
	}
	if !strings.Contains(msg, "4 of 5 keys failed") {
		t.Fatalf("batch summary %q", msg)
	}
	mexist := make([]int32, 5)
	l.expectPartial(t, "batch_is_exist with bad keys", l.storeBatchIsExist(s, &mixed[0], 5, &mexist[0]))
	if mexist[0] != 1 || mexist[1] != l.c(t, "MC_ERR_INVALID_ARGUMENT") || mexist[2] != l.c(t, "MC_STORE_ERR_INVALID_KEY") || mexist[3] != 1 || mexist[4] != 0 {
		t.Fatalf("batch_is_exist with bad keys = %v", mexist)
	}

	// Remove.
	l.expect(t, "remove leased without force", l.storeRemove(s, cstr("abi-single"), 0), "MC_STORE_ERR_OBJECT_HAS_LEASE")
	l.expect(t, "remove with force", l.storeRemove(s, cstr("abi-single"), 1), "MC_OK")
	l.expect(t, "remove again", l.storeRemove(s, cstr("abi-single"), 1), "MC_STORE_ERR_OBJECT_NOT_FOUND")
	l.expect(t, "get removed", l.storeGetInto(s, cstr("abi-single"), uintptr(dst.Addr()), blk, &read), "MC_STORE_ERR_OBJECT_NOT_FOUND")

	l.expect(t, "unregister src", l.storeUnregister(s, uintptr(src.Addr())), "MC_OK")
	l.expect(t, "unregister src again", l.storeUnregister(s, uintptr(src.Addr())), "MC_ERR_ADDRESS_NOT_REGISTERED")
	l.expect(t, "put_from unregistered", l.storePutFrom(s, cstr("abi-x"), uintptr(src.Addr()), blk), "MC_ERR_ADDRESS_NOT_REGISTERED")
	l.expect(t, "destroy", l.storeDestroy(s), "MC_OK")
	msg = l.expect(t, "destroy again", l.storeDestroy(s), "MC_ERR_INVALID_HANDLE")
	if !strings.HasPrefix(msg, "mc_store_destroy: ") {
		t.Fatalf("mc_last_error %q does not name the function", msg)
	}
	l.expect(t, "put on a destroyed store", l.storePut(s, cstr("k"), uintptr(r.Addr()), 1), "MC_ERR_INVALID_HANDLE")
	l.expect(t, "is_exist on a destroyed store", l.storeIsExist(s, cstr("k")), "MC_ERR_INVALID_HANDLE")
}

func TestStoreBadInputs(t *testing.T) {
	l := load(t)
	lockThread(t)
	m := startMaster(t)
	meta, master := m.MetadataURL, m.RPCAddr
	s := newStore(t, l, m, 8*mib, mib)
	r := region(t, 64<<10)
	addr := uintptr(r.Addr())
	l.expect(t, "register", l.storeRegister(s, addr, 32<<10), "MC_OK")
	te := newEngine(t, l, meta, "abi-store-bad-te")
	long := strings.Repeat("k", 4097)
	keys := cstrings(t, "bad-a", "bad-b")
	ptrs, sizes := []uintptr{addr, addr + 4096}, []uintptr{4096, 4096}
	codes, results := make([]int32, 2), make([]int64, 2)
	var h, n uintptr
	var read int64
	var size uint64
	buf := make([]byte, 8)
	setup := func(host, meta *byte, proto, master *byte, out *uintptr) int32 {
		return l.storeSetup(host, meta, 0, mib, proto, nil, master, out)
	}

	for _, c := range []struct {
		name string
		call func() int32
		want string
	}{
		{"setup: NULL hostname", func() int32 { return setup(nil, cstr(meta), nil, cstr(master), &h) }, "MC_ERR_INVALID_ARGUMENT"},
		{"setup: empty hostname", func() int32 { return setup(cstr(""), cstr(meta), nil, cstr(master), &h) }, "MC_ERR_INVALID_ARGUMENT"},
		{"setup: NULL metadata", func() int32 { return setup(cstr("127.0.0.1"), nil, nil, cstr(master), &h) }, "MC_ERR_INVALID_ARGUMENT"},
		{"setup: NULL master", func() int32 { return setup(cstr("127.0.0.1"), cstr(meta), nil, nil, &h) }, "MC_ERR_INVALID_ARGUMENT"},
		{"setup: NULL out", func() int32 { return setup(cstr("127.0.0.1"), cstr(meta), nil, cstr(master), nil) }, "MC_ERR_INVALID_ARGUMENT"},
		{"setup: unknown metadata scheme", func() int32 { return setup(cstr("127.0.0.1"), cstr("ftp://h/x"), nil, cstr(master), &h) }, "MC_ERR_INVALID_ARGUMENT"},
		{"setup: redis metadata", func() int32 { return setup(cstr("127.0.0.1"), cstr("redis://127.0.0.1:6379"), nil, cstr(master), &h) }, "MC_ERR_UNSUPPORTED"},
		{"setup: rdma", func() int32 { return setup(cstr("127.0.0.1"), cstr(meta), cstr("rdma"), cstr(master), &h) }, "MC_ERR_UNSUPPORTED"},
		{"setup: etcd master", func() int32 { return setup(cstr("127.0.0.1"), cstr(meta), nil, cstr("etcd://127.0.0.1:2379"), &h) }, "MC_ERR_UNSUPPORTED"},
		{"setup: master not host:port", func() int32 { return setup(cstr("127.0.0.1"), cstr(meta), nil, cstr("master"), &h) }, "MC_ERR_INVALID_ARGUMENT"},
		{"setup: master unreachable", func() int32 { return setup(cstr("127.0.0.1"), cstr(meta), nil, cstr("127.0.0.1:1"), &h) }, "MC_STORE_ERR_RPC_FAIL"},
		{"setup: metadata unreachable", func() int32 {
			return setup(cstr("127.0.0.1"), cstr("http://127.0.0.1:1/metadata"), nil, cstr(master), &h)
		}, "MC_ERR_METADATA"},
		{"setup: huge segment", func() int32 {
			return l.storeSetup(cstr("127.0.0.1"), cstr(meta), 1<<63, 0, nil, nil, cstr(master), &h)
		}, "MC_ERR_INVALID_ARGUMENT"},

		{"destroy: NULL", func() int32 { return l.storeDestroy(0) }, "MC_ERR_INVALID_ARGUMENT"},
		{"destroy: unknown handle", func() int32 { return l.storeDestroy(0xdead0000) }, "MC_ERR_INVALID_HANDLE"},
		{"destroy: a transfer engine handle", func() int32 { return l.storeDestroy(te) }, "MC_ERR_INVALID_HANDLE"},
		{"put: NULL store", func() int32 { return l.storePut(0, cstr("k"), addr, 1) }, "MC_ERR_INVALID_ARGUMENT"},
		{"put: engine handle", func() int32 { return l.storePut(te, cstr("k"), addr, 1) }, "MC_ERR_INVALID_HANDLE"},
		{"put: NULL key", func() int32 { return l.storePut(s, nil, addr, 1) }, "MC_ERR_INVALID_ARGUMENT"},
		{"put: empty key", func() int32 { return l.storePut(s, cstr(""), addr, 1) }, "MC_ERR_INVALID_ARGUMENT"},
		{"put: key of 4097 bytes", func() int32 { return l.storePut(s, cstr(long), addr, 1) }, "MC_STORE_ERR_INVALID_KEY"},
		{"put: key of 4096 bytes", func() int32 { return l.storePut(s, cstr(long[:4096]), addr, 1) }, "MC_OK"},
		{"put: NULL value", func() int32 { return l.storePut(s, cstr("k"), 0, 1) }, "MC_ERR_INVALID_ARGUMENT"},
		{"put: zero-page value", func() int32 { return l.storePut(s, cstr("k"), 8, 1) }, "MC_ERR_INVALID_ARGUMENT"},
		{"put: zero size", func() int32 { return l.storePut(s, cstr("k"), addr, 0) }, "MC_ERR_INVALID_ARGUMENT"},
		{"put: size wraps", func() int32 { return l.storePut(s, cstr("k"), addr, ^uintptr(0)-addr+2) }, "MC_ERR_INVALID_ARGUMENT"},
		{"put: 64 KiB", func() int32 { return l.storePut(s, cstr("k"), addr, 64<<10) }, "MC_OK"},
		{"get: NULL buf", func() int32 { return l.storeGet(s, cstr("k"), 0, 8, &n) }, "MC_ERR_INVALID_ARGUMENT"},
		{"get: zero cap", func() int32 { return l.storeGet(s, cstr("k"), addr, 0, &n) }, "MC_ERR_INVALID_ARGUMENT"},
		{"get: NULL out_size", func() int32 { return l.storeGet(s, cstr("k"), addr, 8, nil) }, "MC_ERR_INVALID_ARGUMENT"},
		{"get: missing", func() int32 { return l.storeGet(s, cstr("missing"), addr, 8, &n) }, "MC_STORE_ERR_OBJECT_NOT_FOUND"},
		{"put_from: NULL ptr", func() int32 { return l.storePutFrom(s, cstr("k2"), 0, 8) }, "MC_ERR_INVALID_ARGUMENT"},
		{"put_from: zero size", func() int32 { return l.storePutFrom(s, cstr("k2"), addr, 0) }, "MC_ERR_INVALID_ARGUMENT"},
		{"put_from: past the registered buffer", func() int32 { return l.storePutFrom(s, cstr("k2"), addr+(32<<10)-8, 16) }, "MC_ERR_ADDRESS_NOT_REGISTERED"},
		{"put_from: oversize key", func() int32 { return l.storePutFrom(s, cstr(long), addr, 8) }, "MC_STORE_ERR_INVALID_KEY"},
		{"get_into: NULL out_read", func() int32 { return l.storeGetInto(s, cstr("k"), addr, 8, nil) }, "MC_ERR_INVALID_ARGUMENT"},
		{"get_into: unregistered", func() int32 { return l.storeGetInto(s, cstr("k"), addr+(40<<10), 8, &read) }, "MC_ERR_ADDRESS_NOT_REGISTERED"},
		{"batch_put_from: n 0, NULL arrays", func() int32 { return l.storeBatchPutFrom(s, nil, nil, nil, 0, nil) }, "MC_OK"},
		{"batch_put_from: n 0, unknown handle", func() int32 { return l.storeBatchPutFrom(0xdead0000, nil, nil, nil, 0, nil) }, "MC_ERR_INVALID_HANDLE"},
		{"batch_put_from: NULL keys", func() int32 { return l.storeBatchPutFrom(s, nil, &ptrs[0], &sizes[0], 2, &codes[0]) }, "MC_ERR_INVALID_ARGUMENT"},
		{"batch_put_from: NULL ptrs", func() int32 { return l.storeBatchPutFrom(s, &keys[0], nil, &sizes[0], 2, &codes[0]) }, "MC_ERR_INVALID_ARGUMENT"},
		{"batch_put_from: NULL sizes", func() int32 { return l.storeBatchPutFrom(s, &keys[0], &ptrs[0], nil, 2, &codes[0]) }, "MC_ERR_INVALID_ARGUMENT"},
		{"batch_put_from: NULL out", func() int32 { return l.storeBatchPutFrom(s, &keys[0], &ptrs[0], &sizes[0], 2, nil) }, "MC_ERR_INVALID_ARGUMENT"},
		{"batch_put_from: n overflows", func() int32 { return l.storeBatchPutFrom(s, &keys[0], &ptrs[0], &sizes[0], ^uintptr(0)/4, &codes[0]) }, "MC_ERR_INVALID_ARGUMENT"},
		{"batch_put_from: ok", func() int32 { return l.storeBatchPutFrom(s, &keys[0], &ptrs[0], &sizes[0], 2, &codes[0]) }, "MC_OK"},
		{"batch_get_into: NULL out", func() int32 { return l.storeBatchGetInto(s, &keys[0], &ptrs[0], &sizes[0], 2, nil) }, "MC_ERR_INVALID_ARGUMENT"},
		{"batch_get_into: ok", func() int32 { return l.storeBatchGetInto(s, &keys[0], &ptrs[0], &sizes[0], 2, &results[0]) }, "MC_OK"},
		{"batch_is_exist: NULL keys", func() int32 { return l.storeBatchIsExist(s, nil, 2, &codes[0]) }, "MC_ERR_INVALID_ARGUMENT"},
		{"batch_is_exist: NULL out", func() int32 { return l.storeBatchIsExist(s, &keys[0], 2, nil) }, "MC_ERR_INVALID_ARGUMENT"},
		{"is_exist: NULL key", func() int32 { return l.storeIsExist(s, nil) }, "MC_ERR_INVALID_ARGUMENT"},
		{"is_exist: oversize key", func() int32 { return l.storeIsExist(s, cstr(long)) }, "MC_STORE_ERR_INVALID_KEY"},
		{"remove: NULL key", func() int32 { return l.storeRemove(s, nil, 1) }, "MC_ERR_INVALID_ARGUMENT"},
		{"remove: missing", func() int32 { return l.storeRemove(s, cstr("missing"), 1) }, "MC_STORE_ERR_OBJECT_NOT_FOUND"},
		{"get_size: NULL out", func() int32 { return l.storeGetSize(s, cstr("k"), nil) }, "MC_ERR_INVALID_ARGUMENT"},
		{"get_size: missing", func() int32 { return l.storeGetSize(s, cstr("missing"), &size) }, "MC_STORE_ERR_OBJECT_NOT_FOUND"},
		{"get_hostname: NULL buf", func() int32 { return l.storeHostname(s, nil, 8, &n) }, "MC_ERR_INVALID_ARGUMENT"},
		{"get_hostname: NULL out_len", func() int32 { return l.storeHostname(s, &buf[0], 8, nil) }, "MC_ERR_INVALID_ARGUMENT"},
		{"get_hostname: too small", func() int32 { return l.storeHostname(s, &buf[0], 8, &n) }, "MC_STORE_ERR_BUFFER_OVERFLOW"},
		{"register: NULL ptr", func() int32 { return l.storeRegister(s, 0, 8) }, "MC_ERR_INVALID_ARGUMENT"},
		{"register: zero size", func() int32 { return l.storeRegister(s, addr+(40<<10), 0) }, "MC_ERR_INVALID_ARGUMENT"},
		{"register: overlap", func() int32 { return l.storeRegister(s, addr+8, 8) }, "MC_ERR_ADDRESS_OVERLAPPED"},
		{"unregister: NULL", func() int32 { return l.storeUnregister(s, 0) }, "MC_ERR_INVALID_ARGUMENT"},
		{"unregister: not registered", func() int32 { return l.storeUnregister(s, addr+8) }, "MC_ERR_ADDRESS_NOT_REGISTERED"},
		{"unregister: ok", func() int32 { return l.storeUnregister(s, addr) }, "MC_OK"},
		{"unregister: twice", func() int32 { return l.storeUnregister(s, addr) }, "MC_ERR_ADDRESS_NOT_REGISTERED"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lockThread(t)
			msg := l.expect(t, c.name, c.call(), c.want)
			t.Logf("%s -> %s %q", c.name, c.want, msg)
		})
	}
	if codes[0] != 0 || codes[1] != 0 || results[0] != 4096 || results[1] != 4096 {
		t.Fatalf("batch results %v, %v", codes, results)
	}
}

// TestStoreConcurrentCallers drives one store from several OS threads at
// once, each with its own keys and buffer slices.
func TestStoreConcurrentCallers(t *testing.T) {
	l := load(t)
	m := startMaster(t)
	s := newStore(t, l, m, 32*mib, 4*mib)
	const threads, rounds, blk = 8, 10, 16 << 10
	r := region(t, 2*threads*blk)
	l.expect(t, "register", l.storeRegister(s, uintptr(r.Addr()), uintptr(r.Len())), "MC_OK")
	errs := make(chan error, threads)
	var wg sync.WaitGroup
	for th := range threads {
		wg.Go(func() {
			runtime.LockOSThread() // the thread ends with the goroutine
			errs <- storeWorker(l, s, r, th, rounds, blk)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func storeWorker(l *lib, s uintptr, r *memory.Region, th, rounds, blk int) error {
	okCode := int32(l.consts["MC_OK"])
	src := uintptr(r.Addr()) + uintptr(2*th*blk)
	dst := src + uintptr(blk)
	b := r.Bytes()[2*th*blk : 2*(th+1)*blk]
	for round := range rounds {
		for i := range blk {
			b[i] = byte(th*round + i)
		}
		key := cstr(fmt.Sprintf("conc-%d-%d", th, round))
		if rc := l.storePutFrom(s, key, src, uintptr(blk)); rc != okCode {
			return fmt.Errorf("thread %d round %d: put_from = %d: %s", th, round, rc, l.lastError())
		}
		var read int64
		if rc := l.storeGetInto(s, key, dst, uintptr(blk), &read); rc != okCode || read != int64(blk) {
			return fmt.Errorf("thread %d round %d: get_into = %d, %d bytes: %s", th, round, rc, read, l.lastError())
		}
		if !bytes.Equal(b[:blk], b[blk:]) {
			return fmt.Errorf("thread %d round %d: bytes differ", th, round)
		}
	}
	return nil
}

// expectPartial checks a batch call that was carried out with some keys
// failing: MC_OK with a non-empty mc_last_error, which it returns.
func (l *lib) expectPartial(t *testing.T, what string, got int32) string {
	t.Helper()
	msg := l.lastError()
	if got != l.c(t, "MC_OK") || msg == "" {
		t.Fatalf("%s = %d with mc_last_error %q; want MC_OK with a summary of the failed keys", what, got, msg)
	}
	return msg
}
