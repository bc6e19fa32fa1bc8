package runtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWaitReport: an empty step waits for a held request's save to
// finish instead of returning at once, returns at once when nothing is in
// flight or something is already to report, and gives up after its bound.
func TestWaitReport(t *testing.T) {
	pool := newFakePool()
	gate := make(chan struct{})
	pool.saveGate = gate
	s, w := halves(t, pool, SchedulerConfig{}, WorkerConfig{})

	// Nothing in flight: at once, nothing to report (an hour's bound).
	start := time.Now()
	assert.False(t, w.WaitReport(t.Context(), time.Hour))
	assert.Less(t, time.Since(start), time.Minute)

	n, err := s.PlanSave(SaveRequest{ReqID: "a", BlockHashes: hashes("a", 2), BlockIDs: []int{1, 2}, NumComputedTokens: 32})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	step(t, s, w, false)
	require.True(t, s.RequestFinished("a"), "the save is in flight: blocks held")
	step(t, s, w, false) // the finish reaches the worker

	// In flight, bound elapses: false, nothing reported.
	assert.False(t, w.WaitReport(t.Context(), 20*time.Millisecond))
	snd, _ := w.GetFinished()
	assert.Empty(t, snd)

	// The save completes while a waiter blocks: it wakes with a report.
	woke := make(chan bool, 1)
	go func() { woke <- w.WaitReport(t.Context(), time.Hour) }()
	close(gate)
	select {
	case got := <-woke:
		assert.True(t, got, "WaitReport woke without the finished save")
	case <-time.After(time.Minute):
		t.Fatal("WaitReport did not wake when the save finished")
	}
	// Already something to report: at once.
	assert.True(t, w.WaitReport(t.Context(), time.Hour))
	snd, _ = w.GetFinished()
	assert.Equal(t, []string{"a"}, snd)
	assert.False(t, w.WaitReport(t.Context(), time.Hour), "nothing left in flight")
	assert.Zero(t, w.Tracked())
}
