package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// TestPrefetcherWindowSteps walks one pass step by step: the worker bound
// holds the first loads back, the window holds later ones back until the
// consumer reaches them, and every load starts in layer order.
func TestPrefetcherWindowSteps(t *testing.T) {
	const window, workers, layers = 3, 2, 6
	g := newGate(layers)
	var entered atomic.Int32 // consumer position, set before WaitLayer
	g.check = func(l int) {
		if l >= int(entered.Load())+window {
			t.Errorf("layer %d started with the consumer at %d, window %d", l, entered.Load(), window)
		}
	}
	p, err := NewPrefetcher(g.fn, Config{Window: window, Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Start(layers); err != nil {
		t.Fatal(err)
	}
	recv := func(want int) {
		t.Helper()
		if got := <-g.started; got != want {
			t.Fatalf("started layer %d, want %d", got, want)
		}
	}
	// Two workers: layers 0 and 1 start together, in either order.
	if a, b := <-g.started, <-g.started; a+b != 1 || a*b != 0 {
		t.Fatalf("first loads %d, %d; want 0 and 1", a, b)
	}
	g.release[0] <- nil
	recv(2) // layers 0..2 in the window
	g.release[1] <- nil
	g.release[2] <- nil // window full: 3 waits for the consumer (check asserts it)
	for i := range layers {
		entered.Store(int32(i))
		if err := p.WaitLayer(t.Context(), i); err != nil {
			t.Fatalf("WaitLayer(%d) = %v", i, err)
		}
		// Entering WaitLayer(i) released layer i-1, so layer i+window-1
		// may start.
		if next := i + window - 1; i > 0 && next < layers {
			recv(next)
			g.release[next] <- nil
		}
	}
	if p := g.peak.Load(); p > workers {
		t.Errorf("%d loads in flight, workers %d", p, workers)
	}
}

// TestPrefetcherRandomized runs seeded passes where the test completes
// in-flight loads in random order, some failing, while a consumer waits for
// every layer in order; it checks the window, the worker bound and that
// each WaitLayer returns its layer's outcome.
func TestPrefetcherRandomized(t *testing.T) {
	tests := []struct{ window, workers, layers int }{
		{1, 1, 10},
		{2, 1, 10},
		{2, 2, 17},
		{4, 3, 32},
		{8, 8, 61},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("window%d/workers%d/layers%d", tt.window, tt.workers, tt.layers), func(t *testing.T) {
			seed := uint64(tt.window*1000 + tt.workers*100 + tt.layers)
			rng := rand.New(rand.NewPCG(seed, 1))
			t.Logf("seed %d", seed)
			fail := make([]bool, tt.layers)
			for i := range fail {
				fail[i] = rng.IntN(5) == 0
			}
			boom := errors.New("boom")
			g := newGate(tt.layers)
			var entered atomic.Int32
			g.check = func(l int) {
				if l >= int(entered.Load())+tt.window {
					t.Errorf("layer %d started with the consumer at %d", l, entered.Load())
				}
			}
			p, err := NewPrefetcher(g.fn, Config{Window: tt.window, Workers: tt.workers})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if err := p.Start(tt.layers); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				for i := range tt.layers {
					entered.Store(int32(i))
					err := p.WaitLayer(t.Context(), i)
					if fail[i] != errors.Is(err, boom) || (!fail[i] && err != nil) {
						done <- fmt.Errorf("WaitLayer(%d) = %v, want failure %v", i, err, fail[i])
						return
					}
				}
				done <- nil
			}()
			var inflight []int
			var started []int
			for finished := false; !finished; {
				if len(inflight) == 0 {
					select {
					case l := <-g.started:
						inflight = append(inflight, l)
						started = append(started, l)
					case err := <-done:
						if err != nil {
							t.Fatal(err)
						}
						finished = true
					}
					continue
				}
				select {
				case l := <-g.started:
					inflight = append(inflight, l)
					started = append(started, l)
				default:
					k := rng.IntN(len(inflight))
					l := inflight[k]
					inflight = append(inflight[:k], inflight[k+1:]...)
					if fail[l] {
						g.release[l] <- boom
					} else {
						g.release[l] <- nil
					}
				}
			}
			if len(started) != tt.layers {
				t.Fatalf("%d loads, want %d", len(started), tt.layers)
			}
			if pk := g.peak.Load(); pk > int32(tt.workers) {
				t.Errorf("%d loads in flight, workers %d", pk, tt.workers)
			}
			if tt.workers == 1 {
				for i, l := range started {
					if l != i {
						t.Fatalf("load order %v", started)
					}
				}
			}
		})
	}
}

func TestPrefetcherFailureNeverHangs(t *testing.T) {
	boom := errors.New("boom")
	fn := func(ctx context.Context, l int) error {
		if l == 1 {
			return boom
		}
		return nil
	}
	p, err := NewPrefetcher(fn, Config{Window: 2, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Start(4); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		err := p.WaitLayer(t.Context(), i)
		if (i == 1) != errors.Is(err, boom) || (i != 1 && err != nil) {
			t.Fatalf("WaitLayer(%d) = %v", i, err)
		}
	}
	// The pass is over: a new one may start.
	if err := p.Start(1); err != nil {
		t.Fatalf("Start after a finished pass = %v", err)
	}
	if err := p.WaitLayer(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
}

func TestPrefetcherDeadlines(t *testing.T) {
	t.Run("caller deadline", func(t *testing.T) {
		g := newGate(2)
		p, err := NewPrefetcher(g.fn, Config{Window: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		_ = p.Start(2)
		<-g.started
		dl, cancel := context.WithTimeout(t.Context(), time.Millisecond)
		defer cancel()
		if err := p.WaitLayer(dl, 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitLayer past its deadline = %v", err)
		}
		g.release[0] <- nil // the layer still lands; a later wait sees it
		if err := p.WaitLayer(t.Context(), 0); err != nil {
			t.Fatal(err)
		}
		next := make(chan error, 1)
		go func() { next <- p.WaitLayer(t.Context(), 1) }() // releases layer 0
		<-g.started
		g.release[1] <- nil
		if err := <-next; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Config.Timeout bounds a wait without a caller deadline", func(t *testing.T) {
		g := newGate(1)
		p, err := NewPrefetcher(g.fn, Config{Window: 1, Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		_ = p.Start(1)
		<-g.started
		p.cfg.Timeout = 5 * time.Millisecond // the running load keeps its hour
		if err := p.WaitLayer(context.Background(), 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitLayer = %v", err)
		}
		g.release[0] <- nil
	})
	t.Run("a load that overruns Config.Timeout fails its layer", func(t *testing.T) {
		hang := func(ctx context.Context, l int) error { <-ctx.Done(); return ctx.Err() }
		p, err := NewPrefetcher(hang, Config{Window: 1, Timeout: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		_ = p.Start(1)
		p.mu.Lock()
		done := p.cur.done[0]
		p.mu.Unlock()
		<-done
		if err := p.WaitLayer(t.Context(), 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitLayer = %v", err)
		}
	})
}

func TestPrefetcherCancelAndBusy(t *testing.T) {
	g := newGate(4)
	p, err := NewPrefetcher(g.fn, Config{Window: 2, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.WaitLayer(t.Context(), 0); !errors.Is(err, ErrNoPass) {
		t.Fatalf("WaitLayer before Start = %v", err)
	}
	if err := p.Start(4); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(4); !errors.Is(err, ErrBusy) {
		t.Fatalf("Start during a pass = %v", err)
	}
	if err := p.WaitLayer(t.Context(), 4); !errors.Is(err, ErrLayerRange) {
		t.Fatalf("WaitLayer(4) of 4 = %v", err)
	}
	<-g.started // layer 0 runs; 1..3 not started
	waiter := make(chan error, 1)
	go func() { waiter <- p.WaitLayer(t.Context(), 3) }()
	if err := p.Cancel(t.Context()); err != nil {
		t.Fatalf("Cancel = %v", err)
	}
	if err := <-waiter; !errors.Is(err, ErrCanceled) {
		t.Fatalf("waiter of an unstarted layer after Cancel = %v", err)
	}
	if err := p.WaitLayer(t.Context(), 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("running layer after Cancel = %v", err)
	}
	if err := p.Start(0); err != nil {
		t.Fatalf("Start after Cancel = %v", err)
	}
	if err := p.Cancel(t.Context()); err != nil {
		t.Fatalf("Cancel of an empty pass = %v", err)
	}
	if err := p.Start(-1); !errors.Is(err, ErrLayerRange) {
		t.Fatalf("Start(-1) = %v", err)
	}
}

func TestPrefetcherClose(t *testing.T) {
	g := newGate(3)
	p, err := NewPrefetcher(g.fn, Config{Window: 3, Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Start(3)
	for range 3 {
		<-g.started
	}
	p.Close() // the loads see their context cancelled and return
	for i := range 3 {
		if err := p.WaitLayer(t.Context(), i); !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitLayer(%d) after Close = %v", i, err)
		}
	}
	if err := p.Start(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
	p.Close()
}
