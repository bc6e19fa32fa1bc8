package metaopen_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/metaopen"
	"github.com/mooncake-go/mooncake/core/metadata/p2pmeta"
	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
	"github.com/mooncake-go/mooncake/core/transfer"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestDefaultURL(t *testing.T) {
	for _, c := range []struct {
		master, want string
		wantErr      bool
	}{
		{master: "10.0.0.1:50051", want: "http://10.0.0.1:8080/metadata"},
		{master: "master-0:50051", want: "http://master-0:8080/metadata"},
		{master: "[::1]:50051", want: "http://[::1]:8080/metadata"},
		{master: "10.0.0.1", wantErr: true},
		{master: "etcd://h1:2379,h2:2379", wantErr: true},
	} {
		t.Run(c.master, func(t *testing.T) {
			got, err := metaopen.DefaultURL(c.master)
			if (err != nil) != c.wantErr || got != c.want {
				t.Fatalf("DefaultURL(%q) = %q, %v; want %q, error %v", c.master, got, err, c.want, c.wantErr)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, conn string
		check      func(t *testing.T, meta metadata.Store, name string)
		wantErr    error
	}{
		{name: "http", conn: "http://127.0.0.1:1/metadata", check: func(t *testing.T, meta metadata.Store, name string) {
			if _, ok := meta.(*httpmeta.Client); !ok || name != "" {
				t.Fatalf("got %T, name %q; want *httpmeta.Client, no name", meta, name)
			}
		}},
		{name: "p2p", conn: metadata.P2PHandshake, check: func(t *testing.T, meta metadata.Store, name string) {
			s, ok := meta.(*p2pmeta.Store)
			if !ok || name != s.Name() || !strings.HasPrefix(name, "127.0.0.1:") {
				t.Fatalf("got %T, name %q; want *p2pmeta.Store named 127.0.0.1:<port>", meta, name)
			}
		}},
		{name: "redis", conn: "redis://127.0.0.1:6379", wantErr: transfer.ErrUnsupported},
		{name: "garbage", conn: "ftp://x", wantErr: metadata.ErrInvalidConnString},
		{name: "empty", conn: "", wantErr: metadata.ErrInvalidConnString},
	} {
		t.Run(c.name, func(t *testing.T) {
			meta, closer, name, err := metaopen.Open(ctx, c.conn, "127.0.0.1", "")
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.conn) {
					t.Fatalf("Open(%q) error %v; want one wrapping %v naming the input", c.conn, err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q): %v", c.conn, err)
			}
			defer closer.Close()
			c.check(t, meta, name)
		})
	}
}

// TestOpenEtcd opens a real etcd through every endpoint-list spelling,
// upstream's ';' separator included.
func TestOpenEtcd(t *testing.T) {
	ep := etcdtest.Start(t)
	for _, conn := range []string{ep, "etcd://" + ep, "etcd://" + ep + ";" + ep, ep + "," + ep} {
		t.Run(conn, func(t *testing.T) {
			meta, closer, name, err := metaopen.Open(context.Background(), conn, "", "")
			if err != nil {
				t.Fatalf("Open(%q): %v", conn, err)
			}
			defer closer.Close()
			if _, ok := meta.(*etcdmeta.Store); !ok || name != "" {
				t.Fatalf("got %T, name %q; want *etcdmeta.Store, no name", meta, name)
			}
		})
	}
}
