package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/core/kvpool"
)

// ErrPoolNotAnswering wraps the error that opened a Breaker: the lookup
// that failed returns it; the lookups after it answer "absent" without
// asking the pool until a probe succeeds.
var ErrPoolNotAnswering = errors.New("runtime: pool not answering, lookups miss until it does")

// Breaker is a kvpool.Exister in front of the pool's that protects an
// engine's scheduler from a pool that does not answer (a hung or
// partitioned master): each lookup runs on the scheduler's thread and
// waits up to its timeout, so without it every new request would wait
// that long in turn (8 requests, 40 s). After a call fails, the breaker
// opens: that call returns the error (wrapped in ErrPoolNotAnswering),
// every later call answers every key absent at once, and one background
// goroutine probes the pool with a one-key BatchIsExist every
// ProbeInterval until it answers; then the breaker closes and calls go to
// the pool again. A miss costs a recompute, never correctness. Safe for
// concurrent use. Ours: upstream's connectors wait out each lookup.
type Breaker struct {
	inner kvpool.Exister
	cfg   BreakerConfig

	mu struct {
		sync.Mutex
		open    bool
		probing bool
		closed  bool
	}
	stop chan struct{}
	wg   sync.WaitGroup
}

// BreakerConfig tunes a Breaker.
type BreakerConfig struct {
	// ProbeInterval is the wait between probes of an open breaker; default
	// 1 s.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe; default 2 s.
	ProbeTimeout time.Duration
	// ProbeKey is the key a probe asks about (its answer does not matter);
	// default "mooncake-go/probe".
	ProbeKey string
}

// NewBreaker returns a closed Breaker in front of inner.
func NewBreaker(inner kvpool.Exister, cfg BreakerConfig) *Breaker {
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = time.Second
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = 2 * time.Second
	}
	if cfg.ProbeKey == "" {
		cfg.ProbeKey = "mooncake-go/probe"
	}
	return &Breaker{inner: inner, cfg: cfg, stop: make(chan struct{})}
}

// BatchIsExist asks the pool while the breaker is closed; see Breaker.
// Errors: the pool's, wrapped in ErrPoolNotAnswering, on the call that
// opens the breaker; none while it is open.
func (b *Breaker) BatchIsExist(ctx context.Context, keys []string) ([]bool, error) {
	b.mu.Lock()
	open := b.mu.open
	b.mu.Unlock()
	if open {
		return make([]bool, len(keys)), nil
	}
	got, err := b.inner.BatchIsExist(ctx, keys)
	if err == nil || errors.Is(ctx.Err(), context.Canceled) {
		return got, err // a caller's cancellation is not the pool's fault
	}
	b.trip()
	return nil, fmt.Errorf("%w: %w", ErrPoolNotAnswering, err)
}

// Open reports whether lookups currently answer "absent" without asking.
func (b *Breaker) Open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.open
}

func (b *Breaker) trip() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.open = true
	if b.mu.probing || b.mu.closed {
		return
	}
	b.mu.probing = true
	b.wg.Add(1)
	go b.probe()
}

// probe asks the pool every ProbeInterval until it answers, then closes
// the breaker.
func (b *Breaker) probe() {
	defer b.wg.Done()
	t := time.NewTicker(b.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ProbeTimeout)
		_, err := b.inner.BatchIsExist(ctx, []string{b.cfg.ProbeKey})
		cancel()
		if err == nil {
			b.mu.Lock()
			b.mu.open, b.mu.probing = false, false
			b.mu.Unlock()
			return
		}
	}
}

// Close stops the probe and waits for it; later calls still work (closed
// breaker semantics without probing).
func (b *Breaker) Close() {
	b.mu.Lock()
	if b.mu.closed {
		b.mu.Unlock()
		return
	}
	b.mu.closed = true
	b.mu.Unlock()
	close(b.stop)
	b.wg.Wait()
}
