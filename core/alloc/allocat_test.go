package alloc

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestAllocAtErrors(t *testing.T) {
	a := mustNew(t, 1000)
	if err := a.AllocAt(100, 50); err != nil {
		t.Fatalf("AllocAt(100, 50): %v", err)
	}
	tests := []struct {
		name         string
		offset, size uint64
		want         error
	}{
		{"size 0", 0, 0, ErrInvalidArgument},
		{"past capacity", 990, 11, ErrInvalidArgument},
		{"offset past capacity", 1000, 1, ErrInvalidArgument},
		{"wraps around", math.MaxUint64 - 1, 4, ErrInvalidArgument},
		{"same range", 100, 50, ErrNoSpace},
		{"overlaps start", 90, 20, ErrNoSpace},
		{"overlaps end", 149, 2, ErrNoSpace},
		{"inside", 110, 10, ErrNoSpace},
		{"covers", 0, 1000, ErrNoSpace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := a.AllocAt(tt.offset, tt.size); !errors.Is(err, tt.want) {
				t.Fatalf("AllocAt(%d, %d) = %v, want %v", tt.offset, tt.size, err, tt.want)
			}
			mustCheck(t, a)
		})
	}
	if s := a.Stats(); s.Used != 50 || s.Allocations != 1 {
		t.Fatalf("failed AllocAt calls changed the allocator: %+v", s)
	}
}

// TestAllocAtRestoresPlacement re-creates another allocator's placements
// with AllocAt, in ascending and in random order, and checks that both end
// in the same state and keep placing new requests identically.
func TestAllocAtRestoresPlacement(t *testing.T) {
	for _, order := range []string{"ascending", "random"} {
		t.Run(order, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 11))
			const capacity = 1 << 20
			src := mustNew(t, capacity)
			var offs []uint64
			for range 500 {
				off, err := src.Alloc(uint64(1+rng.IntN(4096)), 64)
				if err != nil {
					break
				}
				offs = append(offs, off)
			}
			// Free a third to leave holes.
			kept := offs[:0]
			for _, off := range offs {
				if rng.IntN(3) == 0 {
					mustFree(t, src, off)
				} else {
					kept = append(kept, off)
				}
			}
			if order == "random" {
				rng.Shuffle(len(kept), func(i, j int) { kept[i], kept[j] = kept[j], kept[i] })
			} else {
				slices.Sort(kept)
			}
			dst := mustNew(t, capacity)
			for _, off := range kept {
				size, _ := src.SizeOf(off)
				if err := dst.AllocAt(off, size); err != nil {
					t.Fatalf("AllocAt(%d, %d): %v", off, size, err)
				}
			}
			mustCheck(t, dst)
			if s, d := src.Stats(), dst.Stats(); s != d {
				t.Fatalf("restored stats %+v, source %+v", d, s)
			}
			for range 200 {
				size := uint64(1 + rng.IntN(8192))
				o1, e1 := src.Alloc(size, 64)
				o2, e2 := dst.Alloc(size, 64)
				if o1 != o2 || (e1 == nil) != (e2 == nil) {
					t.Fatalf("Alloc(%d): source %d, %v; restored %d, %v", size, o1, e1, o2, e2)
				}
			}
		})
	}
}

// TestAllocAtPropertyAgainstReference mixes Alloc, AllocAt and Free at
// random on an Allocator and the byte-map reference: AllocAt succeeds
// exactly when every byte of its range is free, and afterwards best-fit
// placement, statistics and invariants still agree with the reference.
func TestAllocAtPropertyAgainstReference(t *testing.T) {
	sequences, steps := 1000, 200
	if testing.Short() {
		sequences = 150
	}
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(99, uint64(seq)))
		capacity := uint64(16 + rng.IntN(240))
		a := mustNew(t, capacity)
		a.alignScan = math.MaxInt // exact best fit, comparable to the reference
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
			case op < 6:
				size := uint64(1 + rng.IntN(24))
				align := []uint64{0, 1, 8}[rng.IntN(3)]
				want, fits := ref.bestFit(size, align)
				off, err := a.Alloc(size, align)
				if !fits {
					if !errors.Is(err, ErrNoSpace) {
						fail("step %d: Alloc(%d, %d) = %d, %v; reference: nothing fits", step, size, align, off, err)
					}
					break
				}
				if err != nil || off != want {
					fail("step %d: Alloc(%d, %d) = %d, %v; reference best fit %d", step, size, align, off, err, want)
				}
				ref.mark(off, size, true)
				live = append(live, liveAlloc{off, size})
				used += size
			case op < 13:
				var off, size uint64
				runs := ref.runs()
				switch k := rng.IntN(4); {
				case k == 0 && len(runs) > 0:
					// Exactly at the start of a free run.
					r := runs[rng.IntN(len(runs))]
					off, size = r.start, uint64(1+rng.IntN(int(r.size)))
				case k == 1 && len(runs) > 0:
					// Ending exactly at the end of a free run.
					r := runs[rng.IntN(len(runs))]
					size = uint64(1 + rng.IntN(int(r.size)))
					off = r.start + r.size - size
				default:
					// Anywhere, possibly overlapping or out of range.
					off = uint64(rng.IntN(int(capacity) + 4))
					size = uint64(1 + rng.IntN(32))
				}
				err := a.AllocAt(off, size)
				free := off+size <= capacity
				for i := off; free && i < off+size; i++ {
					free = !ref.used[i]
				}
				switch {
				case off+size > capacity:
					if !errors.Is(err, ErrInvalidArgument) {
						fail("step %d: AllocAt(%d, %d) beyond capacity = %v", step, off, size, err)
					}
				case !free:
					if !errors.Is(err, ErrNoSpace) {
						fail("step %d: AllocAt(%d, %d) over a live allocation = %v", step, off, size, err)
					}
				default:
					if err != nil {
						fail("step %d: AllocAt(%d, %d) on free bytes: %v", step, off, size, err)
					}
					ref.mark(off, size, true)
					live = append(live, liveAlloc{off, size})
					used += size
				}
			default:
				if len(live) == 0 {
					break
				}
				i := rng.IntN(len(live))
				v := live[i]
				if err := a.Free(v.off); err != nil {
					fail("step %d: Free(%d): %v", step, v.off, err)
				}
				ref.mark(v.off, v.size, false)
				live[i] = live[len(live)-1]
				live = live[:len(live)-1]
				used -= v.size
			}
			runs := ref.runs()
			var largest uint64
			for _, r := range runs {
				largest = max(largest, r.size)
			}
			s := a.Stats()
			if s.Used != used || s.Allocations != len(live) || s.FreeRanges != len(runs) || s.LargestFree != largest {
				fail("step %d: Stats %+v; reference Used %d Allocations %d FreeRanges %d LargestFree %d",
					step, s, used, len(live), len(runs), largest)
			}
			if err := checkInvariants(a); err != nil {
				fail("step %d: %v", step, err)
			}
		}
	}
}
