package httpmeta_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
)

// Serve the HTTP metadata protocol from an in-memory store at /metadata and
// publish a segment descriptor through the client, as an engine started with
// metadata_server="http://<host>/metadata" would.
func ExampleNewHandler() {
	mux := http.NewServeMux()
	mux.Handle("/metadata", httpmeta.NewHandler(memmeta.New()))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	client, err := httpmeta.NewClient(srv.URL + "/metadata")
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx := context.Background()
	desc := metadata.SegmentDesc{Name: "node-1", Protocol: "tcp", TCPDataPort: 15001}
	if err := metadata.PutSegment(ctx, client, "", desc); err != nil {
		panic(err)
	}
	got, err := metadata.GetSegment(ctx, client, "", "node-1")
	fmt.Println(got.Name, got.Protocol, got.TCPDataPort, err)

	err = metadata.DeleteSegment(ctx, client, "", "node-1")
	fmt.Println(err)
	_, err = metadata.GetSegment(ctx, client, "", "node-1")
	fmt.Println(errors.Is(err, metadata.ErrNotFound))
	// Output:
	// node-1 tcp 15001 <nil>
	// <nil>
	// true
}
