package tcp

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSliceFor: large requests are cut into two slices per striped
// connection, within [SliceSize, MaxSliceSize]; an explicit SliceSize
// alone keeps every slice that size (upstream's behaviour).
func TestSliceFor(t *testing.T) {
	def := &peer{cfg: New(Config{}).cfg}
	for _, tc := range []struct{ size, want int }{
		{4 << 10, 64 << 10}, {64 << 10, 64 << 10}, {256 << 10, 64 << 10}, {1 << 20, 256 << 10},
		{(1 << 20) + 8192, 260 << 10}, {4 << 20, 1 << 20}, {64 << 20, 1 << 20},
	} {
		assert.Equal(t, tc.want, def.sliceFor(tc.size), "default config, %d-byte request", tc.size)
	}
	fixed := &peer{cfg: New(Config{SliceSize: 32 << 10}).cfg}
	assert.Equal(t, 32<<10, fixed.sliceFor(4<<20), "explicit SliceSize")
	capped := &peer{cfg: New(Config{SliceSize: 32 << 10, MaxSliceSize: 512 << 10, Stripe: 1}).cfg}
	assert.Equal(t, 512<<10, capped.sliceFor(4<<20), "MaxSliceSize caps")
	assert.Equal(t, 128<<10, capped.sliceFor(256<<10), "two slices on the one connection")
}
