package policy

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/replay/trace"
)

// treeTrace returns n random requests over a random prefix tree of
// nodes ids: every id has one parent (id 0 is the root's child of
// nothing), and a request is the path from the root to a random node, so
// hash ids are chained prefixes as in the Mooncake traces.
func treeTrace(rng *rand.Rand, nodes, n int) [][]uint64 {
	parent := make([]int, nodes)
	for i := 1; i < nodes; i++ {
		parent[i] = rng.IntN(i) // an earlier node: a tree rooted at 0
	}
	out := make([][]uint64, n)
	for t := range out {
		v := rng.IntN(nodes)
		var path []uint64
		for {
			path = append(path, uint64(v)+100)
			if v == 0 {
				break
			}
			v = parent[v]
		}
		for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
			path[i], path[j] = path[j], path[i]
		}
		if rng.IntN(4) == 0 {
			// A second root, so that requests do not all share id 100.
			path[0] = 99
			path = path[:1]
		}
		out[t] = path
	}
	return out
}

// bruteOPT is the most prefix-hit blocks any cache of capacity whole
// blocks can get on reqs: after each request it may keep any subset of
// its cached blocks and the request's blocks (bypass included), found by
// dynamic programming over every cache state (ids must be < 64 after
// remapping).
func bruteOPT(reqs [][]uint64, capacity int) int64 {
	ix := map[uint64]uint{}
	for _, r := range reqs {
		for _, id := range r {
			if _, ok := ix[id]; !ok {
				ix[id] = uint(len(ix))
			}
		}
	}
	if len(ix) > 16 {
		panic("bruteOPT: too many ids")
	}
	best := map[uint64]int64{0: 0}
	for _, r := range reqs {
		var mask uint64
		for _, id := range r {
			mask |= 1 << ix[id]
		}
		nb := map[uint64]int64{}
		for st, v := range best {
			hit := int64(0)
			for _, id := range r {
				if st&(1<<ix[id]) == 0 {
					break
				}
				hit++
			}
			pool := st | mask
			// Every subset of pool with at most capacity blocks.
			for sub := pool; ; sub = (sub - 1) & pool {
				if bits.OnesCount64(sub) <= capacity {
					if old, ok := nb[sub]; !ok || v+hit > old {
						nb[sub] = v + hit
					}
				}
				if sub == 0 {
					break
				}
			}
		}
		best = nb
	}
	var m int64
	for _, v := range best {
		m = max(m, v)
	}
	return m
}

func full(int, int) int { return trace.BlockTokens }

func TestOPTMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 1))
	for k := range 300 {
		nodes := 2 + rng.IntN(9)
		reqs := treeTrace(rng, nodes, 2+rng.IntN(9))
		for capacity := 0; capacity <= 4; capacity++ {
			got := OPT(reqs, full, int64(capacity))
			want := bruteOPT(reqs, capacity)
			require.Equal(t, want, got.BlocksHit, "case %d, capacity %d blocks, trace %v", k, capacity, reqs)
			// OPT is never below LRU with the same room.
			l := NewLRUBound(int64(capacity) * trace.BlockTokens)
			for _, r := range reqs {
				l.Request(r, func(int) int { return trace.BlockTokens })
			}
			require.GreaterOrEqual(t, got.BlocksHit, l.Result().BlocksHit, "case %d, capacity %d: OPT below LRU", k, capacity)
		}
	}
}

func TestOPTSmall(t *testing.T) {
	tests := []struct {
		name     string
		reqs     [][]uint64
		capacity int64
		hit      int64
	}{
		{"empty", nil, 3, 0},
		{"no room", [][]uint64{{1, 2}, {1, 2}}, 0, 0},
		{"repeat", [][]uint64{{1, 2}, {1, 2}}, 2, 2},
		// One slot: the parent is kept, not the child (which could not hit).
		{"one slot keeps the parent", [][]uint64{{1, 2}, {1, 2}}, 1, 1},
		// Bypass: 3 is never used again, so 1 stays for the third request.
		{"bypass", [][]uint64{{1}, {3}, {1}}, 1, 1},
		// Belady: at request 3, 1 is next used later than 2.
		{"farthest goes", [][]uint64{{1}, {2}, {3}, {2}, {1}}, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := OPT(tt.reqs, full, tt.capacity)
			assert.Equal(t, tt.hit, r.BlocksHit)
			assert.Equal(t, len(tt.reqs), r.Requests)
			assert.Equal(t, tt.hit*trace.BlockTokens, r.TokensHit)
		})
	}
	assert.Panics(t, func() { OPT([][]uint64{{1}}, func(int, int) int { return -1 }, 1) })
}

// TestOPTTraces checks OPT against LRU on the two FAST'25 traces: never
// below it with the same room in whole blocks, and the pinned values.
func TestOPTTraces(t *testing.T) {
	dir := filepath.Join("..", "..", "replay", "traces")
	for _, file := range []string{"conversation_trace.jsonl", "synthetic_trace.jsonl"} {
		reqs, err := trace.ReadFile(filepath.Join(dir, file), 0)
		require.NoError(t, err)
		ids := make([][]uint64, len(reqs))
		for i, r := range reqs {
			ids[i] = r.HashIDs
		}
		sizes := func(t, i int) int { return reqs[t].BlockTokens(i) }
		prev := 0.0
		for _, capTokens := range []int64{100_000, 1_000_000, 3_000_000, 10_000_000, 100_000_000} {
			t.Run(fmt.Sprintf("%s/%d", file, capTokens), func(t *testing.T) {
				o := OPT(ids, sizes, capTokens/trace.BlockTokens)
				l := NewLRUBound(capTokens / trace.BlockTokens * trace.BlockTokens)
				for _, r := range reqs {
					l.Request(r.HashIDs, func(int) int { return trace.BlockTokens })
				}
				t.Logf("OPT %.4f, LRU %.4f", o.BlockHitRatio, l.Result().BlockHitRatio)
				assert.GreaterOrEqual(t, o.BlocksHit, l.Result().BlocksHit)
				assert.GreaterOrEqual(t, o.BlockHitRatio, prev, "OPT falls with more room")
				prev = o.BlockHitRatio
			})
		}
	}
}
