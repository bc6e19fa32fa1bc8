package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/store/server"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// High availability with an SSD tier: masters elect a leader on an
// embedded etcd, one node has a small DRAM segment and a disk tier that
// takes the objects evicted from DRAM, the leader goes away, and the new
// leader must serve every object - those only on disk included - byte for
// byte, while a corrupt file stays a miss.

const (
	haDiskMasters = 2
	haDiskSegment = 1 << 20  // the node's DRAM
	haDiskValue   = 64 << 10 // bytes per object
	haDiskObjects = 32       // 2 x the DRAM
	haDiskSeed    = 45
	haDiskTimeout = time.Minute
)

// TestHADiskFailover fills a one-node pool with an offload-on-evict disk
// tier twice over through HA masters, corrupts one disk-only file, then
// stops the leader (resign: Close; crash: its etcd lease left to expire)
// and checks that the new leader serves the disk tier: a disk-only object
// reads back from disk through it (the recovery time is logged), every
// other committed object reads back byte-identical, and the corrupt file
// is a miss (OBJECT_NOT_FOUND, its file deleted), never wrong bytes.
func TestHADiskFailover(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash bool
	}{
		{"resign", false},
		{"crash", true},
	} {
		t.Run(tc.name, func(t *testing.T) { runHADiskFailover(t, tc.crash) })
	}
}

func runHADiskFailover(t *testing.T, crash bool) {
	ep := etcdtest.Start(t) // skips under -short
	ctx, cancel := context.WithTimeout(context.Background(), haDiskTimeout)
	defer cancel()
	cluster := "ha_disk_" + map[bool]string{false: "resign", true: "crash"}[crash]
	sessionTTL := 5 * time.Second
	if crash {
		sessionTTL = 2 * time.Second // etcd's shortest practical lease
	}

	masters := make([]*server.Process, haDiskMasters)
	for i := range masters {
		p, err := server.Start(server.ProcessConfig{
			Master: master.Config{EnableOffload: true, OffloadOnEvict: true, EvictionHighWatermark: 0.5, EvictionRatio: 0.25,
				DefaultLeaseTTL: 200 * time.Millisecond},
			RPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
			HA: &server.HAConfig{
				Endpoints: []string{ep}, ClusterID: cluster, SessionTTL: sessionTTL,
				SnapshotEvery: 16, // the takeover replays a snapshot and a log tail
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

	meta, err := etcdmeta.New(ctx, []string{ep})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { meta.Close() })
	start := func(cfg client.Config) *client.Client {
		cfg.MasterAddr, cfg.ClusterID, cfg.Metadata = "etcd://"+ep, cluster, meta
		cfg.Transport, cfg.PingInterval = tcp.New(tcp.Config{}), 100*time.Millisecond
		c, err := client.New(ctx, cfg)
		if err != nil {
			t.Fatalf("start %s: %v", cfg.LocalHostname, err)
		}
		t.Cleanup(func() {
			if err := c.Close(); err != nil {
				t.Errorf("close %s: %v", cfg.LocalHostname, err)
			}
		})
		return c
	}
	node := start(client.Config{LocalHostname: "ha-disk-node", GlobalSegmentSize: haDiskSegment,
		StorageRootDir: filepath.Join(t.TempDir(), "tier"), StorageQuota: 64 << 20})
	c := start(client.Config{LocalHostname: "ha-disk-client", LocalBufferSize: localBuffer})

	for i := range haDiskObjects {
		v := valueFor(haDiskSeed, i, haDiskValue)
		if err := retry(ctx, func() error { return c.Put(ctx, tierKey(i), v, nil) }); err != nil {
			t.Fatalf("put %s: %v", tierKey(i), err)
		}
	}
	// Let the offloads settle: the node's files and the leader's
	// LOCAL_DISK replicas (replicated to the standby) then agree.
	waitFor(t, ctx, "offloads to settle", func() bool {
		st := stats(t, ctx, c)
		return st.PendingOffloadBytes == 0 && int64(node.DiskTier().Stats().Files) == st.DiskObjects
	})
	var diskOnly []string
	for i := range haDiskObjects {
		k, err := c.Stat(ctx, tierKey(i))
		if err != nil {
			t.Fatalf("stat %s after the fill: %v (an object was lost)", tierKey(i), err)
		}
		if k.DiskSegment != "" && len(k.Replicas) == 0 {
			diskOnly = append(diskOnly, k.Key)
		}
	}
	if want := haDiskObjects - haDiskSegment/haDiskValue; len(diskOnly) < want {
		t.Fatalf("%d objects only on disk before the failover, want at least %d", len(diskOnly), want)
	}
	pre := stats(t, ctx, c)

	// Corrupt one disk-only file (a bit of its value) before the kill.
	victim := diskOnly[len(diskOnly)/2]
	path := node.DiskTier().Path(victim)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-100] ^= 0x40
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}

	// Stop the leader; recovery ends when a disk-only object reads back
	// from disk through the new leader.
	probe := diskOnly[0]
	probeWant := valueFor(haDiskSeed, indexOf(t, probe), haDiskValue)
	killed := time.Now()
	if crash {
		old.Crash()
	} else {
		old.Close()
	}
	var lastErr error
	for {
		got, err := c.Get(ctx, probe)
		if err == nil {
			if !bytes.Equal(got, probeWant) {
				t.Fatalf("disk-only %s after the failover: %d bytes differ from the %d written (first at %d)", probe, len(got), len(probeWant), firstDiff(got, probeWant))
			}
			break
		}
		lastErr = err
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not read back after the kill: %v", probe, lastErr)
		case <-time.After(5 * time.Millisecond):
		}
	}
	recovery := time.Since(killed)
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
	t.Logf("recovery time: %v from killing leader %s by %s to a disk-only read through new leader %s (last error meanwhile: %v)",
		recovery.Round(time.Millisecond), old.RPCAddr, mode, nl.RPCAddr, lastErr)

	// The new leader knows the node, its disk tier and every object.
	st := stats(t, ctx, c)
	if st.Segments != 1 || st.Objects != haDiskObjects || st.DiskObjects < pre.DiskObjects-1 {
		t.Fatalf("new leader: %d segments, %d objects, %d on disk; want 1, %d, >= %d",
			st.Segments, st.Objects, st.DiskObjects, haDiskObjects, pre.DiskObjects-1)
	}

	// The corrupt file is a miss, never wrong bytes.
	got, err := c.Get(ctx, victim)
	if !errors.Is(err, store.ErrObjectNotFound) || got != nil {
		t.Fatalf("get of the corrupted %s through the new leader: %d bytes, %v; want OBJECT_NOT_FOUND", victim, len(got), err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("corrupt file still there: %v", err)
	}
	if _, err := c.Stat(ctx, victim); !errors.Is(err, store.ErrObjectNotFound) {
		t.Fatalf("stat of the corrupted %s: %v; want OBJECT_NOT_FOUND", victim, err)
	}

	// Every other committed object reads back byte for byte, the
	// disk-only ones staged back by the node for the new leader.
	before := stats(t, ctx, c)
	for i := range haDiskObjects {
		key := tierKey(i)
		if key == victim || key == probe {
			continue
		}
		var got []byte
		if err := retry(ctx, func() (err error) { got, err = c.Get(ctx, key); return err }); err != nil {
			t.Fatalf("get %s after the failover: %v", key, err)
		}
		if want := valueFor(haDiskSeed, i, haDiskValue); !bytes.Equal(got, want) {
			t.Fatalf("get %s after the failover: %d bytes differ from the %d written (first at %d)", key, len(got), len(want), firstDiff(got, want))
		}
	}
	after := stats(t, ctx, c)
	if hits, want := after.DiskHits-before.DiskHits, uint64(len(diskOnly)-2); hits < want {
		t.Fatalf("%d reads served from disk by the new leader, want at least %d", hits, want)
	}
	if fs := node.DiskTier().Stats(); fs.Corrupt != 1 {
		t.Fatalf("node file store %+v: want 1 corrupt file", fs)
	}
	t.Logf("%d objects, %d only on disk before the failover; %d disk hits on the new leader", haDiskObjects, len(diskOnly), after.DiskHits)
}

// indexOf is the value index of a tierKey.
func indexOf(t *testing.T, key string) int {
	t.Helper()
	var i int
	if _, err := fmt.Sscanf(key, "ssd/%d", &i); err != nil {
		t.Fatalf("key %q: %v", key, err)
	}
	return i
}
