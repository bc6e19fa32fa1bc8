package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero means defaults", Config{}, true},
		{"window 1", Config{Window: 1}, true},
		{"workers up to window", Config{Window: 4, Workers: 4}, true},
		{"negative window", Config{Window: -1}, false},
		{"workers above window", Config{Window: 2, Workers: 3}, false},
		{"negative workers", Config{Workers: -1}, false},
		{"negative timeout", Config{Timeout: -time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
				t.Fatalf("Validate(%+v) = %v, want ok=%v", tt.cfg, err, tt.ok)
			}
		})
	}
	if _, err := NewSaver(nil, Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewSaver(nil) = %v", err)
	}
	if _, err := NewPrefetcher(nil, Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewPrefetcher(nil) = %v", err)
	}
}

// TestSaverBounds submits every layer from an engine goroutine while the
// test completes saves one at a time, and checks the window (pending never
// above Window, measured independently of the Saver), the worker bound,
// start order, and that WaitAll sees every save done.
func TestSaverBounds(t *testing.T) {
	tests := []struct{ window, workers, layers int }{
		{1, 1, 6},
		{2, 1, 8},
		{3, 2, 12},
		{4, 4, 16},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("window%d/workers%d", tt.window, tt.workers), func(t *testing.T) {
			g := newGate(tt.layers)
			var submitted, completed, peakPending atomic.Int32
			var s *Saver
			g.check = func(int) {
				if p := s.Pending(); p > tt.window {
					t.Errorf("Pending() = %d > window %d", p, tt.window)
				}
			}
			fn := func(ctx context.Context, layer int) error {
				err := g.fn(ctx, layer)
				completed.Add(1)
				return err
			}
			var err error
			s, err = NewSaver(fn, Config{Window: tt.window, Workers: tt.workers})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			engine := make(chan error, 1)
			go func() {
				for l := range tt.layers {
					if err := s.SaveLayer(t.Context(), l); err != nil {
						engine <- err
						return
					}
					p := submitted.Add(1) - completed.Load()
					for q := peakPending.Load(); p > q && !peakPending.CompareAndSwap(q, p); q = peakPending.Load() {
					}
				}
				engine <- nil
			}()
			var order []int
			for range tt.layers {
				l := <-g.started
				order = append(order, l)
				g.release[l] <- nil
			}
			if err := <-engine; err != nil {
				t.Fatalf("SaveLayer: %v", err)
			}
			if err := s.WaitAll(t.Context()); err != nil {
				t.Fatalf("WaitAll: %v", err)
			}
			if p := peakPending.Load(); p > int32(tt.window) {
				t.Errorf("%d layers pending at once, window %d", p, tt.window)
			}
			if p := g.peak.Load(); p > int32(tt.workers) {
				t.Errorf("%d saves in flight at once, workers %d", p, tt.workers)
			}
			if s.Pending() != 0 || completed.Load() != int32(tt.layers) {
				t.Errorf("after WaitAll: pending %d, completed %d of %d", s.Pending(), completed.Load(), tt.layers)
			}
			if tt.workers == 1 {
				for i, l := range order {
					if l != i {
						t.Fatalf("start order %v, want 0..%d", order, tt.layers-1)
					}
				}
			}
		})
	}
}

// TestSaverBackPressure fills the window and checks that SaveLayer then
// blocks (a done context fails it, a deadline fails it, Config.Timeout
// fails it without a caller deadline) until a save finishes.
func TestSaverBackPressure(t *testing.T) {
	const window = 2
	g := newGate(8)
	// Long-lived saves: the gate's release decides, not the save timeout.
	s, err := NewSaver(g.fn, Config{Window: window, Workers: 1, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for l := range window {
		if err := s.SaveLayer(t.Context(), l); err != nil {
			t.Fatalf("SaveLayer(%d) = %v", l, err)
		}
	}
	<-g.started // layer 0 running, layer 1 queued: window full
	if err := s.SaveLayer(canceled(t), 2); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "window of 2") {
		t.Fatalf("SaveLayer on a full window with a done context = %v", err)
	}
	dl, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	if err := s.SaveLayer(dl, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SaveLayer on a full window past its deadline = %v", err)
	}
	s.cfg.Timeout = 10 * time.Millisecond
	if err := s.SaveLayer(context.Background(), 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SaveLayer on a full window past Config.Timeout = %v", err)
	}
	s.cfg.Timeout = time.Hour
	if s.Pending() != window {
		t.Fatalf("refused saves changed Pending to %d", s.Pending())
	}
	// A blocked SaveLayer proceeds once a save finishes.
	blocked := make(chan error, 1)
	go func() { blocked <- s.SaveLayer(t.Context(), 2) }()
	g.release[0] <- nil
	if err := <-blocked; err != nil {
		t.Fatalf("SaveLayer after a slot freed = %v", err)
	}
	for _, l := range []int{1, 2} {
		if got := <-g.started; got != l {
			t.Fatalf("started %d, want %d", got, l)
		}
		g.release[l] <- nil
	}
	if err := s.WaitAll(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestSaverFailures(t *testing.T) {
	boom := errors.New("boom")
	g := newGate(4)
	s, err := NewSaver(g.fn, Config{Window: 4, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for l := range 4 {
		if err := s.SaveLayer(t.Context(), l); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		l := <-g.started
		if l == 2 {
			g.release[l] <- boom
		} else {
			g.release[l] <- nil
		}
	}
	err = s.WaitAll(t.Context())
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "save layer 2") || strings.Contains(err.Error(), "layer 1") {
		t.Fatalf("WaitAll = %v, want boom naming layer 2 only", err)
	}
	if err := s.WaitAll(t.Context()); err != nil {
		t.Fatalf("second WaitAll = %v, want failures cleared", err)
	}
}

func TestSaverDeadlines(t *testing.T) {
	t.Run("WaitAll gives up and keeps failures", func(t *testing.T) {
		boom := errors.New("boom")
		g := newGate(2)
		s, err := NewSaver(g.fn, Config{Window: 2, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_ = s.SaveLayer(t.Context(), 0)
		_ = s.SaveLayer(t.Context(), 1)
		<-g.started
		g.release[0] <- boom
		<-g.started // layer 1 runs, so layer 0's failure is recorded
		if err := s.WaitAll(canceled(t)); !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitAll with a done context = %v", err)
		}
		g.release[1] <- nil
		if err := s.WaitAll(t.Context()); !errors.Is(err, boom) {
			t.Fatalf("WaitAll = %v, want the earlier failure", err)
		}
	})
	t.Run("WaitAll bounded by Config.Timeout", func(t *testing.T) {
		g := newGate(1)
		s, err := NewSaver(g.fn, Config{Window: 1, Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_ = s.SaveLayer(t.Context(), 0)
		<-g.started
		s.cfg.Timeout = 5 * time.Millisecond
		if err := s.WaitAll(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitAll = %v", err)
		}
		g.release[0] <- nil
	})
	t.Run("a save that overruns Config.Timeout fails", func(t *testing.T) {
		started := make(chan struct{})
		hang := func(ctx context.Context, layer int) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}
		s, err := NewSaver(hang, Config{Window: 1, Timeout: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.SaveLayer(t.Context(), 7); err != nil {
			t.Fatal(err)
		}
		<-started
		s.mu.Lock()
		idle := s.idle
		s.mu.Unlock()
		<-idle
		if err := s.WaitAll(t.Context()); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "layer 7") {
			t.Fatalf("WaitAll = %v", err)
		}
	})
}

func TestSaverClose(t *testing.T) {
	g := newGate(4)
	var calls atomic.Int32
	fn := func(ctx context.Context, l int) error { calls.Add(1); return g.fn(ctx, l) }
	s, err := NewSaver(fn, Config{Window: 2, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.SaveLayer(t.Context(), 0)
	_ = s.SaveLayer(t.Context(), 1) // queued behind layer 0
	<-g.started
	blocked := make(chan error, 1)
	go func() { blocked <- s.SaveLayer(t.Context(), 2) }() // back-pressured
	s.Close()
	if err := <-blocked; !errors.Is(err, ErrClosed) {
		t.Fatalf("back-pressured SaveLayer across Close = %v", err)
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("%d save calls, want only the running one", c)
	}
	if err := s.SaveLayer(t.Context(), 3); !errors.Is(err, ErrClosed) {
		t.Fatalf("SaveLayer after Close = %v", err)
	}
	if err := s.WaitAll(t.Context()); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitAll after Close = %v, want the cancelled and the unstarted layer", err)
	}
	s.Close() // idempotent
}
