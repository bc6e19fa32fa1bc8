package master

import (
	"strings"

	"github.com/mooncake-go/mooncake/core/store"
)

// Eviction policies (Config.EvictionPolicy). Each orders the complete
// objects that have DRAM replicas; eviction (pins.go) walks them in that
// order and takes those it may (unleased, unpinned, no tier task in
// flight).
const (
	// PolicyLRU evicts the least recently used object first; a use is a
	// commit (PutEnd) or a lease grant (GetReplicaList, ExistKey).
	// Upstream Mooncake's only policy, and the default.
	PolicyLRU = "lru"
	// PolicyS3FIFO is S3-FIFO (J. Yang, Y. Zhang, Z. Qiu, Y. Yue, K. V.
	// Rashmi, "FIFO queues are all you need for cache eviction", SOSP
	// 2023), by bytes: a small FIFO queue S (30% of the capacity here;
	// the paper's 10% filters too eagerly for KV blocks, whose second use
	// is the next turn of a conversation), a main FIFO queue M, and a
	// ghost FIFO of the key hashes lately evicted from S (as many as
	// twice the objects cached). A new object enters S, or M if its key
	// is a ghost; a use sets a 2-bit frequency (saturating at 3; at most
	// one use per lease, so a lookup and the read that follows count
	// once). Eviction takes from S while S holds more than its share:
	// its oldest object moves to M if it was used, else leaves (its hash
	// joins the ghosts); from M, a used object is reinserted with one
	// use less, an unused one leaves.
	//
	// Prefix-aware tie-breaking: the keys of one batch call (BatchPutEnd,
	// BatchExistKey, ...) are taken as one request's blocks in prefix
	// order, as KV-cache connectors send them. Objects a batch commits
	// tie on time, and the tie is broken so that each goes behind the
	// batch's previous one in its queue: a child block leaves before its
	// parent, never after it (a child without its parent cannot be
	// reached by a prefix match). In a lookup batch, keys found after
	// one that is missing are such orphans: finding them does not count
	// as a use.
	PolicyS3FIFO = "s3fifo"
)

// EvictionPolicies lists the accepted Config.EvictionPolicy names, the
// default first.
func EvictionPolicies() []string { return []string{PolicyLRU, PolicyS3FIFO} }

// checkPolicy validates a Config.EvictionPolicy name ("" is the default).
func checkPolicy(name string) error {
	for _, p := range EvictionPolicies() {
		if name == p {
			return nil
		}
	}
	if name == "" {
		return nil
	}
	return store.Errorf(store.InvalidParams, "eviction_policy %q: want one of %s", name, strings.Join(EvictionPolicies(), ", "))
}

// evictor is an eviction policy's order over the complete DRAM objects.
// It owns the objects' prev/next links and their policy bits.
type evictor interface {
	// insert adds o (complete, with DRAM replicas, not yet linked).
	insert(o *object)
	// use records a use of o (a lease grant); fresh is false when o was
	// still leased (a repeated lookup). An unlinked o is inserted.
	use(o *object, fresh bool)
	// remove unlinks o if linked.
	remove(o *object)
	// victims yields eviction candidates, first to go first, until yield
	// returns false or none is left; the caller may free (and so remove)
	// the yielded object. It may reorder objects as it goes.
	victims(yield func(*object) bool)
	// order yields every linked object, first to be evicted first,
	// without changing anything.
	order(yield func(*object) bool)
	// endBatch ends the current batch call (prefix tie-breaking).
	endBatch()
	// missed tells the policy that a key of the current batch was not
	// found.
	missed()
}

// ring is a doubly linked ring of objects through prev/next with a
// sentinel: head.next is the newest, head.prev the oldest.
type ring struct{ head object }

func (r *ring) init()               { r.head.prev, r.head.next = &r.head, &r.head }
func (r *ring) empty() bool         { return r.head.next == &r.head }
func (r *ring) oldest() *object     { return r.head.prev }
func (r *ring) end(o *object) bool  { return o == &r.head }
func (r *ring) pushFront(o *object) { r.after(&r.head, o) }

// after links o just behind at (towards the oldest end).
func (r *ring) after(at, o *object) {
	o.prev, o.next = at, at.next
	at.next.prev = o
	at.next = o
}

func unlink(o *object) {
	if o.prev == nil {
		return
	}
	o.prev.next, o.next.prev = o.next, o.prev
	o.prev, o.next = nil, nil
}

// lruPolicy is PolicyLRU: upstream's order, one ring.
type lruPolicy struct{ r ring }

func (p *lruPolicy) insert(o *object)             { unlink(o); p.r.pushFront(o) }
func (p *lruPolicy) use(o *object, _ bool)        { p.insert(o) }
func (p *lruPolicy) remove(o *object)             { unlink(o) }
func (p *lruPolicy) endBatch()                    {}
func (p *lruPolicy) missed()                      {}
func (p *lruPolicy) order(y func(*object) bool)   { p.walk(y) }
func (p *lruPolicy) victims(y func(*object) bool) { p.walk(y) }

func (p *lruPolicy) walk(yield func(*object) bool) {
	for o := p.r.oldest(); !p.r.end(o); {
		prev := o.prev
		if !yield(o) {
			return
		}
		o = prev
	}
}

// Policy bits of object.bits (bit 0 is noOffload).
const (
	bitMain   = 1 << 1 // S3-FIFO: in M, not S
	freqShift = 2      // S3-FIFO: 2-bit use count
	freqMask  = 3 << freqShift
)

func (o *object) freq() uint8     { return (o.bits & freqMask) >> freqShift }
func (o *object) setFreq(f uint8) { o.bits = o.bits&^freqMask | f<<freqShift }
func (o *object) inMain() bool    { return o.bits&bitMain != 0 }
func (o *object) setMain(main bool) {
	if main {
		o.bits |= bitMain
	} else {
		o.bits &^= bitMain
	}
}

// s3fifoPolicy is PolicyS3FIFO.
type s3fifoPolicy struct {
	m        *Master
	small    ring
	main     ring
	smallSz  uint64 // bytes (object sizes) in small
	count    int    // objects linked
	seed     uint64 // key hash seed, from Config.Rand
	ghost    ghostFIFO
	anchor   *object // the batch's last committed object, or nil
	orphaned bool    // a key of the current batch was missing
}

// smallShare is S's share of the capacity.
const smallShare = 0.30

func newS3FIFO(m *Master) *s3fifoPolicy {
	p := &s3fifoPolicy{m: m, seed: m.cfg.Rand.Uint64()}
	p.small.init()
	p.main.init()
	p.ghost.set = map[uint64]uint32{}
	return p
}

// hash is a seeded FNV-1a of key, mixed (splitmix64's finalizer).
func (p *s3fifoPolicy) hash(key string) uint64 {
	h := uint64(14695981039346656037) ^ p.seed
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xBF58476D1CE4E5B9
	h ^= h >> 27
	h *= 0x94D049BB133111EB
	return h ^ h>>31
}

func (p *s3fifoPolicy) insert(o *object) {
	if o.prev != nil {
		return
	}
	main := p.ghost.take(p.hash(o.key))
	o.setMain(main)
	o.setFreq(0)
	q := &p.small
	if main {
		q = &p.main
	} else {
		p.smallSz += o.size
	}
	if a := p.anchor; a != nil && a.prev != nil && a.inMain() == main {
		q.after(a, o)
	} else {
		q.pushFront(o)
	}
	p.anchor = o
	p.count++
}

func (p *s3fifoPolicy) use(o *object, fresh bool) {
	if o.prev == nil {
		p.insert(o)
		return
	}
	if fresh && !p.orphaned {
		if f := o.freq(); f < 3 {
			o.setFreq(f + 1)
		}
	}
}

func (p *s3fifoPolicy) remove(o *object) {
	if o.prev == nil {
		return
	}
	if !o.inMain() {
		p.smallSz -= o.size
	}
	if p.anchor == o {
		p.anchor = nil
	}
	unlink(o)
	p.count--
}

func (p *s3fifoPolicy) endBatch() { p.anchor, p.orphaned = nil, false }
func (p *s3fifoPolicy) missed()   { p.orphaned = true }

func (p *s3fifoPolicy) order(yield func(*object) bool) {
	for _, q := range []*ring{&p.small, &p.main} {
		for o := q.oldest(); !q.end(o); o = o.prev {
			if !yield(o) {
				return
			}
		}
	}
}

// victims walks S and M with a cursor each, from their oldest ends,
// applying S3-FIFO's moves to the objects it passes; objects the caller
// does not take stay where they are. Each object of S is passed once and
// each of M at most four times (its use count falls at each pass), so
// the walk ends.
func (p *s3fifoPolicy) victims(yield func(*object) bool) {
	sCur, mCur := p.small.oldest(), p.main.oldest()
	smallTarget := uint64(smallShare * float64(p.m.capacity))
	for {
		sLeft, mLeft := !p.small.end(sCur), !p.main.end(mCur)
		if !sLeft && !mLeft {
			return
		}
		if sLeft && (p.smallSz > smallTarget || !mLeft) {
			o := sCur
			sCur = o.prev
			if o.freq() > 0 {
				// Used while in S: promote to M, unused there so far.
				unlink(o)
				p.smallSz -= o.size
				o.setMain(true)
				o.setFreq(0)
				p.main.pushFront(o)
				if !mLeft {
					mCur = o
				}
				continue
			}
			h := p.hash(o.key)
			if !yield(o) {
				if o.prev == nil {
					p.ghost.add(h, 2*p.count)
				}
				return
			}
			if o.prev == nil {
				p.ghost.add(h, 2*p.count)
			}
			continue
		}
		o := mCur
		mCur = o.prev
		if f := o.freq(); f > 0 {
			o.setFreq(f - 1)
			// Reinserted as the newest: the cursor, walking towards
			// the newest, passes it again with one use less.
			unlink(o)
			p.main.pushFront(o)
			if p.main.end(mCur) {
				mCur = o
			}
			continue
		}
		if !yield(o) {
			return
		}
	}
}

// ghostFIFO is a bounded FIFO of key hashes with membership counts.
type ghostFIFO struct {
	q    []uint64 // ring buffer
	head int      // index of the oldest
	n    int      // entries in q
	set  map[uint64]uint32
}

// add appends h, dropping the oldest entries beyond limit (at least 64).
func (g *ghostFIFO) add(h uint64, limit int) {
	limit = max(limit, 64)
	for g.n >= limit {
		g.pop()
	}
	if g.n == len(g.q) {
		// Grow, keeping FIFO order.
		nq := make([]uint64, max(64, 2*len(g.q)))
		for i := 0; i < g.n; i++ {
			nq[i] = g.q[(g.head+i)%len(g.q)]
		}
		g.q, g.head = nq, 0
	}
	g.q[(g.head+g.n)%len(g.q)] = h
	g.n++
	g.set[h]++
}

func (g *ghostFIFO) pop() {
	h := g.q[g.head]
	g.head = (g.head + 1) % len(g.q)
	g.n--
	if c, ok := g.set[h]; ok && c > 1 {
		g.set[h] = c - 1
	} else if ok {
		delete(g.set, h) // (after take, a later add's count may go first)
	}
}

// take reports whether h is a ghost. The entry stays in the FIFO until it
// ages out; its count is dropped so that it matches once.
func (g *ghostFIFO) take(h uint64) bool {
	c, ok := g.set[h]
	if !ok {
		return false
	}
	if c <= 1 {
		delete(g.set, h)
	} else {
		g.set[h] = c - 1
	}
	return true
}
