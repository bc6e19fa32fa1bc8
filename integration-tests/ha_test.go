package integration

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/master"
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

func runFailover(t *testing.T, crash bool) {
	ep := etcdtest.Start(t) // skips under -short
	ctx, cancel := context.WithTimeout(context.Background(), haTestTimeout)
	defer cancel()
	h := startHA(t, ep, haOptions{
		Cluster: "ha_failover", Masters: haMasters, Master: master.Config{},
		SnapshotEvery:  64, // snapshots and log replay both play a part in the takeover
		Crash:          crash,
		LogCloseErrors: true,
	})
	old := h.waitLeader(ctx)
	for _, p := range h.masters {
		want := "standby"
		if p == old {
			want = "leader"
		}
		if got := roleOf(t, p); got != want {
			t.Fatalf("master %s: /health role %q, want %q", p.RPCAddr, got, want)
		}
	}

	newClient := func(name string, segment, buffer uint64) *client.Client {
		return h.client(ctx, client.Config{LocalHostname: name, GlobalSegmentSize: segment, LocalBufferSize: buffer})
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
	h.kill(old)
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

	nl := h.newLeader(old)
	t.Logf("recovery time: %v after killing leader %s by %s; new leader %s; %d background puts failed meanwhile (last: %v)",
		recovery.Round(time.Millisecond), old.RPCAddr, h.killMode(), nl.RPCAddr, failures, log.lastErr)

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
