package alloc

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// checkInvariants verifies every invariant listed in doc.go plus the
// internal consistency of the indexes. It walks everything: O(n log n).
// For an Untracked allocator, which knows no allocations, it checks the
// free ranges and that the rest of the capacity is Used.
func checkInvariants(a *Allocator) error {
	t := &a.free
	// Both orders: in-order keys strictly increase, heap order holds, and
	// each holds count nodes.
	walkOrder := func(root int32, kids func(freeNode) (int32, int32)) ([]int32, error) {
		var inorder []int32
		var walk func(x int32, parentPrio uint32) error
		walk = func(x int32, parentPrio uint32) error {
			if x == nilNode {
				return nil
			}
			nd := t.nodes[x]
			if nd.prio > parentPrio {
				return fmt.Errorf("node %d prio %d above parent %d", x, nd.prio, parentPrio)
			}
			l, r := kids(nd)
			if err := walk(l, nd.prio); err != nil {
				return err
			}
			inorder = append(inorder, x)
			return walk(r, nd.prio)
		}
		return inorder, walk(root, math.MaxUint32)
	}
	inorder, err := walkOrder(t.root, func(nd freeNode) (int32, int32) { return nd.left, nd.right })
	if err != nil {
		return err
	}
	if len(inorder) != t.count {
		return fmt.Errorf("size index holds %d nodes, count %d", len(inorder), t.count)
	}
	for i := 1; i < len(inorder); i++ {
		p, q := t.nodes[inorder[i-1]], t.nodes[inorder[i]]
		if !keyLess(p.size, p.start, q.size, q.start) {
			return fmt.Errorf("size index out of order: (%d,%d) before (%d,%d)", p.size, p.start, q.size, q.start)
		}
	}
	byStart, err := walkOrder(t.sroot, func(nd freeNode) (int32, int32) { return nd.sleft, nd.sright })
	if err != nil {
		return err
	}
	if len(byStart) != t.count {
		return fmt.Errorf("start index holds %d nodes, count %d", len(byStart), t.count)
	}
	for i := 1; i < len(byStart); i++ {
		if p, q := t.nodes[byStart[i-1]], t.nodes[byStart[i]]; p.start >= q.start {
			return fmt.Errorf("start index out of order: %d before %d", p.start, q.start)
		}
	}
	if !slices.Equal(slices.Sorted(slices.Values(inorder)), slices.Sorted(slices.Values(byStart))) {
		return fmt.Errorf("size and start indexes hold different nodes")
	}
	type span struct {
		start, end uint64
		free       bool
	}
	var spans []span
	var free uint64
	for _, n := range inorder {
		nd := t.nodes[n]
		if nd.size == 0 {
			return fmt.Errorf("empty free range at %d", nd.start)
		}
		if t.startingAt(nd.start) != n || t.endingAt(nd.start+nd.size) != n {
			return fmt.Errorf("free range [%d,%d) not found by start/end", nd.start, nd.start+nd.size)
		}
		spans = append(spans, span{nd.start, nd.start + nd.size, true})
		free += nd.size
	}
	if a.live == nil {
		if free+a.used != a.capacity {
			return fmt.Errorf("free %d + used %d != capacity %d", free, a.used, a.capacity)
		}
		slices.SortFunc(spans, func(x, y span) int { return cmpUint64(x.start, y.start) })
		for i, s := range spans {
			if s.end > a.capacity {
				return fmt.Errorf("free range [%d,%d) outside capacity %d", s.start, s.end, a.capacity)
			}
			if i > 0 && spans[i-1].end >= s.start {
				return fmt.Errorf("free ranges at %d and %d overlap or touch", spans[i-1].start, s.start)
			}
		}
		return nil
	}
	var used uint64
	for off, size := range a.live {
		if size == 0 {
			return fmt.Errorf("empty allocation at %d", off)
		}
		used += size
		spans = append(spans, span{off, off + size, false})
	}
	if used != a.used || len(a.live) != a.allocs {
		return fmt.Errorf("used %d in %d allocations, live allocations sum to %d in %d", a.used, a.allocs, used, len(a.live))
	}
	// Disjoint, adjacent, maximal free ranges, covering [0, capacity).
	slices.SortFunc(spans, func(x, y span) int { return cmpUint64(x.start, y.start) })
	var pos uint64
	for i, s := range spans {
		if s.start != pos {
			return fmt.Errorf("range [%d,%d) does not start at %d (gap or overlap)", s.start, s.end, pos)
		}
		if s.end <= s.start || s.end > a.capacity {
			return fmt.Errorf("range [%d,%d) outside capacity %d", s.start, s.end, a.capacity)
		}
		if i > 0 && s.free && spans[i-1].free {
			return fmt.Errorf("adjacent free ranges at %d", s.start)
		}
		pos = s.end
	}
	if pos != a.capacity {
		return fmt.Errorf("ranges end at %d, capacity %d", pos, a.capacity)
	}
	return nil
}

func cmpUint64(x, y uint64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func mustNew(t testing.TB, capacity uint64) *Allocator {
	t.Helper()
	a, err := New(capacity)
	if err != nil {
		t.Fatalf("New(%d): %v", capacity, err)
	}
	return a
}

func mustAlloc(t testing.TB, a *Allocator, size, align uint64) uint64 {
	t.Helper()
	off, err := a.Alloc(size, align)
	if err != nil {
		t.Fatalf("Alloc(%d, %d): %v", size, align, err)
	}
	return off
}

func mustFree(t testing.TB, a *Allocator, off uint64) {
	t.Helper()
	if err := a.Free(off); err != nil {
		t.Fatalf("Free(%d): %v", off, err)
	}
}

func mustCheck(t testing.TB, a *Allocator) {
	t.Helper()
	if err := checkInvariants(a); err != nil {
		t.Fatal(err)
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name     string
		capacity uint64
		wantErr  error
	}{
		{"zero", 0, ErrInvalidArgument},
		{"one", 1, nil},
		{"8KiB", 8192, nil},
		{"max", math.MaxUint64, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(tt.capacity)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("New(%d) error %v, want %v", tt.capacity, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			want := Stats{Capacity: tt.capacity, Free: tt.capacity, LargestFree: tt.capacity, FreeRanges: 1}
			if got := a.Stats(); got != want {
				t.Fatalf("Stats() = %+v, want %+v", got, want)
			}
			mustCheck(t, a)
		})
	}
}

func TestAllocErrors(t *testing.T) {
	tests := []struct {
		name        string
		size, align uint64
		wantErr     error
		wantMsg     string
	}{
		{"size zero", 0, 0, ErrInvalidArgument, "size 0"},
		{"align 3", 8, 3, ErrInvalidArgument, "align 3"},
		{"align 6", 8, 6, ErrInvalidArgument, "align 6"},
		{"align max", 8, math.MaxUint64, ErrInvalidArgument, "not a power of two"},
		{"larger than capacity", 1025, 0, ErrNoSpace, "size 1025 bytes, align 1 bytes"},
		{"huge", math.MaxUint64, 1, ErrNoSpace, "size"},
		{"align beyond capacity", 1, 2048, ErrNoSpace, "align 2048"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := mustNew(t, 1024)
			mustAlloc(t, a, 1, 0) // so that offset 0 is taken
			_, err := a.Alloc(tt.size, tt.align)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Alloc(%d, %d) error %v, want %v", tt.size, tt.align, err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("error %q does not mention %q", err, tt.wantMsg)
			}
			if got := a.Stats(); got.Allocations != 1 || got.Used != 1 {
				t.Fatalf("failed Alloc changed state: %+v", got)
			}
			mustCheck(t, a)
		})
	}
}

func TestFreeErrors(t *testing.T) {
	tests := []struct {
		name   string
		offset func(a *Allocator, live uint64) uint64
	}{
		{"never allocated", func(*Allocator, uint64) uint64 { return 512 }},
		{"inside allocation", func(_ *Allocator, live uint64) uint64 { return live + 1 }},
		{"beyond capacity", func(*Allocator, uint64) uint64 { return 1 << 40 }},
		{"double free", func(a *Allocator, _ uint64) uint64 {
			off, _ := a.Alloc(8, 0)
			_ = a.Free(off)
			return off
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := mustNew(t, 1024)
			live := mustAlloc(t, a, 16, 0)
			off := tt.offset(a, live)
			before := a.Stats()
			err := a.Free(off)
			if !errors.Is(err, ErrNotAllocated) {
				t.Fatalf("Free(%d) error %v, want ErrNotAllocated", off, err)
			}
			if !strings.Contains(err.Error(), fmt.Sprint(off)) {
				t.Fatalf("error %q does not name offset %d", err, off)
			}
			if got := a.Stats(); got != before {
				t.Fatalf("failed Free changed stats: %+v, was %+v", got, before)
			}
			if size, ok := a.SizeOf(live); !ok || size != 16 {
				t.Fatalf("SizeOf(%d) = %d, %v after failed Free", live, size, ok)
			}
			mustCheck(t, a)
		})
	}
}

func TestAlignment(t *testing.T) {
	tests := []struct {
		name     string
		capacity uint64
		first    uint64 // bytes taken at offset 0 before the aligned request
		size     uint64
		align    uint64
		want     uint64
	}{
		{"align 0 is none", 1024, 3, 8, 0, 3},
		{"align 1 is none", 1024, 3, 8, 1, 3},
		{"already aligned", 1024, 64, 8, 64, 64},
		{"pad to 64", 1024, 1, 8, 64, 64},
		{"pad to 512", 1024, 1, 100, 512, 512},
		{"whole second half", 1024, 1, 512, 512, 512},
		{"4KiB in 1MiB", 1 << 20, 100, 8192, 4096, 4096},
		{"align 2^63", math.MaxUint64, 5, 1, 1 << 63, 1 << 63},
		{"max size after pad", math.MaxUint64, 1, math.MaxUint64 - 8, 8, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := mustNew(t, tt.capacity)
			mustAlloc(t, a, tt.first, 0)
			off := mustAlloc(t, a, tt.size, tt.align)
			if off != tt.want {
				t.Fatalf("Alloc(%d, %d) = %d, want %d", tt.size, tt.align, off, tt.want)
			}
			if tt.align > 1 && off%tt.align != 0 {
				t.Fatalf("offset %d not aligned to %d", off, tt.align)
			}
			mustCheck(t, a)
			// The padding in front stays usable.
			if pad := off - tt.first; pad > 0 {
				p := mustAlloc(t, a, pad, 0)
				if p != tt.first {
					t.Fatalf("padding allocation at %d, want %d", p, tt.first)
				}
				mustCheck(t, a)
			}
			if s := a.Stats(); s.Used+s.Free != s.Capacity {
				t.Fatalf("Used %d + Free %d != Capacity %d", s.Used, s.Free, s.Capacity)
			}
		})
	}
}

func TestBestFit(t *testing.T) {
	// Layout of 10 blocks of 16 bytes; freeing blocks leaves holes.
	tests := []struct {
		name        string
		holes       [][]int // runs of block indexes to free, each run one hole
		size, align uint64
		want        uint64
	}{
		{"exact hole", [][]int{{1, 2, 3}, {5}, {7, 8}}, 32, 0, 7 * 16},
		{"smallest that fits", [][]int{{1, 2, 3}, {5}, {7, 8}}, 17, 0, 7 * 16},
		{"lowest offset among equals", [][]int{{1}, {3}, {5}}, 16, 0, 1 * 16},
		{"tail when holes too small", [][]int{{1}, {3}}, 32, 0, 160},
		{"alignment skips smaller hole", [][]int{{1, 2}, {4, 5, 6}}, 32, 64, 4 * 16},
		{"alignment prefers aligned hole", [][]int{{2, 3}, {5, 6}}, 32, 32, 2 * 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := mustNew(t, 256)
			var blocks []uint64
			for range 10 {
				blocks = append(blocks, mustAlloc(t, a, 16, 0))
			}
			for _, run := range tt.holes {
				for _, i := range run {
					mustFree(t, a, blocks[i])
				}
			}
			if got, want := a.Stats().FreeRanges, len(tt.holes)+1; got != want {
				t.Fatalf("FreeRanges = %d, want %d", got, want)
			}
			if off := mustAlloc(t, a, tt.size, tt.align); off != tt.want {
				t.Fatalf("Alloc(%d, %d) = %d, want %d", tt.size, tt.align, off, tt.want)
			}
			mustCheck(t, a)
		})
	}
}

func TestCoalescing(t *testing.T) {
	tests := []struct {
		name  string
		order []int // indexes of 5 equal blocks filling capacity, freed in order
	}{
		{"middle then neighbours", []int{2, 1, 3, 0, 4}},
		{"middle then right then left", []int{2, 3, 1, 4, 0}},
		{"ascending", []int{0, 1, 2, 3, 4}},
		{"descending", []int{4, 3, 2, 1, 0}},
		{"outside in", []int{0, 4, 1, 3, 2}},
		{"alternate", []int{1, 3, 0, 2, 4}},
	}
	const block = 100
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := mustNew(t, 5*block)
			var offs []uint64
			for range 5 {
				offs = append(offs, mustAlloc(t, a, block, 0))
			}
			if s := a.Stats(); s.FreeRanges != 0 || s.Free != 0 {
				t.Fatalf("full allocator: %+v", s)
			}
			freed := make([]bool, 5)
			for _, i := range tt.order {
				mustFree(t, a, offs[i])
				freed[i] = true
				mustCheck(t, a)
				// Free ranges are the maximal runs of freed blocks.
				runs, longest := 0, 0
				for j, cur := 0, 0; j < 5; j++ {
					if !freed[j] {
						cur = 0
						continue
					}
					if cur == 0 {
						runs++
					}
					cur++
					longest = max(longest, cur)
				}
				s := a.Stats()
				if s.FreeRanges != runs || s.LargestFree != uint64(longest*block) {
					t.Fatalf("after freeing %v: FreeRanges %d LargestFree %d, want %d, %d",
						freed, s.FreeRanges, s.LargestFree, runs, longest*block)
				}
			}
			want := Stats{Capacity: 5 * block, Free: 5 * block, LargestFree: 5 * block, FreeRanges: 1}
			if got := a.Stats(); got != want {
				t.Fatalf("after freeing all: %+v, want %+v", got, want)
			}
		})
	}
}

func TestCoalescingAlignedPadding(t *testing.T) {
	a := mustNew(t, 4096)
	small := mustAlloc(t, a, 10, 0)
	big := mustAlloc(t, a, 1000, 1024) // padding [10, 1024) stays free
	if big != 1024 {
		t.Fatalf("aligned offset %d, want 1024", big)
	}
	if s := a.Stats(); s.FreeRanges != 2 || s.Used != 1010 || s.Free != 4096-1010 {
		t.Fatalf("stats %+v", s)
	}
	mustFree(t, a, big) // merges padding and tail
	if s := a.Stats(); s.FreeRanges != 1 || s.LargestFree != 4096-10 {
		t.Fatalf("after freeing aligned block: %+v", s)
	}
	mustFree(t, a, small)
	if s := a.Stats(); s.FreeRanges != 1 || s.LargestFree != 4096 {
		t.Fatalf("after freeing all: %+v", s)
	}
	mustCheck(t, a)
}

func TestExhaustionThenReuse(t *testing.T) {
	tests := []struct {
		name            string
		capacity, block uint64
		align           uint64
		wantCount       int
	}{
		{"exact fit", 1024, 64, 0, 16},
		{"remainder", 1000, 64, 0, 15},
		{"aligned remainder", 1000, 48, 64, 15},
		{"single byte", 7, 1, 0, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := mustNew(t, tt.capacity)
			var offs []uint64
			for {
				off, err := a.Alloc(tt.block, tt.align)
				if errors.Is(err, ErrNoSpace) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				offs = append(offs, off)
			}
			if len(offs) != tt.wantCount {
				t.Fatalf("%d allocations before ErrNoSpace, want %d", len(offs), tt.wantCount)
			}
			mustCheck(t, a)
			// A freed block is reused at the same place.
			victim := offs[len(offs)/2]
			mustFree(t, a, victim)
			if off := mustAlloc(t, a, tt.block, tt.align); off != victim {
				t.Fatalf("reuse at %d, want %d", off, victim)
			}
			if _, err := a.Alloc(tt.block, tt.align); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("Alloc after refill: %v, want ErrNoSpace", err)
			}
			for _, off := range offs {
				mustFree(t, a, off)
			}
			if s := a.Stats(); s.LargestFree != tt.capacity || s.FreeRanges != 1 || s.Allocations != 0 {
				t.Fatalf("after freeing all: %+v", s)
			}
			mustAlloc(t, a, tt.capacity, 0)
			mustCheck(t, a)
		})
	}
}

func TestSizeOf(t *testing.T) {
	a := mustNew(t, 1<<20)
	sizes := []uint64{1, 7, 8192, 100, 4096}
	offs := make([]uint64, len(sizes))
	for i, s := range sizes {
		offs[i] = mustAlloc(t, a, s, 64)
	}
	tests := []struct {
		name     string
		offset   uint64
		wantSize uint64
		wantOK   bool
	}{
		{"first", offs[0], 1, true},
		{"page", offs[2], 8192, true},
		{"last", offs[4], 4096, true},
		{"inside", offs[2] + 1, 0, false},
		{"free space", 1 << 19, 0, false},
		{"beyond capacity", 1 << 30, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			size, ok := a.SizeOf(tt.offset)
			if size != tt.wantSize || ok != tt.wantOK {
				t.Fatalf("SizeOf(%d) = %d, %v, want %d, %v", tt.offset, size, ok, tt.wantSize, tt.wantOK)
			}
		})
	}
	t.Run("after free", func(t *testing.T) {
		mustFree(t, a, offs[1])
		if size, ok := a.SizeOf(offs[1]); ok || size != 0 {
			t.Fatalf("SizeOf freed offset = %d, %v", size, ok)
		}
	})
}

func TestStatsFragmentation(t *testing.T) {
	a := mustNew(t, 400)
	var offs []uint64
	for range 4 {
		offs = append(offs, mustAlloc(t, a, 100, 0))
	}
	if f := a.Stats().Fragmentation; f != 0 {
		t.Fatalf("full: Fragmentation %v, want 0", f)
	}
	mustFree(t, a, offs[0])
	mustFree(t, a, offs[2])
	s := a.Stats()
	if s.Free != 200 || s.LargestFree != 100 || s.Fragmentation != 0.5 {
		t.Fatalf("two holes: %+v, want Free 200 LargestFree 100 Fragmentation 0.5", s)
	}
	mustFree(t, a, offs[1])
	if s := a.Stats(); s.Fragmentation != 0 || s.LargestFree != 300 {
		t.Fatalf("merged: %+v", s)
	}
}

// TestAlignScanBudget builds 64 holes of exactly the requested size of which
// only one, late in (size, offset) order, is aligned, plus optionally one
// large free range. An aligned request that exhausts its candidate budget
// takes the large range; without one it scans on to the aligned hole.
func TestAlignScanBudget(t *testing.T) {
	tests := []struct {
		name     string
		scan     int
		bigRange bool
		wantHole bool // want the aligned hole (best fit) rather than the big range
	}{
		{"exhaustive finds aligned hole", math.MaxInt, true, true},
		{"budget jumps to big range", 4, true, false},
		{"budget without big range scans on", 4, false, true},
		{"budget 1 without big range scans on", 1, false, true},
	}
	const (
		holes  = 64
		hole   = 64
		sep    = 41                  // odd stride: hole offsets cycle through all residues mod 64
		lead   = 24                  // makes hole 40 the only aligned one: 24+40*105 = 66*64
		stride = hole + sep          // 105
		tail   = 4096                // the big range
		want   = lead + 40*stride    // offset of the aligned hole
		base   = lead + holes*stride // capacity without the big range
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			capacity := uint64(base)
			if tt.bigRange {
				capacity += tail
			}
			a := mustNew(t, capacity)
			a.alignScan = tt.scan
			mustAlloc(t, a, lead, 0)
			var holeOffs []uint64
			for range holes {
				holeOffs = append(holeOffs, mustAlloc(t, a, hole, 0))
				mustAlloc(t, a, sep, 0)
			}
			aligned := 0
			for _, off := range holeOffs {
				mustFree(t, a, off)
				if off%hole == 0 {
					aligned++
				}
			}
			if aligned != 1 || want%hole != 0 {
				t.Fatalf("layout has %d aligned holes, want 1", aligned)
			}
			mustCheck(t, a)
			off := mustAlloc(t, a, hole, hole)
			if off%hole != 0 {
				t.Fatalf("offset %d not aligned", off)
			}
			if got := off == want; got != tt.wantHole {
				t.Fatalf("offset %d, aligned hole at %d, wantHole %v", off, want, tt.wantHole)
			}
			if !tt.wantHole && off < base {
				t.Fatalf("offset %d not in the big range [%d,%d)", off, base, capacity)
			}
			mustCheck(t, a)
		})
	}
}

// refAllocator is the naive reference: one bool per byte.
type refAllocator struct {
	used []bool
}

type refRun struct{ start, size uint64 }

// runs returns the maximal free runs in address order.
func (r *refAllocator) runs() []refRun {
	var out []refRun
	for i := 0; i < len(r.used); {
		if r.used[i] {
			i++
			continue
		}
		j := i
		for j < len(r.used) && !r.used[j] {
			j++
		}
		out = append(out, refRun{uint64(i), uint64(j - i)})
		i = j
	}
	return out
}

// bestFit returns the offset best-fit placement gives: the smallest run
// (lowest start among equals) that holds size bytes at a multiple of align,
// at its first aligned byte.
func (r *refAllocator) bestFit(size, align uint64) (uint64, bool) {
	if align == 0 {
		align = 1
	}
	var best refRun
	found := false
	for _, run := range r.runs() {
		off := (run.start + align - 1) / align * align
		if off+size > run.start+run.size {
			continue
		}
		if !found || run.size < best.size {
			best, found = run, true
		}
	}
	if !found {
		return 0, false
	}
	return (best.start + align - 1) / align * align, true
}

func (r *refAllocator) mark(off, size uint64, v bool) {
	for i := off; i < off+size; i++ {
		r.used[i] = v
	}
}

// TestPropertyAgainstReference runs random operation sequences on an
// Allocator and the byte-map reference and checks after every step that
// placements are valid, statistics agree, ErrNoSpace is returned exactly
// when nothing fits, and, with an unlimited candidate budget, that the
// placement is the reference's best fit.
func TestPropertyAgainstReference(t *testing.T) {
	sequences, steps := 1500, 200
	if testing.Short() {
		sequences = 200
	}
	tests := []struct {
		name      string
		alignScan int
		exactBest bool
	}{
		{"exhaustive best fit", math.MaxInt, true},
		{"default budget", defaultAlignScan, false},
		{"budget 1", 1, false},
	}
	aligns := []uint64{0, 0, 0, 1, 2, 4, 8, 16, 32, 64}
	for ti, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seq := range sequences {
				rng := rand.New(rand.NewPCG(uint64(ti), uint64(seq)))
				capacity := uint64(16 + rng.IntN(240))
				a := mustNew(t, capacity)
				a.alignScan = tt.alignScan
				// u is an Untracked twin: same calls, FreeSized instead of
				// Free; it must place exactly as a does.
				u, err := New(capacity, Untracked())
				if err != nil {
					t.Fatal(err)
				}
				u.alignScan = tt.alignScan
				ref := &refAllocator{used: make([]bool, capacity)}
				type liveAlloc struct{ off, size uint64 }
				var live []liveAlloc
				var used uint64
				fail := func(format string, args ...any) {
					t.Helper()
					t.Fatalf("seq %d (capacity %d): %s", seq, capacity, fmt.Sprintf(format, args...))
				}
				for step := range steps {
					switch op := rng.IntN(20); {
					case op < 11 || len(live) == 0:
						var size uint64
						switch rng.IntN(10) {
						case 0:
							size = uint64(1 + rng.IntN(int(capacity)+8))
						case 1, 2:
							size = uint64(1 + rng.IntN(64))
						default:
							size = uint64(1 + rng.IntN(16))
						}
						align := aligns[rng.IntN(len(aligns))]
						want, fits := ref.bestFit(size, align)
						off, err := a.Alloc(size, align)
						if !fits {
							if !errors.Is(err, ErrNoSpace) {
								fail("step %d: Alloc(%d, %d) = %d, %v; reference: no hole fits", step, size, align, off, err)
							}
							if _, err := u.Alloc(size, align); !errors.Is(err, ErrNoSpace) {
								fail("step %d: untracked Alloc(%d, %d): %v; reference: no hole fits", step, size, align, err)
							}
							break
						}
						if err != nil {
							fail("step %d: Alloc(%d, %d): %v; reference fits at %d", step, size, align, err, want)
						}
						if off+size > capacity || off+size < off {
							fail("step %d: [%d,%d) beyond capacity", step, off, off+size)
						}
						if align > 1 && off%align != 0 {
							fail("step %d: offset %d not aligned to %d", step, off, align)
						}
						for i := off; i < off+size; i++ {
							if ref.used[i] {
								fail("step %d: [%d,%d) overlaps a live allocation at byte %d", step, off, off+size, i)
							}
						}
						if tt.exactBest && off != want {
							fail("step %d: Alloc(%d, %d) = %d, best fit is %d", step, size, align, off, want)
						}
						if uoff, err := u.Alloc(size, align); err != nil || uoff != off {
							fail("step %d: untracked Alloc(%d, %d) = %d, %v; tracked %d", step, size, align, uoff, err, off)
						}
						ref.mark(off, size, true)
						live = append(live, liveAlloc{off, size})
						used += size
					case op < 19:
						i := rng.IntN(len(live))
						v := live[i]
						if got, ok := a.SizeOf(v.off); !ok || got != v.size {
							fail("step %d: SizeOf(%d) = %d, %v, want %d", step, v.off, got, ok, v.size)
						}
						if err := a.Free(v.off); err != nil {
							fail("step %d: Free(%d): %v", step, v.off, err)
						}
						ref.mark(v.off, v.size, false)
						live[i] = live[len(live)-1]
						live = live[:len(live)-1]
						used -= v.size
						if err := a.Free(v.off); !errors.Is(err, ErrNotAllocated) {
							fail("step %d: double Free(%d): %v", step, v.off, err)
						}
						if err := u.FreeSized(v.off, v.size); err != nil {
							fail("step %d: untracked FreeSized(%d, %d): %v", step, v.off, v.size, err)
						}
						if err := u.FreeSized(v.off, v.size); !errors.Is(err, ErrNotAllocated) {
							fail("step %d: double FreeSized(%d, %d): %v", step, v.off, v.size, err)
						}
					default:
						// A request of LargestFree bytes without alignment
						// always succeeds; undo it at once.
						lf := a.Stats().LargestFree
						if lf == 0 {
							break
						}
						off, err := a.Alloc(lf, 0)
						if err != nil {
							fail("step %d: Alloc(LargestFree=%d): %v", step, lf, err)
						}
						if err := a.Free(off); err != nil {
							fail("step %d: Free(%d): %v", step, off, err)
						}
						if uoff, err := u.Alloc(lf, 0); err != nil || uoff != off {
							fail("step %d: untracked Alloc(LargestFree=%d) = %d, %v; tracked %d", step, lf, uoff, err, off)
						}
						if err := u.FreeSized(off, lf); err != nil {
							fail("step %d: untracked FreeSized(%d, %d): %v", step, off, lf, err)
						}
					}
					runs := ref.runs()
					var largest uint64
					for _, r := range runs {
						largest = max(largest, r.size)
					}
					s := a.Stats()
					if s.Capacity != capacity || s.Used != used || s.Free != capacity-used ||
						s.Allocations != len(live) || s.FreeRanges != len(runs) || s.LargestFree != largest {
						fail("step %d: Stats %+v; reference Used %d Allocations %d FreeRanges %d LargestFree %d",
							step, s, used, len(live), len(runs), largest)
					}
					if err := checkInvariants(a); err != nil {
						fail("step %d: %v", step, err)
					}
					if us := u.Stats(); us != s {
						fail("step %d: untracked Stats %+v, tracked %+v", step, us, s)
					}
					if err := checkInvariants(u); err != nil {
						fail("step %d: untracked: %v", step, err)
					}
				}
				for _, v := range live {
					if err := a.Free(v.off); err != nil {
						fail("final Free(%d): %v", v.off, err)
					}
					if err := u.FreeSized(v.off, v.size); err != nil {
						fail("final untracked FreeSized(%d, %d): %v", v.off, v.size, err)
					}
				}
				want := Stats{Capacity: capacity, Free: capacity, LargestFree: capacity, FreeRanges: 1}
				if s := a.Stats(); s != want {
					fail("after freeing all: %+v, want %+v", s, want)
				}
				if s := u.Stats(); s != want {
					fail("untracked after freeing all: %+v, want %+v", s, want)
				}
			}
		})
	}
}

// TestUniformUtilisation checks that equal blocks fill a segment exactly and
// that the holes left by random frees are all reused.
func TestUniformUtilisation(t *testing.T) {
	const block, blocks = 8192, 1000
	tests := []struct {
		name  string
		align uint64
		seed  uint64
	}{
		{"no align", 0, 1},
		{"align 4KiB", 4096, 2},
		{"align 8KiB", 8192, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(tt.seed, 0))
			a := mustNew(t, blocks*block)
			fill := func() []uint64 {
				var offs []uint64
				for {
					off, err := a.Alloc(block, tt.align)
					if errors.Is(err, ErrNoSpace) {
						return offs
					}
					if err != nil {
						t.Fatal(err)
					}
					offs = append(offs, off)
				}
			}
			live := fill()
			if len(live) != blocks {
				t.Fatalf("%d allocations, want %d", len(live), blocks)
			}
			for round := range 5 {
				rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
				for _, off := range live[:blocks/2] {
					mustFree(t, a, off)
				}
				live = live[blocks/2:]
				if s := a.Stats(); s.Free != blocks/2*block {
					t.Fatalf("round %d: Free %d after freeing half", round, s.Free)
				}
				refilled := fill()
				if len(refilled) != blocks/2 {
					t.Fatalf("round %d: refilled %d, want %d", round, len(refilled), blocks/2)
				}
				live = append(live, refilled...)
				want := Stats{Capacity: blocks * block, Used: blocks * block, Allocations: blocks}
				if s := a.Stats(); s != want {
					t.Fatalf("round %d: %+v, want %+v", round, s, want)
				}
				mustCheck(t, a)
			}
		})
	}
}

// benchWorkload returns the (size, align) of one request.
type benchWorkload func(r *rand.Rand) (size, align uint64)

func uniform8KiB(*rand.Rand) (uint64, uint64) { return 8 << 10, 0 }

// mixedKV mimics KV-cache objects: partial blocks, 8 KiB blocks, and larger
// layer-group blocks up to 160 MiB.
func mixedKV(r *rand.Rand) (uint64, uint64) {
	switch p := r.IntN(100); {
	case p < 35: // partial block, 256 B granules
		return uint64(1+r.IntN(32)) * 256, 64
	case p < 70:
		return 8 << 10, 4096
	case p < 85: // 64 KiB .. 1 MiB
		return 64 << (10 + r.IntN(5)), 4096
	case p < 95: // 2 MiB .. 16 MiB
		return 2 << (20 + r.IntN(4)), 4096
	default: // 32 MiB .. 160 MiB
		return uint64(1+r.IntN(5)) * (32 << 20), 4096
	}
}

// BenchmarkAllocFree measures one Free of a random live allocation plus one
// Alloc, with the live set held near its initial size.
func BenchmarkAllocFree(b *testing.B) {
	benchmarks := []struct {
		name string
		live int
		gen  benchWorkload
	}{
		{"8KiB/live=1e5", 100_000, uniform8KiB},
		{"mixed/live=1e5", 100_000, mixedKV},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			// Size the segment so the initial live set fills 80 % of it.
			var total uint64
			for range bm.live {
				s, _ := bm.gen(rng)
				total += s
			}
			a := mustNew(b, total/4*5)
			rng = rand.New(rand.NewPCG(1, 2))
			const none = math.MaxUint64
			live := make([]uint64, bm.live)
			for i := range live {
				size, align := bm.gen(rng)
				off, err := a.Alloc(size, align)
				if err != nil {
					b.Fatalf("prefill %d: %v", i, err)
				}
				live[i] = off
			}
			var ops, failed int
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				j := rng.IntN(len(live))
				if live[j] != none {
					if err := a.Free(live[j]); err != nil {
						b.Fatal(err)
					}
				}
				size, align := bm.gen(rng)
				off, err := a.Alloc(size, align)
				if err != nil {
					off = none
					failed++
				}
				live[j] = off
				ops++
			}
			b.StopTimer()
			s := a.Stats()
			b.ReportMetric(float64(failed)/float64(ops), "nospace/op")
			b.ReportMetric(float64(s.Used)/float64(s.Capacity)*100, "used%")
			b.ReportMetric(s.Fragmentation, "frag")
		})
	}
}
