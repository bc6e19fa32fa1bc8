package integration

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
	"github.com/mooncake-go/mooncake/core/transfer/transfertest"
)

func newTCP(testing.TB) transfer.Transport { return tcp.New(tcp.Config{}) }

// TestTransferConformanceHTTPMetadata runs the transfer conformance suite
// with engines publishing descriptors through upstream's HTTP metadata
// protocol (a real HTTP server on 127.0.0.1).
func TestTransferConformanceHTTPMetadata(t *testing.T) {
	transfertest.Run(t, func(t testing.TB) metadata.Store {
		srv := httptest.NewServer(httpmeta.NewHandler(memmeta.New()))
		t.Cleanup(srv.Close)
		c, err := httpmeta.NewClient(srv.URL + "/metadata")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}, newTCP)
}

// TestTransferConformanceEtcdMetadata runs the same suite with descriptors
// in a real embedded etcd (skipped under -short).
func TestTransferConformanceEtcdMetadata(t *testing.T) {
	ep := etcdtest.Start(t)
	transfertest.Run(t, func(t testing.TB) metadata.Store {
		s, err := etcdmeta.New(context.Background(), []string{ep})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}, newTCP)
}
