package store

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
	"github.com/mooncake-go/mooncake/core/store/server"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// The Go layer behind the exports, tested without crossing into C (the
// exports themselves are tested through libmooncake.so by abi/abitest and
// abi/python/tests).

const mib = 1 << 20

// startMaster runs a master with its HTTP metadata server on loopback.
func startMaster(t *testing.T) *server.Process {
	t.Helper()
	p, err := server.Start(server.ProcessConfig{RPCAddr: "127.0.0.1:0", MetadataAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// args are setup arguments for a client of p on 127.0.0.1.
func args(p *server.Process, segment, local uint64) setupArgs {
	return setupArgs{
		LocalHostname: "127.0.0.1", MetadataServer: p.MetadataURL, GlobalSegmentSize: segment,
		LocalBufferSize: local, Protocol: "tcp", MasterAddr: p.RPCAddr,
	}
}

func mustStore(t *testing.T, a setupArgs) *storeClient {
	t.Helper()
	s, err := newStore(a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.destroy() })
	return s
}

func mapped(t *testing.T, n int) *memory.Region {
	t.Helper()
	r, err := memory.Map(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func wantCode(t *testing.T, what string, err error, want cbridge.Code) {
	t.Helper()
	if got := cbridge.CodeOf(err); got != want {
		t.Fatalf("%s: code %d, want %d (%v)", what, got, want, err)
	}
}

func TestSetupErrors(t *testing.T) {
	p := startMaster(t)
	ok := args(p, 0, mib)
	for _, c := range []struct {
		name string
		edit func(a *setupArgs)
		want cbridge.Code
	}{
		{"empty hostname", func(a *setupArgs) { a.LocalHostname = "" }, cbridge.InvalidArgument},
		{"hostname without host", func(a *setupArgs) { a.LocalHostname = ":123" }, cbridge.InvalidArgument},
		{"hostname bad port", func(a *setupArgs) { a.LocalHostname = "127.0.0.1:99999" }, cbridge.InvalidArgument},
		{"empty metadata", func(a *setupArgs) { a.MetadataServer = "" }, cbridge.InvalidArgument},
		{"garbage metadata", func(a *setupArgs) { a.MetadataServer = "gopher://x" }, cbridge.InvalidArgument},
		{"redis metadata", func(a *setupArgs) { a.MetadataServer = "redis://127.0.0.1:6379" }, cbridge.Unsupported},
		{"metadata down", func(a *setupArgs) { a.MetadataServer = "http://127.0.0.1:1/metadata" }, cbridge.Metadata},
		{"empty master", func(a *setupArgs) { a.MasterAddr = "" }, cbridge.InvalidArgument},
		{"master not host:port", func(a *setupArgs) { a.MasterAddr = "localhost" }, cbridge.InvalidArgument},
		{"etcd master", func(a *setupArgs) { a.MasterAddr = "etcd://127.0.0.1:2379" }, cbridge.Unsupported},
		{"master down", func(a *setupArgs) { a.MasterAddr = "127.0.0.1:1" }, cbridge.StoreRPCFail},
		{"rdma", func(a *setupArgs) { a.Protocol = "rdma" }, cbridge.Unsupported},
		{"huge segment", func(a *setupArgs) { a.GlobalSegmentSize = 1 << 63 }, cbridge.InvalidArgument},
		{"huge buffer", func(a *setupArgs) { a.LocalBufferSize = 1 << 63 }, cbridge.InvalidArgument},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := ok
			c.edit(&a)
			s, err := newStore(a)
			if err == nil {
				s.destroy()
				t.Fatal("newStore succeeded")
			}
			wantCode(t, "newStore", err, c.want)
		})
	}
}

func TestListenAddr(t *testing.T) {
	for _, c := range []struct {
		in, bind, publish string
		port              int
	}{
		{"127.0.0.1", "127.0.0.1", "127.0.0.1", 0},
		{"127.0.0.1:4567", "127.0.0.1", "127.0.0.1", 4567},
		{"node-a", "0.0.0.0", "node-a", 0},
		{"node-a:80", "0.0.0.0", "node-a", 80},
		{"0.0.0.0", "0.0.0.0", "", 0},
		{"::1", "::1", "::1", 0},
		{"[::1]:9", "::1", "::1", 9},
	} {
		bind, port, publish, err := listenAddr(c.in)
		if err != nil || bind != c.bind || port != c.port || publish != c.publish {
			t.Errorf("listenAddr(%q) = %q, %d, %q, %v; want %q, %d, %q", c.in, bind, port, publish, err, c.bind, c.port, c.publish)
		}
	}
	t.Setenv(envBindAddress, "127.0.0.1")
	if bind, _, publish, _ := listenAddr("node-b"); bind != "127.0.0.1" || publish != "node-b" {
		t.Errorf("with %s: bind %q, publish %q", envBindAddress, bind, publish)
	}
}

func TestPutGetBetweenClients(t *testing.T) {
	p := startMaster(t)
	node := mustStore(t, args(p, 64*mib, 0)) // contributes the memory
	a := mustStore(t, args(p, 0, 4*mib))
	b := mustStore(t, args(p, 0, 4*mib))
	if !strings.HasPrefix(a.name, "127.0.0.1:") || a.name == b.name || a.name == node.name {
		t.Fatalf("segment names %q, %q, %q", node.name, a.name, b.name)
	}

	// Copying put and get.
	val := bytes.Repeat([]byte("mooncake"), 1000)
	if err := a.put("copy", val); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2*len(val))
	n, err := b.get("copy", got)
	if err != nil || n != len(val) || !bytes.Equal(got[:n], val) {
		t.Fatalf("get = %d, %v", n, err)
	}
	_, err = b.get("copy", got[:10])
	wantCode(t, "get into a small buffer", err, cbridge.StoreBufferOverflow)
	_, err = b.get("missing", got)
	wantCode(t, "get missing", err, cbridge.StoreObjectNotFound)
	size, err := b.getSize("copy")
	if err != nil || size != uint64(len(val)) {
		t.Fatalf("getSize = %d, %v", size, err)
	}
	_, err = b.getSize("missing")
	wantCode(t, "getSize missing", err, cbridge.StoreObjectNotFound)

	// Zero copy through registered buffers, in batches.
	const blocks, blk = 16, 64 << 10
	ra, rb := mapped(t, blocks*blk), mapped(t, blocks*blk)
	for i := range ra.Bytes() {
		ra.Bytes()[i] = byte(i*13 + i>>16)
	}
	if err := a.register(ra.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := b.register(rb.Bytes()); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "register twice", a.register(ra.Bytes()[blk:2*blk]), cbridge.AddressOverlapped)
	var keys []string
	var srcs, dsts [][]byte
	for i := range blocks {
		keys = append(keys, fmt.Sprintf("blk-%d", i))
		s, err := a.zeroCopy("ptr", uintptr(ra.Addr())+uintptr(i*blk), blk)
		if err != nil {
			t.Fatal(err)
		}
		d, err := b.zeroCopy("ptr", uintptr(rb.Addr())+uintptr(i*blk), blk)
		if err != nil {
			t.Fatal(err)
		}
		srcs, dsts = append(srcs, s), append(dsts, d)
	}
	for i, err := range a.batchPutFrom(keys, srcs) {
		if err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	exist, err := b.batchIsExist(append(keys, "missing"))
	if err != nil || len(exist) != blocks+1 || exist[blocks] {
		t.Fatalf("batchIsExist = %v, %v", exist, err)
	}
	for i := range blocks {
		if !exist[i] {
			t.Fatalf("%s does not exist after its put", keys[i])
		}
	}
	read, errs := b.batchGetInto(keys, dsts)
	for i := range keys {
		if errs[i] != nil || read[i] != blk {
			t.Fatalf("get %s: %d, %v", keys[i], read[i], errs[i])
		}
	}
	if !bytes.Equal(ra.Bytes(), rb.Bytes()) {
		t.Fatal("bytes differ after put_from / get_into")
	}
	// Put of an existing key: success, value unchanged.
	if err := a.batchPutFrom(keys[:1], srcs[1:2])[0]; err != nil {
		t.Fatalf("put existing: %v", err)
	}

	// Ranges outside registered memory are refused before any transfer.
	other := mapped(t, 4096)
	_, err = a.zeroCopy("ptr", uintptr(other.Addr()), 4096)
	wantCode(t, "unregistered range", err, cbridge.AddressNotRegistered)
	_, err = a.zeroCopy("ptr", uintptr(ra.Addr())+blocks*blk-10, 20)
	wantCode(t, "range past the buffer", err, cbridge.AddressNotRegistered)
	_, err = a.zeroCopy("ptr", 0, 20)
	wantCode(t, "NULL", err, cbridge.InvalidArgument)

	// Remove.
	wantCode(t, "remove leased", b.remove(keys[0], false), cbridge.StoreObjectHasLease)
	if err := b.remove(keys[0], true); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "remove again", b.remove(keys[0], true), cbridge.StoreObjectNotFound)

	if err := a.unregister(ra.Addr()); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "unregister again", a.unregister(ra.Addr()), cbridge.AddressNotRegistered)
	_, err = a.zeroCopy("ptr", uintptr(ra.Addr()), 10)
	wantCode(t, "after unregister", err, cbridge.AddressNotRegistered)
}

func TestNoLocalBuffer(t *testing.T) {
	p := startMaster(t)
	s := mustStore(t, args(p, 8*mib, 0))
	wantCode(t, "put without local buffer", s.put("k", []byte("v")), cbridge.StoreBufferOverflow)
}

func TestCheckKey(t *testing.T) {
	wantCode(t, "empty", checkKey(""), cbridge.InvalidArgument)
	wantCode(t, "too long", checkKey(strings.Repeat("k", MaxKeyLen+1)), cbridge.StoreInvalidKey)
	if err := checkKey(strings.Repeat("k", MaxKeyLen)); err != nil {
		t.Fatal(err)
	}
	// Keys are bytes.
	for _, k := range []string{"\xff\xfe", "a\x00b", "\x00"} {
		if err := checkKey(k); err != nil {
			t.Fatalf("checkKey(%q): %v", k, err)
		}
	}
}

func TestDestroyWaitsForCalls(t *testing.T) {
	p := startMaster(t)
	s, err := newStore(args(p, 8*mib, mib))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.acquire(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- s.destroy() }()
	// destroy cannot finish while the call is in flight; new calls are refused.
	var refused error
	for refused == nil {
		if refused = s.acquire(); refused == nil {
			s.release()
		}
	}
	if !errors.Is(refused, transfer.ErrClosed) {
		t.Fatalf("acquire during destroy: %v", refused)
	}
	select {
	case err := <-done:
		t.Fatalf("destroy returned (%v) with a call in flight", err)
	default:
	}
	if err := s.put("k", []byte("v")); err != nil { // the call in flight still works
		t.Fatal(err)
	}
	s.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentPuts(t *testing.T) {
	p := startMaster(t)
	s := mustStore(t, args(p, 32*mib, 4*mib))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				key := fmt.Sprintf("g%d-%d", g, i)
				val := bytes.Repeat([]byte{byte(g), byte(i)}, 1000)
				if err := s.put(key, val); err != nil {
					errs <- err
					return
				}
				buf := make([]byte, len(val))
				if n, err := s.get(key, buf); err != nil || n != len(val) || !bytes.Equal(buf, val) {
					errs <- fmt.Errorf("get %s: %d, %v", key, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestP2PHandshake(t *testing.T) {
	p := startMaster(t)
	a := args(p, 16*mib, mib)
	a.MetadataServer = "P2PHANDSHAKE"
	node := mustStore(t, a)
	c := mustStore(t, a)
	if node.name == c.name || !strings.HasPrefix(node.name, "127.0.0.1:") {
		t.Fatalf("names %q, %q", node.name, c.name)
	}
	// Values land on either segment; each client reads the other's.
	for i := range 8 {
		key := fmt.Sprintf("p2p-%d", i)
		if err := c.put(key, []byte(key)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if n, err := node.get(key, buf); err != nil || string(buf[:n]) != key {
			t.Fatalf("get %s: %q, %v", key, buf[:n], err)
		}
	}
}

func TestEtcdMetadata(t *testing.T) {
	ep := etcdtest.Start(t)
	p := startMaster(t)
	a := args(p, 16*mib, mib)
	a.MetadataServer = "etcd://" + ep
	node := mustStore(t, a)
	c := mustStore(t, args(p, 0, mib)) // HTTP metadata: cannot reach node's segment
	e := mustStore(t, setupArgs{LocalHostname: "127.0.0.1", MetadataServer: ep, LocalBufferSize: mib, MasterAddr: p.RPCAddr})
	if err := e.put("etcd", []byte("value")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if n, err := node.get("etcd", buf); err != nil || string(buf[:n]) != "value" {
		t.Fatalf("get: %q, %v", buf[:n], err)
	}
	_, err := c.get("etcd", buf)
	wantCode(t, "get with the wrong metadata service", err, cbridge.StoreTransferFail)
}

func TestABIVersion(t *testing.T) {
	if storeABIVersion != 1<<16|3 {
		t.Fatalf("MC_STORE_ABI_VERSION = %#x, want 1.3 (1.1: the _n functions; 1.2: the mooncake.store calls; 1.3: mc_store_batch_get_alloc)", storeABIVersion)
	}
}
