package httpmeta_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/testutil/wiretap"
)

// fzMaxBody is the fuzzed handler's PUT limit, small so that fuzzed
// requests reach the 413 paths.
const fzMaxBody = 64

// recordHTTP runs real clients against a handler through a wiretap: the
// package's Client (keep-alive: one connection carries several requests),
// a chunked PUT and a request outside the protocol.
func recordHTTP(tb testing.TB) []wiretap.Recording {
	srv := httptest.NewServer(httpmeta.NewHandler(memmeta.New(), httpmeta.WithMaxBodyBytes(fzMaxBody)))
	defer srv.Close()
	tap, err := wiretap.Start(srv.Listener.Addr().String())
	require.NoError(tb, err)
	c, err := httpmeta.NewClient("http://" + tap.Addr() + "/metadata")
	require.NoError(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, key := range []string{"mooncake/ram/node-1", "a+b c&d=e%f", "\xff\x00key"} {
		require.NoError(tb, c.Put(ctx, key, []byte(`{"name":"node-1","buffers":[]}`)))
		_, err := c.Get(ctx, key)
		require.NoError(tb, err)
	}
	require.NoError(tb, c.Delete(ctx, "a+b c&d=e%f"))
	_, err = c.Get(ctx, "absent")
	require.ErrorIs(tb, err, metadata.ErrNotFound)
	require.Error(tb, c.Put(ctx, "big", bytes.Repeat([]byte("x"), fzMaxBody+1)))
	c.Close()

	// A chunked PUT and a POST, with net/http's own client.
	hc := &http.Client{Transport: &http.Transport{}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+tap.Addr()+"/metadata?key=chunked", io.MultiReader(strings.NewReader(`{"a":`), strings.NewReader(`1}`)))
	require.NoError(tb, err)
	resp, err := hc.Do(req)
	require.NoError(tb, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp, err = hc.Post("http://"+tap.Addr()+"/metadata?key=x", "text/plain", strings.NewReader("y"))
	require.NoError(tb, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	hc.CloseIdleConnections()
	return tap.Close()
}

// replayBody is a request body read ahead: its bytes, then the error the
// read ended with (nil for a clean end).
type replayBody struct {
	r   *bytes.Reader
	err error
}

func (b *replayBody) Read(p []byte) (int, error) {
	n, _ := b.r.Read(p)
	if n == 0 && len(p) > 0 {
		if b.err != nil {
			return 0, b.err
		}
		return 0, io.EOF
	}
	return n, nil
}

func (b *replayBody) Close() error { return nil }

// expectHTTP is the reference handler: the status of req (body read
// ahead: body, readErr) against the values in model, which it updates.
func expectHTTP(req *http.Request, body []byte, readErr error, model map[string][]byte) int {
	switch req.Method {
	case http.MethodGet, http.MethodPut, http.MethodDelete:
	default:
		return http.StatusMethodNotAllowed
	}
	q, err := url.ParseQuery(req.URL.RawQuery)
	key := q.Get("key")
	if err != nil || key == "" {
		return http.StatusBadRequest
	}
	switch req.Method {
	case http.MethodGet:
		if _, ok := model[key]; !ok {
			return http.StatusNotFound
		}
	case http.MethodPut:
		switch {
		case req.ContentLength > fzMaxBody || len(body) > fzMaxBody:
			return http.StatusRequestEntityTooLarge
		case readErr != nil:
			return http.StatusBadRequest
		}
		model[key] = bytes.Clone(body)
	case http.MethodDelete:
		if _, ok := model[key]; !ok {
			return http.StatusNotFound
		}
		delete(model, key)
	}
	return http.StatusOK
}

// FuzzHandler serves arbitrary bytes as one client connection (requests
// parsed as net/http's server parses them, one after another) and checks
// every answer against the reference handler and a model of the store:
// the status, a GET's exact value and content type, the Allow header of a
// 405, and the store holding exactly the model's keys afterwards. Each
// request must be answered within a second.
func FuzzHandler(f *testing.F) {
	for _, r := range recordHTTP(f) {
		f.Add(r.Up)
	}
	f.Add([]byte("PUT /?key=k HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n"))
	f.Add([]byte("PUT /?key=k HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"))
	f.Add([]byte("GET /?key=%zz HTTP/1.1\r\nHost: x\r\n\r\nDELETE /?key=k;x HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		store := memmeta.New()
		h := httpmeta.NewHandler(store, httpmeta.WithMaxBodyBytes(fzMaxBody))
		model := map[string][]byte{}
		br := bufio.NewReader(bytes.NewReader(stream))
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				break
			}
			// Fuzzed streams are far shorter than the limit: this reads
			// the whole body, or up to the framing error.
			body, readErr := io.ReadAll(io.LimitReader(req.Body, 1<<20))
			req.Body = &replayBody{r: bytes.NewReader(body), err: readErr}
			want := expectHTTP(req, body, readErr, model)
			rec := httptest.NewRecorder()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			done := make(chan struct{})
			go func() {
				defer close(done)
				h.ServeHTTP(rec, req.WithContext(ctx))
			}()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				t.Fatalf("%s %q not answered", req.Method, req.URL)
			}
			cancel()
			require.Equal(t, want, rec.Code, "%s %q (body %q, read error %v): %s", req.Method, req.URL, body, readErr, rec.Body.String())
			switch {
			case want == http.StatusMethodNotAllowed:
				require.Equal(t, "GET, PUT, DELETE", rec.Header().Get("Allow"))
			case want == http.StatusOK && req.Method == http.MethodGet:
				q, _ := url.ParseQuery(req.URL.RawQuery)
				require.Equal(t, model[q.Get("key")], rec.Body.Bytes())
				require.Equal(t, "application/json; charset=utf-8", rec.Header().Get("Content-Type"))
			}
			if readErr != nil {
				break // the server would close the connection
			}
		}
		require.Equal(t, len(model), store.Len(), "store and model hold different numbers of keys")
		for k, v := range model {
			got, err := store.Get(context.Background(), k)
			require.NoError(t, err)
			require.Equal(t, v, got, "key %q", k)
		}
	})
}
