package abitest

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
)

const mib = 1 << 20

// metaServer starts an HTTP metadata server on 127.0.0.1 and returns its
// connection string.
func metaServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(httpmeta.NewHandler(memmeta.New()))
	t.Cleanup(srv.Close)
	return srv.URL + "/metadata"
}

// newEngine creates an engine bound to 127.0.0.1 on an ephemeral port; it is
// destroyed at cleanup unless the test did it.
func newEngine(t *testing.T, l *lib, meta, name string) uintptr {
	t.Helper()
	var e uintptr
	l.expect(t, "mc_te_create "+name, l.create(cstr(meta), cstr(name), cstr("127.0.0.1"), 0, 0, &e), "MC_OK")
	if e == 0 {
		t.Fatal("mc_te_create returned MC_OK and a NULL engine")
	}
	t.Cleanup(func() { l.destroy(e) })
	return e
}

// region maps n bytes off the Go heap (a foreign caller's memory).
func region(t *testing.T, n int) *memory.Region {
	t.Helper()
	r, err := memory.Map(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// wait polls task ids [0, n) of batch until none is WAITING and returns
// their statuses (and the mc_last_error text of each FAILED one).
func wait(t *testing.T, l *lib, e uintptr, batch uint64, n int) ([]status, []string) {
	t.Helper()
	out := make([]status, n)
	msgs := make([]string, n)
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < n; {
		st := new(status)
		// MC_OK whatever the task's state; a FAILED one leaves its reason
		// in mc_last_error.
		if rc := l.getStatus(e, batch, uintptr(i), st); rc != l.c(t, "MC_OK") {
			t.Fatalf("mc_te_get_status(batch %d, task %d) = %d: %s", batch, i, rc, l.lastError())
		}
		if st.Status == l.c(t, "MC_TE_STATUS_WAITING") {
			if time.Now().After(deadline) {
				t.Fatalf("task %d of batch %d still WAITING after 30 s", i, batch)
			}
			time.Sleep(100 * time.Microsecond) // polling a C API: nothing to block on
			continue
		}
		out[i] = *st
		if st.Status == l.c(t, "MC_TE_STATUS_FAILED") {
			msgs[i] = l.lastError()
		}
		i++
	}
	return out, msgs
}

func TestTransferEngineABI(t *testing.T) {
	l := load(t)
	lockThread(t)

	if got, want := l.abiVersion(), uint32(l.c(t, "MC_ABI_VERSION_MAJOR")<<16|l.c(t, "MC_ABI_VERSION_MINOR")); got != want {
		t.Fatalf("mc_abi_version = %#x, want %#x", got, want)
	}
	if got, want := l.teABIVersion(), uint32(l.c(t, "MC_TE_ABI_VERSION_MAJOR")<<16|l.c(t, "MC_TE_ABI_VERSION_MINOR")); got != want {
		t.Fatalf("mc_te_abi_version = %#x, want %#x", got, want)
	}

	meta := metaServer(t)
	a := newEngine(t, l, meta, "abi-a")
	b := newEngine(t, l, meta, "abi-b")
	l.expect(t, `mc_te_install_transport "tcp"`, l.install(a, cstr("tcp")), "MC_OK")

	ra, rb := region(t, mib), region(t, mib)
	src, dst := ra.Bytes(), rb.Bytes()
	for i := range src {
		src[i] = byte(i*7 + i>>12)
	}
	l.expect(t, "register a", l.register(a, uintptr(ra.Addr()), mib, cstr("cpu:0"), 1), "MC_OK")
	l.expect(t, "register b", l.register(b, uintptr(rb.Addr()), mib, nil, 1), "MC_OK")

	var peer, self int32
	l.expect(t, "open abi-b", l.openSegment(a, cstr("abi-b"), &peer), "MC_OK")
	l.expect(t, "open own segment", l.openSegment(a, cstr("abi-a"), &self), "MC_OK")
	if peer <= 0 || self != l.c(t, "MC_TE_LOCAL_SEGMENT") {
		t.Fatalf("segment ids: peer %d (want > 0), self %d (want MC_TE_LOCAL_SEGMENT)", peer, self)
	}

	// WRITE 1 MiB a -> b in 16 requests, then READ the first 4 KiB back.
	var batch uint64
	l.expect(t, "allocate", l.allocBatch(a, 17, &batch), "MC_OK")
	const parts = 16
	reqs := make([]request, parts)
	for i := range reqs {
		off := uint64(i * mib / parts)
		reqs[i] = request{Opcode: l.c(t, "MC_TE_OPCODE_WRITE"), Source: uintptr(ra.Addr() + off), TargetID: peer, TargetOffset: rb.Addr() + off, Length: mib / parts}
	}
	l.expect(t, "submit writes", l.submit(a, batch, &reqs[0], parts), "MC_OK")
	sts, msgs := wait(t, l, a, batch, parts)
	for i, st := range sts {
		if st.Status != l.c(t, "MC_TE_STATUS_COMPLETED") || st.TransferredBytes != mib/parts {
			t.Fatalf("write %d: status %d, %d bytes (%s)", i, st.Status, st.TransferredBytes, msgs[i])
		}
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("target buffer differs from the source after COMPLETED writes")
	}
	want := append([]byte(nil), src[:4096]...)
	clear(src[:4096])
	rd := []request{{Opcode: l.c(t, "MC_TE_OPCODE_READ"), Source: uintptr(ra.Addr()), TargetID: peer, TargetOffset: rb.Addr(), Length: 4096}}
	l.expect(t, "submit read", l.submit(a, batch, &rd[0], 1), "MC_OK")
	if sts, msgs := wait(t, l, a, batch, parts+1); sts[parts].Status != l.c(t, "MC_TE_STATUS_COMPLETED") {
		t.Fatalf("read: status %d (%s)", sts[parts].Status, msgs[parts])
	}
	if !bytes.Equal(src[:4096], want) {
		t.Fatal("READ did not bring the target's bytes back")
	}
	l.expect(t, "submit past capacity", l.submit(a, batch, &rd[0], 1), "MC_ERR_TOO_MANY_REQUESTS")
	l.expect(t, "free batch", l.freeBatch(a, batch), "MC_OK")
	msg := l.expect(t, "free batch again", l.freeBatch(a, batch), "MC_ERR_INVALID_HANDLE")
	if !strings.HasPrefix(msg, "mc_te_free_batch: ") {
		t.Fatalf("mc_last_error %q does not name the function", msg)
	}

	// A request outside the target's registered memory is queued and FAILS.
	l.expect(t, "allocate", l.allocBatch(a, 2, &batch), "MC_OK")
	bad := []request{
		{Opcode: l.c(t, "MC_TE_OPCODE_WRITE"), Source: uintptr(ra.Addr()), TargetID: peer, TargetOffset: rb.Addr() + mib - 10, Length: 100},
		{Opcode: 7, Source: uintptr(ra.Addr()), TargetID: peer, TargetOffset: rb.Addr(), Length: 100},
	}
	l.expect(t, "submit bad requests", l.submit(a, batch, &bad[0], 2), "MC_OK")
	sts, msgs = wait(t, l, a, batch, 2)
	for i, st := range sts {
		if st.Status != l.c(t, "MC_TE_STATUS_FAILED") || msgs[i] == "" {
			t.Fatalf("bad request %d: status %d, mc_last_error %q; want FAILED with a reason", i, st.Status, msgs[i])
		}
	}
	if !strings.Contains(msgs[0], "not registered") || !strings.Contains(msgs[1], "opcode") {
		t.Fatalf("reasons %q", msgs)
	}
	l.expect(t, "free batch", l.freeBatch(a, batch), "MC_OK")

	l.expect(t, "close segment", l.closeSegment(a, peer), "MC_OK")
	l.expect(t, "close segment again", l.closeSegment(a, peer), "MC_ERR_NOT_FOUND")
	l.expect(t, "unregister a", l.unregister(a, uintptr(ra.Addr())), "MC_OK")
	l.expect(t, "unregister a again", l.unregister(a, uintptr(ra.Addr())), "MC_ERR_ADDRESS_NOT_REGISTERED")
	l.expect(t, "destroy a", l.destroy(a), "MC_OK")
	l.expect(t, "destroy a again", l.destroy(a), "MC_ERR_INVALID_HANDLE")
	l.expect(t, "register on destroyed engine", l.register(a, uintptr(ra.Addr()), mib, nil, 1), "MC_ERR_INVALID_HANDLE")
}

func TestTransferEngineBadInputs(t *testing.T) {
	l := load(t)
	lockThread(t)
	meta := metaServer(t)
	e := newEngine(t, l, meta, "abi-bad")
	r := region(t, 64<<10)
	addr := uintptr(r.Addr())
	var batch uint64
	var id int32
	st := new(status)

	for _, c := range []struct {
		name string
		call func() int32
		want string
	}{
		{"create: NULL metadata", func() int32 { var o uintptr; return l.create(nil, cstr("x"), nil, 0, 0, &o) }, "MC_ERR_INVALID_ARGUMENT"},
		{"create: NULL name", func() int32 { var o uintptr; return l.create(cstr(meta), nil, nil, 0, 0, &o) }, "MC_ERR_INVALID_ARGUMENT"},
		{"create: empty name", func() int32 { var o uintptr; return l.create(cstr(meta), cstr(""), nil, 0, 0, &o) }, "MC_ERR_INVALID_ARGUMENT"},
		{"create: NULL out", func() int32 { return l.create(cstr(meta), cstr("x"), nil, 0, 0, nil) }, "MC_ERR_INVALID_ARGUMENT"},
		{"create: port over 65535", func() int32 { var o uintptr; return l.create(cstr(meta), cstr("x"), nil, 70000, 0, &o) }, "MC_ERR_INVALID_ARGUMENT"},
		{"create: unknown scheme", func() int32 { var o uintptr; return l.create(cstr("ftp://h/x"), cstr("x"), nil, 0, 0, &o) }, "MC_ERR_INVALID_ARGUMENT"},
		{"create: p2phandshake (case-sensitive)", func() int32 { var o uintptr; return l.create(cstr("p2phandshake"), cstr("x"), nil, 0, 0, &o) }, "MC_ERR_INVALID_ARGUMENT"},
		{"create: redis", func() int32 { var o uintptr; return l.create(cstr("redis://127.0.0.1:6379"), cstr("x"), nil, 0, 0, &o) }, "MC_ERR_UNSUPPORTED"},
		{"create: etcd unreachable", func() int32 {
			var o uintptr
			return l.create(cstr("etcd://127.0.0.1:1"), cstr("x"), cstr("127.0.0.1"), 0, 0, &o)
		}, "MC_ERR_METADATA"},
		{"create: metadata unreachable", func() int32 {
			var o uintptr
			return l.create(cstr("http://127.0.0.1:1/metadata"), cstr("x"), cstr("127.0.0.1"), 0, 0, &o)
		}, "MC_ERR_METADATA"},
		{"create: bind address unresolvable", func() int32 {
			// A host name is published, not bound (upstream binds every
			// interface); MC_TCP_BIND_ADDRESS is bound.
			t.Setenv("MC_TCP_BIND_ADDRESS", "no-such-host.invalid")
			var o uintptr
			return l.create(cstr(meta), cstr("x"), cstr("no-such-host.invalid"), 0, 0, &o)
		}, "MC_ERR_DNS"},
		{"destroy: NULL", func() int32 { return l.destroy(0) }, "MC_ERR_INVALID_ARGUMENT"},
		{"destroy: unknown handle", func() int32 { return l.destroy(0xdead0000) }, "MC_ERR_INVALID_HANDLE"},
		{"install: NULL engine", func() int32 { return l.install(0, cstr("tcp")) }, "MC_ERR_INVALID_ARGUMENT"},
		{"install: NULL proto", func() int32 { return l.install(e, nil) }, "MC_ERR_INVALID_ARGUMENT"},
		{"install: rdma", func() int32 { return l.install(e, cstr("rdma")) }, "MC_ERR_UNSUPPORTED"},
		{"register: NULL engine", func() int32 { return l.register(0, addr, 4096, nil, 1) }, "MC_ERR_INVALID_ARGUMENT"},
		{"register: NULL addr", func() int32 { return l.register(e, 0, 4096, nil, 1) }, "MC_ERR_INVALID_ARGUMENT"},
		{"register: zero page addr", func() int32 { return l.register(e, 16, 4096, nil, 1) }, "MC_ERR_INVALID_ARGUMENT"},
		{"register: zero length", func() int32 { return l.register(e, addr, 0, nil, 1) }, "MC_ERR_INVALID_ARGUMENT"},
		{"register: length wraps", func() int32 { return l.register(e, addr, ^uintptr(0)-addr+2, nil, 1) }, "MC_ERR_INVALID_ARGUMENT"},
		{"register: ok", func() int32 { return l.register(e, addr, 64<<10, nil, 1) }, "MC_OK"},
		{"register: overlap", func() int32 { return l.register(e, addr+4096, 4096, nil, 1) }, "MC_ERR_ADDRESS_OVERLAPPED"},
		{"unregister: NULL addr", func() int32 { return l.unregister(e, 0) }, "MC_ERR_INVALID_ARGUMENT"},
		{"unregister: not registered", func() int32 { return l.unregister(e, addr+4096) }, "MC_ERR_ADDRESS_NOT_REGISTERED"},
		{"open: NULL name", func() int32 { return l.openSegment(e, nil, &id) }, "MC_ERR_INVALID_ARGUMENT"},
		{"open: NULL out", func() int32 { return l.openSegment(e, cstr("abi-bad"), nil) }, "MC_ERR_INVALID_ARGUMENT"},
		{"open: unknown segment", func() int32 { return l.openSegment(e, cstr("nobody"), &id) }, "MC_ERR_NOT_FOUND"},
		{"close: never opened", func() int32 { return l.closeSegment(e, 42) }, "MC_ERR_NOT_FOUND"},
		{"allocate: NULL out", func() int32 { return l.allocBatch(e, 4, nil) }, "MC_ERR_INVALID_ARGUMENT"},
		{"allocate: size 0", func() int32 { return l.allocBatch(e, 0, &batch) }, "MC_ERR_INVALID_ARGUMENT"},
		{"allocate: ok", func() int32 { return l.allocBatch(e, 4, &batch) }, "MC_OK"},
		{"submit: NULL reqs", func() int32 { return l.submit(e, batch, nil, 1) }, "MC_ERR_INVALID_ARGUMENT"},
		{"submit: count 0", func() int32 { return l.submit(e, batch, nil, 0) }, "MC_OK"},
		{"submit: unknown batch", func() int32 { return l.submit(e, 1<<40, nil, 0) }, "MC_ERR_INVALID_HANDLE"},
		{"submit: count overflows", func() int32 { return l.submit(e, batch, &[]request{{}}[0], ^uintptr(0)/8) }, "MC_ERR_INVALID_ARGUMENT"},
		{"status: unknown batch", func() int32 { return l.getStatus(e, 1<<40, 0, st) }, "MC_ERR_INVALID_HANDLE"},
		{"status: task never submitted", func() int32 { return l.getStatus(e, batch, 0, st) }, "MC_ERR_INVALID_ARGUMENT"},
		{"status: NULL out", func() int32 { return l.getStatus(e, batch, 0, nil) }, "MC_ERR_INVALID_ARGUMENT"},
		{"free: unknown batch", func() int32 { return l.freeBatch(e, 1<<40) }, "MC_ERR_INVALID_HANDLE"},
		{"free: ok", func() int32 { return l.freeBatch(e, batch) }, "MC_OK"},
		{"free: twice", func() int32 { return l.freeBatch(e, batch) }, "MC_ERR_INVALID_HANDLE"},
		{"unregister: ok", func() int32 { return l.unregister(e, addr) }, "MC_OK"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lockThread(t)
			msg := l.expect(t, c.name, c.call(), c.want)
			t.Logf("%s -> %s %q", c.name, c.want, msg)
		})
	}
}

// TestLastErrorPerThread checks that mc_last_error belongs to the calling
// thread: a failure on one thread leaves another thread's text alone.
func TestLastErrorPerThread(t *testing.T) {
	l := load(t)
	lockThread(t)
	other := make(chan string)
	step := make(chan struct{})
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine
		l.abiVersion()
		var o uintptr
		l.create(nil, nil, nil, 0, 0, &o) // fails on this thread
		other <- l.lastError()
		<-step
		other <- l.lastError()
	}()
	failed := <-other
	if failed == "" {
		t.Fatal("failing call left an empty mc_last_error")
	}
	l.expect(t, "mc_te_install_transport(NULL)", l.install(0, nil), "MC_ERR_INVALID_ARGUMENT")
	mine := l.lastError()
	step <- struct{}{}
	if again := <-other; again != failed {
		t.Fatalf("other thread's mc_last_error changed from %q to %q by a call on this thread", failed, again)
	}
	if mine == failed {
		t.Fatalf("both threads report %q", mine)
	}
}

// TestConcurrentCallers drives one engine from several OS threads at once,
// each with its own batches, as a multi-threaded host would.
func TestConcurrentCallers(t *testing.T) {
	l := load(t)
	e := newEngine(t, l, metaServer(t), "abi-conc")
	const threads, rounds, reqs, chunk = 8, 20, 8, 4096
	r := region(t, 2*threads*reqs*chunk)
	l.expect(t, "register", l.register(e, uintptr(r.Addr()), uintptr(r.Len()), nil, 1), "MC_OK")
	buf := r.Bytes()
	for i := range buf[:len(buf)/2] {
		buf[i] = byte(i % 253)
	}
	errs := make(chan error, threads)
	for th := range threads {
		go func() {
			runtime.LockOSThread() // the thread ends with the goroutine
			errs <- worker(l, e, uint64(r.Addr()), th, rounds, reqs, chunk, len(buf)/2)
		}()
	}
	for range threads {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if half := len(buf) / 2; !bytes.Equal(buf[:half], buf[half:]) {
		t.Fatal("destination half differs from the source half")
	}
	l.expect(t, "unregister", l.unregister(e, uintptr(r.Addr())), "MC_OK")
}

// worker copies its slice of the source half to the destination half through
// the engine's own segment, rounds times, one batch per round.
func worker(l *lib, e uintptr, base uint64, th, rounds, reqs, chunk, half int) error {
	okCode, completed := int32(l.consts["MC_OK"]), int32(l.consts["MC_TE_STATUS_COMPLETED"])
	waiting, write := int32(l.consts["MC_TE_STATUS_WAITING"]), int32(l.consts["MC_TE_OPCODE_WRITE"])
	rs := make([]request, reqs)
	for i := range rs {
		off := uint64((th*reqs + i) * chunk)
		rs[i] = request{Opcode: write, Source: uintptr(base + off), TargetID: 0, TargetOffset: base + uint64(half) + off, Length: uint64(chunk)}
	}
	for round := range rounds {
		var batch uint64
		if rc := l.allocBatch(e, uintptr(reqs), &batch); rc != okCode {
			return fmt.Errorf("thread %d round %d: allocate = %d: %s", th, round, rc, l.lastError())
		}
		if rc := l.submit(e, batch, &rs[0], uintptr(reqs)); rc != okCode {
			return fmt.Errorf("thread %d round %d: submit = %d: %s", th, round, rc, l.lastError())
		}
		for i := 0; i < reqs; {
			st := new(status)
			if rc := l.getStatus(e, batch, uintptr(i), st); rc != okCode {
				return fmt.Errorf("thread %d: status = %d: %s", th, rc, l.lastError())
			}
			switch st.Status {
			case waiting:
				runtime.Gosched()
				continue
			case completed:
				i++
			default:
				return fmt.Errorf("thread %d round %d task %d: status %d: %s", th, round, i, st.Status, l.lastError())
			}
		}
		if rc := l.freeBatch(e, batch); rc != okCode {
			return fmt.Errorf("thread %d: free = %d: %s", th, rc, l.lastError())
		}
		if msg := l.lastError(); msg != "" {
			return fmt.Errorf("thread %d: mc_last_error %q after a successful call", th, msg)
		}
	}
	return nil
}
