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
// An Allocator is not safe for concurrent use: the caller serialises all
// calls, typically by holding the lock of the segment that owns it.
type Allocator struct {
	capacity uint64
	used     uint64

	// live maps the offset of each live allocation to its size in bytes.
	live map[uint64]uint64
	// byStart and byEnd map the first offset and the end offset (exclusive)
	// of each free range to its node in bySize; Free finds the neighbours it
	// coalesces with in O(1).
	byStart map[uint64]int32
	byEnd   map[uint64]int32
	// bySize orders the free ranges by (size, offset) for best-fit search.
	bySize sizeIndex

	// alignScan is the candidate budget of an aligned search (see
	// defaultAlignScan). Tests set it to make the search exhaustive.
	alignScan int
}

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
func New(capacity uint64) (*Allocator, error) {
	if capacity == 0 {
		return nil, fmt.Errorf("%w: capacity 0 bytes", ErrInvalidArgument)
	}
	a := &Allocator{
		capacity:  capacity,
		live:      make(map[uint64]uint64),
		byStart:   make(map[uint64]int32),
		byEnd:     make(map[uint64]int32),
		bySize:    newSizeIndex(),
		alignScan: defaultAlignScan,
	}
	a.insertFree(0, capacity)
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
	n := a.bySize.bestFit(size, align, a.alignScan)
	if n == nilNode {
		return 0, fmt.Errorf("%w: size %d bytes, align %d bytes (largest free range %d bytes)",
			ErrNoSpace, size, align, a.bySize.maxSize())
	}
	start, rangeSize := a.bySize.nodes[n].start, a.bySize.nodes[n].size
	pad := -start & (align - 1)
	offset = start + pad
	tail := rangeSize - pad - size
	a.removeFree(n)
	// The chosen range was maximal, so neither remainder touches another
	// free range and none needs coalescing.
	if pad > 0 {
		a.insertFree(start, pad)
	}
	if tail > 0 {
		a.insertFree(offset+size, tail)
	}
	a.live[offset] = size
	a.used += size
	return offset, nil
}

// Free releases the live allocation that starts at offset (in bytes) and
// merges it with the free ranges directly before and after it. It returns
// ErrNotAllocated when no live allocation starts at offset, including a
// second Free of the same allocation.
func (a *Allocator) Free(offset uint64) error {
	size, ok := a.live[offset]
	if !ok {
		return fmt.Errorf("%w: offset %d", ErrNotAllocated, offset)
	}
	delete(a.live, offset)
	a.used -= size
	start, end := offset, offset+size
	if n, ok := a.byEnd[start]; ok {
		start = a.bySize.nodes[n].start
		a.removeFree(n)
	}
	if n, ok := a.byStart[end]; ok {
		end += a.bySize.nodes[n].size
		a.removeFree(n)
	}
	a.insertFree(start, end-start)
	return nil
}

// AllocAt reserves exactly the bytes [offset, offset+size), as if Alloc
// had placed an allocation there: afterwards Free(offset) releases it. It is
// how a restored master re-creates the placements another master made
// (core/store/master Restore*). Errors: ErrInvalidArgument for size 0 or a
// range that does not lie inside [0, capacity); ErrNoSpace when any byte of
// the range is held by a live allocation.
//
// Cost: O(log n) expected when offset is the start of a free range, the
// range ends where a free range ends, or the range lies in the free range
// that ends at the capacity (the case of restoring allocations in ascending
// offset order); otherwise finding the free range around offset scans all n
// free ranges, O(n).
func (a *Allocator) AllocAt(offset, size uint64) error {
	if size == 0 {
		return fmt.Errorf("%w: size 0 bytes", ErrInvalidArgument)
	}
	end := offset + size
	if end < offset || end > a.capacity {
		return fmt.Errorf("%w: range [%d,+%d) bytes outside capacity %d", ErrInvalidArgument, offset, size, a.capacity)
	}
	n := a.freeAround(offset, end)
	if n == nilNode {
		return fmt.Errorf("%w: range [%d,%d) overlaps a live allocation", ErrNoSpace, offset, end)
	}
	start, rangeEnd := a.bySize.nodes[n].start, a.bySize.nodes[n].start+a.bySize.nodes[n].size
	a.removeFree(n)
	// The range was maximal, so neither remainder touches another free
	// range.
	if offset > start {
		a.insertFree(start, offset-start)
	}
	if rangeEnd > end {
		a.insertFree(end, rangeEnd-end)
	}
	a.live[offset] = size
	a.used += size
	return nil
}

// freeAround returns the free range that contains all of [offset, end), or
// nilNode when no free range does.
func (a *Allocator) freeAround(offset, end uint64) int32 {
	contains := func(n int32) bool {
		nd := &a.bySize.nodes[n]
		return nd.start <= offset && end <= nd.start+nd.size
	}
	if n, ok := a.byStart[offset]; ok {
		if contains(n) {
			return n
		}
		return nilNode
	}
	if n, ok := a.byEnd[end]; ok {
		if contains(n) {
			return n
		}
		return nilNode
	}
	if n, ok := a.byEnd[a.capacity]; ok && a.bySize.nodes[n].start <= offset {
		if contains(n) {
			return n
		}
		return nilNode
	}
	for start, n := range a.byStart {
		if start <= offset && offset < start+a.bySize.nodes[n].size {
			if contains(n) {
				return n
			}
			return nilNode
		}
	}
	return nilNode
}

// SizeOf returns the size in bytes of the live allocation that starts at
// offset (in bytes), and whether there is one.
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
		LargestFree: a.bySize.maxSize(),
		Allocations: len(a.live),
		FreeRanges:  a.bySize.count,
	}
	if s.Free > 0 {
		s.Fragmentation = 1 - float64(s.LargestFree)/float64(s.Free)
	}
	return s
}

// insertFree records [start, start+size) as a free range in all indexes.
func (a *Allocator) insertFree(start, size uint64) {
	n := a.bySize.insert(start, size)
	a.byStart[start] = n
	a.byEnd[start+size] = n
}

// removeFree drops free range node n from all indexes.
func (a *Allocator) removeFree(n int32) {
	nd := a.bySize.nodes[n]
	delete(a.byStart, nd.start)
	delete(a.byEnd, nd.start+nd.size)
	a.bySize.remove(n)
}

// nilNode is the absent node index.
const nilNode int32 = -1

// freeNode is one free range [start, start+size) in bytes, stored in a
// sizeIndex.
type freeNode struct {
	start, size uint64
	// left and right are child node indexes; left also links unused slots
	// into the recycle list.
	left, right int32
	// prio is the treap heap priority: a parent's is never below a child's.
	prio uint32
}

// sizeIndex is a treap of free ranges ordered by (size, start), stored in a
// slice and linked by int32 indexes so that the garbage collector sees no
// pointers and freed slots are reused without allocating. Priorities come
// from a fixed-seed xorshift generator, so the shape, and therefore every
// placement decision, is deterministic for a given sequence of calls.
type sizeIndex struct {
	nodes    []freeNode
	root     int32
	recycled int32 // head of the unused slot list, linked through left
	count    int   // live nodes
	rng      uint32
}

func newSizeIndex() sizeIndex {
	return sizeIndex{root: nilNode, recycled: nilNode, rng: 0x9e3779b9}
}

// keyLess orders ranges by size, then by start offset.
func keyLess(aSize, aStart, bSize, bStart uint64) bool {
	return aSize < bSize || (aSize == bSize && aStart < bStart)
}

// nextPrio returns the next xorshift32 value.
func (t *sizeIndex) nextPrio() uint32 {
	x := t.rng
	x ^= x << 13
	x ^= x >> 17
	x ^= x << 5
	t.rng = x
	return x
}

// insert adds the range [start, start+size) and returns its node index.
func (t *sizeIndex) insert(start, size uint64) int32 {
	nd := freeNode{start: start, size: size, left: nilNode, right: nilNode, prio: t.nextPrio()}
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
	t.count++
	return n
}

// insertAt inserts node n into the subtree rooted at root and returns the
// new subtree root. The node slice does not grow during the call.
func (t *sizeIndex) insertAt(root, n int32) int32 {
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

// rotateRight lifts x's left child above x and returns it.
func (t *sizeIndex) rotateRight(x int32) int32 {
	y := t.nodes[x].left
	t.nodes[x].left = t.nodes[y].right
	t.nodes[y].right = x
	return y
}

// rotateLeft lifts x's right child above x and returns it.
func (t *sizeIndex) rotateLeft(x int32) int32 {
	y := t.nodes[x].right
	t.nodes[x].right = t.nodes[y].left
	t.nodes[y].left = x
	return y
}

// remove deletes node n, which must be in the tree, and recycles its slot.
func (t *sizeIndex) remove(n int32) {
	t.root = t.removeAt(t.root, n)
	t.count--
	t.nodes[n] = freeNode{left: t.recycled, right: nilNode}
	t.recycled = n
}

// removeAt removes node n from the subtree rooted at root and returns the
// new subtree root.
func (t *sizeIndex) removeAt(root, n int32) int32 {
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

// merge joins subtrees a and b, every key of a being below every key of b,
// and returns the joined root.
func (t *sizeIndex) merge(a, b int32) int32 {
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

// ceil returns the node with the smallest key >= (size, start), or nilNode.
func (t *sizeIndex) ceil(size, start uint64) int32 {
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
func (t *sizeIndex) next(n int32) int32 {
	nd := &t.nodes[n]
	// start+1 cannot overflow: start+size is at most the capacity.
	return t.ceil(nd.size, nd.start+1)
}

// maxSize returns the size of the largest range, 0 when there is none.
func (t *sizeIndex) maxSize() uint64 {
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
func (t *sizeIndex) fits(n int32, size, align uint64) bool {
	nd := &t.nodes[n]
	return -nd.start&(align-1) <= nd.size-size
}

// bestFit returns the smallest range (lowest start among equals) that can
// hold size bytes at a multiple of align, or nilNode if none can. With
// align > 1, once scan candidates have failed the alignment test it returns
// the smallest range of at least size+align-1 bytes, which fits wherever it
// starts, and resumes the exhaustive scan only when there is none.
func (t *sizeIndex) bestFit(size, align uint64, scan int) int32 {
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
