package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/ha"
	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
)

// diagnoseEtcd explains why etcd did not answer (its client reports only
// the deadline): "; " and what tlsconfig.Diagnose found at the first
// endpoint where it found something, with tlsconfig.EtcdHint's advice, or
// "".
func diagnoseEtcd(endpoints []string, tc *tlsconfig.Config) string {
	for _, ep := range endpoints[:min(len(endpoints), 3)] {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := tlsconfig.Diagnose(ctx, ep, tc.Client())
		cancel()
		if err == nil {
			continue
		}
		out := "; " + err.Error()
		if h := tlsconfig.EtcdHint(err, tc != nil); h != "" {
			out += "; " + h
		}
		return out
	}
	return ""
}

// HAConfig makes a master process one of several that share an etcd: it
// campaigns for the leadership (core/store/ha), serves only while it
// leads, replicates every committed mutation to etcd before answering, and
// on winning first rebuilds the table the previous leader had committed.
// While it stands by, every RPC fails with gRPC code Unavailable
// (UNAVAILABLE_IN_CURRENT_MODE in the message) and /health reports
// "standby". Upstream: --enable_ha with --etcd_endpoints.
type HAConfig struct {
	// Endpoints are the etcd client endpoints (host:port); required. See
	// ParseEtcdEndpoints for upstream's forms.
	Endpoints []string
	// ClusterID scopes the election and the replicated state (upstream
	// --cluster_id); default ha.DefaultClusterID, [0-9A-Za-z_.-]{1,128}.
	ClusterID string
	// AdvertiseAddr is the RPC address clients are sent to while this
	// master leads; default the bound RPC address, with an unspecified
	// host (0.0.0.0, ::) replaced by this machine's first non-loopback
	// address.
	AdvertiseAddr string
	// SessionTTL is the leadership lease; default ha.DefaultSessionTTL
	// (5 s): a leader that dies without resigning is replaced after it.
	SessionTTL time.Duration
	// SnapshotEvery and SnapshotInterval: see ha.ReplicatorConfig.
	SnapshotEvery    int
	SnapshotInterval time.Duration
	// DialTimeout bounds the first contact with etcd; default 5 s.
	DialTimeout time.Duration
	// Logf receives leadership changes and replication errors; default
	// none.
	Logf func(format string, args ...any)
	// EtcdTLS, when set, is the TLS identity of this master's etcd client
	// (tlsconfig.LoadClient: the CA bundle of etcd's server certificate,
	// and a client certificate for etcd's --client-cert-auth): the
	// election, the replicated operation log and snapshots, and /health's
	// leader lookup all go over it. nil = plaintext. Ours: upstream has
	// no such setting.
	EtcdTLS *tlsconfig.Config
}

// ParseEtcdEndpoints splits an etcd endpoint list: "h1:2379,h2:2379" or
// upstream's "h1:2379;h2:2379", optionally prefixed "etcd://". Empty items
// are dropped.
func ParseEtcdEndpoints(s string) []string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "etcd://")
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' }) {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// haState is a process's part in the election. The master it serves while
// leading replaces Server.mu.m (swapped under Server.mu).
type haState struct {
	cfg     HAConfig
	mcfg    master.Config // for each term's fresh master; no observer
	cli     *clientv3.Client
	elector *ha.Elector
	addr    string // advertised RPC address

	rep   atomic.Pointer[ha.Replicator] // non-nil while leading and serving
	crash atomic.Bool                   // Crash: abandon the lease instead of resigning
	terms atomic.Int64                  // terms served

	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
	once   sync.Once
}

func (h *haState) logf(format string, args ...any) { h.cfg.Logf(format, args...) }

// haInterceptors returns the gRPC interceptors of an HA process (none
// without HA). The interceptor reads p.ha, which startHA sets before
// serving starts.
func (p *Process) haInterceptors(cfg *HAConfig) []grpc.UnaryServerInterceptor {
	if cfg == nil {
		return nil
	}
	return []grpc.UnaryServerInterceptor{p.haGate}
}

// haGate refuses RPCs while standing by and, while leading, answers only
// once every mutation the call observed (and any before it) is durable in
// etcd; if that fails (leadership lost), the call fails with Unavailable
// and the client retries it at the next leader when it is idempotent.
func (p *Process) haGate(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	h := p.ha
	rep := h.rep.Load()
	if rep == nil {
		return nil, grpcstatus.Errorf(codes.Unavailable, "mooncake master %s: %s: standby, not the leader of cluster %s",
			h.addr, store.UnavailableInCurrentMode, h.cfg.ClusterID)
	}
	resp, err := handler(ctx, req)
	if err != nil {
		return resp, err
	}
	if err := rep.Sync(ctx); err != nil {
		return nil, grpcstatus.Errorf(codes.Unavailable, "mooncake master %s: %s: change not replicated, leadership lost: %v",
			h.addr, store.UnavailableInCurrentMode, err)
	}
	return resp, nil
}

// startHA connects to etcd and starts campaigning. Errors: INVALID_PARAMS
// (no endpoints, bad cluster id); etcd unreachable within DialTimeout.
func (p *Process) startHA(cfg ProcessConfig) error {
	hc := *cfg.HA
	if len(hc.Endpoints) == 0 {
		return store.Errorf(store.InvalidParams, "ha: no etcd endpoints")
	}
	if hc.ClusterID == "" {
		hc.ClusterID = ha.DefaultClusterID
	}
	if err := ha.CheckClusterID(hc.ClusterID); err != nil {
		return store.Errorf(store.InvalidParams, "%v", err)
	}
	if hc.DialTimeout <= 0 {
		hc.DialTimeout = 5 * time.Second
	}
	if hc.Logf == nil {
		hc.Logf = func(string, ...any) {}
	}
	if hc.AdvertiseAddr == "" {
		hc.AdvertiseAddr = advertiseAddr(p.RPCAddr)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: hc.Endpoints, DialTimeout: hc.DialTimeout, Logger: zap.NewNop(), TLS: hc.EtcdTLS.Client()})
	if err != nil {
		return fmt.Errorf("master: etcd %v: %w", hc.Endpoints, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hc.DialTimeout)
	_, err = cli.Get(ctx, ha.ViewPrefix(hc.ClusterID), clientv3.WithCountOnly(), clientv3.WithPrefix())
	cancel()
	if err != nil {
		cli.Close()
		return fmt.Errorf("master: etcd %v unreachable (%s): %w%s", hc.Endpoints, hc.EtcdTLS, err, diagnoseEtcd(hc.Endpoints, hc.EtcdTLS))
	}
	el, err := ha.NewElector(cli, hc.ClusterID, hc.SessionTTL)
	if err != nil {
		cli.Close()
		return store.Errorf(store.InvalidParams, "%v", err)
	}
	mcfg := cfg.Master
	mcfg.Observer = nil
	h := &haState{cfg: hc, mcfg: mcfg, cli: cli, elector: el, addr: hc.AdvertiseAddr, done: make(chan struct{})}
	var runCtx context.Context
	runCtx, h.cancel = context.WithCancel(context.Background())
	p.ha = h
	go h.run(runCtx, p.Server)
	return nil
}

// stopHA ends the leadership (resigning, unless Crash) and closes the etcd
// client. It runs before the gRPC server stops.
func (p *Process) stopHA() {
	h := p.ha
	if h == nil {
		return
	}
	h.once.Do(func() {
		h.cancel()
		<-h.done
		h.cli.Close()
	})
}

// Crash stops the process like Close, except that a leader does not
// resign: its lease is left to expire, as when the process is killed, so
// a standby takes over only after SessionTTL. For failover tests.
func (p *Process) Crash() {
	if p.ha != nil {
		p.ha.crash.Store(true)
	}
	p.Close()
}

// Role is "leader" while the process serves (always, without HA) and
// "standby" otherwise.
func (p *Process) Role() string {
	if p.ha == nil || p.ha.rep.Load() != nil {
		return "leader"
	}
	return "standby"
}

// run campaigns, leads, and campaigns again until ctx ends.
func (h *haState) run(ctx context.Context, s *Server) {
	defer close(h.done)
	backoff := 100 * time.Millisecond
	pause := func() {
		t := time.NewTimer(backoff)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	for ctx.Err() == nil {
		t, err := h.elector.Campaign(ctx, h.addr)
		if err != nil {
			if ctx.Err() == nil {
				h.logf("mooncake master %s: campaign: %v", h.addr, err)
				pause()
			}
			continue
		}
		served := h.lead(ctx, s, t)
		if h.crash.Load() {
			t.Abandon()
		} else if err := t.Resign(context.Background()); err != nil {
			h.logf("mooncake master %s: resign: %v", h.addr, err)
		}
		if served {
			backoff = 100 * time.Millisecond
		} else {
			pause()
		}
	}
}

// lead serves one term: it rebuilds the replicated table into a fresh
// master, swaps it in and serves until the term, the replication or ctx
// ends; then it stands by again with an empty master. It reports whether
// it served.
func (h *haState) lead(ctx context.Context, s *Server, t *ha.Term) bool {
	start := time.Now()
	m, err := master.New(h.mcfg)
	if err != nil {
		h.logf("mooncake master %s: %v", h.addr, err)
		return false
	}
	ls, err := ha.Load(ctx, h.cli, h.cfg.ClusterID, m)
	if err != nil {
		h.logf("mooncake master %s: elected but cannot load the replicated table: %v", h.addr, err)
		return false
	}
	rep := ha.NewReplicator(ha.ReplicatorConfig{
		Client: h.cli, ClusterID: h.cfg.ClusterID, Fence: t.Fence(), NextSeq: ls.LastSeq + 1, Do: s.Do,
		SnapshotEvery: h.cfg.SnapshotEvery, SnapshotInterval: h.cfg.SnapshotInterval, Logf: h.cfg.Logf,
	})
	rep.Attach(m)
	if err := t.Check(ctx); err != nil {
		rep.Close()
		h.logf("mooncake master %s: leadership lost while loading: %v", h.addr, err)
		return false
	}
	s.mu.Lock()
	s.mu.m = m
	h.rep.Store(rep)
	s.unlock()
	h.terms.Add(1)
	h.logf("mooncake master %s: leading cluster %s (view %d): %d objects, %d segments restored (snapshot seq %d + %d log events) in %v",
		h.addr, h.cfg.ClusterID, t.Rev(), ls.Objects, ls.Segments, ls.SnapshotSeq, ls.Replayed, time.Since(start).Round(time.Millisecond))
	why := "stopping"
	select {
	case <-t.Done():
		why = "etcd session lost"
	case <-rep.Failed():
		why = fmt.Sprintf("replication failed: %v", rep.Err())
	case <-ctx.Done():
	}
	// Refuse new calls, fail the ones in flight (their Sync fails), then
	// drop the table.
	h.rep.Store(nil)
	rep.Close()
	empty, _ := master.New(h.mcfg)
	s.mu.Lock()
	s.mu.m = empty
	s.unlock()
	h.logf("mooncake master %s: standing by: %s", h.addr, why)
	return true
}

// httpHandler is the metrics/health handler; with HA, /health and /role
// report the role.
func (p *Process) httpHandler() http.Handler {
	base := p.Server.HTTPHandler()
	h := p.ha
	if h == nil {
		return base
	}
	mux := http.NewServeMux()
	mux.Handle("/", base)
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		body := map[string]string{"status": "ok", "role": p.Role(), "cluster_id": h.cfg.ClusterID, "address": h.addr}
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		if leader, _, err := ha.Leader(ctx, h.cli, h.cfg.ClusterID); err == nil {
			body["leader"] = leader
		}
		cancel()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(body)
	})
	mux.HandleFunc("/role", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, p.Role())
	})
	return mux
}

// advertiseAddr is bound with an unspecified host replaced by the first
// non-loopback address of this machine (else its hostname).
func advertiseAddr(bound string) string {
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		return bound
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				return net.JoinHostPort(n.IP.String(), port)
			}
		}
	}
	if hn, err := os.Hostname(); err == nil {
		return net.JoinHostPort(hn, port)
	}
	return bound
}
