package pd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxRegisterBody bounds a /register body the server reads; maxQueryBody
// bounds a /query answer the client reads.
const (
	maxRegisterBody = 64 << 10
	maxQueryBody    = 8 << 20
)

// Registration is one producer worker's entry, the JSON body of POST
// /register (upstream's RegisterWorkerPayload). TPSize is our addition
// (optional; lets a consumer refuse unequal TP at once).
type Registration struct {
	EngineID string `json:"engine_id"`
	DPRank   int    `json:"dp_rank"`
	TPRank   int    `json:"tp_rank"`
	PPRank   int    `json:"pp_rank"`
	// Addr is the worker's side-channel address, "tcp://host:port" as
	// upstream's ZMQ address.
	Addr   string `json:"addr"`
	TPSize int    `json:"tp_size,omitempty"`
}

// EngineEntry is one data-parallel rank in GET /query's answer:
// {"engine_id": ..., "worker_addr": {tp_rank: {pp_rank: addr}}} (keys are
// decimal strings in JSON), plus our optional "tp_size".
type EngineEntry struct {
	EngineID   string                 `json:"engine_id"`
	WorkerAddr map[int]map[int]string `json:"worker_addr"`
	TPSize     int                    `json:"tp_size,omitempty"`
}

// BootstrapServer is upstream MooncakeConnector's bootstrap HTTP server
// (mooncake_utils.py): producer workers register their side-channel
// addresses, consumers and proxies query them.
//
//   - POST /register with a Registration: 200 on success; 400 when a field
//     is missing or negative, when the (dp, tp, pp) slot already holds a
//     different registration, or when the DP rank belongs to another
//     engine id (upstream answers 400 for both). A registration identical
//     to the stored one is accepted again (200), so a client may retry a
//     request whose answer it lost.
//   - GET /query: 200 with {dp_rank: EngineEntry} for every registered DP
//     rank.
//
// Concurrency: safe for concurrent use; one mutex guards the table.
type BootstrapServer struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{} // closed when Serve returned

	mu struct {
		sync.Mutex
		engines map[int]*EngineEntry // by DP rank
	}
}

// NewBootstrapServer listens on addr ("host:port"; port 0 picks one) and
// serves. Upstream binds 0.0.0.0; here the operator chooses. Errors: the
// listen error, naming addr.
func NewBootstrapServer(addr string) (*BootstrapServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: listen %s: %v", ErrBootstrap, addr, err)
	}
	b := &BootstrapServer{ln: ln, done: make(chan struct{})}
	b.mu.engines = map[int]*EngineEntry{}
	mux := http.NewServeMux()
	mux.HandleFunc("/register", b.register)
	mux.HandleFunc("/query", b.query)
	b.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	go func() {
		defer close(b.done)
		_ = b.srv.Serve(ln)
	}()
	return b, nil
}

// Addr is the bound "host:port".
func (b *BootstrapServer) Addr() string { return b.ln.Addr().String() }

// Close stops the server, closes its connections and waits for it.
func (b *BootstrapServer) Close() error {
	err := b.srv.Close()
	<-b.done
	return err
}

func (b *BootstrapServer) register(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "register: POST only", http.StatusMethodNotAllowed)
		return
	}
	var reg Registration
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRegisterBody))
	if err := dec.Decode(&reg); err != nil {
		http.Error(w, "register: bad JSON body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := b.add(reg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"status":"ok"}`)
}

// add records reg; errors describe why it was refused.
func (b *BootstrapServer) add(reg Registration) error {
	switch {
	case reg.EngineID == "" || reg.Addr == "":
		return fmt.Errorf("register: engine_id and addr are required")
	case reg.DPRank < 0 || reg.TPRank < 0 || reg.PPRank < 0 || reg.TPSize < 0:
		return fmt.Errorf("register: negative rank in %+v", reg)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.mu.engines[reg.DPRank]
	if e == nil {
		e = &EngineEntry{EngineID: reg.EngineID, WorkerAddr: map[int]map[int]string{}, TPSize: reg.TPSize}
		b.mu.engines[reg.DPRank] = e
	}
	if e.EngineID != reg.EngineID {
		return fmt.Errorf("register: dp rank %d belongs to engine %q, not %q", reg.DPRank, e.EngineID, reg.EngineID)
	}
	if reg.TPSize != 0 && e.TPSize != 0 && reg.TPSize != e.TPSize {
		return fmt.Errorf("register: engine %q tp size %d, earlier ranks said %d", reg.EngineID, reg.TPSize, e.TPSize)
	}
	pp := e.WorkerAddr[reg.TPRank]
	if pp == nil {
		pp = map[int]string{}
		e.WorkerAddr[reg.TPRank] = pp
	}
	if old, ok := pp[reg.PPRank]; ok {
		if old == reg.Addr {
			return nil
		}
		return fmt.Errorf("register: dp %d tp %d pp %d of engine %q already registered at %s", reg.DPRank, reg.TPRank, reg.PPRank, reg.EngineID, old)
	}
	pp[reg.PPRank] = reg.Addr
	if e.TPSize == 0 {
		e.TPSize = reg.TPSize
	}
	return nil
}

func (b *BootstrapServer) query(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "query: GET only", http.StatusMethodNotAllowed)
		return
	}
	b.mu.Lock()
	body, err := json.Marshal(b.mu.engines)
	b.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// bootstrapURL turns "host:port" or "http://host:port[/]" into a base URL.
func bootstrapURL(addr string) (string, error) {
	a := strings.TrimRight(addr, "/")
	if !strings.Contains(a, "://") {
		a = "http://" + a
	}
	host, ok := strings.CutPrefix(a, "http://")
	if !ok || host == "" || strings.Contains(host, "/") {
		return "", fmt.Errorf("%w: bootstrap address %q is not host:port or http://host:port", ErrInvalidArgument, addr)
	}
	if _, _, err := net.SplitHostPort(host); err != nil {
		return "", fmt.Errorf("%w: bootstrap address %q: %v", ErrInvalidArgument, addr, err)
	}
	return a, nil
}

// permanentError marks a failure retry must not retry (HTTP 400, a
// malformed answer, unequal TP).
type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// permanent marks err as not worth retrying.
func permanent(err error) error { return permanentError{err} }

// isPermanent reports whether err was marked by permanent.
func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// registerOnce posts reg to base.
func registerOnce(ctx context.Context, hc *http.Client, base string, reg Registration) error {
	body, _ := json.Marshal(reg)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/register", bytes.NewReader(body))
	if err != nil {
		return permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusBadRequest:
		return permanent(fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg))))
	}
	return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
}

// queryOnce gets base/query.
func queryOnce(ctx context.Context, hc *http.Client, base string) (map[int]EngineEntry, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/query", nil)
	if err != nil {
		return nil, permanent(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxQueryBody+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	if len(body) > maxQueryBody {
		return nil, permanent(fmt.Errorf("query answer exceeds %d bytes", maxQueryBody))
	}
	var out map[int]EngineEntry
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, permanent(fmt.Errorf("query answer is not JSON: %v", err))
	}
	return out, nil
}

// retry calls f with capped exponential backoff (50 ms doubling to 1 s)
// until it succeeds, returns a permanent error, or ctx ends; it returns
// the last error.
func retry(ctx context.Context, f func(context.Context) error) error {
	back := 50 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil || isPermanent(err) {
			return err
		}
		t := time.NewTimer(back)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%v (gave up: %v)", err, context.Cause(ctx))
		case <-t.C:
		}
		back = min(2*back, time.Second)
	}
}

// sideAddr strips upstream's "tcp://" scheme from a registered address.
func sideAddr(a string) string { return strings.TrimPrefix(a, "tcp://") }

// ranks lists an entry's TP ranks in order (for messages).
func ranks(e EngineEntry) string {
	var rs []int
	for r := range e.WorkerAddr {
		rs = append(rs, r)
	}
	sort.Ints(rs)
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.Itoa(r)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
