package httpmeta_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
)

// rawDo sends one request with a plain http.Client (not httpmeta.Client) and
// returns status, body and headers.
func rawDo(t *testing.T, method, url string, body io.Reader, contentLength int64) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentLength != 0 {
		req.ContentLength = contentLength
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

// chunked hides the length of r so the request goes out chunked.
type chunked struct{ io.Reader }

// failingStore fails every call with a non-sentinel error.
type failingStore struct{}

var errBackend = errors.New("backend down")

func (failingStore) Get(context.Context, string) ([]byte, error) { return nil, errBackend }
func (failingStore) Put(context.Context, string, []byte) error   { return errBackend }
func (failingStore) Delete(context.Context, string) error        { return errBackend }

func TestHandler(t *testing.T) {
	const limit = 16
	store := memmeta.New()
	srv := httptest.NewServer(httpmeta.NewHandler(store, httpmeta.WithMaxBodyBytes(limit)))
	defer srv.Close()
	failing := httptest.NewServer(httpmeta.NewHandler(failingStore{}))
	defer failing.Close()

	tests := []struct {
		name       string
		server     *httptest.Server
		method     string
		target     string // path and query
		body       io.Reader
		length     int64 // request ContentLength override; -1 = unknown
		wantStatus int
		wantBody   string // substring of the response body
		wantAllow  bool
	}{
		// Upstream protocol, happy path, in order.
		{name: "put", method: "PUT", target: "/metadata?key=mooncake%2Fram%2Fn1", body: strings.NewReader(`{"n":1}`), wantStatus: 200, wantBody: "metadata updated"},
		{name: "get", method: "GET", target: "/metadata?key=mooncake%2Fram%2Fn1", wantStatus: 200, wantBody: `{"n":1}`},
		{name: "any mount path", method: "GET", target: "/some/other/path?key=mooncake/ram/n1", wantStatus: 200, wantBody: `{"n":1}`},
		{name: "delete", method: "DELETE", target: "/metadata?key=mooncake%2Fram%2Fn1", wantStatus: 200, wantBody: "metadata deleted"},
		{name: "get deleted", method: "GET", target: "/metadata?key=mooncake%2Fram%2Fn1", wantStatus: 404, wantBody: "metadata not found"},
		{name: "get unknown", method: "GET", target: "/metadata?key=nope", wantStatus: 404, wantBody: "metadata not found"},
		{name: "delete unknown", method: "DELETE", target: "/metadata?key=nope", wantStatus: 404, wantBody: "metadata not found"},
		{name: "put empty body", method: "PUT", target: "/metadata?key=empty", body: strings.NewReader(""), wantStatus: 200, wantBody: "metadata updated"},
		{name: "put at limit", method: "PUT", target: "/metadata?key=at-limit", body: strings.NewReader(strings.Repeat("x", limit)), wantStatus: 200, wantBody: "metadata updated"},

		// 400: no usable key.
		{name: "get without key", method: "GET", target: "/metadata", wantStatus: 400, wantBody: "missing key"},
		{name: "get with empty key", method: "GET", target: "/metadata?key=", wantStatus: 400, wantBody: "missing key"},
		{name: "get with other params only", method: "GET", target: "/metadata?k=x", wantStatus: 400, wantBody: "missing key"},
		{name: "put without key", method: "PUT", target: "/metadata", body: strings.NewReader(`{}`), wantStatus: 400, wantBody: "missing key"},
		{name: "delete without key", method: "DELETE", target: "/metadata", wantStatus: 400, wantBody: "missing key"},
		{name: "malformed query", method: "GET", target: "/metadata?key=%zz", wantStatus: 400, wantBody: "invalid query"},

		// 405: outside the protocol.
		{name: "post", method: "POST", target: "/metadata?key=k", body: strings.NewReader(`{}`), wantStatus: 405, wantBody: "POST not allowed", wantAllow: true},
		{name: "patch", method: "PATCH", target: "/metadata?key=k", body: strings.NewReader(`{}`), wantStatus: 405, wantAllow: true},
		{name: "head", method: "HEAD", target: "/metadata?key=k", wantStatus: 405, wantAllow: true},
		{name: "options without key", method: "OPTIONS", target: "/metadata", wantStatus: 405, wantAllow: true},

		// 413: body over the cap, declared or streamed.
		{name: "put over limit", method: "PUT", target: "/metadata?key=big", body: strings.NewReader(strings.Repeat("x", limit+1)), wantStatus: 413, wantBody: "limit is 16 bytes"},
		{name: "put over limit chunked", method: "PUT", target: "/metadata?key=big", body: chunked{strings.NewReader(strings.Repeat("x", 10*limit))}, length: -1, wantStatus: 413, wantBody: "limit is 16 bytes"},
		{name: "oversized put stored nothing", method: "GET", target: "/metadata?key=big", wantStatus: 404},

		// 500: the store failed for another reason.
		{name: "store error get", server: failing, method: "GET", target: "/metadata?key=k", wantStatus: 500, wantBody: "backend down"},
		{name: "store error put", server: failing, method: "PUT", target: "/metadata?key=k", body: strings.NewReader(`{}`), wantStatus: 500, wantBody: "backend down"},
		{name: "store error delete", server: failing, method: "DELETE", target: "/metadata?key=k", wantStatus: 500, wantBody: "backend down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := srv
			if tt.server != nil {
				s = tt.server
			}
			status, body, hdr := rawDo(t, tt.method, s.URL+tt.target, tt.body, tt.length)
			if status != tt.wantStatus {
				t.Fatalf("%s %s: status %d (%q), want %d", tt.method, tt.target, status, body, tt.wantStatus)
			}
			if !strings.Contains(body, tt.wantBody) {
				t.Errorf("%s %s: body %q, want it to contain %q", tt.method, tt.target, body, tt.wantBody)
			}
			if tt.wantAllow && hdr.Get("Allow") != "GET, PUT, DELETE" {
				t.Errorf("Allow header = %q, want %q", hdr.Get("Allow"), "GET, PUT, DELETE")
			}
			if tt.method == "GET" && status == 200 && hdr.Get("Content-Type") != "application/json; charset=utf-8" {
				t.Errorf("Content-Type = %q, want upstream's application/json; charset=utf-8", hdr.Get("Content-Type"))
			}
		})
	}
}

// TestHandlerKeyDecoding checks that query decoding keeps '+' (space in form
// encoding) and %2B (a literal plus) apart, as every upstream server does.
func TestHandlerKeyDecoding(t *testing.T) {
	store := memmeta.New()
	srv := httptest.NewServer(httpmeta.NewHandler(store))
	defer srv.Close()
	for target, key := range map[string]string{
		"/m?key=a+b":             "a b",
		"/m?key=a%2Bb":           "a+b",
		"/m?key=a%20c":           "a c",
		"/m?key=%E9%94%AE/x":     "键/x",
		"/m?key=first&key=other": "first",
		"/m?x=1&key=k%26y%3D2":   "k&y=2",
	} {
		if status, body, _ := rawDo(t, "PUT", srv.URL+target, strings.NewReader(`{}`), 0); status != 200 {
			t.Fatalf("PUT %s: %d %q", target, status, body)
		}
		if _, err := store.Get(t.Context(), key); err != nil {
			t.Errorf("PUT %s: key %q not stored: %v", target, key, err)
		}
	}
}

func TestHandlerDefaultLimit(t *testing.T) {
	srv := httptest.NewServer(httpmeta.NewHandler(memmeta.New(), httpmeta.WithMaxBodyBytes(0)))
	defer srv.Close()
	// Raw wire: declare a length just over the default cap and send no body.
	// The handler must answer 413 from the header alone, before reading (so
	// the test never allocates 64 MiB).
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := fmt.Sprintf("PUT /metadata?key=k HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		httpmeta.DefaultMaxValueBytes+1)
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d (%q), want 413", resp.StatusCode, body)
	}
	if want := fmt.Sprintf("limit is %d bytes", httpmeta.DefaultMaxValueBytes); !strings.Contains(string(body), want) {
		t.Errorf("body %q, want it to contain %q", body, want)
	}
}

func TestNewHandlerNilStorePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewHandler(nil) did not panic")
		}
	}()
	httpmeta.NewHandler(nil)
}

var _ metadata.Store = failingStore{}
