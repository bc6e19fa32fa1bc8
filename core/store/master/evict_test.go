package master

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/store"
)

func TestEvictionPolicyNames(t *testing.T) {
	assert.Equal(t, []string{"lru", "s3fifo"}, EvictionPolicies())
	_, err := New(Config{EvictionPolicy: "lfu"})
	require.Error(t, err)
	assert.True(t, errors.Is(err, store.ErrInvalidParams), "%v", err)
	assert.Contains(t, err.Error(), `"lfu"`)
	for _, p := range []string{"", "lru", "s3fifo"} {
		_, err := New(Config{EvictionPolicy: p})
		assert.NoError(t, err, "policy %q", p)
	}
}

// policyMaster is a master of policy with one segment of 10 objects of
// 128 bytes, freeing one object per eviction.
func policyMaster(t *testing.T, policy string) (*Master, *fakeClock) {
	m, clk := newTestMaster(t, func(c *Config) {
		c.EvictionPolicy = policy
		c.EvictionRatio = 0.1
		c.EvictionHighWatermark = 1
		c.DefaultLeaseTTL = time.Millisecond
	})
	mustMount(t, m, "c", testSeg("s", 1280))
	return m, clk
}

// putBatch commits keys as one batch, then lets every lease end.
func putBatch(t *testing.T, m *Master, clk *fakeClock, keys ...string) {
	for _, k := range keys {
		mustPut(t, m, "c", k, 128, 1)
	}
	m.EndBatch()
	clk.Advance(time.Second)
}

func lookupBatch(t *testing.T, m *Master, clk *fakeClock, keys ...string) []bool {
	out := make([]bool, len(keys))
	for i, k := range keys {
		ok, err := m.ExistKey(k)
		require.NoError(t, err)
		out[i] = ok
	}
	m.EndBatch()
	clk.Advance(time.Second)
	return out
}

// TestS3FIFOKeepsReusedObject: an object used once survives a scan of
// one-time objects ten times the pool under S3-FIFO; under LRU it goes.
func TestS3FIFOKeepsReusedObject(t *testing.T) {
	for _, tc := range []struct {
		policy string
		kept   bool
	}{{"lru", false}, {"s3fifo", true}} {
		t.Run(tc.policy, func(t *testing.T) {
			m, clk := policyMaster(t, tc.policy)
			putBatch(t, m, clk, "hot")
			require.Equal(t, []bool{true}, lookupBatch(t, m, clk, "hot"))
			for i := range 100 {
				putBatch(t, m, clk, fmt.Sprint("scan", i))
			}
			hot, err := m.ExistKey("hot")
			require.NoError(t, err)
			assert.Equal(t, tc.kept, hot)
			assert.Equal(t, 10, m.ObjectCount())
			assert.Equal(t, uint64(91), m.Stats().EvictedObjects)
		})
	}
}

// TestPrefixTieBreak: of one batch a, b, c (a request's blocks in prefix
// order), S3-FIFO evicts the deepest block first; LRU keeps upstream's
// order (the first committed is the least recently used).
func TestPrefixTieBreak(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   []bool // a, b, c after one eviction
	}{{"lru", []bool{false, true, true}}, {"s3fifo", []bool{true, true, false}}} {
		t.Run(tc.policy, func(t *testing.T) {
			m, clk := policyMaster(t, tc.policy)
			putBatch(t, m, clk, "a", "b", "c")
			for i := range 7 {
				putBatch(t, m, clk, fmt.Sprint("x", i))
			}
			// Make the others newer (LRU) or leave them (S3-FIFO: no
			// use counted), then force one eviction.
			for i := range 7 {
				lookupBatch(t, m, clk, fmt.Sprint("x", i))
			}
			putBatch(t, m, clk, "new")
			assert.Equal(t, tc.want, lookupBatch(t, m, clk, "a", "b", "c"))
		})
	}
}

// TestS3FIFOOrphanLookupIsNoUse: a key found after a missing one in the
// same lookup batch is unreachable by a prefix match; finding it does not
// count as a use, so it is not promoted.
func TestS3FIFOOrphanLookupIsNoUse(t *testing.T) {
	run := func(batch []string) bool {
		m, clk := policyMaster(t, "s3fifo")
		putBatch(t, m, clk, "child")
		lookupBatch(t, m, clk, batch...)
		for i := range 20 {
			putBatch(t, m, clk, fmt.Sprint("scan", i))
		}
		ok, err := m.ExistKey("child")
		require.NoError(t, err)
		return ok
	}
	assert.True(t, run([]string{"child"}), "a prefix hit promotes")
	assert.False(t, run([]string{"parent-missing", "child"}), "an orphan hit does not")
}

// TestPoliciesDeterministic: a random workload gives the same state twice
// under the same seed, for every policy, and every policy keeps the
// master's invariants (only complete objects in its order, each once).
func TestPoliciesDeterministic(t *testing.T) {
	for _, policy := range EvictionPolicies() {
		t.Run(policy, func(t *testing.T) {
			run := func() (State, Stats) {
				m, clk := newTestMaster(t, func(c *Config) {
					c.EvictionPolicy = policy
					c.EvictionHighWatermark = 1
					c.DefaultLeaseTTL = time.Millisecond
				})
				mustMount(t, m, "c", testSeg("s1", 4096), testSeg("s2", 4096))
				rng := rand.New(rand.NewPCG(1, 2))
				for range 3000 {
					k := fmt.Sprint("k", rng.IntN(200))
					switch rng.IntN(4) {
					case 0, 1:
						if _, err := m.PutStart("c", k, uint64(1+rng.IntN(300)), ReplicaConfig{ReplicaNum: 1}); err == nil {
							require.NoError(t, m.PutEnd("c", k))
						}
					case 2:
						_, err := m.ExistKey(k)
						require.NoError(t, err)
					case 3:
						_ = m.Remove(k, false)
					}
					if rng.IntN(3) == 0 {
						m.EndBatch()
					}
					clk.Advance(time.Duration(rng.IntN(2)) * time.Millisecond)
				}
				seen := map[*object]bool{}
				for o := range m.pol.order {
					require.False(t, seen[o], "%q twice in the order", o.key)
					seen[o] = true
					require.True(t, o.complete && o.nreps() > 0 && m.objects.get(o.key) == o, "%q", o.key)
				}
				complete := 0
				for o := range m.objects.all {
					if o.complete {
						complete++
					}
				}
				require.Equal(t, complete, len(seen))
				return m.Dump(), m.Stats()
			}
			st1, s1 := run()
			st2, s2 := run()
			assert.Greater(t, s1.EvictedObjects, uint64(0))
			assert.Equal(t, s1, s2)
			assert.Equal(t, st1, st2)
		})
	}
}
