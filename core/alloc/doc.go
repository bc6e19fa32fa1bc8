// Package alloc is an offset allocator for one memory segment: it hands out
// byte ranges [offset, offset+size) inside [0, capacity) and takes them back.
// The store master uses one Allocator per mounted segment to place objects
// (KV blocks of typically 8 KiB to 160 MiB, many of one size, plus smaller
// partial blocks). It plays the part of upstream Mooncake's offset allocator
// but is an independent design: exact best fit over an ordered index rather
// than size bins, so a request never fails while a suitable hole exists.
//
// The package is pure logic: it holds no pointers to the memory it manages,
// starts no goroutines and does no I/O. All sizes, offsets and alignments are
// in bytes.
//
// # Policy and cost
//
// Alloc picks the smallest free range that can hold the request at the
// requested alignment (lowest offset among equal sizes) and places the
// allocation at the first aligned byte in it. The padding before it and the
// tail after it stay free. Free merges the released range with the free
// ranges directly before and after it. Steady-state Alloc and Free are
// O(log n) in the number of free ranges and allocate no Go memory; see
// Allocator for the bound on aligned requests. Placement is deterministic:
// the same sequence of calls yields the same offsets.
//
// AllocAt reserves a range chosen by the caller instead (it fails unless
// every byte of it is free). A master taking over from another uses it to
// re-create the placements recorded in the replicated object table; it is
// O(log n) too.
//
// # Memory
//
// By default every live allocation costs a map entry (offset to size) so
// that Free and SizeOf take an offset alone. New(capacity, Untracked())
// keeps no record per allocation, for a caller that knows each
// allocation's size (the store master, which holds millions): it frees with
// FreeSized. The free-range indexes and the map are rebuilt smaller after
// mass frees, so their memory is given back.
//
// # Concurrency
//
// An Allocator is not safe for concurrent use. The caller holds a lock
// around every method call, Stats included; the methods do no I/O and never
// block, so they are fine to call under a lock.
//
// # Invariants
//
// Between calls:
//   - live allocations and free ranges are pairwise disjoint and together
//     cover [0, capacity) exactly;
//   - free ranges are maximal: no two of them are adjacent;
//   - every live allocation starts at a multiple of the alignment it was
//     requested with;
//   - Stats.Used is the sum of the live allocation sizes and
//     Stats.Used+Stats.Free == Stats.Capacity (an allocation reserves
//     exactly the bytes requested);
//   - hence after every allocation is freed there is one free range of
//     Capacity bytes, and a request of at most Stats.LargestFree bytes with
//     align 0 or 1 always succeeds.
package alloc
