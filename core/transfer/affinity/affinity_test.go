package affinity

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// onLockedThread runs fn on a goroutine locked to its own OS thread and
// returns its error; the thread exits afterwards (the goroutine returns
// still locked), so a mask fn sets does not leak into other tests. fn
// must not call t.FailNow (require): only the test's goroutine may.
func onLockedThread(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- fn()
	}()
	return <-done
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
	var widened, again bool
	var got unix.CPUSet
	err := onLockedThread(func() error {
		var one unix.CPUSet
		one.Set(firstCPU(startMask))
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			return err
		}
		widened = Widen()
		if err := unix.SchedGetaffinity(0, &got); err != nil {
			return err
		}
		again = Widen()
		return nil
	})
	require.NoError(t, err)
	assert.True(t, widened, "a thread pinned to one CPU of the start mask is widened")
	assert.Equal(t, startMask, got, "the thread runs on the start mask again")
	assert.False(t, again, "a thread on the start mask is left alone")
}

func TestWidenLeavesForeignMask(t *testing.T) {
	if StartCPUs() < 2 {
		t.Skipf("the process started on %d CPU(s)", StartCPUs())
	}
	// A thread mask with a CPU outside the start mask cannot be made when
	// the start mask is every CPU the kernel allows; shrink the start mask
	// for the test instead (the thread keeps its own mask).
	saved, savedN := startMask, startCPUs
	t.Cleanup(func() { startMask, startCPUs = saved, savedN })
	var cur, got unix.CPUSet
	var widened bool
	err := onLockedThread(func() error {
		if err := unix.SchedGetaffinity(0, &cur); err != nil {
			return err
		}
		startMask = cur
		startMask.Clear(firstCPU(cur))
		startCPUs = max(startMask.Count(), 2) // still take the path that compares masks
		widened = Widen()
		return unix.SchedGetaffinity(0, &got)
	})
	require.NoError(t, err)
	assert.False(t, widened, "a mask with CPUs outside the start mask is not ours to change")
	assert.Equal(t, cur, got)
}

func TestWidenOneCPUStart(t *testing.T) {
	saved, savedN := startMask, startCPUs
	t.Cleanup(func() { startMask, startCPUs = saved, savedN })
	startCPUs = 1
	assert.False(t, Widen(), "a one-CPU start mask widens nothing")
}
