// Package proxy is a small OpenAI-compatible prefill/decode (P/D) proxy
// for vLLM instances running our connector (or upstream's Mooncake / NIXL
// connectors), in the sequential mode of vLLM's toy proxy and
// mooncake_connector_proxy.py: each completion request goes to a prefill
// instance first (one token, not streamed), and then, with the
// kv_transfer_params that prefill returned, to a decode instance, whose
// answer (streamed or not) goes back to the client unchanged.
//
// Per request to /v1/completions or /v1/chat/completions (POST, JSON):
//
//  1. A request id is generated (a random UUID, crypto/rand); the
//     transfer id is "xfer-<uuid>".
//  2. Prefill (round robin over Config.Prefill) gets the client's body
//     with kv_transfer_params = {"do_remote_decode": true,
//     "do_remote_prefill": false, "transfer_id": "xfer-<uuid>"},
//     max_tokens = 1, max_completion_tokens = 1 when present, stream =
//     false, stream_options and min_tokens removed, and the header
//     X-Request-Id: <uuid> (plus the client's Authorization header).
//  3. Decode (round robin over Config.Decode) gets the client's original
//     body plus the kv_transfer_params object of the prefill's JSON answer.
//     If that answer carries none, the proxy sends {"do_remote_prefill":
//     true, "do_remote_decode": false, "transfer_id": ...,
//     "remote_bootstrap_addr": "http://<prefill host>:<bootstrap port>",
//     "remote_engine_id": <dp rank 0's engine_id from the bootstrap's
//     /query, when it answers>} (the concurrent-mode parameters of
//     upstream's proxy).
//  4. The decode's status, Content-Type and body are copied to the client,
//     flushing after every read so server-sent events stream through.
//
// A prefill instance that cannot be reached or answers a status other than
// 200 or a body that is not JSON makes the proxy answer 502 with
// {"error": {"message": ..., "type": "prefill_failed", "instance": URL}};
// an unreachable decode instance gives 502 with type "decode_failed". A
// body that is not a JSON object is 400. GET /healthcheck and /health
// answer 200 {"status": "ok", "prefill_instances": N,
// "decode_instances": M}.
//
// Concurrency: a Proxy serves requests concurrently; round-robin counters
// are atomic.
package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultBootstrapPort is upstream's VLLM_MOONCAKE_BOOTSTRAP_PORT default,
// used for a prefill instance given without one.
const DefaultBootstrapPort = 8998

// MaxBodyBytes bounds a client's request body.
const MaxBodyBytes = 64 << 20

// maxPrefillAnswer bounds the prefill's answer the proxy reads.
const maxPrefillAnswer = 64 << 20

// ErrInvalidArgument is returned for a bad Config or command line.
var ErrInvalidArgument = errors.New("proxy: invalid argument")

// Prefill is one prefill instance.
type Prefill struct {
	// URL is the instance's base URL ("http://host:port"), without /v1.
	URL string
	// BootstrapPort is the port of its bootstrap server on the URL's host
	// (upstream `--prefill URL BOOTSTRAP_PORT`); 0 means
	// DefaultBootstrapPort. Used only when a prefill answer carries no
	// kv_transfer_params.
	BootstrapPort int
}

// Config configures a Proxy.
type Config struct {
	// Prefill lists the prefill instances (at least one).
	Prefill []Prefill
	// Decode lists the decode instances' base URLs (at least one).
	Decode []string
	// Client sends the requests to the instances; default a client with
	// 10 s connect timeout and no overall timeout (decode streams may be
	// long).
	Client *http.Client
	// NewID returns a fresh request id; default a random UUID (version 4,
	// crypto/rand).
	NewID func() (string, error)
	// Logger receives instance failures (Warn); nil discards.
	Logger *slog.Logger
}

// Proxy is the P/D proxy; it is an http.Handler.
type Proxy struct {
	cfg     Config
	mux     *http.ServeMux
	nextP   atomic.Uint64
	nextD   atomic.Uint64
	prefill []Prefill
	decode  []string
}

// New checks cfg and returns a Proxy. Errors: ErrInvalidArgument for no
// prefill or decode instance, or an instance URL that is not http(s)://host[:port].
func New(cfg Config) (*Proxy, error) {
	if len(cfg.Prefill) == 0 || len(cfg.Decode) == 0 {
		return nil, fmt.Errorf("%w: need at least one prefill and one decode instance (got %d and %d)", ErrInvalidArgument, len(cfg.Prefill), len(cfg.Decode))
	}
	p := &Proxy{cfg: cfg}
	for _, pf := range cfg.Prefill {
		u, err := baseURL(pf.URL)
		if err != nil {
			return nil, err
		}
		if pf.BootstrapPort < 0 || pf.BootstrapPort > 65535 {
			return nil, fmt.Errorf("%w: prefill %s: bootstrap port %d", ErrInvalidArgument, pf.URL, pf.BootstrapPort)
		}
		if pf.BootstrapPort == 0 {
			pf.BootstrapPort = DefaultBootstrapPort
		}
		p.prefill = append(p.prefill, Prefill{URL: u, BootstrapPort: pf.BootstrapPort})
	}
	for _, d := range cfg.Decode {
		u, err := baseURL(d)
		if err != nil {
			return nil, err
		}
		p.decode = append(p.decode, u)
	}
	if p.cfg.Client == nil {
		p.cfg.Client = &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	if p.cfg.NewID == nil {
		p.cfg.NewID = NewUUID
	}
	if p.cfg.Logger == nil {
		p.cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p.mux = http.NewServeMux()
	p.mux.HandleFunc("POST /v1/completions", p.completion)
	p.mux.HandleFunc("POST /v1/chat/completions", p.completion)
	p.mux.HandleFunc("GET /healthcheck", p.health)
	p.mux.HandleFunc("GET /health", p.health)
	return p, nil
}

// baseURL checks and normalises an instance URL (no trailing slash).
func baseURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return "", fmt.Errorf("%w: instance URL %q is not http(s)://host[:port]", ErrInvalidArgument, s)
	}
	return strings.TrimRight(s, "/"), nil
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.mux.ServeHTTP(w, r) }

// CloseIdleConnections closes the client's idle connections to instances.
func (p *Proxy) CloseIdleConnections() { p.cfg.Client.CloseIdleConnections() }

func (p *Proxy) health(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "prefill_instances": len(p.prefill), "decode_instances": len(p.decode)})
}

// NewUUID returns a random (version 4) UUID from crypto/rand.
func NewUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

// completion routes one request through prefill, then decode.
func (p *Proxy) completion(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "", "reading request body: "+err.Error())
		return
	}
	var body map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil || body == nil || dec.More() {
		writeError(w, http.StatusBadRequest, "invalid_request", "", "request body is not one JSON object")
		return
	}
	id, err := p.cfg.NewID()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "proxy_error", "", "request id: "+err.Error())
		return
	}
	xfer := "xfer-" + id
	pf := p.prefill[int(p.nextP.Add(1)-1)%len(p.prefill)]
	dURL := p.decode[int(p.nextD.Add(1)-1)%len(p.decode)]

	// Prefill: one token, not streamed.
	pre := make(map[string]any, len(body)+2)
	for k, v := range body {
		pre[k] = v
	}
	pre["kv_transfer_params"] = map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "transfer_id": xfer}
	pre["max_tokens"] = 1
	if _, ok := pre["max_completion_tokens"]; ok {
		pre["max_completion_tokens"] = 1
	}
	pre["stream"] = false
	delete(pre, "stream_options")
	delete(pre, "min_tokens")
	kv, err := p.prefillCall(r, pf, id, pre)
	if err != nil {
		p.cfg.Logger.Warn("proxy: prefill failed", "instance", pf.URL, "request_id", id, "err", err)
		writeError(w, http.StatusBadGateway, "prefill_failed", pf.URL, fmt.Sprintf("prefill instance %s failed: %v", pf.URL, err))
		return
	}
	if kv == nil {
		kv = p.fallbackParams(r.Context(), pf, xfer)
	}

	// Decode: the original body plus the prefill's parameters.
	body["kv_transfer_params"] = kv
	dbody, err := json.Marshal(body)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "proxy_error", "", "encoding decode request: "+err.Error())
		return
	}
	resp, err := p.post(r, dURL+r.URL.RequestURI(), id, dbody)
	if err != nil {
		p.cfg.Logger.Warn("proxy: decode failed", "instance", dURL, "request_id", id, "err", err)
		writeError(w, http.StatusBadGateway, "decode_failed", dURL, fmt.Sprintf("decode instance %s failed: %v", dURL, err))
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Cache-Control"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.Header().Set("X-Request-Id", id)
	w.WriteHeader(resp.StatusCode)
	stream(w, resp.Body)
}

// post sends body to u with the request id and the client's
// Authorization header.
func (p *Proxy) post(r *http.Request, u, id string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	if a := r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	return p.cfg.Client.Do(req)
}

// prefillCall sends the prefill request and returns the kv_transfer_params
// object of its answer (nil when the answer has none).
func (p *Proxy) prefillCall(r *http.Request, pf Prefill, id string, body map[string]any) (map[string]any, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	resp, err := p.post(r, pf.URL+r.URL.RequestURI(), id, b)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(resp.Body, maxPrefillAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("reading answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s: %s", resp.Status, snippet(ans))
	}
	if len(ans) > maxPrefillAnswer {
		return nil, fmt.Errorf("answer exceeds %d bytes", maxPrefillAnswer)
	}
	var out struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(ans, &out); err != nil {
		return nil, fmt.Errorf("answer is not JSON: %v: %s", err, snippet(ans))
	}
	if len(out.KV) == 0 || string(out.KV) == "null" {
		return nil, nil
	}
	var kv map[string]any
	dec := json.NewDecoder(bytes.NewReader(out.KV))
	dec.UseNumber()
	if err := dec.Decode(&kv); err != nil {
		return nil, fmt.Errorf("kv_transfer_params is not an object: %s", snippet(out.KV))
	}
	return kv, nil
}

// fallbackParams builds decode parameters when the prefill answered none:
// the transfer id the proxy sent and the prefill's bootstrap coordinates,
// with dp rank 0's engine id when the bootstrap's /query answers.
func (p *Proxy) fallbackParams(ctx context.Context, pf Prefill, xfer string) map[string]any {
	u, _ := url.Parse(pf.URL)
	boot := "http://" + net.JoinHostPort(u.Hostname(), strconv.Itoa(pf.BootstrapPort))
	kv := map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "transfer_id": xfer, "remote_bootstrap_addr": boot}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(qctx, http.MethodGet, boot+"/query", nil)
	if err != nil {
		return kv
	}
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		p.cfg.Logger.Warn("proxy: bootstrap query failed", "bootstrap", boot, "err", err)
		return kv
	}
	defer resp.Body.Close()
	var table map[string]struct {
		EngineID string `json:"engine_id"`
	}
	if resp.StatusCode == http.StatusOK && json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&table) == nil {
		if e, ok := table["0"]; ok && e.EngineID != "" {
			kv["remote_engine_id"] = e.EngineID
		}
	}
	return kv
}

// stream copies body to w, flushing after every read.
func stream(w http.ResponseWriter, body io.Reader) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// snippet shortens an instance's answer for an error message.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 512 {
		s = s[:512] + "..."
	}
	return s
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers an OpenAI-style error object naming the instance.
func writeError(w http.ResponseWriter, status int, typ, instance, msg string) {
	e := map[string]any{"message": msg, "type": typ, "code": status}
	if instance != "" {
		e["instance"] = instance
	}
	writeJSON(w, status, map[string]any{"error": e})
}
