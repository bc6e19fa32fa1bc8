package p2p

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// shard is the shard size of the tests: small, so objects have many.
const shard = 16 << 10

// bound is the generous deadline of every test call.
const bound = 2 * time.Minute

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

// newStore starts a store on etcd ep named name; it is closed by Cleanup.
func newStore(t *testing.T, ep, name string, mod func(*Config)) *Store {
	t.Helper()
	cfg := Config{Etcd: []string{ep}, Name: name, Prefix: "test/" + t.Name() + "/", HolderWait: 300 * time.Millisecond, Concurrency: 4}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(ctxT(t), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// buffers maps off-heap buffers of sizes; with seed != 0 they are filled
// with seeded random bytes.
func buffers(t *testing.T, seed uint64, sizes ...int) [][]byte {
	t.Helper()
	r := mrand.New(mrand.NewPCG(seed, 7))
	var out [][]byte
	for _, n := range sizes {
		reg, err := memory.Map(n)
		require.NoError(t, err)
		t.Cleanup(func() { _ = reg.Close() })
		b := reg.Bytes()
		if seed != 0 {
			for i := range b {
				b[i] = byte(r.Uint32())
			}
		}
		out = append(out, b)
	}
	return out
}

func requireSame(t *testing.T, want, got [][]byte) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.True(t, string(want[i]) == string(got[i]), "buffer %d differs", i)
	}
}

// sizes of the test object: two buffers, the last shard of each short.
var sizes = []int{10*shard + 123, 3*shard + 1}

func TestSeedAndConcurrentGetters(t *testing.T) {
	ep := etcdtest.Start(t)
	ctx := ctxT(t)
	seed := newStore(t, ep, "seed", nil)
	src := buffers(t, 1, sizes...)
	// No claim expires during the test: each shard leaves the seed once.
	long := func(c *Config) { c.ClaimWait = bound }
	require.NoError(t, seed.Register(ctx, "ckpt/step-1", src, shard, "cpu:0"))

	const n = 4
	gets := make([]*Store, n)
	dsts := make([][][]byte, n)
	for i := range gets {
		gets[i] = newStore(t, ep, fmt.Sprintf("getter-%d", i), long)
		dsts[i] = buffers(t, 0, sizes...)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range gets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = gets[i].GetReplica(ctx, "ckpt/step-1", dsts[i])
		}()
	}
	wg.Wait()
	var fromOrigin, total uint64
	for i := range gets {
		require.NoError(t, errs[i], "getter %d", i)
		requireSame(t, src, dsts[i])
		st := gets[i].Stats()
		assert.Equal(t, uint64(sizes[0]+sizes[1]), st.BytesFetched, "getter %d", i)
		assert.Equal(t, uint64(11+4), st.ShardsFetched)
		fromOrigin += st.BytesFromOrigin
		total += st.BytesFetched
	}
	assert.Equal(t, uint64(n*(sizes[0]+sizes[1])), total)
	assert.Equal(t, uint64(sizes[0]+sizes[1]), fromOrigin, "the seed sent each shard once")

	info, err := seed.Info(ctx, "ckpt/step-1")
	require.NoError(t, err)
	assert.Equal(t, PayloadInfo{Name: "ckpt/step-1", MaxShardSize: shard, TotalSize: uint64(sizes[0] + sizes[1]),
		SizeList: []uint64{uint64(sizes[0]), uint64(sizes[1])}, Shards: 15, Origin: "seed", Holders: n + 1}, info)
}

func TestListByPrefix(t *testing.T) {
	ep := etcdtest.Start(t)
	ctx := ctxT(t)
	s := newStore(t, ep, "seed", nil)
	for _, name := range []string{"a/1", "a/2", "b/1"} {
		require.NoError(t, s.Register(ctx, name, buffers(t, 3, 100), 0, ""))
	}
	l, err := s.List(ctx, "a/")
	require.NoError(t, err)
	require.Len(t, l, 2)
	assert.Equal(t, "a/1", l[0].Name)
	assert.Equal(t, "a/2", l[1].Name)
	assert.Equal(t, uint64(DefaultMaxShardSize), l[0].MaxShardSize)
	all, err := s.List(ctx, "")
	require.NoError(t, err)
	assert.Len(t, all, 3)
	none, err := s.List(ctx, "zzz")
	require.NoError(t, err)
	assert.Empty(t, none)

	require.NoError(t, s.Unregister(ctx, "a/1"))
	l, err = s.List(ctx, "a/")
	require.NoError(t, err)
	require.Len(t, l, 1, "the last holder leaving deletes the object")
	assert.Equal(t, "a/2", l[0].Name)
}

// The seed unregisters after the first getter finished: later getters
// complete from peers only.
func TestSeedUnregisterLaterGettersFromPeers(t *testing.T) {
	ep := etcdtest.Start(t)
	ctx := ctxT(t)
	seed := newStore(t, ep, "seed", nil)
	src := buffers(t, 2, sizes...)
	require.NoError(t, seed.Register(ctx, "obj", src, shard, "cpu:0", WithLabels("weights", "config")))
	require.ErrorIs(t, seed.Register(ctx, "obj2", src, shard, "", WithLabels("one")), ErrInvalidArgument)
	g1 := newStore(t, ep, "g1", nil)
	d1 := buffers(t, 0, sizes...)
	var calls int
	var last uint64
	require.NoError(t, g1.GetReplica(ctx, "obj", d1, WithProgress(func(done, total uint64) {
		calls++
		assert.Greater(t, done, last)
		last = done
		assert.Equal(t, uint64(sizes[0]+sizes[1]), total)
	})))
	requireSame(t, src, d1)
	assert.Equal(t, 15, calls)
	assert.Equal(t, uint64(sizes[0]+sizes[1]), last)
	require.NoError(t, seed.Unregister(ctx, "obj"))
	for i := range src[0] { // the seed's memory is the caller's again
		src[0][i] = 0
	}
	want := buffers(t, 2, sizes...)

	info, err := g1.Info(ctx, "obj")
	require.NoError(t, err)
	assert.Equal(t, 1, info.Holders)
	assert.Equal(t, []string{"weights", "config"}, info.Labels)

	for i := range 2 {
		g := newStore(t, ep, fmt.Sprintf("late-%d", i), nil)
		d := buffers(t, 0, sizes...)
		require.NoError(t, g.GetReplica(ctx, "obj", d))
		requireSame(t, want, d)
		assert.Zero(t, g.Stats().BytesFromOrigin)
		assert.Zero(t, g.Stats().Retries)
	}
	// Everyone stops serving: the object disappears.
	require.NoError(t, g1.DeleteReplica(ctx, "obj"))
	l, err := g1.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, l, 1)
	assert.Equal(t, 2, l[0].Holders)
}

// A holder dies after the getter took its first shard from it; the getter
// completes from the seed.
func TestHolderDiesMidFetch(t *testing.T) {
	for _, tc := range []struct {
		name string
		kill func(*Store)
	}{
		// Close revokes the lease: the holder vanishes from the lists.
		{"lease revoked", func(s *Store) { _ = s.Close() }},
		// Only the engine dies: the holder is still listed, reads fail.
		{"engine closed", func(s *Store) { _ = s.eng.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := etcdtest.Start(t)
			ctx := ctxT(t)
			seed := newStore(t, ep, "seed", nil)
			src := buffers(t, 4, sizes...)
			require.NoError(t, seed.Register(ctx, "obj", src, shard, ""))
			g1 := newStore(t, ep, "g1", nil)
			require.NoError(t, g1.GetReplica(ctx, "obj", buffers(t, 0, sizes...)))

			g2 := newStore(t, ep, "g2", func(c *Config) { c.Concurrency = 1 })
			var from sync.Map
			var killed atomic.Bool
			g2.testFetched = func(i int, holder string) {
				from.Store(i, holder)
				if holder == "g1" && !killed.Swap(true) {
					tc.kill(g1)
				}
			}
			d := buffers(t, 0, sizes...)
			require.NoError(t, g2.GetReplica(ctx, "obj", d))
			requireSame(t, src, d)
			require.True(t, killed.Load(), "g2 never fetched from g1")
			var byG1, bySeed int
			from.Range(func(_, v any) bool {
				if v == "g1" {
					byG1++
				} else if v == "seed" {
					bySeed++
				}
				return true
			})
			assert.Equal(t, 1, byG1, "only the first shard came from g1")
			assert.Equal(t, 14, bySeed)
			if tc.name == "engine closed" {
				assert.GreaterOrEqual(t, g2.Stats().Retries, uint64(1))
			}
		})
	}
}

// A holder whose memory changed after it announced serves torn bytes; the
// checksum rejects them and the getter fetches from the seed.
func TestChecksumCatchesTornShard(t *testing.T) {
	ep := etcdtest.Start(t)
	ctx := ctxT(t)
	seed := newStore(t, ep, "seed", nil)
	src := buffers(t, 5, sizes...)
	require.NoError(t, seed.Register(ctx, "obj", src, shard, ""))
	g1 := newStore(t, ep, "g1", nil)
	d1 := buffers(t, 0, sizes...)
	require.NoError(t, g1.GetReplica(ctx, "obj", d1))
	d1[0][5] ^= 0xff // shard 0 of g1 is now torn

	g2 := newStore(t, ep, "g2", nil)
	d := buffers(t, 0, sizes...)
	require.NoError(t, g2.GetReplica(ctx, "obj", d))
	requireSame(t, src, d)
	st := g2.Stats()
	assert.Equal(t, uint64(1), st.Retries)
	assert.Equal(t, uint64(shard), st.BytesFromOrigin, "only the torn shard came from the seed")
}

func TestErrors(t *testing.T) {
	ep := etcdtest.Start(t)
	ctx := ctxT(t)
	seed := newStore(t, ep, "seed", nil)
	other := newStore(t, ep, "other", nil)
	src := buffers(t, 6, sizes...)
	require.NoError(t, seed.Register(ctx, "obj", src, shard, ""))

	require.ErrorIs(t, seed.Register(ctx, "obj", src, shard, ""), ErrOpened)
	require.ErrorIs(t, other.Register(ctx, "obj", buffers(t, 6, 10), shard, ""), ErrExists)
	require.ErrorIs(t, other.GetReplica(ctx, "nope", buffers(t, 0, 10)), ErrNotFound)
	require.ErrorIs(t, other.GetReplica(ctx, "obj", buffers(t, 0, sizes[0])), ErrSizeMismatch)
	require.ErrorIs(t, other.GetReplica(ctx, "obj", buffers(t, 0, sizes[0], sizes[1]+1)), ErrSizeMismatch)
	require.ErrorIs(t, other.GetReplica(ctx, "", buffers(t, 0, 10)), ErrInvalidArgument)
	require.ErrorIs(t, other.GetReplica(ctx, "obj", nil), ErrInvalidArgument)
	require.ErrorIs(t, other.Unregister(ctx, "obj"), ErrNotOpened)
	require.ErrorIs(t, other.DeleteReplica(ctx, "obj"), ErrNotOpened)
	require.ErrorIs(t, seed.DeleteReplica(ctx, "obj"), ErrNotOpened, "the seed's copy is Unregistered, not deleted")

	// The only holder dies: the getter gives up after HolderWait and
	// leaves nothing announced.
	require.NoError(t, seed.Close())
	require.ErrorIs(t, seed.Close(), ErrClosed)
	require.ErrorIs(t, seed.Unregister(ctx, "obj"), ErrClosed)
	err := other.GetReplica(ctx, "obj", buffers(t, 0, sizes...))
	require.ErrorIs(t, err, ErrNoHolder)
	info, err := other.Info(ctx, "obj")
	require.NoError(t, err)
	assert.Zero(t, info.Holders)
	// The name is free again for a retry.
	require.ErrorIs(t, other.GetReplica(ctx, "obj", buffers(t, 0, sizes...)), ErrNoHolder)

	_, err = New(ctx, Config{Etcd: []string{"127.0.0.1:1"}, DialTimeout: 300 * time.Millisecond})
	require.True(t, errors.Is(err, etcdmeta.ErrUnreachable), "%v", err)
	_, err = New(ctx, Config{})
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// NewP2PStore takes upstream's arguments.
func TestNewP2PStore(t *testing.T) {
	ep := etcdtest.Start(t)
	s, err := NewP2PStore(ctxT(t), "etcd://"+ep, "node-a")
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, "node-a", s.Name())
	l, err := s.List(ctxT(t), "")
	require.NoError(t, err)
	assert.Empty(t, l)
}

// A store that stops renewing its lease (a crashed process) vanishes from
// the holder lists within the TTL, without any call of its own.
func TestLeaseExpiryDropsDeadHolder(t *testing.T) {
	ep := etcdtest.Start(t)
	ctx := ctxT(t)
	seed := newStore(t, ep, "seed", func(c *Config) { c.LeaseTTL = time.Second })
	require.NoError(t, seed.Register(ctx, "obj", buffers(t, 8, 1000), shard, ""))
	watcher := newStore(t, ep, "watcher", nil)
	info, err := watcher.Info(ctx, "obj")
	require.NoError(t, err)
	require.Equal(t, 1, info.Holders)

	seed.cancel() // stop the keepalive; the lease is not revoked
	<-seed.kaDone
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err = watcher.Info(ctx, "obj")
		require.NoError(t, err)
		if info.Holders == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the dead seed is still listed as holder after 30 s")
		time.Sleep(50 * time.Millisecond) // polling etcd with a deadline
	}
	assert.Equal(t, "seed", info.Origin, "the object outlives its holders")
}

// A getter dies in the middle of its own fetch (after it already served
// some shards to others); the other getter completes, bytes intact.
func TestGetterKilledMidFetchOthersContinue(t *testing.T) {
	ep := etcdtest.Start(t)
	ctx := ctxT(t)
	seed := newStore(t, ep, "seed", nil)
	src := buffers(t, 9, sizes...)
	require.NoError(t, seed.Register(ctx, "obj", src, shard, ""))
	a := newStore(t, ep, "a", func(c *Config) { c.Concurrency = 1 })
	b := newStore(t, ep, "b", func(c *Config) { c.Concurrency = 2 })
	var n atomic.Int32
	a.testFetched = func(int, string) {
		if n.Add(1) == 5 {
			st := time.Now()
			_ = a.Close()
			t.Logf("close took %v", time.Since(st))
		}
	}
	da, db := buffers(t, 0, sizes...), buffers(t, 0, sizes...)
	errA := make(chan error, 1)
	go func() { errA <- a.GetReplica(ctx, "obj", da) }()
	st := time.Now()
	require.NoError(t, b.GetReplica(ctx, "obj", db))
	t.Logf("b took %v, stats %+v", time.Since(st), b.Stats())
	requireSame(t, src, db)
	st = time.Now()
	ea := <-errA
	t.Logf("a returned after %v more: %v", time.Since(st), ea)
	require.ErrorIs(t, ea, ErrClosed, "a was closed mid-fetch")
	info, err := b.Info(ctx, "obj")
	require.NoError(t, err)
	assert.Equal(t, 2, info.Holders, "seed and b; a left with its lease")
}
