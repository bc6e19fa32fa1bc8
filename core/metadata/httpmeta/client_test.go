package httpmeta_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
)

func mustClient(t *testing.T, base string, opts ...httpmeta.ClientOption) *httpmeta.Client {
	t.Helper()
	c, err := httpmeta.NewClient(base, opts...)
	if err != nil {
		t.Fatalf("NewClient(%q): %v", base, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestClientKeyURL(t *testing.T) {
	tests := []struct{ base, key, want string }{
		{"http://h:8080/metadata", "mooncake/ram/node-1", "http://h:8080/metadata?key=mooncake%2Fram%2Fnode-1"},
		// Exactly curl_easy_escape: only A-Z a-z 0-9 - . _ ~ pass through.
		{"http://h/m", "a b+c?d&e=f#g%h;i,j:k@l$m!n*o'p(q)r~s_t-u.v", "http://h/m?key=a%20b%2Bc%3Fd%26e%3Df%23g%25h%3Bi%2Cj%3Ak%40l%24m%21n%2Ao%27p%28q%29r~s_t-u.v"},
		{"http://h/m", "键", "http://h/m?key=%E9%94%AE"},
		{"http://h/m?token=abc", "k", "http://h/m?token=abc&key=k"},
		{"http://h/m?", "k", "http://h/m?key=k"},
		{"https://h", "k", "https://h?key=k"},
		{"http://h/path%2Fwith/escape", "k", "http://h/path%2Fwith/escape?key=k"},
	}
	for _, tt := range tests {
		if got := mustClient(t, tt.base).KeyURL(tt.key); got != tt.want {
			t.Errorf("NewClient(%q).KeyURL(%q) =\n  %s\nwant\n  %s", tt.base, tt.key, got, tt.want)
		}
	}
}

// TestClientWire checks what the client puts on the wire: method, encoded
// key, content type and the optional bearer token.
func TestClientWire(t *testing.T) {
	type seen struct{ method, rawQuery, key, contentType, auth, body string }
	var (
		mu  sync.Mutex
		got []seen
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Method, r.URL.RawQuery, r.URL.Query().Get("key"), r.Header.Get("Content-Type"), r.Header.Get("Authorization"), string(b)})
		mu.Unlock()
		_, _ = io.WriteString(w, `{}`)
	}))
	defer srv.Close()

	key := "a b+c/键"
	ctx := t.Context()
	plain := mustClient(t, srv.URL+"/metadata")
	if err := plain.Put(ctx, key, []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	authed := mustClient(t, srv.URL+"/metadata", httpmeta.WithBearerToken("s3cret"))
	if _, err := authed.Get(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := authed.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	want := []seen{
		{"PUT", "key=a%20b%2Bc%2F%E9%94%AE", key, "application/json", "", `{"v":1}`},
		{"GET", "key=a%20b%2Bc%2F%E9%94%AE", key, "", "Bearer s3cret", ""},
		{"DELETE", "key=a%20b%2Bc%2F%E9%94%AE", key, "", "Bearer s3cret", ""},
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("server saw %d requests, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestNewClientErrors(t *testing.T) {
	for _, base := range []string{"", "ftp://h/m", "http://", "/relative/path", "h:8080/m", "http://h/m#frag", "http://h/%zz", "P2PHANDSHAKE"} {
		if _, err := httpmeta.NewClient(base); !errors.Is(err, metadata.ErrInvalidConnString) {
			t.Errorf("NewClient(%q) error = %v, want ErrInvalidConnString", base, err)
		} else if !strings.Contains(err.Error(), base) {
			t.Errorf("NewClient(%q) error %q does not name the URL", base, err)
		}
	}
	for name, opt := range map[string]httpmeta.ClientOption{
		"zero request timeout":     httpmeta.WithRequestTimeout(0),
		"negative connect timeout": httpmeta.WithConnectTimeout(-time.Second),
		"zero max response":        httpmeta.WithMaxResponseBytes(0),
		"nil http client":          httpmeta.WithHTTPClient(nil),
	} {
		if _, err := httpmeta.NewClient("http://h/m", opt); err == nil {
			t.Errorf("NewClient with %s succeeded, want error", name)
		}
	}
}

func TestClientStatusErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("key") {
		case "overloaded":
			http.Error(w, "try later\n", http.StatusServiceUnavailable)
		case "redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		case "404":
			http.Error(w, "metadata not found", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	c := mustClient(t, srv.URL+"/metadata")
	ctx := t.Context()

	check := func(op string, err error, key string, code int) {
		t.Helper()
		se, ok := errors.AsType[*httpmeta.StatusError](err)
		if !ok {
			t.Fatalf("%s(%q) error = %v, want *StatusError", op, key, err)
		}
		if se.StatusCode != code || se.Key != key || se.URL != c.KeyURL(key) || se.Method != op {
			t.Errorf("%s(%q) StatusError = %+v", op, key, se)
		}
		for _, part := range []string{key, c.KeyURL(key), http.StatusText(code)} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("%s(%q) error %q does not mention %q", op, key, err, part)
			}
		}
		if errors.Is(err, metadata.ErrNotFound) {
			t.Errorf("%s(%q) error %v wraps ErrNotFound", op, key, err)
		}
	}
	_, err := c.Get(ctx, "overloaded")
	check("GET", err, "overloaded", 503)
	if se, _ := errors.AsType[*httpmeta.StatusError](err); se != nil && se.Body != "try later" {
		t.Errorf("StatusError.Body = %q, want %q", se.Body, "try later")
	}
	check("PUT", c.Put(ctx, "overloaded", []byte(`{}`)), "overloaded", 503)
	check("DELETE", c.Delete(ctx, "overloaded"), "overloaded", 503)
	// Redirects are not followed (libcurl's default).
	_, err = c.Get(ctx, "redirect")
	check("GET", err, "redirect", 307)
	// 404 means "not found" only for GET and DELETE; a PUT answered 404 hit
	// the wrong path.
	check("PUT", c.Put(ctx, "404", []byte(`{}`)), "404", 404)
	if _, err := c.Get(ctx, "404"); !errors.Is(err, metadata.ErrNotFound) {
		t.Errorf("Get on 404: err = %v, want ErrNotFound", err)
	}
	if err := c.Delete(ctx, "404"); !errors.Is(err, metadata.ErrNotFound) {
		t.Errorf("Delete on 404: err = %v, want ErrNotFound", err)
	}
}

// TestClientLenientDelete: the upstream example server answers 200 to a
// DELETE of an unknown key, and the Client passes that through.
func TestClientLenientDelete(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "metadata deleted")
	}))
	defer srv.Close()
	if err := mustClient(t, srv.URL+"/metadata").Delete(t.Context(), "unknown"); err != nil {
		t.Fatalf("Delete = %v, want nil", err)
	}
}

func TestClientMaxResponseBytes(t *testing.T) {
	store := memmeta.New()
	if err := store.Put(t.Context(), "big", []byte(strings.Repeat("x", 100))); err != nil {
		t.Fatal(err)
	}
	c := serve(t, store, "/metadata", httpmeta.WithMaxResponseBytes(10))
	if _, err := c.Get(t.Context(), "big"); err == nil || !strings.Contains(err.Error(), "limit of 10 bytes") {
		t.Errorf("Get of 100-byte value with 10-byte cap: err = %v", err)
	}
	// A streamed (chunked) response over the cap fails too.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 10 {
			_, _ = io.WriteString(w, "0123456789")
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	c2 := mustClient(t, srv.URL, httpmeta.WithMaxResponseBytes(50))
	if _, err := c2.Get(t.Context(), "k"); err == nil || !strings.Contains(err.Error(), "limit of 50 bytes") {
		t.Errorf("chunked Get over cap: err = %v", err)
	}
	// At the cap is fine.
	c3 := mustClient(t, srv.URL, httpmeta.WithMaxResponseBytes(100))
	if v, err := c3.Get(t.Context(), "k"); err != nil || len(v) != 100 {
		t.Errorf("Get at cap = %d bytes, %v", len(v), err)
	}
}

// silentServer returns a server that reads each request and never answers
// until the client goes away or the test ends.
func silentServer(t *testing.T) *httptest.Server {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Consume the body so the server notices the client hanging up.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs before srv.Close
	return srv
}

// TestClientRequestTimeout: a server that never answers makes the call fail
// once the request timeout passes.
func TestClientRequestTimeout(t *testing.T) {
	srv := silentServer(t)
	c := mustClient(t, srv.URL+"/metadata", httpmeta.WithRequestTimeout(50*time.Millisecond))
	_, err := c.Get(t.Context(), "k")
	if err == nil {
		t.Fatal("Get against a silent server succeeded")
	}
	if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
		t.Errorf("error %v is not a timeout", err)
	}
	if !strings.Contains(err.Error(), `"k"`) || !strings.Contains(err.Error(), srv.URL) {
		t.Errorf("error %q does not name key and URL", err)
	}
}

func TestClientContextDeadline(t *testing.T) {
	srv := silentServer(t)
	c := mustClient(t, srv.URL+"/metadata")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := c.Put(ctx, "k", []byte(`{}`)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Put past ctx deadline: err = %v, want context.DeadlineExceeded", err)
	}
}

func TestClientConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	c := mustClient(t, "http://"+addr+"/metadata")
	_, err = c.Get(t.Context(), "k")
	if err == nil || errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("Get against a closed port: err = %v, want a transport error", err)
	}
	if _, ok := errors.AsType[*net.OpError](err); !ok {
		t.Errorf("error %v does not wrap the *net.OpError", err)
	}
}

// TestClientWithHTTPClient routes requests through a caller's client.
func TestClientWithHTTPClient(t *testing.T) {
	srv := httptest.NewServer(httpmeta.NewHandler(memmeta.New()))
	defer srv.Close()
	c := mustClient(t, srv.URL, httpmeta.WithHTTPClient(srv.Client()))
	if err := c.Put(t.Context(), "k", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(t.Context(), "k"); err != nil || string(v) != `{}` {
		t.Fatalf("Get = %q, %v", v, err)
	}
}
