package p2pmeta_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/p2pmeta"
	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// quick bounds calls that must fail or succeed fast.
const quick = 5 * time.Second

func listen(t testing.TB, opts ...p2pmeta.Option) *p2pmeta.Store {
	t.Helper()
	s, err := p2pmeta.Listen("", opts...)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), quick)
	t.Cleanup(cancel)
	return ctx
}

// publish stores a descriptor for s the way the engine does.
func publish(t testing.TB, s *p2pmeta.Store, cluster string, bufs int) metadata.SegmentDesc {
	t.Helper()
	d := metadata.SegmentDesc{Name: s.Name(), Protocol: "tcp", TCPDataPort: 4242, TCPProtoVersion: 2}
	for i := range bufs {
		d.Buffers = append(d.Buffers, metadata.BufferDesc{Name: "cpu:0", Addr: uint64(i+1) << 20, Length: 4096})
	}
	if err := metadata.PutSegment(ctxT(t), s, cluster, d); err != nil {
		t.Fatalf("PutSegment: %v", err)
	}
	return d
}

func TestName(t *testing.T) {
	s := listen(t)
	port := s.Addr().(*net.TCPAddr).Port
	if want := "127.0.0.1:" + strconv.Itoa(port); s.Name() != want {
		t.Fatalf("Name = %q, want %q", s.Name(), want)
	}
	h := listen(t, p2pmeta.WithHost("node7.example"))
	if !strings.HasPrefix(h.Name(), "node7.example:") {
		t.Fatalf("Name with WithHost = %q", h.Name())
	}
}

func TestNameIPv6(t *testing.T) {
	s, err := p2pmeta.Listen("[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer s.Close()
	if !strings.HasPrefix(s.Name(), "[::1]:") {
		t.Fatalf("Name = %q, want [::1]:<port>", s.Name())
	}
	if err := p2pmeta.Probe(ctxT(t), s.Name()); err != nil {
		t.Fatalf("probe over IPv6: %v", err)
	}
	a := listen(t)
	want := publish(t, s, "", 1)
	got, err := metadata.GetSegment(ctxT(t), a, "", s.Name())
	if err != nil || got.Name != want.Name {
		t.Fatalf("GetSegment over IPv6 = %+v, %v", got, err)
	}
}

func TestPortRange(t *testing.T) {
	// Find a small range with a free port: bind one, release it, and ask
	// for a range around it.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := probe.Addr().(*net.TCPAddr).Port
	probe.Close()
	lo, hi := max(1024, free-2), min(65535, free+2)
	s := listen(t, p2pmeta.WithPortRange(lo, hi), p2pmeta.WithRand(rand.New(rand.NewPCG(1, 2))))
	if p := s.Addr().(*net.TCPAddr).Port; p < lo || p > hi {
		t.Fatalf("bound port %d outside [%d, %d]", p, lo, hi)
	}
	// The whole range taken: a one-port range on s's port fails.
	p := s.Addr().(*net.TCPAddr).Port
	if _, err := p2pmeta.Listen("127.0.0.1:0", p2pmeta.WithPortRange(p, p)); err == nil {
		t.Fatal("Listen on a taken one-port range succeeded")
	}
}

func TestListenOptionErrors(t *testing.T) {
	for name, opt := range map[string]p2pmeta.Option{
		"frame too small": p2pmeta.WithMaxFrame(1000),
		"frame too large": p2pmeta.WithMaxFrame(p2pmeta.MaxMaxFrame + 1),
		"zero connect":    p2pmeta.WithConnectTimeout(0),
		"negative io":     p2pmeta.WithIOTimeout(-1),
		"zero server":     p2pmeta.WithServerTimeout(0),
		"inverted range":  p2pmeta.WithPortRange(17000, 15000),
		"range too high":  p2pmeta.WithPortRange(65000, 70000),
	} {
		t.Run(name, func(t *testing.T) {
			s, err := p2pmeta.Listen("", opt)
			if !errors.Is(err, p2pmeta.ErrInvalidOption) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("err = %v, want ErrInvalidOption", err)
			}
		})
	}
	if _, err := p2pmeta.Listen("127.0.0.1:4000", p2pmeta.WithPortRange(p2pmeta.MinRPCPort, p2pmeta.MaxRPCPort)); !errors.Is(err, p2pmeta.ErrInvalidOption) {
		t.Fatalf("port and range: err = %v", err)
	}
}

func TestExchangeDescriptors(t *testing.T) {
	for _, cluster := range []string{"", "c1"} {
		t.Run("cluster="+cluster, func(t *testing.T) {
			a, b := listen(t), listen(t)
			ctx := ctxT(t)
			// Before b published anything: not found, naming the key.
			key := metadata.SegmentKey(cluster, b.Name())
			_, err := a.Get(ctx, key)
			if !errors.Is(err, metadata.ErrNotFound) || !strings.Contains(err.Error(), key) {
				t.Fatalf("Get before publish = %v, want ErrNotFound naming %q", err, key)
			}
			wantB := publish(t, b, cluster, 3)
			wantA := publish(t, a, cluster, 1)
			gotB, err := metadata.GetSegment(ctx, a, cluster, b.Name())
			if err != nil {
				t.Fatalf("a gets b: %v", err)
			}
			gotA, err := metadata.GetSegment(ctx, b, cluster, a.Name())
			if err != nil {
				t.Fatalf("b gets a: %v", err)
			}
			if fmt.Sprint(*gotB) != fmt.Sprint(wantB) || fmt.Sprint(*gotA) != fmt.Sprint(wantA) {
				t.Fatalf("descriptors differ:\n got %+v / %+v\nwant %+v / %+v", *gotB, *gotA, wantB, wantA)
			}
			// Updates are seen at once: nothing is cached.
			wantB = publish(t, b, cluster, 5)
			if gotB, err = metadata.GetSegment(ctx, a, cluster, b.Name()); err != nil || len(gotB.Buffers) != 5 {
				t.Fatalf("after update: %+v, %v", gotB, err)
			}
			// The peer removed its descriptor (engine closed): not found.
			if err := metadata.DeleteSegment(ctx, b, cluster, b.Name()); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Get(ctx, key); !errors.Is(err, metadata.ErrNotFound) {
				t.Fatalf("Get after peer delete = %v, want ErrNotFound", err)
			}
		})
	}
}

func TestPeerRPCMetaWithoutIO(t *testing.T) {
	a := listen(t)
	cases := []struct {
		name string
		want metadata.RPCMeta
	}{
		{"10.1.2.3:4567", metadata.RPCMeta{IPOrHostName: "10.1.2.3", RPCPort: 4567}},
		{"[fe80::1]:15001", metadata.RPCMeta{IPOrHostName: "fe80::1", RPCPort: 15001}},
		{"node-9:16000", metadata.RPCMeta{IPOrHostName: "node-9", RPCPort: 16000}},
	}
	for _, c := range cases {
		got, err := metadata.GetRPCMeta(ctxT(t), a, "cl", c.name)
		if err != nil || got != c.want {
			t.Errorf("GetRPCMeta(%q) = %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

func TestOwnKeys(t *testing.T) {
	s := listen(t)
	ctx := ctxT(t)
	rpc := metadata.RPCMeta{IPOrHostName: "127.0.0.1", RPCPort: 9999}
	if err := metadata.PutRPCMeta(ctx, s, "", s.Name(), rpc); err != nil {
		t.Fatal(err)
	}
	if got, err := metadata.GetRPCMeta(ctx, s, "", s.Name()); err != nil || got != rpc {
		t.Fatalf("own rpc_meta = %+v, %v (stored, not derived)", got, err)
	}
	d := publish(t, s, "", 2)
	if got, err := metadata.GetSegment(ctx, s, "", s.Name()); err != nil || got.Name != d.Name || len(got.Buffers) != 2 {
		t.Fatalf("own segment = %+v, %v", got, err)
	}
	// Values are copied in and out.
	key := metadata.SegmentKey("", s.Name())
	v := []byte(`{"name":"x"}`)
	if err := s.Put(ctx, key, v); err != nil {
		t.Fatal(err)
	}
	v[2] = 'N'
	got, _ := s.Get(ctx, key)
	got[0] = '['
	if again, _ := s.Get(ctx, key); string(again) != `{"name":"x"}` {
		t.Fatalf("stored value aliased: %q", again)
	}
	for _, k := range []string{key, metadata.RPCMetaKey("", s.Name())} {
		if err := s.Delete(ctx, k); err != nil {
			t.Fatalf("Delete(%q): %v", k, err)
		}
		if err := s.Delete(ctx, k); !errors.Is(err, metadata.ErrNotFound) {
			t.Fatalf("second Delete(%q) = %v, want ErrNotFound", k, err)
		}
		if _, err := s.Get(ctx, k); !errors.Is(err, metadata.ErrNotFound) {
			t.Fatalf("Get(%q) after delete = %v, want ErrNotFound", k, err)
		}
	}
}

func TestPeerKeysReadOnly(t *testing.T) {
	s := listen(t)
	ctx := ctxT(t)
	for _, key := range []string{metadata.SegmentKey("", "10.0.0.1:15000"), metadata.RPCMetaKey("c", "10.0.0.1:15000")} {
		err := s.Put(ctx, key, []byte("{}"))
		if !errors.Is(err, p2pmeta.ErrPeerKey) || !strings.Contains(err.Error(), "p2p: cannot write peer key") || !strings.Contains(err.Error(), key) {
			t.Errorf("Put(%q) = %v, want ErrPeerKey naming the key", key, err)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, p2pmeta.ErrPeerKey) {
			t.Errorf("Delete(%q) = %v, want ErrPeerKey", key, err)
		}
	}
}

func TestBadKeys(t *testing.T) {
	s := listen(t)
	ctx := ctxT(t)
	keys := []string{
		"",
		"other/ram/1.2.3.4:5",
		"mooncake/",
		"mooncake/ram/",
		"mooncake/ram/noport",
		"mooncake/ram/host:",
		"mooncake/ram/host:0",
		"mooncake/ram/host:65536",
		"mooncake/ram/host:http",
		"mooncake/ram/:80",
		"mooncake/ram/fe80::1:80",
		"mooncake/nvmeof/1.2.3.4:5",
		"mooncake/1.2.3.4:5",
	}
	for _, k := range keys {
		if _, err := s.Get(ctx, k); !errors.Is(err, metadata.ErrInvalidKey) {
			t.Errorf("Get(%q) = %v, want ErrInvalidKey", k, err)
		}
		if err := s.Put(ctx, k, []byte("{}")); !errors.Is(err, metadata.ErrInvalidKey) {
			t.Errorf("Put(%q) = %v, want ErrInvalidKey", k, err)
		}
		if err := s.Delete(ctx, k); !errors.Is(err, metadata.ErrInvalidKey) {
			t.Errorf("Delete(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
	for _, addr := range []string{"", "nohost", "h:0", "[::1]"} {
		if err := p2pmeta.Probe(ctx, addr); !errors.Is(err, metadata.ErrInvalidKey) {
			t.Errorf("Probe(%q) = %v, want ErrInvalidKey", addr, err)
		}
		if err := p2pmeta.SendNotify(ctx, addr, "n", "m"); !errors.Is(err, metadata.ErrInvalidKey) {
			t.Errorf("SendNotify(%q) = %v, want ErrInvalidKey", addr, err)
		}
	}
}

func TestProbe(t *testing.T) {
	s := listen(t)
	if err := p2pmeta.Probe(ctxT(t), s.Name()); err != nil {
		t.Fatal(err)
	}
}

func TestNotify(t *testing.T) {
	s := listen(t)
	ctx := ctxT(t)
	if got := s.Notifies(); len(got) != 0 {
		t.Fatalf("fresh store has notifies %v", got)
	}
	want := []p2pmeta.Notify{{Name: "10.0.0.1:1", Msg: "first"}, {Name: "10.0.0.2:2", Msg: `{"json":"inside"}`}}
	for _, n := range want {
		if err := p2pmeta.SendNotify(ctx, s.Name(), n.Name, n.Msg); err != nil {
			t.Fatalf("SendNotify: %v", err)
		}
	}
	if got := s.Notifies(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Notifies = %v, want %v", got, want)
	}
	if got := s.Notifies(); len(got) != 0 {
		t.Fatalf("Notifies did not drain: %v", got)
	}
}

// freePort returns a loopback port with nothing listening.
func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestUnreachablePeer(t *testing.T) {
	s := listen(t)
	publish(t, s, "", 1)
	t.Run("refused", func(t *testing.T) {
		addr := freePort(t)
		start := time.Now()
		_, err := s.Get(ctxT(t), metadata.SegmentKey("", addr))
		if !errors.Is(err, p2pmeta.ErrUnreachable) || !errors.Is(err, metadata.ErrNotFound) || !strings.Contains(err.Error(), addr) {
			t.Fatalf("err = %v, want ErrUnreachable and ErrNotFound naming %s", err, addr)
		}
		if d := time.Since(start); d > quick/2 {
			t.Fatalf("refused connect took %v", d)
		}
		if err := p2pmeta.Probe(ctxT(t), addr); !errors.Is(err, p2pmeta.ErrUnreachable) {
			t.Fatalf("Probe = %v, want ErrUnreachable", err)
		}
	})
	t.Run("connect timeout", func(t *testing.T) {
		// TEST-NET-1: never routed; either the connect times out or the
		// host has no route at all. Both must fail quickly.
		fast := listen(t, p2pmeta.WithConnectTimeout(200*time.Millisecond))
		start := time.Now()
		_, err := fast.Get(context.Background(), metadata.SegmentKey("", "192.0.2.1:15000"))
		if !errors.Is(err, p2pmeta.ErrUnreachable) {
			t.Fatalf("err = %v, want ErrUnreachable", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("connect timeout of 200ms took %v", d)
		}
	})
}

// silentPeer accepts connections and never answers; it returns its address.
func silentPeer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

func TestSilentPeerHonoursDeadlines(t *testing.T) {
	addr := silentPeer(t)
	key := metadata.SegmentKey("", addr)
	t.Run("ctx deadline", func(t *testing.T) {
		s := listen(t)
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		_, err := s.Get(ctx, key)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want context.DeadlineExceeded", err)
		}
	})
	t.Run("ctx cancel", func(t *testing.T) {
		s := listen(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, err := s.Get(ctx, key); done <- err }()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
		case <-time.After(quick):
			t.Fatal("Get ignored cancellation")
		}
	})
	t.Run("io timeout", func(t *testing.T) {
		s := listen(t, p2pmeta.WithIOTimeout(150*time.Millisecond))
		_, err := s.Get(context.Background(), key)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("err = %v, want a timeout", err)
		}
	})
	t.Run("close aborts", func(t *testing.T) {
		s, err := p2pmeta.Listen("")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := s.Get(context.Background(), key); done <- err }()
		// Close races with the Get: either it aborts the exchange or the Get
		// starts after Close; both fail with ErrClosed.
		s.Close()
		select {
		case err := <-done:
			if !errors.Is(err, p2pmeta.ErrClosed) {
				t.Fatalf("err = %v, want ErrClosed", err)
			}
		case <-time.After(quick):
			t.Fatal("Close did not abort Get")
		}
	})
}

func TestCanceledContext(t *testing.T) {
	s := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	own := metadata.SegmentKey("", s.Name())
	if err := s.Put(ctx, own, []byte("{}")); !errors.Is(err, context.Canceled) {
		t.Errorf("Put = %v", err)
	}
	if _, err := s.Get(ctx, own); !errors.Is(err, context.Canceled) {
		t.Errorf("Get = %v", err)
	}
	if err := s.Delete(ctx, own); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete = %v", err)
	}
	if err := p2pmeta.Probe(ctx, s.Name()); !errors.Is(err, context.Canceled) {
		t.Errorf("Probe = %v", err)
	}
}

func TestClose(t *testing.T) {
	a, b := listen(t), listen(t)
	ctx := ctxT(t)
	publish(t, a, "", 1)
	publish(t, b, "", 1)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := a.Get(ctx, metadata.SegmentKey("", b.Name())); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("Get from a closed peer = %v, want ErrNotFound (refused)", err)
	}
	if _, err := b.Get(ctx, metadata.SegmentKey("", a.Name())); !errors.Is(err, p2pmeta.ErrClosed) {
		t.Fatalf("peer Get on a closed store = %v, want ErrClosed", err)
	}
	// Own keys outlive Close: an engine closed after its store still
	// deletes them.
	if err := metadata.DeleteSegment(ctx, b, "", b.Name()); err != nil {
		t.Fatalf("own delete after Close: %v", err)
	}
}

// rawExchange sends raw bytes to addr and returns everything the server
// writes until it closes the connection.
func rawExchange(t *testing.T, addr string, in []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(quick))
	if _, err := c.Write(in); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	out, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		// A server closing with unread input resets the connection.
		t.Fatalf("read: %v", err)
	}
	return out
}

func TestServerWire(t *testing.T) {
	s := listen(t)
	d := publish(t, s, "", 1)
	frame := func(typ p2pmeta.FrameType, p string) []byte { return p2pmeta.AppendFrame(nil, typ, []byte(p)) }
	cases := []struct {
		name     string
		in       []byte
		wantType p2pmeta.FrameType
		check    func(t *testing.T, payload []byte)
		closed   bool // no reply at all
	}{
		{name: "metadata", in: frame(p2pmeta.FrameMetadata, `{"name":"peer"}`), wantType: p2pmeta.FrameMetadata, check: func(t *testing.T, p []byte) {
			var got metadata.SegmentDesc
			if err := json.Unmarshal(p, &got); err != nil || got.Name != d.Name {
				t.Fatalf("reply %s: %v", p, err)
			}
		}},
		{name: "probe", in: frame(p2pmeta.FrameProbe, `{}`), wantType: p2pmeta.FrameProbe, check: func(t *testing.T, p []byte) {
			if string(p) != `{"status":"success"}` {
				t.Fatalf("reply %s", p)
			}
		}},
		{name: "notify", in: frame(p2pmeta.FrameNotify, `{"name":"x","notify_msg":"y"}`), wantType: p2pmeta.FrameNotify, check: func(t *testing.T, p []byte) {
			if !bytes.Contains(p, []byte(`"notify_msg":"success"`)) {
				t.Fatalf("reply %s", p)
			}
		}},
		{name: "connection", in: frame(p2pmeta.FrameConnection, `{"local_nic_path":"a@b"}`), wantType: p2pmeta.FrameConnection, check: wantReplyMsg},
		{name: "legacy", in: frame(p2pmeta.FrameLegacy, `{"local_nic_path":"a@b"}`), wantType: p2pmeta.FrameLegacy, check: wantReplyMsg},
		{name: "oversize", in: header(1 << 30), closed: true},
		{name: "unknown type", in: frame(7, `{}`), closed: true},
		{name: "not json", in: frame(p2pmeta.FrameProbe, `{"x"`), closed: true},
		{name: "http", in: []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), closed: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := rawExchange(t, s.Name(), c.in)
			if c.closed {
				if len(out) != 0 {
					t.Fatalf("got reply %q, want the connection closed", out)
				}
				return
			}
			typ, p, err := p2pmeta.ReadFrame(bytes.NewReader(out), p2pmeta.DefaultMaxFrame)
			if err != nil || typ != c.wantType {
				t.Fatalf("reply %v %v, want type %v", typ, err, c.wantType)
			}
			c.check(t, p)
		})
	}
	// Several frames on one connection are answered in order.
	in := append(frame(p2pmeta.FrameProbe, `{}`), frame(p2pmeta.FrameProbe, `{}`)...)
	r := bytes.NewReader(rawExchange(t, s.Name(), in))
	for i := range 2 {
		if typ, _, err := p2pmeta.ReadFrame(r, p2pmeta.DefaultMaxFrame); err != nil || typ != p2pmeta.FrameProbe {
			t.Fatalf("reply %d: %v %v", i, typ, err)
		}
	}
	// The notify sent above was queued.
	if n := s.Notifies(); len(n) != 1 || n[0] != (p2pmeta.Notify{Name: "x", Msg: "y"}) {
		t.Fatalf("Notifies = %v", n)
	}
}

func wantReplyMsg(t *testing.T, p []byte) {
	var r struct {
		ReplyMsg string `json:"reply_msg"`
	}
	if err := json.Unmarshal(p, &r); err != nil || r.ReplyMsg == "" {
		t.Fatalf("reply %s: want a non-empty reply_msg (%v)", p, err)
	}
}

// A peer answering with the wrong frame type or a non-object is rejected.
func TestBadReplies(t *testing.T) {
	cases := []struct {
		name  string
		reply []byte
		want  error
	}{
		{"wrong type", p2pmeta.AppendFrame(nil, p2pmeta.FrameProbe, []byte(`{"status":"success"}`)), p2pmeta.ErrBadFrame},
		{"array", p2pmeta.AppendFrame(nil, p2pmeta.FrameMetadata, []byte(`[1]`)), p2pmeta.ErrBadFrame},
		{"null", p2pmeta.AppendFrame(nil, p2pmeta.FrameMetadata, []byte("null\n")), metadata.ErrNotFound},
		{"empty object", p2pmeta.AppendFrame(nil, p2pmeta.FrameMetadata, []byte("{}\n")), metadata.ErrNotFound},
		{"oversize", header(1 << 40), p2pmeta.ErrFrameTooLarge},
	}
	s := listen(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			addr := fakePeer(t, c.reply)
			_, err := s.Get(ctxT(t), metadata.SegmentKey("", addr))
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
}

// fakePeer answers one connection's first frame with reply (raw bytes).
func fakePeer(t *testing.T, reply []byte) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(quick))
		if _, _, err := p2pmeta.ReadFrame(c, p2pmeta.DefaultMaxFrame); err != nil {
			return
		}
		c.Write(reply)
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func TestConcurrentGets(t *testing.T) {
	a, b := listen(t), listen(t)
	publish(t, b, "", 4)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%4 == 0 {
				publish(t, a, "", i)
			}
			d, err := metadata.GetSegment(ctx, a, "", b.Name())
			if err == nil && len(d.Buffers) != 4 {
				err = fmt.Errorf("got %d buffers", len(d.Buffers))
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
