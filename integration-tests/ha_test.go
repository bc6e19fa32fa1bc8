package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/store/server"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// High availability: three masters share an embedded etcd; the leader is
// stopped while a writer keeps putting; the test measures how long puts
// fail and checks that every put that returned success - before and after
// the failover - reads back intact from the new leader.

const (
	haMasters     = 3
	haNodes       = 2
	haSegment     = 32 << 20 // per storage node
	haValue       = 64 << 10
	haPreload     = 200 // objects written before the background writer starts
	haBefore      = 20  // background puts that succeed before the kill
	haAfter       = 30  // background puts that succeed after recovery
	haSeed        = 42
	haTestTimeout = 2 * time.Minute
)

func TestHAFailoverResign(t *testing.T) { runFailover(t, false) }

func TestHAFailoverCrash(t *testing.T) { runFailover(t, true) }

// haPut is one put that returned success.
type haPut struct {
	key        string
	i          int // value index (valueFor(haSeed, i, haValue))
	start, end time.Time
}

// haLog records the background writer's outcomes.
type haLog struct {
	mu       sync.Mutex
	ok       []haPut
	failures int
	lastErr  error
}

func (l *haLog) snapshot() ([]haPut, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]haPut(nil), l.ok...), l.failures
}

// pollUntil calls cond every few milliseconds until it is true, failing t
// at the deadline.
func pollUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

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

func runFailover(t *testing.T, crash bool) {
	ep := etcdtest.Start(t) // skips under -short
	ctx, cancel := context.WithTimeout(context.Background(), haTestTimeout)
	defer cancel()
	const cluster = "ha_failover"
	sessionTTL := 5 * time.Second
	if crash {
		sessionTTL = 2 * time.Second // etcd's shortest practical lease
	}

	masters := make([]*server.Process, haMasters)
	for i := range masters {
		p, err := server.Start(server.ProcessConfig{
			Master: master.Config{}, RPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
			HA: &server.HAConfig{
				Endpoints: []string{ep}, ClusterID: cluster, SessionTTL: sessionTTL,
				SnapshotEvery: 64, // snapshots and log replay both play a part in the takeover
				Logf:          func(format string, args ...any) { t.Logf("master %d: "+format, append([]any{i}, args...)...) },
			},
		})
		if err != nil {
			t.Fatalf("start master %d: %v", i, err)
		}
		masters[i] = p
		t.Cleanup(p.Close)
	}
	leaderOf := func() *server.Process {
		var l *server.Process
		for _, p := range masters {
			if p.Role() == "leader" {
				if l != nil {
					t.Fatalf("two leaders: %s and %s", l.RPCAddr, p.RPCAddr)
				}
				l = p
			}
		}
		return l
	}
	pollUntil(t, ctx, "a leader", func() bool { return leaderOf() != nil })
	old := leaderOf()
	for _, p := range masters {
		want := "standby"
		if p == old {
			want = "leader"
		}
		if got := roleOf(t, p); got != want {
			t.Fatalf("master %s: /health role %q, want %q", p.RPCAddr, got, want)
		}
	}

	meta, err := etcdmeta.New(ctx, []string{ep})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { meta.Close() })
	newClient := func(name string, segment, buffer uint64) *client.Client {
		c, err := client.New(ctx, client.Config{
			LocalHostname: name, MasterAddr: "etcd://" + ep, ClusterID: cluster, Metadata: meta,
			Transport: tcp.New(tcp.Config{}), GlobalSegmentSize: segment, LocalBufferSize: buffer,
			PingInterval: 100 * time.Millisecond,
		})
		if err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		t.Cleanup(func() {
			if err := c.Close(); err != nil {
				t.Logf("close %s: %v", name, err)
			}
		})
		return c
	}
	for i := range haNodes {
		newClient(fmt.Sprintf("ha-node-%d", i), haSegment, 0)
	}
	w := newClient("ha-writer", 0, 8<<20)

	// Preload, with content checks.
	var committed []haPut
	for i := range haPreload {
		key := fmt.Sprintf("pre-%d", i)
		if err := w.Put(ctx, key, valueFor(haSeed, i, haValue), nil); err != nil {
			t.Fatalf("preload put %q: %v", key, err)
		}
		committed = append(committed, haPut{key: key, i: i})
	}
	mustGet(t, ctx, w, "pre-0", valueFor(haSeed, 0, haValue))

	// Background writer: one key after another; a failed put is retried
	// (a put that did commit then answers OBJECT_ALREADY_EXISTS, which
	// counts as success and keeps the same value).
	log := &haLog{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		retry := time.NewTicker(5 * time.Millisecond)
		defer retry.Stop()
		for n := haPreload; ; n++ {
			key := fmt.Sprintf("bg-%d", n)
			val := valueFor(haSeed, n, haValue)
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				err := w.Put(ctx, key, val, nil)
				log.mu.Lock()
				if err == nil {
					log.ok = append(log.ok, haPut{key: key, i: n, start: start, end: time.Now()})
				} else {
					log.failures++
					log.lastErr = err
				}
				log.mu.Unlock()
				if err == nil {
					break
				}
				select {
				case <-stop:
					return
				case <-retry.C:
				}
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}()
	pollUntil(t, ctx, "background puts before the kill", func() bool { ok, _ := log.snapshot(); return len(ok) >= haBefore })

	// Kill the leader mid-workload.
	killed := time.Now()
	if crash {
		old.Crash()
	} else {
		old.Close()
	}
	var recovered time.Time
	pollUntil(t, ctx, "a put to succeed after the kill", func() bool {
		ok, _ := log.snapshot()
		for _, p := range ok {
			if p.start.After(killed) {
				recovered = p.end
				return true
			}
		}
		return false
	})
	recovery := recovered.Sub(killed)
	var afterRecovery int
	pollUntil(t, ctx, "background puts after recovery", func() bool {
		ok, _ := log.snapshot()
		afterRecovery = 0
		for _, p := range ok {
			if p.start.After(recovered) {
				afterRecovery++
			}
		}
		return afterRecovery >= haAfter
	})
	close(stop)
	<-done
	bg, failures := log.snapshot()
	committed = append(committed, bg...)

	nl := leaderOf()
	if nl == nil || nl == old {
		t.Fatalf("no new leader after the kill")
	}
	if got := roleOf(t, nl); got != "leader" {
		t.Fatalf("new leader's /health role %q", got)
	}
	mode := "resign (Close)"
	if crash {
		mode = fmt.Sprintf("crash (lease left to expire, session TTL %v)", sessionTTL)
	}
	t.Logf("recovery time: %v after killing leader %s by %s; new leader %s; %d background puts failed meanwhile (last: %v)",
		recovery.Round(time.Millisecond), old.RPCAddr, mode, nl.RPCAddr, failures, log.lastErr)

	// Zero committed objects lost: every put that returned success reads
	// back intact from the new leader.
	for _, p := range committed {
		got, err := w.Get(ctx, p.key)
		if err != nil {
			t.Fatalf("committed %q lost after failover: %v", p.key, err)
		}
		if want := valueFor(haSeed, p.i, haValue); !bytes.Equal(got, want) {
			t.Fatalf("committed %q corrupt after failover: first difference at byte %d", p.key, firstDiff(got, want))
		}
	}
	st := stats(t, ctx, w)
	if st.Segments != haNodes || st.Objects < int64(len(committed)) {
		t.Fatalf("new leader: %d segments, %d objects; want %d segments, >= %d objects", st.Segments, st.Objects, haNodes, len(committed))
	}
	t.Logf("%d committed objects (%d preloaded, %d background) all intact on the new leader", len(committed), haPreload, len(bg))
}
