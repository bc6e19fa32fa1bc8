package affinity

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// onLockedThread runs fn on a goroutine locked to its own OS thread; the
// thread exits afterwards (the goroutine returns still locked), so a mask
// fn sets does not leak into other tests.
func onLockedThread(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		fn()
	}()
	<-done
}

func firstCPU(s unix.CPUSet) int {
	for c := 0; c < len(s)*64; c++ {
		if s.IsSet(c) {
			return c
		}
	}
	return -1
}

func TestWidenRestoresStartMask(t *testing.T) {
	if StartCPUs() < 2 {
		t.Skipf("the process started on %d CPU(s): nothing to widen", StartCPUs())
	}
	onLockedThread(t, func() {
		var one unix.CPUSet
		one.Set(firstCPU(startMask))
		require.NoError(t, unix.SchedSetaffinity(0, &one), "pinning the test thread")
		assert.True(t, Widen(), "a thread pinned to one CPU of the start mask is widened")
		var got unix.CPUSet
		require.NoError(t, unix.SchedGetaffinity(0, &got))
		assert.Equal(t, startMask, got, "the thread runs on the start mask again")
		assert.False(t, Widen(), "a thread on the start mask is left alone")
	})
}

func TestWidenLeavesForeignMask(t *testing.T) {
	if StartCPUs() < 2 {
		t.Skipf("the process started on %d CPU(s)", StartCPUs())
	}
	// A mask with a CPU outside the start mask cannot be set when the
	// start mask is every CPU the kernel allows; emulate it by shrinking
	// the start mask for the test instead.
	saved, savedN := startMask, startCPUs
	t.Cleanup(func() { startMask, startCPUs = saved, savedN })
	onLockedThread(t, func() {
		var cur unix.CPUSet
		require.NoError(t, unix.SchedGetaffinity(0, &cur))
		first := firstCPU(cur)
		// The start mask now lacks the thread's first CPU: its mask is not
		// a subset, so Widen must not touch it.
		startMask = cur
		startMask.Clear(first)
		startCPUs = startMask.Count()
		if startCPUs < 2 {
			startCPUs = 2 // still take the path that compares masks
		}
		assert.False(t, Widen(), "a mask with CPUs outside the start mask is not ours to change")
		var got unix.CPUSet
		require.NoError(t, unix.SchedGetaffinity(0, &got))
		assert.Equal(t, cur, got)
	})
}

func TestWidenOneCPUStart(t *testing.T) {
	saved, savedN := startMask, startCPUs
	t.Cleanup(func() { startMask, startCPUs = saved, savedN })
	startCPUs = 1
	assert.False(t, Widen(), "a one-CPU start mask widens nothing")
}
