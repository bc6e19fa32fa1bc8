package lmcache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
)

const testTimeout = 30 * time.Second

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

var clientSeq atomic.Int64

// startPool is an in-process master with two 64 MiB nodes.
func startPool(t *testing.T) *localcluster.Cluster {
	t.Helper()
	cl, err := localcluster.Start(testContext(t), localcluster.Options{Nodes: 2, SegmentSize: 64 << 20})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// newConnector is a Connector over a fresh pure client of cl.
func newConnector(t *testing.T, cl *localcluster.Cluster, s Settings) *Connector {
	t.Helper()
	c, err := cl.NewClient(testContext(t), client.Config{LocalHostname: fmt.Sprintf("lmcache-test-%d", clientSeq.Add(1))})
	require.NoError(t, err)
	conn := NewConnector(s, c, c.Close)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// arena is off-heap memory standing in for LMCache's pinned CPU buffer.
func arena(t *testing.T, size int) []byte {
	t.Helper()
	r, err := memory.Map(size)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r.Bytes()
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

const chunk = 64 << 10 // a "full chunk" of the tests, bytes

func TestPutGetExactLengthZeroCopy(t *testing.T) {
	cl := startPool(t)
	w := newConnector(t, cl, Settings{KeyPrefix: "t/"})
	src := arena(t, 4*chunk)
	require.NoError(t, w.RegisterBuffer(src))
	keys := []string{"m@1@0@a@bfloat16", "m@1@0@b@bfloat16", "m@1@0@c@bfloat16"}
	lens := []int{chunk, chunk, chunk / 4} // the last is a partial chunk
	var srcs [][]byte
	for i, n := range lens {
		b := src[i*chunk : i*chunk+n]
		fill(b, uint64(i))
		srcs = append(srcs, b)
	}
	for i, err := range w.BatchedPut(keys, srcs) {
		require.NoError(t, err, keys[i])
	}

	// A second connector (another process in LMCache) reads them back
	// into full-chunk buffers: the bytes read are the stored lengths.
	r := newConnector(t, cl, Settings{KeyPrefix: "t/"})
	dst := arena(t, 4*chunk)
	require.NoError(t, r.RegisterBuffer(dst))
	n, err := r.BatchedContains(append(keys, "m@1@0@zz@bfloat16"))
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	var dsts [][]byte
	for i := range keys {
		dsts = append(dsts, dst[i*chunk:(i+1)*chunk])
	}
	got, errs := r.BatchedGet(keys, dsts)
	for i := range keys {
		require.NoError(t, errs[i], keys[i])
		require.Equal(t, lens[i], got[i], keys[i])
		require.Equal(t, srcs[i], dsts[i][:got[i]], keys[i])
	}
	// The pool holds them under the prefix; List strips it.
	listed, err := r.List()
	require.NoError(t, err)
	assert.ElementsMatch(t, keys, listed)
	ok, err := r.Exists(keys[2])
	require.NoError(t, err)
	assert.True(t, ok)
	require.NoError(t, r.Remove(keys[2]))
	ok, err = r.Exists(keys[2])
	require.NoError(t, err)
	assert.False(t, ok)
	require.NoError(t, r.Ping())
	require.NoError(t, r.UnregisterBuffer(memory.AddrOf(dst)))
	require.Error(t, r.UnregisterBuffer(memory.AddrOf(dst)))
}

func TestPrefixCount(t *testing.T) {
	cl := startPool(t)
	c := newConnector(t, cl, Settings{})
	buf := arena(t, chunk)
	require.NoError(t, c.RegisterBuffer(buf))
	fill(buf, 1)
	// Stored: k0 k1 _ k3: the prefix stops at the first miss.
	for _, k := range []string{"k0", "k1", "k3"} {
		require.NoError(t, c.BatchedPut([]string{k}, [][]byte{buf})[0])
	}
	for _, tc := range []struct {
		keys []string
		want int
	}{
		{[]string{"k0", "k1", "k2", "k3"}, 2},
		{[]string{"k2", "k0"}, 0},
		{[]string{"k0", "k1"}, 2},
		{[]string{"k3"}, 1},
		{nil, 0},
	} {
		n, err := c.BatchedContains(tc.keys)
		require.NoError(t, err)
		assert.Equal(t, tc.want, n, "%v", tc.keys)
	}
}

func TestUnregisteredBuffersAreRegisteredForTheCall(t *testing.T) {
	cl := startPool(t)
	c := newConnector(t, cl, Settings{})
	mem := arena(t, 3*chunk)
	a, b := mem[:chunk], mem[chunk:2*chunk]
	fill(a, 3)
	fill(b, 4)
	// Nothing registered: both buffers are registered for the call, and
	// a buffer inside another (same call) needs nothing more.
	inner := a[100:200]
	errs := c.BatchedPut([]string{"a", "b", "inner"}, [][]byte{a, b, inner})
	for _, err := range errs {
		require.NoError(t, err)
	}
	out := mem[2*chunk:]
	n, gerrs := c.BatchedGet([]string{"inner"}, [][]byte{out})
	require.NoError(t, gerrs[0])
	require.Equal(t, a[100:200], out[:n[0]])
	n, gerrs = c.BatchedGet([]string{"b"}, [][]byte{out})
	require.NoError(t, gerrs[0])
	require.Equal(t, b, out[:n[0]])
	// Registered for the call only: a later RegisterBuffer of it works.
	require.NoError(t, c.RegisterBuffer(mem))
}

func TestMissesAndBadInput(t *testing.T) {
	cl := startPool(t)
	c := newConnector(t, cl, Settings{})
	buf := arena(t, chunk)
	require.NoError(t, c.RegisterBuffer(buf))
	_, errs := c.BatchedGet([]string{"absent"}, [][]byte{buf})
	require.Error(t, errs[0])
	assert.True(t, store.CodeOf(errs[0]) == store.ObjectNotFound, "%v", errs[0])
	// A value longer than the destination is an error, never a short read.
	fill(buf, 5)
	require.NoError(t, c.BatchedPut([]string{"big"}, [][]byte{buf})[0])
	_, errs = c.BatchedGet([]string{"big"}, [][]byte{buf[:chunk/2]})
	require.Error(t, errs[0])
	assert.True(t, store.CodeOf(errs[0]) == store.BufferOverflow, "%v", errs[0])
	assert.Error(t, c.BatchedPut([]string{"a", "b"}, [][]byte{buf})[0])
	assert.Error(t, c.BatchedPut([]string{"empty"}, [][]byte{nil})[0])
}

func TestDeadMasterLookupsMissFast(t *testing.T) {
	cl := startPool(t)
	c := newConnector(t, cl, Settings{LookupTimeout: 2 * time.Second})
	buf := arena(t, chunk)
	require.NoError(t, c.RegisterBuffer(buf))
	require.NoError(t, c.BatchedPut([]string{"k"}, [][]byte{buf})[0])
	n, err := c.BatchedContains([]string{"k"})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	cl.Master.Close()
	cl.Master = nil
	// The first lookup fails (never a hit); the ones after it answer
	// "absent" at once without asking.
	n, err = c.BatchedContains([]string{"k"})
	assert.Error(t, err)
	assert.Equal(t, 0, n)
	require.True(t, c.lookups.Open(), "the failed lookup opens the breaker")
	for range 20 {
		ok, err := c.Exists("k")
		require.NoError(t, err)
		require.False(t, ok)
	}
	assert.Error(t, c.Ping())
}

func TestClosed(t *testing.T) {
	cl := startPool(t)
	c := newConnector(t, cl, Settings{})
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	_, err := c.Exists("k")
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, c.BatchedPut([]string{"k"}, [][]byte{{1}})[0], ErrClosed)
	_, errs := c.BatchedGet([]string{"k"}, [][]byte{{1}})
	assert.ErrorIs(t, errs[0], ErrClosed)
	_, err = c.List()
	assert.ErrorIs(t, err, ErrClosed)
}
