package proxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// seen is one request a fake instance received.
type seen struct {
	path      string
	requestID string
	auth      string
	body      map[string]any
}

// fake is a fake vLLM instance recording what it got.
type fake struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newFake(t *testing.T, h func(w http.ResponseWriter, r *http.Request, body map[string]any)) *fake {
	t.Helper()
	f := &fake{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if r.Method == http.MethodPost {
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, seen{r.URL.RequestURI(), r.Header.Get("X-Request-Id"), r.Header.Get("Authorization"), body})
		f.mu.Unlock()
		h(w, r, body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) got() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.reqs...)
}

// prefillOK answers like a vLLM prefill instance with our connector:
// the kv_transfer_params request_finished returned.
func prefillOK(w http.ResponseWriter, r *http.Request, body map[string]any) {
	kv := body["kv_transfer_params"].(map[string]any)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id":      "cmpl-1",
		"choices": []any{map[string]any{"text": "x"}},
		"kv_transfer_params": map[string]any{
			"do_remote_prefill": true, "do_remote_decode": false,
			"transfer_id": kv["transfer_id"], "remote_engine_id": "prefill-engine",
			"remote_bootstrap_addr": "http://10.0.0.1:8998", "remote_block_ids": []int{1, 2, 3},
		},
	})
}

func decodeJSON(w http.ResponseWriter, r *http.Request, body map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"id":"cmpl-d","choices":[{"text":"hello world"}]}`)
}

func newProxy(t *testing.T, pre []Prefill, dec []string) (*Proxy, *httptest.Server) {
	t.Helper()
	n := 0
	p, err := New(Config{Prefill: pre, Decode: dec, NewID: func() (string, error) {
		n++
		return fmt.Sprintf("00000000-0000-4000-8000-%012d", n), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(p)
	t.Cleanup(func() {
		s.Close()
		p.CloseIdleConnections()
	})
	return p, s
}

func post(t *testing.T, s *httptest.Server, path, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestExactFields checks, for both endpoints, every field the proxy sends
// to prefill and to decode, and that decode's answer reaches the client.
func TestExactFields(t *testing.T) {
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		t.Run(strings.ReplaceAll(path, "/", "_"), func(t *testing.T) {
			pf := newFake(t, prefillOK)
			df := newFake(t, decodeJSON)
			_, s := newProxy(t, []Prefill{{URL: pf.srv.URL}}, []string{df.srv.URL})
			client := `{"model":"m","prompt":"hi","max_tokens":50,"max_completion_tokens":60,"min_tokens":5,"stream":true,"stream_options":{"include_usage":true},"temperature":0.5,"seed":12345678901234567}`
			resp, body := post(t, s, path, client)
			if resp.StatusCode != 200 || body != `{"id":"cmpl-d","choices":[{"text":"hello world"}]}` {
				t.Fatalf("client got %d %s", resp.StatusCode, body)
			}
			const id = "00000000-0000-4000-8000-000000000001"
			if resp.Header.Get("X-Request-Id") != id {
				t.Fatalf("X-Request-Id to client %q", resp.Header.Get("X-Request-Id"))
			}
			p := pf.got()
			if len(p) != 1 || p[0].path != path || p[0].requestID != id || p[0].auth != "Bearer k" {
				t.Fatalf("prefill got %+v", p)
			}
			wantPre := map[string]any{
				"model": "m", "prompt": "hi", "max_tokens": 1.0, "max_completion_tokens": 1.0, "stream": false,
				"temperature": 0.5, "seed": 12345678901234567.0,
				"kv_transfer_params": map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "transfer_id": "xfer-" + id},
			}
			if !reflect.DeepEqual(p[0].body, wantPre) {
				t.Fatalf("prefill body\n got %v\nwant %v", p[0].body, wantPre)
			}
			d := df.got()
			if len(d) != 1 || d[0].path != path || d[0].requestID != id {
				t.Fatalf("decode got %+v", d)
			}
			var wantDec map[string]any
			json.Unmarshal([]byte(client), &wantDec)
			wantDec["kv_transfer_params"] = map[string]any{
				"do_remote_prefill": true, "do_remote_decode": false, "transfer_id": "xfer-" + id,
				"remote_engine_id": "prefill-engine", "remote_bootstrap_addr": "http://10.0.0.1:8998", "remote_block_ids": []any{1.0, 2.0, 3.0},
			}
			if !reflect.DeepEqual(d[0].body, wantDec) {
				t.Fatalf("decode body\n got %v\nwant %v", d[0].body, wantDec)
			}
		})
	}
}

// TestLargeIntegersKept: integers beyond float64 precision pass through
// unchanged (the proxy decodes numbers as json.Number).
func TestLargeIntegersKept(t *testing.T) {
	var raw string
	pf := newFake(t, prefillOK)
	df2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		raw = string(b)
	}))
	defer df2.Close()
	_, s := newProxy(t, []Prefill{{URL: pf.srv.URL}}, []string{df2.URL})
	post(t, s, "/v1/completions", `{"prompt":"x","seed":12345678901234567}`)
	if !strings.Contains(raw, `"seed":12345678901234567`) {
		t.Fatalf("decode body %s", raw)
	}
}

// TestStreaming: decode's server-sent events reach the client one by one
// (the proxy flushes): the client reads the first event before decode
// writes the second.
func TestStreaming(t *testing.T) {
	pf := newFake(t, prefillOK)
	second := make(chan struct{})
	df := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-second:
		case <-time.After(20 * time.Second):
		}
		io.WriteString(w, "data: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: [DONE]\n\n")
	})
	_, s := newProxy(t, []Prefill{{URL: pf.srv.URL}}, []string{df.srv.URL})
	resp, err := s.Client().Post(s.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: {\"choices\":[{\"text\":\"a\"}]}\n" {
		t.Fatalf("first event %q %v", line, err)
	}
	close(second)
	rest, _ := io.ReadAll(br)
	if string(rest) != "\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: [DONE]\n\n" {
		t.Fatalf("rest %q", rest)
	}
}

// TestPrefillFailure: a prefill error status, an unreachable prefill, or
// a non-JSON answer gives 502 naming the instance; decode is not called.
func TestPrefillFailure(t *testing.T) {
	bad := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		http.Error(w, `{"error":"boom"}`, http.StatusInternalServerError)
	})
	notJSON := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		io.WriteString(w, "<html>")
	})
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	for _, k := range []struct {
		url, want string
	}{{bad.srv.URL, "status 500"}, {notJSON.srv.URL, "not JSON"}, {deadURL, "connect"}} {
		df := newFake(t, decodeJSON)
		_, s := newProxy(t, []Prefill{{URL: k.url}}, []string{df.srv.URL})
		resp, body := post(t, s, "/v1/completions", `{"prompt":"x"}`)
		var e struct {
			Error struct {
				Message, Type, Instance string
			}
		}
		json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != http.StatusBadGateway || e.Error.Type != "prefill_failed" || e.Error.Instance != k.url || !strings.Contains(e.Error.Message, k.url) || !strings.Contains(e.Error.Message, k.want) {
			t.Fatalf("%s: %d %s", k.url, resp.StatusCode, body)
		}
		if len(df.got()) != 0 {
			t.Fatal("decode was called after a prefill failure")
		}
	}
}

// TestFallbackParams: a prefill answer without kv_transfer_params makes
// the proxy send the transfer id it chose, the prefill host's bootstrap
// address and the engine id its /query lists.
func TestFallbackParams(t *testing.T) {
	boot := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/query" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, `{"0":{"engine_id":"eng-7","worker_addr":{"0":{"0":"tcp://127.0.0.1:1"}}}}`)
	}))
	defer boot.Close()
	bu, _ := url.Parse(boot.URL)
	port, _ := strconv.Atoi(bu.Port())
	pf := newFake(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		io.WriteString(w, `{"id":"p","choices":[]}`)
	})
	df := newFake(t, decodeJSON)
	_, s := newProxy(t, []Prefill{{URL: pf.srv.URL, BootstrapPort: port}}, []string{df.srv.URL})
	if resp, body := post(t, s, "/v1/completions", `{"prompt":"x"}`); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	want := map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "transfer_id": "xfer-00000000-0000-4000-8000-000000000001",
		"remote_bootstrap_addr": "http://127.0.0.1:" + bu.Port(), "remote_engine_id": "eng-7"}
	if got := df.got()[0].body["kv_transfer_params"]; !reflect.DeepEqual(got, want) {
		t.Fatalf("decode kv params %v, want %v", got, want)
	}
}

// TestRoundRobin spreads requests over two prefill and two decode
// instances.
func TestRoundRobin(t *testing.T) {
	p1, p2 := newFake(t, prefillOK), newFake(t, prefillOK)
	d1, d2 := newFake(t, decodeJSON), newFake(t, decodeJSON)
	_, s := newProxy(t, []Prefill{{URL: p1.srv.URL}, {URL: p2.srv.URL + "/"}}, []string{d1.srv.URL, d2.srv.URL})
	for range 4 {
		if resp, body := post(t, s, "/v1/chat/completions", `{"messages":[]}`); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	for i, f := range []*fake{p1, p2, d1, d2} {
		if n := len(f.got()); n != 2 {
			t.Fatalf("instance %d got %d requests, want 2", i, n)
		}
	}
}

// TestRoutes: health endpoints, a bad body, unknown paths and methods.
func TestRoutes(t *testing.T) {
	pf, df := newFake(t, prefillOK), newFake(t, decodeJSON)
	_, s := newProxy(t, []Prefill{{URL: pf.srv.URL}}, []string{df.srv.URL})
	for _, path := range []string{"/health", "/healthcheck"} {
		resp, err := s.Client().Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"decode_instances":1,"prefill_instances":1,"status":"ok"}` {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
	if resp, _ := post(t, s, "/v1/completions", `[1,2]`); resp.StatusCode != 400 {
		t.Fatalf("array body: %d", resp.StatusCode)
	}
	if resp, _ := post(t, s, "/v1/embeddings", `{}`); resp.StatusCode != 404 {
		t.Fatalf("unknown path: %d", resp.StatusCode)
	}
	resp, err := s.Client().Get(s.URL + "/v1/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET completions: %d", resp.StatusCode)
	}
	if len(pf.got()) != 0 {
		t.Fatal("prefill called for a rejected request")
	}
}

// TestParseArgs covers upstream's command line shapes and errors.
func TestParseArgs(t *testing.T) {
	a, err := ParseArgs([]string{"--prefill", "http://p1:8100", "8998", "--prefill=http://p2:8100", "--decode", "http://d1:8200", "-decode", "http://d2:8200", "--host", "0.0.0.0", "--port=9000"})
	if err != nil {
		t.Fatal(err)
	}
	want := Args{Prefill: []Prefill{{"http://p1:8100", 8998}, {"http://p2:8100", 0}}, Decode: []string{"http://d1:8200", "http://d2:8200"}, Host: "0.0.0.0", Port: 9000}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("got %+v want %+v", a, want)
	}
	// Error messages name the flag at fault.
	for args, msg := range map[string]string{
		"--bogus":   `unknown flag "--bogus"`,
		"--bogus x": `unknown flag "--bogus"`,
		"--prefill http://p --decode --port 8000": "--decode needs a value",
	} {
		if _, err := ParseArgs(strings.Fields(args)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseArgs(%q) = %v, want %q", args, err, msg)
		}
	}
	for _, bad := range [][]string{
		{"--decode", "http://d"},
		{"--prefill", "http://p"},
		{"--prefill", "http://p", "notaport", "--decode", "http://d"},
		{"--prefill", "http://p", "--decode", "http://d", "--port", "70000"},
		{"--prefill", "http://p", "--decode", "http://d", "--bogus", "1"},
		{"--prefill"},
		{"stray"},
	} {
		if _, err := ParseArgs(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ParseArgs(%q) = %v, want ErrInvalidArgument", bad, err)
		}
	}
	if _, err := ParseArgs([]string{"--help"}); !errors.Is(err, ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	if _, err := New(Config{Prefill: []Prefill{{URL: "ftp://x"}}, Decode: []string{"http://d"}}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("ftp URL: %v", err)
	}
}

// TestNewUUID checks the version and variant bits and uniqueness.
func TestNewUUID(t *testing.T) {
	a, err := NewUUID()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewUUID()
	if len(a) != 36 || a[14] != '4' || !strings.ContainsRune("89ab", rune(a[19])) || a == b {
		t.Fatalf("uuids %q %q", a, b)
	}
}

// TestQueryAndTrailingData: the query string reaches both instances; a
// body with data after its JSON object is refused with 400.
func TestQueryAndTrailingData(t *testing.T) {
	pf, df := newFake(t, prefillOK), newFake(t, decodeJSON)
	_, s := newProxy(t, []Prefill{{URL: pf.srv.URL}}, []string{df.srv.URL})
	if resp, body := post(t, s, "/v1/completions?api-version=2", `{"prompt":"x"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	for _, f := range []*fake{pf, df} {
		if g := f.got(); len(g) != 1 || g[0].path != "/v1/completions?api-version=2" {
			t.Errorf("instance got %+v, want the query string kept", g)
		}
	}
	resp, body := post(t, s, "/v1/completions", `{"prompt":"x"} trailing`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "one JSON object") {
		t.Errorf("trailing data: %d %s", resp.StatusCode, body)
	}
}
