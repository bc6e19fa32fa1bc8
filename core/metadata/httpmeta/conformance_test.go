package httpmeta_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/metadata/metadatatest"
)

// serve starts NewHandler(store) mounted at /metadata on a 127.0.0.1
// httptest server and returns a Client for base (relative to the server).
func serve(tb testing.TB, store metadata.Store, base string, opts ...httpmeta.ClientOption) *httpmeta.Client {
	tb.Helper()
	mux := http.NewServeMux()
	mux.Handle("/metadata", httpmeta.NewHandler(store))
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	c, err := httpmeta.NewClient(srv.URL+base, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() }) // runs before srv.Close
	return c
}

func TestConformance(t *testing.T) {
	metadatatest.RunStoreTests(t, func(t *testing.T) metadata.Store {
		return serve(t, memmeta.New(), "/metadata")
	})
}

// TestConformanceBaseWithQuery runs the suite through a base URL that
// already carries a query string, so key= is appended with '&'.
func TestConformanceBaseWithQuery(t *testing.T) {
	metadatatest.RunStoreTests(t, func(t *testing.T) metadata.Store {
		return serve(t, memmeta.New(), "/metadata?cluster=c1")
	})
}

func BenchmarkClient(b *testing.B) {
	metadatatest.RunStoreBenchmarks(b, func(b *testing.B) metadata.Store {
		return serve(b, memmeta.New(), "/metadata")
	})
}
