package policy

import (
	"fmt"
	"math"
)

// LRUBound simulates a block-level LRU cache whose capacity is given in
// tokens. A block occupies as many tokens as it holds, so a partial last
// block counts only its own size.
//
// For each request, in order, Request first counts the longest prefix of
// the request's hash ids that is present in the cache (the lookup happens
// before any insertion), then touches or inserts every block of the request
// in order, evicting least recently used blocks while the used tokens exceed
// the capacity. A block bigger than the whole capacity is never cached.
//
// Every operation is O(1) per block: a map from hash id to a slot in a slice
// of nodes forming an intrusive doubly linked recency list; freed slots are
// reused, so steady state allocates nothing.
//
// The zero value is not usable; call NewLRUBound.
type LRUBound struct {
	capacity int64 // tokens; never negative
	used     int64 // tokens held by cached blocks; <= capacity after each Request

	index map[uint64]int32 // hash id -> slot in nodes
	// nodes[0] is the list sentinel: nodes[0].next is the most recently
	// used block, nodes[0].prev the least recently used.
	nodes []node
	free  int32 // first free slot, chained by next; 0 when none

	sizes []int64 // per-request scratch: tokens of each block

	res BoundResult
}

// node is one cached block, or a free slot.
type node struct {
	id         uint64
	tokens     int64
	prev, next int32
}

// NewLRUBound returns an empty cache holding at most capacityTokens tokens.
// A capacity <= 0 caches nothing.
func NewLRUBound(capacityTokens int64) *LRUBound {
	return &LRUBound{
		capacity: max(capacityTokens, 0),
		index:    make(map[uint64]int32),
		nodes:    make([]node, 1), // sentinel, linked to itself
	}
}

// BoundResult summarizes the requests replayed so far.
type BoundResult struct {
	// Requests is the number of calls to Request.
	Requests int
	// BlocksTotal is the number of blocks requested; BlocksHit the number
	// of them found as part of a cached prefix.
	BlocksTotal, BlocksHit int64
	// TokensTotal is the number of tokens requested (the sum of the block
	// sizes); TokensHit the tokens of the hit blocks.
	TokensTotal, TokensHit int64
	// BlockHitRatio is BlocksHit/BlocksTotal and TokenHitRatio is
	// TokensHit/TokensTotal, both in [0, 1]; each is 0 when its total is 0.
	BlockHitRatio, TokenHitRatio float64
}

// Request replays one request made of the blocks hashIDs, where block i
// holds blockTokens(i) tokens. It returns the length of the longest cached
// prefix in blocks and the tokens those blocks hold (both measured before
// the request's own blocks are inserted), then caches the request's blocks
// as described on LRUBound. A block already cached takes the size given by
// this request.
//
// blockTokens must not be nil and is called once per block; it panics with
// a programmer error if it returns a negative size.
func (l *LRUBound) Request(hashIDs []uint64, blockTokens func(i int) int) (hitBlocks int, hitTokens int64) {
	l.sizes = l.sizes[:0]
	var total int64
	for i := range hashIDs {
		n := blockTokens(i)
		if n < 0 {
			panic(fmt.Sprintf("policy: block %d of a request has negative size %d", i, n))
		}
		l.sizes = append(l.sizes, int64(n))
		total += int64(n)
	}

	for i, id := range hashIDs {
		if _, ok := l.index[id]; !ok {
			break
		}
		hitBlocks++
		hitTokens += l.sizes[i]
	}

	for i, id := range hashIDs {
		l.touch(id, l.sizes[i])
	}

	l.res.Requests++
	l.res.BlocksTotal += int64(len(hashIDs))
	l.res.BlocksHit += int64(hitBlocks)
	l.res.TokensTotal += total
	l.res.TokensHit += hitTokens
	return hitBlocks, hitTokens
}

// Result returns the totals and hit ratios of the requests replayed so far.
func (l *LRUBound) Result() BoundResult {
	r := l.res
	if r.BlocksTotal > 0 {
		r.BlockHitRatio = float64(r.BlocksHit) / float64(r.BlocksTotal)
	}
	if r.TokensTotal > 0 {
		r.TokenHitRatio = float64(r.TokensHit) / float64(r.TokensTotal)
	}
	return r
}

// touch makes block id, of the given size, the most recently used one,
// inserting it if absent, then evicts until the cache fits its capacity.
func (l *LRUBound) touch(id uint64, tokens int64) {
	s, ok := l.index[id]
	if tokens > l.capacity {
		if ok {
			l.remove(s)
		}
		return
	}
	if ok {
		l.used += tokens - l.nodes[s].tokens
		l.nodes[s].tokens = tokens
		l.unlink(s)
	} else {
		s = l.alloc()
		l.nodes[s] = node{id: id, tokens: tokens}
		l.index[id] = s
		l.used += tokens
	}
	l.pushFront(s)
	for l.used > l.capacity {
		l.remove(l.nodes[0].prev) // never s: s alone fits
	}
}

// alloc returns a free slot, growing nodes when none is left.
func (l *LRUBound) alloc() int32 {
	if s := l.free; s != 0 {
		l.free = l.nodes[s].next
		return s
	}
	if len(l.nodes) == math.MaxInt32 {
		panic("policy: LRUBound holds more than 2^31-1 blocks")
	}
	l.nodes = append(l.nodes, node{})
	return int32(len(l.nodes) - 1)
}

// remove evicts the block in slot s and frees the slot.
func (l *LRUBound) remove(s int32) {
	n := &l.nodes[s]
	delete(l.index, n.id)
	l.used -= n.tokens
	l.unlink(s)
	*n = node{next: l.free}
	l.free = s
}

func (l *LRUBound) unlink(s int32) {
	n := &l.nodes[s]
	l.nodes[n.prev].next = n.next
	l.nodes[n.next].prev = n.prev
}

func (l *LRUBound) pushFront(s int32) {
	head := l.nodes[0].next
	l.nodes[s].prev = 0
	l.nodes[s].next = head
	l.nodes[head].prev = s
	l.nodes[0].next = s
}
