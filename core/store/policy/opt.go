package policy

import (
	"container/heap"
	"fmt"
	"math"
)

// OPT computes the offline optimum of block-weighted prefix hits for a
// cache of capacityBlocks whole blocks (every block, a partial last one
// too, takes one slot): Belady's MIN ("evict the block whose next use
// is farthest in the future"; L. A. Belady, "A study of replacement
// algorithms for a virtual-storage computer", IBM Systems Journal 5(2),
// 1966) with bypass (a missed block whose next use is farther than every
// cached block's is not cached at all).
//
// requests[t] holds the hash ids of request t, in prefix order, and
// blockTokens(t, i) the tokens of its block i (used only for the token
// figures). As LRUBound, each request first counts its longest cached
// prefix, then its blocks become candidates: after request t the cache
// holds the capacityBlocks blocks with the soonest next use among those
// cached and those of request t; blocks never used again are dropped.
// Ties on the next use are broken by the deeper block (larger index in
// its request) going first, so a block's chain parent, which appears in
// every request its child appears in and always earlier, is kept while
// the child is: the cache stays closed under prefixes, every cached block
// of a request lies in its cached prefix, and the MIN optimum for single
// block hits is reached as prefix hits. That makes BlocksHit an upper
// bound for any policy holding at most capacityBlocks blocks on a trace
// whose hash ids are chained prefixes (the Mooncake traces).
//
// Time O(B log C) for B blocks in all and a cache of C blocks, memory
// O(B). blockTokens must not be nil; it panics with a programmer error
// on a negative size.
func OPT(requests [][]uint64, blockTokens func(t, i int) int, capacityBlocks int64) BoundResult {
	// next[k] is the request index of the next use of the block at flat
	// position k (request t, block i), or never.
	total := 0
	for _, r := range requests {
		total += len(r)
	}
	if len(requests) > math.MaxInt32-1 {
		panic("policy: OPT over more than 2^31-2 requests")
	}
	next := make([]int32, total)
	last := make(map[uint64]int32, total/4)
	k := total
	for t := len(requests) - 1; t >= 0; t-- {
		r := requests[t]
		k -= len(r)
		for i := len(r) - 1; i >= 0; i-- {
			n, ok := last[r[i]]
			if !ok {
				n = never
			}
			next[k+i] = n
		}
		for _, id := range r {
			last[id] = int32(t)
		}
	}
	last = nil

	c := optCache{slot: make(map[uint64]int, min(capacityBlocks, int64(total))+1)}
	var res BoundResult
	k = 0
	for t, r := range requests {
		hit := hitPrefix(&c, r)
		for i := range r {
			n := int64(blockTokens(t, i))
			if n < 0 {
				panic(fmt.Sprintf("policy: block %d of request %d has negative size %d", i, t, n))
			}
			res.TokensTotal += n
			if i < hit {
				res.BlocksHit++
				res.TokensHit += n
			}
		}
		res.BlocksTotal += int64(len(r))
		res.Requests++
		// Hits first: their next use moves on.
		for i, id := range r {
			if s, ok := c.slot[id]; ok {
				c.h[s].next, c.h[s].depth = next[k+i], int32(i)
				heap.Fix(&c, s)
			}
		}
		for i, id := range r {
			if _, ok := c.slot[id]; ok {
				continue
			}
			e := optEntry{id: id, next: next[k+i], depth: int32(i)}
			if e.next == never || capacityBlocks <= 0 {
				continue // bypass
			}
			if int64(len(c.h)) < capacityBlocks {
				heap.Push(&c, e)
				continue
			}
			if c.less(0, e) {
				continue // e is used later than everything cached: bypass
			}
			delete(c.slot, c.h[0].id)
			c.h[0] = e
			c.slot[id] = 0
			heap.Fix(&c, 0)
		}
		// Blocks whose last use was this request leave (they hold a slot
		// that nothing will hit).
		for len(c.h) > 0 && c.h[0].next == never {
			heap.Pop(&c)
		}
		k += len(r)
	}
	return finish(res)
}

// hitPrefix is the length of r's longest prefix held by c.
func hitPrefix(c *optCache, r []uint64) int {
	n := 0
	for _, id := range r {
		if _, ok := c.slot[id]; !ok {
			break
		}
		n++
	}
	return n
}

// never is the next use of a block not requested again.
const never = math.MaxInt32

// optEntry is one cached block: its next use and its depth in the request
// that set it.
type optEntry struct {
	id    uint64
	next  int32
	depth int32
}

// optCache is a max-heap of cached blocks by (next use, depth, id): the
// root is the block to evict. slot maps an id to its heap index.
type optCache struct {
	h    []optEntry
	slot map[uint64]int
}

// after reports whether a should be evicted before b.
func after(a, b optEntry) bool {
	if a.next != b.next {
		return a.next > b.next
	}
	if a.depth != b.depth {
		return a.depth > b.depth
	}
	return a.id > b.id
}

// less reports whether the cached entry at index i goes before (is kept
// longer than) candidate e, i.e. e should be bypassed.
func (c *optCache) less(i int, e optEntry) bool { return !after(c.h[i], e) }

func (c *optCache) Len() int           { return len(c.h) }
func (c *optCache) Less(i, j int) bool { return after(c.h[i], c.h[j]) }
func (c *optCache) Swap(i, j int) {
	c.h[i], c.h[j] = c.h[j], c.h[i]
	c.slot[c.h[i].id], c.slot[c.h[j].id] = i, j
}
func (c *optCache) Push(x any) {
	e := x.(optEntry)
	c.slot[e.id] = len(c.h)
	c.h = append(c.h, e)
}
func (c *optCache) Pop() any {
	e := c.h[len(c.h)-1]
	c.h = c.h[:len(c.h)-1]
	delete(c.slot, e.id)
	return e
}

// finish fills in r's ratios.
func finish(r BoundResult) BoundResult {
	if r.BlocksTotal > 0 {
		r.BlockHitRatio = float64(r.BlocksHit) / float64(r.BlocksTotal)
	}
	if r.TokensTotal > 0 {
		r.TokenHitRatio = float64(r.TokensHit) / float64(r.TokensTotal)
	}
	return r
}
