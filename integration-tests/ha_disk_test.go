package integration

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/master"
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
	h := startHA(t, ep, haOptions{
		Cluster: "ha_disk_" + map[bool]string{false: "resign", true: "crash"}[crash],
		Masters: haDiskMasters,
		Master: master.Config{EnableOffload: true, OffloadOnEvict: true, EvictionHighWatermark: 0.5, EvictionRatio: 0.25,
			DefaultLeaseTTL: 200 * time.Millisecond},
		SnapshotEvery: 16, // the takeover replays a snapshot and a log tail
		Crash:         crash,
	})
	old := h.waitLeader(ctx)

	node := h.client(ctx, client.Config{LocalHostname: "ha-disk-node", GlobalSegmentSize: haDiskSegment,
		StorageRootDir: filepath.Join(t.TempDir(), "tier"), StorageQuota: 64 << 20})
	c := h.client(ctx, client.Config{LocalHostname: "ha-disk-client", LocalBufferSize: localBuffer})

	fillTier(t, ctx, c, haDiskSeed, haDiskObjects, haDiskValue)
	// Let the offloads settle: the node's files and the leader's
	// LOCAL_DISK replicas (replicated to the standby) then agree.
	settleOffloads(t, ctx, c, node)
	diskOnly := diskOnlyKeys(t, ctx, c, haDiskObjects)
	if want := haDiskObjects - haDiskSegment/haDiskValue; len(diskOnly) < want {
		t.Fatalf("%d objects only on disk before the failover, want at least %d", len(diskOnly), want)
	}
	pre := stats(t, ctx, c)

	// Corrupt one disk-only file (a bit of its value) before the kill.
	victim := diskOnly[len(diskOnly)/2]
	path := corruptTierFile(t, node, victim)

	// Stop the leader; recovery ends when a disk-only object reads back
	// from disk through the new leader.
	probe := diskOnly[0]
	probeWant := valueFor(haDiskSeed, indexOf(t, probe), haDiskValue)
	killed := time.Now()
	h.kill(old)
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
	nl := h.newLeader(old)
	t.Logf("recovery time: %v from killing leader %s by %s to a disk-only read through new leader %s (last error meanwhile: %v)",
		recovery.Round(time.Millisecond), old.RPCAddr, h.killMode(), nl.RPCAddr, lastErr)

	// The new leader knows the node, its disk tier and every object.
	st := stats(t, ctx, c)
	if st.Segments != 1 || st.Objects != haDiskObjects || st.DiskObjects < pre.DiskObjects-1 {
		t.Fatalf("new leader: %d segments, %d objects, %d on disk; want 1, %d, >= %d",
			st.Segments, st.Objects, st.DiskObjects, haDiskObjects, pre.DiskObjects-1)
	}

	// The corrupt file is a miss, never wrong bytes.
	wantCorruptMiss(t, ctx, c, victim, path, " through the new leader")

	// Every other committed object reads back byte for byte, the
	// disk-only ones staged back by the node for the new leader.
	before := stats(t, ctx, c)
	readBackTier(t, ctx, c, haDiskSeed, haDiskObjects, haDiskValue, " after the failover", victim, probe)
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
