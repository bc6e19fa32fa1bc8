package alloc

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFreeSizedErrors: FreeSized refuses what is not one live allocation
// as far as each mode can tell, and changes nothing when it does.
func TestFreeSizedErrors(t *testing.T) {
	tests := []struct {
		name      string
		untracked bool
		off, size func(live uint64) uint64
		want      error
	}{
		{"size 0", false, func(l uint64) uint64 { return l }, func(uint64) uint64 { return 0 }, ErrInvalidArgument},
		{"beyond capacity", true, func(uint64) uint64 { return 1000 }, func(uint64) uint64 { return 100 }, ErrInvalidArgument},
		{"wraps around", true, func(uint64) uint64 { return 1 << 63 }, func(uint64) uint64 { return 1 << 63 }, ErrInvalidArgument},
		{"tracked, wrong size", false, func(l uint64) uint64 { return l }, func(uint64) uint64 { return 8 }, ErrNotAllocated},
		{"tracked, not a start", false, func(l uint64) uint64 { return l + 1 }, func(uint64) uint64 { return 8 }, ErrNotAllocated},
		{"untracked, free range", true, func(uint64) uint64 { return 512 }, func(uint64) uint64 { return 16 }, ErrNotAllocated},
		{"untracked, runs into free space", true, func(l uint64) uint64 { return l }, func(uint64) uint64 { return 32 }, ErrNotAllocated},
		{"untracked, starts in free space", true, func(l uint64) uint64 { return l - 1 }, func(uint64) uint64 { return 8 }, ErrNotAllocated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []Option
			if tt.untracked {
				opts = append(opts, Untracked())
			}
			a, err := New(1024, opts...)
			require.NoError(t, err)
			_, err = a.Alloc(16, 0) // [0,16)
			require.NoError(t, err)
			live, err := a.Alloc(16, 64) // [64,80): free space on both sides
			require.NoError(t, err)
			require.Equal(t, uint64(64), live)
			before := a.Stats()
			err = a.FreeSized(tt.off(live), tt.size(live))
			require.ErrorIs(t, err, tt.want)
			assert.Equal(t, before, a.Stats(), "a refused FreeSized changed the allocator")
			require.NoError(t, checkInvariants(a))
			require.NoError(t, a.FreeSized(live, 16))
			require.ErrorIs(t, a.FreeSized(live, 16), ErrNotAllocated, "second FreeSized")
			require.NoError(t, checkInvariants(a))
		})
	}
}

// TestUntrackedRecordsNothing: an Untracked allocator refuses Free, knows
// no sizes, and still counts its allocations.
func TestUntrackedRecordsNothing(t *testing.T) {
	a, err := New(4096, Untracked())
	require.NoError(t, err)
	off, err := a.Alloc(100, 64)
	require.NoError(t, err)
	require.NoError(t, a.AllocAt(1024, 200))
	err = a.Free(off)
	require.True(t, errors.Is(err, ErrUntracked), "Free: %v", err)
	size, ok := a.SizeOf(off)
	assert.False(t, ok)
	assert.Zero(t, size)
	st := a.Stats()
	assert.Equal(t, 2, st.Allocations)
	assert.Equal(t, uint64(300), st.Used)
	require.NoError(t, a.FreeSized(1024, 200))
	require.NoError(t, a.FreeSized(off, 100))
	assert.Equal(t, Stats{Capacity: 4096, Free: 4096, LargestFree: 4096, FreeRanges: 1}, a.Stats())
	require.NoError(t, checkInvariants(a))
}

// TestShrinkAfterMassFree: once most allocations and free ranges are gone
// the allocator's indexes are rebuilt small, in both modes.
func TestShrinkAfterMassFree(t *testing.T) {
	for _, untracked := range []bool{false, true} {
		var opts []Option
		if untracked {
			opts = append(opts, Untracked())
		}
		a, err := New(1<<30, opts...)
		require.NoError(t, err)
		const n = 20000
		offs := make([]uint64, n)
		for i := range offs {
			offs[i], err = a.Alloc(64, 64)
			require.NoError(t, err)
		}
		free := func(off uint64) {
			if untracked {
				require.NoError(t, a.FreeSized(off, 64))
			} else {
				require.NoError(t, a.Free(off))
			}
		}
		// Every other one: n/2 free ranges.
		for i := 0; i < n; i += 2 {
			free(offs[i])
		}
		require.Equal(t, n/2+1, a.Stats().FreeRanges)
		peakNodes := len(a.free.nodes)
		require.GreaterOrEqual(t, peakNodes, n/2)
		for i := 1; i < n; i += 2 {
			free(offs[i])
		}
		require.NoError(t, checkInvariants(a))
		assert.Equal(t, 1, a.Stats().FreeRanges)
		assert.Less(t, cap(a.free.nodes), shrinkMin, "untracked=%v: node slice of %d slots after mass free (peak %d)", untracked, cap(a.free.nodes), peakNodes)
		if !untracked {
			assert.Less(t, a.livePeak, shrinkMin, "live map not rebuilt: peak %d", a.livePeak)
		}
		// Still works after the rebuild.
		off, err := a.Alloc(1<<29, 0)
		require.NoError(t, err)
		free2 := a.FreeSized(off, 1<<29)
		require.NoError(t, free2)
		require.NoError(t, checkInvariants(a))
	}
}
