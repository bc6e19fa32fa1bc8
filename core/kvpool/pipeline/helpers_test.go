package pipeline

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// gate is a LayerFunc whose calls the test controls: each call announces
// its layer on started and returns the error sent on release[layer] (or
// its context's error). It measures the calls in flight with atomics.
type gate struct {
	started  chan int
	release  []chan error
	inflight atomic.Int32
	peak     atomic.Int32
	// check, if set, runs at the start of each call (on the call's
	// goroutine) to assert an invariant.
	check func(layer int)
}

func newGate(layers int) *gate {
	g := &gate{started: make(chan int, layers), release: make([]chan error, layers)}
	for i := range g.release {
		g.release[i] = make(chan error, 1)
	}
	return g
}

func (g *gate) fn(ctx context.Context, layer int) error {
	n := g.inflight.Add(1)
	defer g.inflight.Add(-1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
	if g.check != nil {
		g.check(layer)
	}
	g.started <- layer
	select {
	case err := <-g.release[layer]:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// canceled returns a context that is already done.
func canceled(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}
