package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
	"github.com/mooncake-go/mooncake/core/store/master"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

const (
	segmentSize = 4 << 20                 // DRAM each storage node contributes
	poolNodes   = 2                       // storage nodes per pool
	poolSize    = poolNodes * segmentSize // bytes the whole pool holds
	localBuffer = 8 << 20                 // the test client's scratch buffer
	testTimeout = 30 * time.Second        // bound on each test's calls
)

// testContext is a context bounded by testTimeout, cancelled when t ends.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// startPool starts a master with mcfg and poolNodes storage nodes of
// segmentSize bytes each, plus a pure client (no segment) with a local
// buffer of localBuffer bytes named "client". Everything is closed when t
// ends: the client first, then the nodes, then the master.
func startPool(t *testing.T, mcfg master.Config) (*localcluster.Cluster, *client.Client) {
	t.Helper()
	ctx := testContext(t)
	cl, err := localcluster.Start(ctx, localcluster.Options{Nodes: poolNodes, SegmentSize: segmentSize, Master: mcfg})
	if err != nil {
		t.Fatalf("start pool: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl, newClient(t, cl, "client")
}

// newClient starts a pure client of cl named name; it is closed when t ends.
func newClient(t *testing.T, cl *localcluster.Cluster, name string) *client.Client {
	t.Helper()
	c, err := cl.NewClient(testContext(t), client.Config{LocalHostname: name, LocalBufferSize: localBuffer})
	if err != nil {
		t.Fatalf("start client %q: %v", name, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close client %q: %v", name, err)
		}
	})
	return c
}

// newRand returns a PCG source seeded with seed and logs the seed.
func newRand(t *testing.T, seed uint64) *rand.Rand {
	t.Helper()
	t.Logf("rand seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// fillRandom overwrites b with bytes from r.
func fillRandom(r *rand.Rand, b []byte) {
	var w [8]byte
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		copy(b[i:], w[:])
	}
}

// randBytes returns n bytes from r.
func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	fillRandom(r, b)
	return b
}

// valueFor is the deterministic n-byte value of key number i under seed,
// so tests that write many keys need not keep the values.
func valueFor(seed uint64, i, n int) []byte {
	return randBytes(rand.New(rand.NewPCG(seed, uint64(i))), n)
}

// wantErr fails t unless err matches the pool error sentinel want.
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %s", what, err, store.CodeOf(want))
	}
}

// mustGet fails t unless key reads back as want through c.Get.
func mustGet(t *testing.T, ctx context.Context, c *client.Client, key string, want []byte) {
	t.Helper()
	got, err := c.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("get %q: %d bytes differ from the %d written (first difference at %d)", key, len(got), len(want), firstDiff(got, want))
	}
}

// firstDiff is the index of the first byte where a and b differ.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// stats fetches the master's usage snapshot.
func stats(t *testing.T, ctx context.Context, c *client.Client) *pb.StatsResponse {
	t.Helper()
	s, err := c.Stats(ctx)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return s
}

// registeredRegion maps n bytes off the Go heap and registers them with c
// for zero-copy calls; when t ends the region is unregistered (before c
// closes) and unmapped.
func registeredRegion(t *testing.T, c *client.Client, n int) []byte {
	t.Helper()
	reg, err := memory.Map(n)
	if err != nil {
		t.Fatalf("map %d bytes: %v", n, err)
	}
	buf := reg.Bytes()
	if err := c.RegisterBuffer(testContext(t), buf); err != nil {
		reg.Close()
		t.Fatalf("register %d bytes: %v", n, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.UnregisterBuffer(ctx, buf); err != nil {
			t.Errorf("unregister buffer: %v", err)
		}
		if err := reg.Close(); err != nil {
			t.Errorf("unmap buffer: %v", err)
		}
	})
	return buf
}

// eventually polls cond every few milliseconds until it returns nil, and
// fails t with cond's last error once d has passed.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		<-tick.C
	}
}

// pollUntil calls cond every few milliseconds until it is true, failing t
// when ctx ends.
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

// retry calls f until it returns nil or an error other than the
// transient NO_AVAILABLE_HANDLE (DRAM still being offloaded) and
// REPLICA_IS_NOT_READY, or until ctx ends.
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if !errors.Is(err, store.ErrNoAvailableHandle) && !errors.Is(err, store.ErrReplicaIsNotReady) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up: %v)", err, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
