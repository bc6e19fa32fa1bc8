package alloc

import (
	"errors"
	"fmt"
	"math"
)

// ErrNoSpace is returned by Allocator.Alloc when no free range can hold the
// requested number of bytes at the requested alignment. It is wrapped with
// the size and alignment (in bytes) of the failed request; match it with
// errors.Is.
var ErrNoSpace = errors.New("alloc: no space")

// ErrInvalidArgument is returned for a request that can never succeed: a
// capacity of 0 bytes passed to New, a size of 0 bytes, or an alignment that
// is neither 0 nor a power of two. It is wrapped with the offending value.
var ErrInvalidArgument = errors.New("alloc: invalid argument")

// ErrNotAllocated is returned by Allocator.Free for a byte offset at which no
// live allocation starts: an offset never returned by Alloc, an offset inside
// an allocation, or an allocation that was already freed. It is wrapped with
// the offset.
var ErrNotAllocated = errors.New("alloc: offset not allocated")

// ErrUntracked is returned by Allocator.Free for an allocator made with
// Untracked, which does not know the sizes of its allocations: free them
// with FreeSized.
var ErrUntracked = errors.New("alloc: allocation sizes are not tracked")

// defaultAlignScan is how many free ranges Alloc inspects that are large
// enough in bytes but cannot hold an aligned request before it jumps to the
// smallest range that fits at any alignment. It bounds the cost of aligned
// requests when many slightly too small, misaligned holes exist.
const defaultAlignScan = 32

// Allocator hands out byte ranges [offset, offset+size) of one segment of
// Capacity bytes. It is pure bookkeeping: it never touches the memory it
// describes.
//
// Policy: best fit. Alloc takes the smallest free range that can hold the
// request (ties go to the lowest offset) and places the allocation at the
// first suitably aligned byte of that range; the alignment padding in front
// and the tail behind stay free. Free merges the released range with free
// neighbours on both sides, so free ranges are always maximal.
//
// Complexity, with n free ranges: Free is O(log n) expected. Alloc with
// align <= 1 is O(log n) expected. An aligned Alloc inspects at most a small
// constant number of too-small misaligned candidates, O(log n) each, before
// falling back to the smallest range that fits whatever its alignment; only
// when no such range exists does it scan all m free ranges whose size lies in
// [size, size+align-1), O(m log n). Stats is O(log n). Steady-state Alloc and
// Free allocate no Go memory.
//
// Memory: the free ranges cost 40 bytes each; by default every live
// allocation also costs an entry in a hash map from offset to size (about
// 25-40 bytes), which is what lets Free and SizeOf take an offset alone.
// An allocator made with Untracked keeps no per-allocation record: its
// caller, which knows every allocation's size anyway, frees with
// FreeSized. Both structures are rebuilt smaller once they hold under 1/8
// of their peak, so memory comes back after mass frees.
//
// An Allocator is not safe for concurrent use: the caller serialises all
// calls, typically by holding the lock of the segment that owns it.
type Allocator struct {
	capacity uint64
	used     uint64
	allocs   int // live allocations

	// live maps the offset of each live allocation to its size in bytes;
	// nil when Untracked. livePeak is its largest size since it was last
	// rebuilt.
	live     map[uint64]uint64
	livePeak int
	// free indexes the free ranges twice: by (size, start) for best-fit
	// search and by start for coalescing and range checks.
	free freeIndex

	// alignScan is the candidate budget of an aligned search (see
	// defaultAlignScan). Tests set it to make the search exhaustive.
	alignScan int
}

// Option configures New.
type Option func(*Allocator)

// Untracked makes an Allocator that records nothing per allocation (see
// Allocator's memory notes): Free returns ErrUntracked and SizeOf reports
// nothing; FreeSized frees. It then trusts its caller to pass each
// allocation's exact offset and size: a range that is not wholly allocated
// is refused, but one spanning several allocations, or a part of one, is
// not detected. The store master uses it (it keeps every size).
func Untracked() Option { return func(a *Allocator) { a.live = nil } }

// Stats is a snapshot of an Allocator's occupancy. All sizes are in bytes.
type Stats struct {
	// Capacity is the size of the managed segment in bytes.
	Capacity uint64
	// Used is the number of bytes held by live allocations. An allocation
	// reserves exactly the bytes requested (alignment padding is returned to
	// the free set), so Used is also the sum of the requested sizes and
	// Used+Free == Capacity.
	Used uint64
	// Free is the number of bytes not held by any live allocation.
	Free uint64
	// LargestFree is the size in bytes of the largest free range; any request
	// of at most LargestFree bytes with align <= 1 succeeds.
	LargestFree uint64
	// Allocations is the number of live allocations.
	Allocations int
	// FreeRanges is the number of maximal free ranges.
	FreeRanges int
	// Fragmentation is 1 - LargestFree/Free, between 0 (all free bytes form
	// one range) and almost 1; it is 0 when Free is 0.
	Fragmentation float64
}

// New returns an Allocator managing the byte range [0, capacity), entirely
// free. capacity is in bytes and must be greater than 0.
func New(capacity uint64, opts ...Option) (*Allocator, error) {
	if capacity == 0 {
		return nil, fmt.Errorf("%w: capacity 0 bytes", ErrInvalidArgument)
	}
	a := &Allocator{
		capacity:  capacity,
		live:      make(map[uint64]uint64),
		free:      newFreeIndex(),
		alignScan: defaultAlignScan,
	}
	for _, o := range opts {
		o(a)
	}
	a.free.insert(0, capacity)
	return a, nil
}

// Alloc reserves size bytes and returns the offset in bytes of the first
// one. align is the required alignment of offset in bytes: 0 or 1 means
// none, otherwise it must be a power of two and offset%align == 0. It
// returns ErrInvalidArgument for size 0 or a bad align and ErrNoSpace when no
// free range can hold the request.
func (a *Allocator) Alloc(size, align uint64) (offset uint64, err error) {
	if size == 0 {
		return 0, fmt.Errorf("%w: size 0 bytes", ErrInvalidArgument)
	}
	if align == 0 {
		align = 1
	}
	if align&(align-1) != 0 {
		return 0, fmt.Errorf("%w: align %d bytes is not a power of two", ErrInvalidArgument, align)
	}
	n := a.free.bestFit(size, align, a.alignScan)
	if n == nilNode {
		return 0, fmt.Errorf("%w: size %d bytes, align %d bytes (largest free range %d bytes)",
			ErrNoSpace, size, align, a.free.maxSize())
	}
	start, rangeSize := a.free.nodes[n].start, a.free.nodes[n].size
	pad := -start & (align - 1)
	offset = start + pad
	tail := rangeSize - pad - size
	a.free.remove(n)
	// The chosen range was maximal, so neither remainder touches another
	// free range and none needs coalescing.
	if pad > 0 {
		a.free.insert(start, pad)
	}
	if tail > 0 {
		a.free.insert(offset+size, tail)
	}
	a.taken(offset, size)
	return offset, nil
}

// taken records the new allocation [offset, offset+size).
func (a *Allocator) taken(offset, size uint64) {
	if a.live != nil {
		a.live[offset] = size
		a.livePeak = max(a.livePeak, len(a.live))
	}
	a.allocs++
	a.used += size
}

// Free releases the live allocation that starts at offset (in bytes) and
// merges it with the free ranges directly before and after it. It returns
// ErrNotAllocated when no live allocation starts at offset, including a
// second Free of the same allocation.
//
// An Untracked allocator returns ErrUntracked: use FreeSized.
func (a *Allocator) Free(offset uint64) error {
	if a.live == nil {
		return fmt.Errorf("%w: Free(%d) needs the size: use FreeSized", ErrUntracked, offset)
	}
	size, ok := a.live[offset]
	if !ok {
		return fmt.Errorf("%w: offset %d", ErrNotAllocated, offset)
	}
	a.release(offset, size)
	return nil
}

// FreeSized releases the live allocation [offset, offset+size) as Free
// does; size is the size it was allocated with. It returns
// ErrInvalidArgument for size 0 or a range outside [0, capacity), and
// ErrNotAllocated when the allocator tracks sizes and no allocation of
// size bytes starts at offset, or, Untracked, when any byte of the range
// is free (a second FreeSized of the same allocation included).
func (a *Allocator) FreeSized(offset, size uint64) error {
	end := offset + size
	if size == 0 || end < offset || end > a.capacity {
		return fmt.Errorf("%w: range [%d,+%d) bytes empty or outside capacity %d", ErrInvalidArgument, offset, size, a.capacity)
	}
	if a.live != nil {
		if got, ok := a.live[offset]; !ok || got != size {
			return fmt.Errorf("%w: no allocation of %d bytes at offset %d", ErrNotAllocated, size, offset)
		}
	} else if n := a.free.floor(end - 1); n != nilNode && a.free.nodes[n].start+a.free.nodes[n].size > offset {
		return fmt.Errorf("%w: range [%d,%d) holds free bytes", ErrNotAllocated, offset, end)
	}
	a.release(offset, size)
	return nil
}

// release frees the allocation [offset, offset+size), merging it with its
// free neighbours, and shrinks indexes that became sparse.
func (a *Allocator) release(offset, size uint64) {
	if a.live != nil {
		delete(a.live, offset)
		if n := len(a.live); a.livePeak >= shrinkMin && n*8 < a.livePeak {
			live := make(map[uint64]uint64, n)
			for k, v := range a.live {
				live[k] = v
			}
			a.live, a.livePeak = live, n
		}
	}
	a.allocs--
	a.used -= size
	start, end := offset, offset+size
	if n := a.free.endingAt(start); n != nilNode {
		start = a.free.nodes[n].start
		a.free.remove(n)
	}
	if n := a.free.startingAt(end); n != nilNode {
		end += a.free.nodes[n].size
		a.free.remove(n)
	}
	a.free.insert(start, end-start)
	a.free.shrink()
}

// shrinkMin is the peak below which the indexes are never rebuilt.
const shrinkMin = 1024

// AllocAt reserves exactly the bytes [offset, offset+size), as if Alloc
// had placed an allocation there: afterwards Free(offset) releases it. It is
// how a restored master re-creates the placements another master made
// (core/store/master Restore*). Errors: ErrInvalidArgument for size 0 or a
// range that does not lie inside [0, capacity); ErrNoSpace when any byte of
// the range is held by a live allocation.
//
// Cost: O(log n) expected in the number n of free ranges.
func (a *Allocator) AllocAt(offset, size uint64) error {
	if size == 0 {
		return fmt.Errorf("%w: size 0 bytes", ErrInvalidArgument)
	}
	end := offset + size
	if end < offset || end > a.capacity {
		return fmt.Errorf("%w: range [%d,+%d) bytes outside capacity %d", ErrInvalidArgument, offset, size, a.capacity)
	}
	n := a.free.floor(offset)
	if n == nilNode || a.free.nodes[n].start+a.free.nodes[n].size < end {
		return fmt.Errorf("%w: range [%d,%d) overlaps a live allocation", ErrNoSpace, offset, end)
	}
	start, rangeEnd := a.free.nodes[n].start, a.free.nodes[n].start+a.free.nodes[n].size
	a.free.remove(n)
	// The range was maximal, so neither remainder touches another free
	// range.
	if offset > start {
		a.free.insert(start, offset-start)
	}
	if rangeEnd > end {
		a.free.insert(end, rangeEnd-end)
	}
	a.taken(offset, size)
	return nil
}

// SizeOf returns the size in bytes of the live allocation that starts at
// offset (in bytes), and whether there is one; an Untracked allocator
// knows none.
func (a *Allocator) SizeOf(offset uint64) (uint64, bool) {
	size, ok := a.live[offset]
	return size, ok
}

// Stats returns the current occupancy; see Stats for the meaning and units
// of each field. It costs O(log n) in the number of free ranges.
func (a *Allocator) Stats() Stats {
	s := Stats{
		Capacity:    a.capacity,
		Used:        a.used,
		Free:        a.capacity - a.used,
		LargestFree: a.free.maxSize(),
		Allocations: a.allocs,
		FreeRanges:  a.free.count,
	}
	if s.Free > 0 {
		s.Fragmentation = 1 - float64(s.LargestFree)/float64(s.Free)
	}
	return s
}

// nilNode is the absent node index.
const nilNode int32 = -1

// freeNode is one free range [start, start+size) in bytes, stored in a
// freeIndex.
type freeNode struct {
	start, size uint64
	// left and right are child node indexes in the (size, start) order;
	// left also links unused slots into the recycle list. sleft and sright
	// are those in the start order.
	left, right   int32
	sleft, sright int32
	// prio is the treap heap priority of both orders: a parent's is never
	// below a child's.
	prio uint32
}

// freeIndex holds the free ranges in two treaps over one node slice: one
// ordered by (size, start) for best-fit search, one by start for
// coalescing and range checks. Nodes are linked by int32 indexes so that
// the garbage collector sees no pointers and freed slots are reused without
// allocating. Priorities come from a fixed-seed xorshift generator, so the
// shapes, and therefore every placement decision, are deterministic for a
// given sequence of calls.
type freeIndex struct {
	nodes    []freeNode
	root     int32 // of the (size, start) order
	sroot    int32 // of the start order
	recycled int32 // head of the unused slot list, linked through left
	count    int   // live nodes
	rng      uint32
}

func newFreeIndex() freeIndex {
	return freeIndex{root: nilNode, sroot: nilNode, recycled: nilNode, rng: 0x9e3779b9}
}

// keyLess orders ranges by size, then by start offset.
func keyLess(aSize, aStart, bSize, bStart uint64) bool {
	return aSize < bSize || (aSize == bSize && aStart < bStart)
}

// nextPrio returns the next xorshift32 value.
func (t *freeIndex) nextPrio() uint32 {
	x := t.rng
	x ^= x << 13
	x ^= x >> 17
	x ^= x << 5
	t.rng = x
	return x
}

// insert adds the range [start, start+size) and returns its node index.
func (t *freeIndex) insert(start, size uint64) int32 {
	nd := freeNode{start: start, size: size, left: nilNode, right: nilNode, sleft: nilNode, sright: nilNode, prio: t.nextPrio()}
	n := t.recycled
	if n != nilNode {
		t.recycled = t.nodes[n].left
		t.nodes[n] = nd
	} else {
		if len(t.nodes) == math.MaxInt32 {
			panic("alloc: more than 2^31-1 free ranges")
		}
		n = int32(len(t.nodes))
		t.nodes = append(t.nodes, nd)
	}
	t.root = t.insertAt(t.root, n)
	t.sroot = t.sinsertAt(t.sroot, n)
	t.count++
	return n
}

// insertAt inserts node n into the (size, start) subtree rooted at root
// and returns the new subtree root. The node slice does not grow during
// the call.
func (t *freeIndex) insertAt(root, n int32) int32 {
	if root == nilNode {
		return n
	}
	r, k := &t.nodes[root], &t.nodes[n]
	if keyLess(k.size, k.start, r.size, r.start) {
		r.left = t.insertAt(r.left, n)
		if t.nodes[r.left].prio > r.prio {
			return t.rotateRight(root)
		}
	} else {
		r.right = t.insertAt(r.right, n)
		if t.nodes[r.right].prio > r.prio {
			return t.rotateLeft(root)
		}
	}
	return root
}

// sinsertAt is insertAt in the start order.
func (t *freeIndex) sinsertAt(root, n int32) int32 {
	if root == nilNode {
		return n
	}
	r, k := &t.nodes[root], &t.nodes[n]
	if k.start < r.start {
		r.sleft = t.sinsertAt(r.sleft, n)
		if t.nodes[r.sleft].prio > r.prio {
			y := r.sleft
			r.sleft = t.nodes[y].sright
			t.nodes[y].sright = root
			return y
		}
	} else {
		r.sright = t.sinsertAt(r.sright, n)
		if t.nodes[r.sright].prio > r.prio {
			y := r.sright
			r.sright = t.nodes[y].sleft
			t.nodes[y].sleft = root
			return y
		}
	}
	return root
}

// rotateRight lifts x's left child above x and returns it.
func (t *freeIndex) rotateRight(x int32) int32 {
	y := t.nodes[x].left
	t.nodes[x].left = t.nodes[y].right
	t.nodes[y].right = x
	return y
}

// rotateLeft lifts x's right child above x and returns it.
func (t *freeIndex) rotateLeft(x int32) int32 {
	y := t.nodes[x].right
	t.nodes[x].right = t.nodes[y].left
	t.nodes[y].left = x
	return y
}

// remove deletes node n, which must be in the index, and recycles its
// slot.
func (t *freeIndex) remove(n int32) {
	t.root = t.removeAt(t.root, n)
	t.sroot = t.sremoveAt(t.sroot, n)
	t.count--
	t.nodes[n] = freeNode{left: t.recycled, right: nilNode, sleft: nilNode, sright: nilNode}
	t.recycled = n
}

// removeAt removes node n from the (size, start) subtree rooted at root
// and returns the new subtree root.
func (t *freeIndex) removeAt(root, n int32) int32 {
	if root == n {
		return t.merge(t.nodes[n].left, t.nodes[n].right)
	}
	if root == nilNode {
		panic("alloc: free range missing from size index")
	}
	r, k := &t.nodes[root], &t.nodes[n]
	if keyLess(k.size, k.start, r.size, r.start) {
		r.left = t.removeAt(r.left, n)
	} else {
		r.right = t.removeAt(r.right, n)
	}
	return root
}

// sremoveAt is removeAt in the start order.
func (t *freeIndex) sremoveAt(root, n int32) int32 {
	if root == n {
		return t.smerge(t.nodes[n].sleft, t.nodes[n].sright)
	}
	if root == nilNode {
		panic("alloc: free range missing from start index")
	}
	r := &t.nodes[root]
	if t.nodes[n].start < r.start {
		r.sleft = t.sremoveAt(r.sleft, n)
	} else {
		r.sright = t.sremoveAt(r.sright, n)
	}
	return root
}

// merge joins (size, start) subtrees a and b, every key of a being below
// every key of b, and returns the joined root.
func (t *freeIndex) merge(a, b int32) int32 {
	switch {
	case a == nilNode:
		return b
	case b == nilNode:
		return a
	case t.nodes[a].prio > t.nodes[b].prio:
		t.nodes[a].right = t.merge(t.nodes[a].right, b)
		return a
	default:
		t.nodes[b].left = t.merge(a, t.nodes[b].left)
		return b
	}
}

// smerge is merge in the start order.
func (t *freeIndex) smerge(a, b int32) int32 {
	switch {
	case a == nilNode:
		return b
	case b == nilNode:
		return a
	case t.nodes[a].prio > t.nodes[b].prio:
		t.nodes[a].sright = t.smerge(t.nodes[a].sright, b)
		return a
	default:
		t.nodes[b].sleft = t.smerge(a, t.nodes[b].sleft)
		return b
	}
}

// floor returns the range with the largest start <= offset, or nilNode.
func (t *freeIndex) floor(offset uint64) int32 {
	best := nilNode
	for x := t.sroot; x != nilNode; {
		nd := &t.nodes[x]
		if nd.start <= offset {
			best = x
			x = nd.sright
		} else {
			x = nd.sleft
		}
	}
	return best
}

// startingAt returns the range that starts at offset, or nilNode.
func (t *freeIndex) startingAt(offset uint64) int32 {
	if n := t.floor(offset); n != nilNode && t.nodes[n].start == offset {
		return n
	}
	return nilNode
}

// endingAt returns the range that ends at offset (exclusive), or nilNode.
func (t *freeIndex) endingAt(offset uint64) int32 {
	if offset == 0 {
		return nilNode
	}
	if n := t.floor(offset - 1); n != nilNode && t.nodes[n].start+t.nodes[n].size == offset {
		return n
	}
	return nilNode
}

// shrink rebuilds the index into a smaller node slice once under 1/8 of
// its slots are in use (the slice never shrinks by itself). The ranges are
// re-inserted in start order, which keeps the rebuild deterministic.
func (t *freeIndex) shrink() {
	if len(t.nodes) < shrinkMin || t.count*8 >= len(t.nodes) {
		return
	}
	type rng struct{ start, size uint64 }
	ranges := make([]rng, 0, t.count)
	var walk func(x int32)
	walk = func(x int32) {
		if x == nilNode {
			return
		}
		walk(t.nodes[x].sleft)
		ranges = append(ranges, rng{t.nodes[x].start, t.nodes[x].size})
		walk(t.nodes[x].sright)
	}
	walk(t.sroot)
	t.nodes = make([]freeNode, 0, 2*len(ranges))
	t.root, t.sroot, t.recycled, t.count = nilNode, nilNode, nilNode, 0
	for _, r := range ranges {
		t.insert(r.start, r.size)
	}
}

// ceil returns the node with the smallest key >= (size, start), or nilNode.
func (t *freeIndex) ceil(size, start uint64) int32 {
	best := nilNode
	for x := t.root; x != nilNode; {
		nd := &t.nodes[x]
		if keyLess(nd.size, nd.start, size, start) {
			x = nd.right
		} else {
			best = x
			x = nd.left
		}
	}
	return best
}

// next returns the in-order successor of node n, or nilNode.
func (t *freeIndex) next(n int32) int32 {
	nd := &t.nodes[n]
	// start+1 cannot overflow: start+size is at most the capacity.
	return t.ceil(nd.size, nd.start+1)
}

// maxSize returns the size of the largest range, 0 when there is none.
func (t *freeIndex) maxSize() uint64 {
	x := t.root
	if x == nilNode {
		return 0
	}
	for t.nodes[x].right != nilNode {
		x = t.nodes[x].right
	}
	return t.nodes[x].size
}

// fits reports whether range node n can hold size bytes at a multiple of
// align, a power of two. The caller guarantees n's size >= size.
func (t *freeIndex) fits(n int32, size, align uint64) bool {
	nd := &t.nodes[n]
	return -nd.start&(align-1) <= nd.size-size
}

// bestFit returns the smallest range (lowest start among equals) that can
// hold size bytes at a multiple of align, or nilNode if none can. With
// align > 1, once scan candidates have failed the alignment test it returns
// the smallest range of at least size+align-1 bytes, which fits wherever it
// starts, and resumes the exhaustive scan only when there is none.
func (t *freeIndex) bestFit(size, align uint64, scan int) int32 {
	n := t.ceil(size, 0)
	if align == 1 || n == nilNode {
		return n
	}
	for tried := 0; n != nilNode; n = t.next(n) {
		if t.fits(n, size, align) {
			return n
		}
		tried++
		if tried == scan && size <= math.MaxUint64-(align-1) {
			if sure := t.ceil(size+align-1, 0); sure != nilNode {
				return sure
			}
		}
	}
	return nilNode
}
