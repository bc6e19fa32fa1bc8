package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hungPool answers like a pool whose master stopped answering (every call
// waits for its deadline) until healthy is set; then every key exists.
type hungPool struct {
	healthy atomic.Bool
	calls   atomic.Int64
}

func (p *hungPool) BatchIsExist(ctx context.Context, keys []string) ([]bool, error) {
	p.calls.Add(1)
	if !p.healthy.Load() {
		<-ctx.Done()
		// As the store client reports it: an RPC error, not ctx.Err().
		return nil, errors.New("store: RPC_FAIL (-900): exist key: rpc error: code = DeadlineExceeded")
	}
	out := make([]bool, len(keys))
	for i := range out {
		out[i] = true
	}
	return out, nil
}

func TestBreakerHungPool(t *testing.T) {
	p := &hungPool{}
	b := NewBreaker(p, BreakerConfig{ProbeInterval: 5 * time.Millisecond, ProbeTimeout: 5 * time.Millisecond})
	t.Cleanup(b.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err := b.BatchIsExist(ctx, []string{"a", "b"})
	cancel()
	require.ErrorIs(t, err, ErrPoolNotAnswering)
	require.Contains(t, err.Error(), "RPC_FAIL")
	require.True(t, b.Open())

	// Open: answered at once, every key absent, without a call to the pool
	// (only probes reach it).
	before := p.calls.Load()
	done := make(chan []bool, 1)
	go func() {
		got, err := b.BatchIsExist(context.Background(), []string{"a", "b", "c"})
		assert.NoError(t, err)
		done <- got
	}()
	select {
	case got := <-done:
		assert.Equal(t, []bool{false, false, false}, got)
	case <-time.After(10 * time.Second):
		t.Fatal("a lookup on an open breaker waited for the pool")
	}
	require.Eventually(t, func() bool { return p.calls.Load() > before }, 10*time.Second, time.Millisecond, "no probe reached the pool")

	// The pool answers again: a probe closes the breaker.
	p.healthy.Store(true)
	require.Eventually(t, func() bool { return !b.Open() }, 10*time.Second, time.Millisecond)
	got, err := b.BatchIsExist(context.Background(), []string{"a"})
	require.NoError(t, err)
	assert.Equal(t, []bool{true}, got)
}

func TestBreakerCallerCancelDoesNotTrip(t *testing.T) {
	p := &hungPool{}
	b := NewBreaker(p, BreakerConfig{})
	t.Cleanup(b.Close)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.BatchIsExist(ctx, []string{"a"})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrPoolNotAnswering)
	assert.False(t, b.Open())
}
