package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
)

// Helpers for pools whose node has a disk tier: objects are tierKey(i)
// holding valueFor(seed, i, size).

func tierKey(i int) string { return fmt.Sprintf("ssd/%03d", i) }

// fillTier puts objects tierKey(0..n-1) of size bytes through c,
// retrying the transient errors of a DRAM still being offloaded.
func fillTier(t *testing.T, ctx context.Context, c *client.Client, seed uint64, n, size int) {
	t.Helper()
	for i := range n {
		v := valueFor(seed, i, size)
		if err := retry(ctx, func() error { return c.Put(ctx, tierKey(i), v, nil) }); err != nil {
			t.Fatalf("put %s: %v", tierKey(i), err)
		}
	}
}

// settleOffloads waits until no offload is pending and node's disk tier
// holds as many files as the master counts objects on disk.
func settleOffloads(t *testing.T, ctx context.Context, c, node *client.Client) {
	t.Helper()
	pollUntil(t, ctx, "offloads to settle", func() bool {
		st := stats(t, ctx, c)
		return st.PendingOffloadBytes == 0 && int64(node.DiskTier().Stats().Files) == st.DiskObjects
	})
}

// diskOnlyKeys stats tierKey(0..n-1) through c, failing t if one is
// unknown, and returns in key order those only on disk (no DRAM replica).
func diskOnlyKeys(t *testing.T, ctx context.Context, c *client.Client, n int) []string {
	t.Helper()
	var diskOnly []string
	for i := range n {
		k, err := c.Stat(ctx, tierKey(i))
		if err != nil {
			t.Fatalf("stat %s after the fill: %v (an object was lost)", tierKey(i), err)
		}
		if k.DiskSegment != "" && len(k.Replicas) == 0 {
			diskOnly = append(diskOnly, k.Key)
		}
	}
	return diskOnly
}

// corruptTierFile flips a bit of key's value in its file on node's disk
// tier and returns the file's path.
func corruptTierFile(t *testing.T, node *client.Client, key string) string {
	t.Helper()
	path := node.DiskTier().Path(key)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-100] ^= 0x40
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// wantCorruptMiss fails t unless key, whose file at path is corrupt, is a
// miss through c: the get returns OBJECT_NOT_FOUND and no bytes, the file
// is deleted, and the object is gone. via (" through the new leader", or
// "") completes the get's failure message.
func wantCorruptMiss(t *testing.T, ctx context.Context, c *client.Client, key, path, via string) {
	t.Helper()
	got, err := c.Get(ctx, key)
	if !errors.Is(err, store.ErrObjectNotFound) || got != nil {
		t.Fatalf("get of the corrupted %s%s: %d bytes, %v; want OBJECT_NOT_FOUND", key, via, len(got), err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("corrupt file still there: %v", err)
	}
	if _, err := c.Stat(ctx, key); !errors.Is(err, store.ErrObjectNotFound) {
		t.Fatalf("stat of the corrupted %s: %v; want OBJECT_NOT_FOUND", key, err)
	}
}

// readBackTier reads tierKey(0..n-1) but the keys in skip through c,
// retrying transient errors, and fails t unless each is byte-identical to
// what fillTier wrote. when (" after the failover", or "") completes the
// failure messages.
func readBackTier(t *testing.T, ctx context.Context, c *client.Client, seed uint64, n, size int, when string, skip ...string) {
	t.Helper()
	for i := range n {
		key := tierKey(i)
		if slices.Contains(skip, key) {
			continue
		}
		var got []byte
		if err := retry(ctx, func() (err error) { got, err = c.Get(ctx, key); return err }); err != nil {
			t.Fatalf("get %s%s: %v", key, when, err)
		}
		if want := valueFor(seed, i, size); !bytes.Equal(got, want) {
			t.Fatalf("get %s%s: %d bytes differ from the %d written (first at %d)", key, when, len(got), len(want), firstDiff(got, want))
		}
	}
}
