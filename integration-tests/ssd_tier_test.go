package integration

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
	"github.com/mooncake-go/mooncake/core/store/master"
)

// SSD tier pool: one node with a small DRAM segment and a disk tier.
const (
	tierSegment = 1 << 20  // the node's DRAM
	tierValue   = 64 << 10 // bytes per object
	tierObjects = 40       // 2.5 x the DRAM
)

// startTierPool starts a master with offload on (onEvict selects the
// mode), one node with a tierSegment-byte segment and a disk tier in a
// temporary directory, and a pure client.
func startTierPool(t *testing.T, onEvict bool) (*localcluster.Cluster, *client.Client) {
	t.Helper()
	ctx := testContext(t)
	cl, err := localcluster.Start(ctx, localcluster.Options{
		Nodes: 1, SegmentSize: tierSegment, StorageRootDir: t.TempDir(), StorageQuota: 64 << 20,
		Master: master.Config{EnableOffload: true, OffloadOnEvict: onEvict, EvictionHighWatermark: 0.5, EvictionRatio: 0.25,
			DefaultLeaseTTL: time.Second},
	})
	if err != nil {
		t.Fatalf("start pool: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl, newClient(t, cl, "client")
}

// TestSSDTierOffloadOnEvict fills a pool 2.5 times over with offload on
// evict: evicted objects land in checksummed files on the node's disk
// tier, nothing is lost, every object reads back byte for byte (those on
// disk staged back by the node), and a corrupted file is a miss
// (OBJECT_NOT_FOUND), never wrong bytes.
func TestSSDTierOffloadOnEvict(t *testing.T) {
	cl, c := startTierPool(t, true)
	ctx := testContext(t)
	node := cl.Nodes[0]
	const seed = 41
	fillTier(t, ctx, c, seed, tierObjects, tierValue)
	// Let the offloads the fill queued finish: the node's files and the
	// master's LOCAL_DISK replicas then agree.
	settleOffloads(t, ctx, c, node)
	// Every object is still known; the oldest ones are only on disk.
	diskOnly := diskOnlyKeys(t, ctx, c, tierObjects)
	if want := tierObjects - tierSegment/tierValue; len(diskOnly) < want {
		t.Fatalf("%d objects only on disk, want at least %d", len(diskOnly), want)
	}
	if diskOnly[0] != tierKey(0) {
		t.Fatalf("first disk-only object %s, want the least recently used %s", diskOnly[0], tierKey(0))
	}
	st := stats(t, ctx, c)
	files := node.DiskTier().Stats()
	if st.DiskObjects < int64(len(diskOnly)) || files.Files < len(diskOnly) || st.Offloads < uint64(len(diskOnly)) || st.Used > tierSegment {
		t.Fatalf("master %d disk objects (%d offloads, %d bytes of DRAM used), node %d files; %d objects only on disk",
			st.DiskObjects, st.Offloads, st.Used, files.Files, len(diskOnly))
	}
	for _, k := range diskOnly {
		if _, err := os.Stat(node.DiskTier().Path(k)); err != nil {
			t.Fatalf("file of %s: %v", k, err)
		}
	}

	// Corrupt one file (a bit of its value): reading it is a miss.
	victim := diskOnly[len(diskOnly)/2]
	path := corruptTierFile(t, node, victim)
	wantCorruptMiss(t, ctx, c, victim, path, "")

	// Every other object reads back byte for byte.
	before := stats(t, ctx, c)
	readBackTier(t, ctx, c, seed, tierObjects, tierValue, "", victim)
	after := stats(t, ctx, c)
	if hits := after.DiskHits - before.DiskHits; hits < uint64(len(diskOnly)-1) {
		t.Fatalf("%d reads served from disk, want at least %d", hits, len(diskOnly)-1)
	}
	if after.DiskMisses != 1 || after.OffloadFailures != 0 {
		t.Fatalf("disk misses %d (want 1: the corrupted file), offload failures %d", after.DiskMisses, after.OffloadFailures)
	}
	if fs := node.DiskTier().Stats(); fs.Corrupt != 1 || fs.Reads < uint64(len(diskOnly)-1) {
		t.Fatalf("node file store %+v: want 1 corrupt, >= %d reads", fs, len(diskOnly)-1)
	}
	t.Logf("%d objects, %d only on disk after the fill; %d offloads, %d disk hits", tierObjects, len(diskOnly), after.Offloads, after.DiskHits)
}

// TestSSDTierWriteThrough: without offload_on_evict every put is copied to
// disk at once, so eviction frees DRAM immediately and puts never wait;
// the disk quota evicts the oldest files (and their objects) when full.
func TestSSDTierWriteThrough(t *testing.T) {
	cl, c := startTierPool(t, false)
	ctx := testContext(t)
	node := cl.Nodes[0]
	const seed = 42
	const n = 24
	for i := range n {
		if err := retry(ctx, func() error { return c.Put(ctx, tierKey(i), valueFor(seed, i, tierValue), nil) }); err != nil {
			t.Fatalf("put %s: %v", tierKey(i), err)
		}
		// Wait for each copy, so that eviction never meets an object
		// whose offload has not started yet (it would drop it).
		key := tierKey(i)
		pollUntil(t, ctx, key+" on disk", func() bool {
			k, err := c.Stat(ctx, key)
			return err == nil && k.DiskSegment != ""
		})
	}
	for i := range n {
		var got []byte
		err := retry(ctx, func() (err error) { got, err = c.Get(ctx, tierKey(i)); return err })
		if err != nil || !bytes.Equal(got, valueFor(seed, i, tierValue)) {
			t.Fatalf("get %s: %d bytes, %v", tierKey(i), len(got), err)
		}
	}
	st := stats(t, ctx, c)
	if st.Offloads != n || st.DiskObjects != n || node.DiskTier().Stats().Files != n || st.DiskHits == 0 {
		t.Fatalf("stats: %d offloads, %d disk objects, %d files, %d disk hits; want %d, %d, %d, > 0",
			st.Offloads, st.DiskObjects, node.DiskTier().Stats().Files, st.DiskHits, n, n, n)
	}
}

// TestSSDTierBadConfig: a disk tier needs a segment and a master with
// enable_offload; the errors say so.
func TestSSDTierBadConfig(t *testing.T) {
	cl, _ := startPool(t, master.Config{})
	ctx := testContext(t)
	_, err := cl.NewClient(ctx, client.Config{LocalHostname: "noseg", StorageRootDir: t.TempDir()})
	wantErr(t, "disk tier without a segment", err, store.ErrInvalidParams)
	dir := filepath.Join(t.TempDir(), "tier")
	_, err = cl.NewClient(ctx, client.Config{LocalHostname: "nooffload", GlobalSegmentSize: 1 << 20, StorageRootDir: dir})
	wantErr(t, "disk tier on a master without enable_offload", err, store.ErrUnableOffload)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused disk tier created its directory: %v", err)
	}

	tc, _ := startTierPool(t, true)
	_, err = tc.NewClient(ctx, client.Config{LocalHostname: "tiny", GlobalSegmentSize: 1 << 20, StorageRootDir: dir, StorageQuota: 1})
	wantErr(t, "disk tier of 1 byte", err, store.ErrInvalidParams)
	dir = tc.Nodes[0].DiskTier().Dir()
	_, err = tc.NewClient(ctx, client.Config{LocalHostname: "samedir", GlobalSegmentSize: 1 << 20, StorageRootDir: dir})
	wantErr(t, "disk tier in a directory in use", err, store.ErrInvalidParams)
	if st := stats(t, ctx, tc.Nodes[0]); st.DiskCapacity != 64<<20 {
		t.Fatalf("disk capacity %d after the refused tier; want only the node's %d (the refused one unmounted)", st.DiskCapacity, 64<<20)
	}
}

// TestSSDTierPutsWaitForOffloads: with offload_on_evict, puts that find the
// DRAM full while eviction's copies are still being written wait for them
// (server Options.PutWait) instead of failing with NO_AVAILABLE_HANDLE:
// filling the pool 2.5 times over needs no retry.
func TestSSDTierPutsWaitForOffloads(t *testing.T) {
	_, c := startTierPool(t, true)
	ctx := testContext(t)
	const seed = 44
	for i := range tierObjects {
		if err := c.Put(ctx, tierKey(i), valueFor(seed, i, tierValue), nil); err != nil {
			t.Fatalf("put %s: %v", tierKey(i), err)
		}
	}
	for i := range tierObjects {
		mustGet(t, ctx, c, tierKey(i), valueFor(seed, i, tierValue))
	}
	if st := stats(t, ctx, c); st.DiskHits == 0 || st.Offloads == 0 {
		t.Fatalf("%d disk hits, %d offloads; want both > 0", st.DiskHits, st.Offloads)
	}
}

// TestSSDTierSequentialReadUnderDRAMPressure is the reviewer's sequence,
// scaled down: a write-through pool whose node has 4 MiB of DRAM takes 40
// x 256 KiB, then a pure client reads every key once, in order, without
// retrying. Each disk-only read stages its object into the node's DRAM and
// leases it, so the DRAM fills with leased copies after 16 reads; the
// reads after that must make room (dropping DRAM copies already on disk)
// or wait for a lease to end, never fail. Every value reads back byte for
// byte, the older ones from disk.
func TestSSDTierSequentialReadUnderDRAMPressure(t *testing.T) {
	const (
		segment = 4 << 20
		value   = 256 << 10
		objects = 40
		seed    = 43
		lease   = 300 * time.Millisecond
	)
	ctx := testContext(t)
	cl, err := localcluster.Start(ctx, localcluster.Options{
		Nodes: 1, SegmentSize: segment, StorageRootDir: t.TempDir(), StorageQuota: 64 << 20,
		Master: master.Config{EnableOffload: true, DefaultLeaseTTL: lease},
	})
	if err != nil {
		t.Fatalf("start pool: %v", err)
	}
	t.Cleanup(cl.Close)
	c := newClient(t, cl, "client")
	for i := range objects {
		if err := c.Put(ctx, tierKey(i), valueFor(seed, i, value), nil); err != nil {
			t.Fatalf("put %s: %v", tierKey(i), err)
		}
	}
	pollUntil(t, ctx, "every put on disk", func() bool { return stats(t, ctx, c).DiskObjects == objects })
	before := stats(t, ctx, c)
	start := time.Now()
	for i := range objects {
		mustGet(t, ctx, c, tierKey(i), valueFor(seed, i, value))
	}
	after := stats(t, ctx, c)
	hits := after.DiskHits - before.DiskHits
	if min := uint64(objects - segment/value); hits < min {
		t.Fatalf("%d reads served from disk, want at least %d", hits, min)
	}
	if after.DiskMisses != 0 || after.Used > segment {
		t.Fatalf("%d disk misses, %d bytes of DRAM used; want 0, <= %d", after.DiskMisses, after.Used, segment)
	}
	t.Logf("%d reads in %v, %d from disk", objects, time.Since(start).Round(time.Millisecond), hits)
}
