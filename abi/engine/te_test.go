package engine

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// The Go layer behind the exports, tested without crossing into C (the
// exports themselves are tested through libmooncake.so by abi/abitest and
// abi/python/tests).

func metaURL(t *testing.T) string {
	srv := httptest.NewServer(httpmeta.NewHandler(memmeta.New()))
	t.Cleanup(srv.Close)
	return srv.URL + "/metadata"
}

func mustEngine(t *testing.T, meta, name string) *teEngine {
	t.Helper()
	return mustEngineArgs(t, engineArgs{Conn: meta, Name: name, Host: "127.0.0.1"})
}

func mustEngineArgs(t *testing.T, a engineArgs) *teEngine {
	t.Helper()
	if a.Env == nil {
		a.Env = map[string]string{} // never the test process's MC_TCP_BIND_ADDRESS
	}
	e, err := newEngine(a)
	require.NoError(t, err)
	t.Cleanup(func() { e.destroy() })
	return e
}

func mapped(t *testing.T, n int) *memory.Region {
	r, err := memory.Map(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestNewEngineErrors(t *testing.T) {
	meta := metaURL(t)
	for _, c := range []struct {
		name, conn, seg, host string
		port                  uint64
		want                  cbridge.Code
	}{
		{"empty conn", "", "x", "", 0, cbridge.InvalidArgument},
		{"empty name", meta, "", "", 0, cbridge.InvalidArgument},
		{"port", meta, "x", "", 65536, cbridge.InvalidArgument},
		{"bad scheme", "gopher://h", "x", "", 0, cbridge.InvalidArgument},
		{"p2p lowercase", "p2phandshake", "x", "", 0, cbridge.InvalidArgument},
		{"redis", "redis://127.0.0.1:6379", "x", "", 0, cbridge.Unsupported},
		{"metadata down", "http://127.0.0.1:1/metadata", "x", "127.0.0.1", 0, cbridge.Metadata},
		{"etcd down", "127.0.0.1:1", "x", "127.0.0.1", 0, cbridge.Metadata},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := newEngine(engineArgs{Conn: c.conn, Name: c.seg, Host: c.host, Port: c.port, Env: map[string]string{}})
			if err == nil {
				e.destroy()
				t.Fatal("newEngine succeeded")
			}
			if got := cbridge.CodeOf(err); got != c.want {
				t.Fatalf("code %d, want %d (%v)", got, c.want, err)
			}
		})
	}
}

func TestPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := uint64(ln.Addr().(*net.TCPAddr).Port)
	e, err := newEngine(engineArgs{Conn: metaURL(t), Name: "x", Host: "127.0.0.1", Port: port, Env: map[string]string{}})
	if err == nil {
		e.destroy()
		t.Fatalf("bound port %d twice", port)
	}
	if got := cbridge.CodeOf(err); got != cbridge.Socket {
		t.Fatalf("code %d, want Socket (%v)", got, err)
	}
}

func TestInstallTransport(t *testing.T) {
	e := mustEngine(t, metaURL(t), "x")
	if err := e.installTransport("tcp"); err != nil {
		t.Fatal(err)
	}
	if err := e.installTransport("rdma"); cbridge.CodeOf(err) != cbridge.Unsupported {
		t.Fatalf("rdma: %v", err)
	}
	if err := e.installTransport(""); cbridge.CodeOf(err) != cbridge.InvalidArgument {
		t.Fatalf("empty: %v", err)
	}
}

func TestWriteReadBetweenEngines(t *testing.T) {
	meta := metaURL(t)
	a, b := mustEngine(t, meta, "a"), mustEngine(t, meta, "b")
	ra, rb := mapped(t, 1<<20), mapped(t, 1<<20)
	for i := range ra.Bytes() {
		ra.Bytes()[i] = byte(i % 251)
	}
	if err := a.register(ra.Bytes(), "cpu:0", true); err != nil {
		t.Fatal(err)
	}
	if err := b.register(rb.Bytes(), "", true); err != nil {
		t.Fatal(err)
	}
	peer, err := a.openSegment("b")
	if err != nil {
		t.Fatal(err)
	}
	batch, err := a.allocateBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	err = a.submit(batch, []transfer.Request{
		{Op: opcode(1), Source: ra.Addr(), Target: transfer.SegmentID(peer), TargetOffset: rb.Addr(), Length: 1 << 20},
		{Op: opcode(300), Source: ra.Addr(), Target: transfer.SegmentID(peer), TargetOffset: rb.Addr(), Length: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.e.Wait(ctx, transfer.BatchID(batch)); err != nil {
		t.Fatal(err)
	}
	st0, err := a.status(batch, 0)
	if err != nil || st0.Status != transfer.StatusCompleted {
		t.Fatalf("write: %+v, %v", st0, err)
	}
	st1, err := a.status(batch, 1)
	if err != nil || st1.Status != transfer.StatusFailed || !errors.Is(st1.Err, transfer.ErrInvalidArgument) {
		t.Fatalf("opcode 300 must FAIL (not wrap to READ): %+v, %v", st1, err)
	}
	if !bytes.Equal(ra.Bytes(), rb.Bytes()) {
		t.Fatal("bytes differ after the write")
	}
	if _, err := a.status(batch, 2); cbridge.CodeOf(err) != cbridge.InvalidArgument {
		t.Fatalf("task 2: %v", err)
	}
	if _, err := a.status(batch, 1<<63); cbridge.CodeOf(err) != cbridge.InvalidArgument {
		t.Fatalf("task 1<<63: %v", err)
	}
	if err := a.freeBatch(batch); err != nil {
		t.Fatal(err)
	}
	if err := a.freeBatch(batch); cbridge.CodeOf(err) != cbridge.InvalidHandle {
		t.Fatalf("double free: %v", err)
	}
	if _, err := a.allocateBatch(1 << 63); cbridge.CodeOf(err) != cbridge.InvalidArgument {
		t.Fatalf("huge batch: %v", err)
	}
	if _, err := a.openSegment("nobody"); cbridge.CodeOf(err) != cbridge.NotFound {
		t.Fatalf("unknown segment: %v", err)
	}
	if err := a.closeSegment(peer); err != nil {
		t.Fatal(err)
	}
	if err := a.unregister(ra.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := a.unregister(ra.Addr()); cbridge.CodeOf(err) != cbridge.AddressNotRegistered {
		t.Fatalf("double unregister: %v", err)
	}
	if err := b.unregister(rb.Addr()); err != nil {
		t.Fatal(err)
	}
}

func TestDestroyRemovesDescriptor(t *testing.T) {
	meta := metaURL(t)
	a := mustEngine(t, meta, "a")
	b, err := newEngine(engineArgs{Conn: meta, Name: "b", Host: "127.0.0.1", Env: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.openSegment("b"); cbridge.CodeOf(err) != cbridge.NotFound {
		t.Fatalf("open after destroy: %v", err)
	}
}
