package abitest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/ebitengine/purego"
)

// EnvLibrary names the environment variable that points the tests at a
// built libmooncake.so instead of build/libmooncake.so.
const EnvLibrary = "MC_LIBMOONCAKE"

// request mirrors mc_te_request_t (x86-64 / arm64 LP64 layout: int at 0,
// void* at 8, int32 at 16, uint64 at 24 and 32; 40 bytes). source is an
// integer so no Go pointer sits in memory C reads.
type request struct {
	Opcode       int32
	Source       uintptr
	TargetID     int32
	TargetOffset uint64
	Length       uint64
}

// status mirrors mc_te_status_t (int at 0, uint64 at 8; 16 bytes).
type status struct {
	Status           int32
	TransferredBytes uint64
}

// cbuf mirrors mc_buf_t (void* at 0, size_t at 8). data is an integer: it
// points into C memory the test reads with readBuf and frees with
// mc_buf_free.
type cbuf struct {
	Data uintptr
	Len  uintptr
}

// bufferDesc mirrors mc_te_buffer_t (two uint64; 16 bytes).
type bufferDesc struct {
	Addr   uint64
	Length uint64
}

// lib holds the library's functions, typed as the headers declare them.
// Strings are *byte so a test can pass NULL; see cstr.
type lib struct {
	abiVersion   func() uint32
	lastError    func() string
	teABIVersion func() uint32
	create       func(meta, name, host *byte, port uint64, autoDiscover int32, out *uintptr) int32
	destroy      func(e uintptr) int32
	install      func(e uintptr, proto *byte) int32
	register     func(e, addr, length uintptr, location *byte, remote int32) int32
	unregister   func(e, addr uintptr) int32
	openSegment  func(e uintptr, name *byte, out *int32) int32
	closeSegment func(e uintptr, id int32) int32
	allocBatch   func(e, size uintptr, out *uint64) int32
	submit       func(e uintptr, batch uint64, reqs *request, count uintptr) int32
	getStatus    func(e uintptr, batch uint64, task uintptr, out *status) int32
	freeBatch    func(e uintptr, batch uint64) int32

	// transfer_engine.h 1.1.
	bufFree     func(b *cbuf)
	localName   func(e uintptr, out *cbuf) int32
	rpcPort     func(e uintptr, out *int32) int32
	refreshSeg  func(e uintptr, id int32) int32
	segBuffers  func(e uintptr, id int32, out *bufferDesc, capacity uintptr, count *uintptr) int32
	waitBatch   func(e uintptr, batch, timeoutMS uint64, out *status) int32
	probe       func(e uintptr, name *byte) int32
	sendNotify  func(e uintptr, name, notifyName, msg *byte) int32
	getNotifies func(e uintptr, out *cbuf) int32

	// store.h. Key strings are *byte (NULL-able); arrays of addresses and
	// sizes are []uintptr passed by their first element (they hold no Go
	// pointers: key strings of a batch live off the Go heap, see cstrings).
	storeABIVersion   func() uint32
	storeSetup        func(host, meta *byte, global, local uint64, proto, dev, master *byte, out *uintptr) int32
	storeDestroy      func(s uintptr) int32
	storeHostname     func(s uintptr, buf *byte, capacity uintptr, outLen *uintptr) int32
	storeRegister     func(s, ptr, size uintptr) int32
	storeUnregister   func(s, ptr uintptr) int32
	storePut          func(s uintptr, key *byte, value, size uintptr) int32
	storeGet          func(s uintptr, key *byte, buf, capacity uintptr, outSize *uintptr) int32
	storePutFrom      func(s uintptr, key *byte, ptr, size uintptr) int32
	storeGetInto      func(s uintptr, key *byte, ptr, size uintptr, outRead *int64) int32
	storeBatchPutFrom func(s uintptr, keys, ptrs, sizes *uintptr, n uintptr, out *int32) int32
	storeBatchGetInto func(s uintptr, keys, ptrs, sizes *uintptr, n uintptr, out *int64) int32
	storeIsExist      func(s uintptr, key *byte) int32
	storeBatchIsExist func(s uintptr, keys *uintptr, n uintptr, out *int32) int32
	storeRemove       func(s uintptr, key *byte, force int32) int32
	storeGetSize      func(s uintptr, key *byte, out *uint64) int32
	// The _n forms (store.h ABI 1.1): each key as pointer and length.
	storePutN          func(s uintptr, key *byte, keyLen, value, size uintptr) int32
	storeGetN          func(s uintptr, key *byte, keyLen, buf, capacity uintptr, outSize *uintptr) int32
	storePutFromN      func(s uintptr, key *byte, keyLen, ptr, size uintptr) int32
	storeGetIntoN      func(s uintptr, key *byte, keyLen, ptr, size uintptr, outRead *int64) int32
	storeBatchPutFromN func(s uintptr, keys, keyLens, ptrs, sizes *uintptr, n uintptr, out *int32) int32
	storeBatchGetIntoN func(s uintptr, keys, keyLens, ptrs, sizes *uintptr, n uintptr, out *int64) int32
	storeIsExistN      func(s uintptr, key *byte, keyLen uintptr) int32
	storeBatchIsExistN func(s uintptr, keys, keyLens *uintptr, n uintptr, out *int32) int32
	storeRemoveN       func(s uintptr, key *byte, keyLen uintptr, force int32) int32
	storeGetSizeN      func(s uintptr, key *byte, keyLen uintptr, out *uint64) int32

	// memcpy is libc's, to copy C memory (an mc_buf_t) into Go memory
	// without unsafe.
	memcpy func(dst *byte, src, n uintptr) uintptr

	// consts are the integer #defines of common.h and transfer_engine.h.
	consts map[string]int64
}

var (
	loadOnce sync.Once
	loaded   *lib
	loadErr  error
)

// repoRoot is the repository root, two levels above this package.
func repoRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Join(wd, "..", "..")
}

// load opens the library once per process (a Go c-shared library cannot be
// unloaded) or skips the test when it is not built.
func load(t *testing.T) *lib {
	t.Helper()
	// mc_last_error is per OS thread: keep the test goroutine on one thread
	// so a call and the error check that follows it see the same slot.
	lockThread(t)
	path := os.Getenv(EnvLibrary)
	if path == "" {
		path = filepath.Join(repoRoot(), "build", "libmooncake.so")
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("libmooncake.so not built (%v): run `make lib` from the repository root, or set %s to a built library", err, EnvLibrary)
	}
	loadOnce.Do(func() { loaded, loadErr = open(path) })
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loaded
}

func open(path string) (*lib, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("dlopen %s: %w", path, err)
	}
	l := &lib{}
	for name, fp := range map[string]any{
		"mc_abi_version":                &l.abiVersion,
		"mc_last_error":                 &l.lastError,
		"mc_te_abi_version":             &l.teABIVersion,
		"mc_te_create":                  &l.create,
		"mc_te_destroy":                 &l.destroy,
		"mc_te_install_transport":       &l.install,
		"mc_te_register_local_memory":   &l.register,
		"mc_te_unregister_local_memory": &l.unregister,
		"mc_te_open_segment":            &l.openSegment,
		"mc_te_close_segment":           &l.closeSegment,
		"mc_te_allocate_batch":          &l.allocBatch,
		"mc_te_submit":                  &l.submit,
		"mc_te_get_status":              &l.getStatus,
		"mc_te_free_batch":              &l.freeBatch,
		"mc_buf_free":                   &l.bufFree,
		"mc_te_get_local_name":          &l.localName,
		"mc_te_get_rpc_port":            &l.rpcPort,
		"mc_te_refresh_segment":         &l.refreshSeg,
		"mc_te_get_segment_buffers":     &l.segBuffers,
		"mc_te_wait_batch":              &l.waitBatch,
		"mc_te_probe":                   &l.probe,
		"mc_te_send_notify":             &l.sendNotify,
		"mc_te_get_notifies":            &l.getNotifies,
		"mc_store_abi_version":          &l.storeABIVersion,
		"mc_store_setup":                &l.storeSetup,
		"mc_store_destroy":              &l.storeDestroy,
		"mc_store_get_hostname":         &l.storeHostname,
		"mc_store_register_buffer":      &l.storeRegister,
		"mc_store_unregister_buffer":    &l.storeUnregister,
		"mc_store_put":                  &l.storePut,
		"mc_store_get":                  &l.storeGet,
		"mc_store_put_from":             &l.storePutFrom,
		"mc_store_get_into":             &l.storeGetInto,
		"mc_store_batch_put_from":       &l.storeBatchPutFrom,
		"mc_store_batch_get_into":       &l.storeBatchGetInto,
		"mc_store_is_exist":             &l.storeIsExist,
		"mc_store_batch_is_exist":       &l.storeBatchIsExist,
		"mc_store_remove":               &l.storeRemove,
		"mc_store_get_size":             &l.storeGetSize,
		"mc_store_put_n":                &l.storePutN,
		"mc_store_get_n":                &l.storeGetN,
		"mc_store_put_from_n":           &l.storePutFromN,
		"mc_store_get_into_n":           &l.storeGetIntoN,
		"mc_store_batch_put_from_n":     &l.storeBatchPutFromN,
		"mc_store_batch_get_into_n":     &l.storeBatchGetIntoN,
		"mc_store_is_exist_n":           &l.storeIsExistN,
		"mc_store_batch_is_exist_n":     &l.storeBatchIsExistN,
		"mc_store_remove_n":             &l.storeRemoveN,
		"mc_store_get_size_n":           &l.storeGetSizeN,
	} {
		sym, err := purego.Dlsym(h, name)
		if err != nil {
			return nil, fmt.Errorf("dlsym %s in %s: %w", name, path, err)
		}
		purego.RegisterFunc(fp, sym)
	}
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("dlopen libc.so.6: %w", err)
	}
	sym, err := purego.Dlsym(libc, "memcpy")
	if err != nil {
		return nil, fmt.Errorf("dlsym memcpy: %w", err)
	}
	purego.RegisterFunc(&l.memcpy, sym)
	l.consts = map[string]int64{}
	for _, hdr := range headers {
		if err := readDefines(filepath.Join(repoRoot(), "abi", "include", "mooncake", hdr), l.consts); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// headers are the headers of abi/include/mooncake; the tests read their
// constants and their function declarations.
var headers = []string{"common.h", "transfer_engine.h", "store.h", "vllm.h", "sglang.h", "lmcache.h", "nixl.h", "trtllm.h", "p2p.h"}

var defineRE = regexp.MustCompile(`^#define\s+(MC_\w+)\s+\(?(-?\d+)\)?\s*(/\*.*)?$`)

// readDefines adds the integer-valued MC_ macros of a header to m.
func readDefines(path string, m map[string]int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if g := defineRE.FindStringSubmatch(sc.Text()); g != nil {
			v, err := strconv.ParseInt(g[2], 10, 64)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", path, g[1], err)
			}
			m[g[1]] = v
		}
	}
	return sc.Err()
}

// c returns the value of a header constant; the test fails for an unknown one.
func (l *lib) c(t *testing.T, name string) int32 {
	t.Helper()
	v, ok := l.consts[name]
	if !ok {
		t.Fatalf("header has no integer #define %s", name)
	}
	return int32(v)
}

// cstr returns a NUL-terminated copy of s for a const char* argument.
// readBuf copies an mc_buf_t's bytes into Go memory and frees the buffer.
func (l *lib) readBuf(b *cbuf) []byte {
	out := make([]byte, b.Len)
	if b.Len > 0 {
		l.memcpy(&out[0], b.Data, b.Len)
	}
	l.bufFree(b)
	return out
}

func cstr(s string) *byte {
	b := append([]byte(s), 0)
	return &b[0]
}

// lockThread pins the test goroutine to its OS thread for the rest of the
// test: mc_last_error is per thread, so the call that failed and the call
// that reads the error must run on the same one.
func lockThread(t *testing.T) {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
}

// expect checks that a call returned want and, for a failure, left a
// non-empty mc_last_error; for MC_OK, an empty one.
func (l *lib) expect(t *testing.T, what string, got int32, want string) string {
	t.Helper()
	msg := l.lastError()
	if w := l.c(t, want); got != w {
		t.Fatalf("%s = %d, want %s (%d); mc_last_error: %q", what, got, want, w, msg)
	}
	if want == "MC_OK" && msg != "" {
		t.Fatalf("%s succeeded but mc_last_error = %q, want \"\"", what, msg)
	}
	if want != "MC_OK" && msg == "" {
		t.Fatalf("%s = %s but mc_last_error is empty", what, want)
	}
	return msg
}

func TestHeadersParsed(t *testing.T) {
	l := load(t)
	for _, name := range []string{"MC_OK", "MC_ERR_INVALID_ARGUMENT", "MC_ERR_INTERNAL", "MC_TE_STATUS_COMPLETED", "MC_TE_STATUS_FAILED",
		"MC_STORE_ERR_OBJECT_NOT_FOUND", "MC_STORE_MAX_KEY_LEN", "MC_VLLM_ABI_VERSION_MAJOR", "MC_TRTLLM_STATE_FAILURE"} {
		l.c(t, name)
	}
}
