package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/store/server"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// haOptions configures startHA.
type haOptions struct {
	Cluster       string        // ClusterID the masters elect under
	Masters       int           // master processes
	Master        master.Config // every master's config
	SnapshotEvery int           // HAConfig.SnapshotEvery
	// Crash: the leader will be crashed, not closed, so the masters get
	// etcd's shortest practical session TTL (2s instead of 5s).
	Crash bool
	// LogCloseErrors: a client's Close error is logged instead of
	// failing the test.
	LogCloseErrors bool
}

// haCluster is a set of HA masters electing a leader on an embedded etcd,
// and the clients that find the leader through it.
type haCluster struct {
	t          *testing.T
	opts       haOptions
	ep         string        // the etcd endpoint
	sessionTTL time.Duration // the masters' etcd session TTL
	masters    []*server.Process
	meta       *etcdmeta.Store // the clients' metadata store; opened by the first client
}

// startHA starts o.Masters HA masters on the etcd at ep; each is closed
// when t ends.
func startHA(t *testing.T, ep string, o haOptions) *haCluster {
	t.Helper()
	h := &haCluster{t: t, opts: o, ep: ep, sessionTTL: 5 * time.Second}
	if o.Crash {
		h.sessionTTL = 2 * time.Second // etcd's shortest practical lease
	}
	h.masters = make([]*server.Process, o.Masters)
	for i := range h.masters {
		p, err := server.Start(server.ProcessConfig{
			Master: o.Master, RPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
			HA: &server.HAConfig{
				Endpoints: []string{ep}, ClusterID: o.Cluster, SessionTTL: h.sessionTTL,
				SnapshotEvery: o.SnapshotEvery,
				Logf:          func(format string, args ...any) { t.Logf("master %d: "+format, append([]any{i}, args...)...) },
			},
		})
		if err != nil {
			t.Fatalf("start master %d: %v", i, err)
		}
		h.masters[i] = p
		t.Cleanup(p.Close)
	}
	return h
}

// leader is the master whose role is leader, nil if none; two leaders
// fail t.
func (h *haCluster) leader() *server.Process {
	h.t.Helper()
	var l *server.Process
	for _, p := range h.masters {
		if p.Role() == "leader" {
			if l != nil {
				h.t.Fatalf("two leaders: %s and %s", l.RPCAddr, p.RPCAddr)
			}
			l = p
		}
	}
	return l
}

// waitLeader polls until a master leads and returns it.
func (h *haCluster) waitLeader(ctx context.Context) *server.Process {
	h.t.Helper()
	pollUntil(h.t, ctx, "a leader", func() bool { return h.leader() != nil })
	return h.leader()
}

// client starts a client of the cluster configured by cfg plus the etcd
// discovery, a TCP transport and a 100ms ping; it is closed when t ends.
func (h *haCluster) client(ctx context.Context, cfg client.Config) *client.Client {
	t := h.t
	t.Helper()
	if h.meta == nil {
		meta, err := etcdmeta.New(ctx, []string{h.ep})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { meta.Close() })
		h.meta = meta
	}
	cfg.MasterAddr, cfg.ClusterID, cfg.Metadata = "etcd://"+h.ep, h.opts.Cluster, h.meta
	cfg.Transport, cfg.PingInterval = tcp.New(tcp.Config{}), 100*time.Millisecond
	c, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatalf("start %s: %v", cfg.LocalHostname, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			if h.opts.LogCloseErrors {
				t.Logf("close %s: %v", cfg.LocalHostname, err)
			} else {
				t.Errorf("close %s: %v", cfg.LocalHostname, err)
			}
		}
	})
	return c
}

// kill stops leader p: Crash (its etcd lease left to expire) under
// opts.Crash, else Close (it resigns).
func (h *haCluster) kill(p *server.Process) {
	if h.opts.Crash {
		p.Crash()
	} else {
		p.Close()
	}
}

// killMode describes how kill stops a leader, for the recovery log.
func (h *haCluster) killMode() string {
	if h.opts.Crash {
		return fmt.Sprintf("crash (lease left to expire, session TTL %v)", h.sessionTTL)
	}
	return "resign (Close)"
}

// newLeader fails t unless a master other than old leads and says so on
// /health, and returns it.
func (h *haCluster) newLeader(old *server.Process) *server.Process {
	h.t.Helper()
	nl := h.leader()
	if nl == nil || nl == old {
		h.t.Fatalf("no new leader after the kill")
	}
	if got := roleOf(h.t, nl); got != "leader" {
		h.t.Fatalf("new leader's /health role %q", got)
	}
	return nl
}

// roleOf is the role p reports on its /health endpoint.
func roleOf(t *testing.T, p *server.Process) string {
	t.Helper()
	resp, err := http.Get("http://" + p.MetricsAddr + "/health")
	if err != nil {
		t.Fatalf("GET /health: %v", err)
	}
	defer resp.Body.Close()
	var body map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("/health: %v", err)
	}
	return body["role"]
}
