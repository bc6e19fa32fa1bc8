package etcdmeta_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
	"github.com/mooncake-go/mooncake/core/metadata/metadatatest"
)

// rawClient returns a plain etcd client for ep, to inspect and wipe the
// server behind the Store's back.
func rawClient(t testing.TB, ep string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("clientv3.New(%q): %v", ep, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// newStore returns a Store on ep, closed by t.Cleanup.
func newStore(t testing.TB, ep string, opts ...etcdmeta.Option) *etcdmeta.Store {
	t.Helper()
	s, err := etcdmeta.New(t.Context(), []string{ep}, opts...)
	if err != nil {
		t.Fatalf("New(%q): %v", ep, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// emptyStore wipes every key on the server and returns a fresh Store, so the
// conformance cases can share one server.
func emptyStore(t testing.TB, ep string, raw *clientv3.Client) metadata.Store {
	t.Helper()
	if _, err := raw.Delete(t.Context(), "", clientv3.WithPrefix()); err != nil {
		t.Fatalf("wiping etcd: %v", err)
	}
	return newStore(t, ep)
}

func TestConformance(t *testing.T) {
	ep := etcdtest.Start(t)
	raw := rawClient(t, ep)
	metadatatest.RunStoreTests(t, func(t *testing.T) metadata.Store { return emptyStore(t, ep, raw) })
}

func BenchmarkStore(b *testing.B) {
	ep := etcdtest.Start(b)
	raw := rawClient(b, ep)
	metadatatest.RunStoreBenchmarks(b, func(b *testing.B) metadata.Store { return emptyStore(b, ep, raw) })
}

// TestServer groups the cases that need a live server, sharing one.
func TestServer(t *testing.T) {
	ep := etcdtest.Start(t)
	raw := rawClient(t, ep)

	t.Run("NewFromConnString", func(t *testing.T) {
		dead := deadEndpoint(t)
		for _, tc := range []struct {
			conn string
			want []string
		}{
			{ep, []string{ep}},
			{"etcd://" + ep, []string{ep}},
			// One live endpoint of several is enough.
			{"etcd://" + ep + "," + dead, []string{ep, dead}},
		} {
			t.Run(tc.conn, func(t *testing.T) {
				s, err := etcdmeta.NewFromConnString(t.Context(), tc.conn)
				if err != nil {
					t.Fatalf("NewFromConnString(%q): %v", tc.conn, err)
				}
				defer s.Close()
				if got := s.Endpoints(); !slices.Equal(got, tc.want) {
					t.Fatalf("Endpoints() = %q, want %q", got, tc.want)
				}
				key := metadata.SegmentKey("", "conn-"+t.Name())
				if err := s.Put(t.Context(), key, []byte(`{"ok":true}`)); err != nil {
					t.Fatalf("Put: %v", err)
				}
				got, err := s.Get(t.Context(), key)
				if err != nil || string(got) != `{"ok":true}` {
					t.Fatalf("Get = %q, %v", got, err)
				}
			})
		}
	})

	t.Run("KeysVerbatim", func(t *testing.T) {
		// Keys and values are stored as-is, so upstream engines and
		// etcdctl see the same documents.
		s := newStore(t, ep)
		key := metadata.SegmentKey("cluster-a", "node-1")
		if key != "mooncake/cluster-a/ram/node-1" {
			t.Fatalf("SegmentKey = %q", key)
		}
		val := []byte(`{"name":"node-1","protocol":"tcp"}`)
		if err := s.Put(t.Context(), key, val); err != nil {
			t.Fatal(err)
		}
		resp, err := raw.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != key || !bytes.Equal(resp.Kvs[0].Value, val) {
			t.Fatalf("raw etcd Get(%q) = %v", key, resp.Kvs)
		}
		// And a value written by another etcd client reads back.
		if _, err := raw.Put(t.Context(), metadata.RPCMetaKey("", "srv"), `{"rpc_port":15000}`); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(t.Context(), "mooncake/rpc_meta/srv")
		if err != nil || string(got) != `{"rpc_port":15000}` {
			t.Fatalf("Get = %q, %v", got, err)
		}
	})

	t.Run("EmptyValue", func(t *testing.T) {
		s := newStore(t, ep)
		if err := s.Put(t.Context(), "mooncake/ram/empty", nil); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(t.Context(), "mooncake/ram/empty")
		if err != nil {
			t.Fatal(err)
		}
		if got == nil || len(got) != 0 {
			t.Fatalf("Get = %#v, want non-nil empty slice", got)
		}
	})

	t.Run("MaxRequestBytes", func(t *testing.T) {
		s := newStore(t, ep, etcdmeta.WithMaxRequestBytes(1024))
		err := s.Put(t.Context(), "mooncake/ram/big", bytes.Repeat([]byte{'x'}, 2048))
		if err == nil {
			t.Fatal("Put of 2 KiB with a 1 KiB cap succeeded")
		}
		if !strings.Contains(err.Error(), "mooncake/ram/big") {
			t.Errorf("error %q does not name the key", err)
		}
	})

	t.Run("Close", func(t *testing.T) {
		s, err := etcdmeta.New(t.Context(), []string{ep})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := s.Get(t.Context(), "k"); !errors.Is(err, etcdmeta.ErrClosed) {
			t.Errorf("Get after Close: %v, want ErrClosed", err)
		}
		if err := s.Put(t.Context(), "k", nil); !errors.Is(err, etcdmeta.ErrClosed) {
			t.Errorf("Put after Close: %v, want ErrClosed", err)
		}
		if err := s.Delete(t.Context(), "k"); !errors.Is(err, etcdmeta.ErrClosed) {
			t.Errorf("Delete after Close: %v, want ErrClosed", err)
		}
	})

	t.Run("ExpiredContext", func(t *testing.T) {
		// A deadline already in the past on the caller's ctx is reported
		// as such, with the key.
		s := newStore(t, ep, etcdmeta.WithRequestTimeout(time.Second))
		ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
		defer cancel()
		_, err := s.Get(ctx, "mooncake/ram/x")
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "mooncake/ram/x") {
			t.Fatalf("Get with expired ctx: %v", err)
		}
	})
}

// deadEndpoint returns a 127.0.0.1 endpoint nothing listens on.
func deadEndpoint(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return ep
}

// silentEndpoint returns a 127.0.0.1 endpoint that accepts TCP connections
// and never answers, the way a hung or non-etcd peer behaves.
func silentEndpoint(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range conns {
					_ = c.Close()
				}
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// TestUnreachable checks that New fails with ErrUnreachable within the dial
// timeout instead of hanging. It needs no etcd and runs under -short.
func TestUnreachable(t *testing.T) {
	const dialTimeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		ep   func(testing.TB) string
	}{
		{"Refused", deadEndpoint},
		{"Silent", silentEndpoint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := tc.ep(t)
			start := time.Now()
			s, err := etcdmeta.NewFromConnString(t.Context(), "etcd://"+ep, etcdmeta.WithDialTimeout(dialTimeout))
			elapsed := time.Since(start)
			if err == nil {
				s.Close()
				t.Fatalf("NewFromConnString(%q) succeeded", ep)
			}
			t.Logf("error: %v (after %v)", err, elapsed)
			if !errors.Is(err, etcdmeta.ErrUnreachable) {
				t.Errorf("error = %v, want one wrapping ErrUnreachable", err)
			}
			if !strings.Contains(err.Error(), ep) {
				t.Errorf("error %q does not name the endpoint %q", err, ep)
			}
			// Generous slack for -race on a loaded machine; without the
			// probe this would hang until the first call's own timeout.
			if elapsed > dialTimeout+5*time.Second {
				t.Errorf("New took %v, dial timeout %v", elapsed, dialTimeout)
			}
		})
	}
}

func TestNewCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := etcdmeta.New(ctx, []string{deadEndpoint(t)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("New with canceled ctx: %v, want context.Canceled", err)
	}
}

// TestNewRejects covers inputs New and NewFromConnString refuse without I/O.
func TestNewRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func(context.Context) (*etcdmeta.Store, error)
		want error // nil: any error
	}{
		{"NoEndpoints", func(ctx context.Context) (*etcdmeta.Store, error) { return etcdmeta.New(ctx, nil) }, nil},
		{"EmptyEndpoint", func(ctx context.Context) (*etcdmeta.Store, error) {
			return etcdmeta.New(ctx, []string{"127.0.0.1:2379", ""})
		}, nil},
		{"ZeroDialTimeout", func(ctx context.Context) (*etcdmeta.Store, error) {
			return etcdmeta.New(ctx, []string{"127.0.0.1:2379"}, etcdmeta.WithDialTimeout(0))
		}, nil},
		{"NegativeRequestTimeout", func(ctx context.Context) (*etcdmeta.Store, error) {
			return etcdmeta.New(ctx, []string{"127.0.0.1:2379"}, etcdmeta.WithRequestTimeout(-time.Second))
		}, nil},
		{"ZeroMaxRequestBytes", func(ctx context.Context) (*etcdmeta.Store, error) {
			return etcdmeta.New(ctx, []string{"127.0.0.1:2379"}, etcdmeta.WithMaxRequestBytes(0))
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := tc.new(t.Context()); err == nil {
				s.Close()
				t.Fatal("succeeded")
			}
		})
	}
	for _, conn := range []string{
		"", "etcd://", "etcd://h1:2379,", "redis://10.0.0.1:6379", "http://h:8080/metadata",
		"https://h/metadata", metadata.P2PHandshake, "h1", "ftp://h:21",
	} {
		t.Run("ConnString/"+conn, func(t *testing.T) {
			s, err := etcdmeta.NewFromConnString(t.Context(), conn)
			if !errors.Is(err, metadata.ErrInvalidConnString) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("NewFromConnString(%q) error = %v, want metadata.ErrInvalidConnString", conn, err)
			}
		})
	}
}
