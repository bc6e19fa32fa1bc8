package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Saver saves layers in the background while the engine computes the next
// ones. The engine calls SaveLayer after computing each layer and WaitAll
// at the end of the step (before the saved buffers may be overwritten).
type Saver struct {
	save LayerFunc
	cfg  Config

	// ctx is the Saver's own context, the parent of every save; Close
	// cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	// slots holds one token per pending layer (queued or running): its
	// capacity is the Window, so a full channel is back-pressure.
	slots chan struct{}
	// wg counts running save goroutines.
	wg sync.WaitGroup

	// mu guards the fields below it.
	mu sync.Mutex
	// queue holds layers waiting for a worker, in submission order.
	queue []int
	// running is the number of save calls in progress.
	running int
	// idle is closed while nothing is pending; a fresh channel replaces
	// it when work arrives.
	idle chan struct{}
	// busy reports whether idle is open.
	busy bool
	// errs collects save failures since the last WaitAll.
	errs []error
	// closed is set by Close.
	closed bool
}

// NewSaver returns a Saver that runs save for each submitted layer, with
// the bounds of cfg.
func NewSaver(save LayerFunc, cfg Config) (*Saver, error) {
	if save == nil {
		return nil, fmt.Errorf("%w: nil save func", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	idle := make(chan struct{})
	close(idle)
	return &Saver{
		save:   save,
		cfg:    cfg,
		ctx:    ctx,
		cancel: cancel,
		slots:  make(chan struct{}, cfg.Window),
		idle:   idle,
	}, nil
}

// Pending returns the number of layers queued or being saved; never more
// than the Window.
func (s *Saver) Pending() int { return len(s.slots) }

// SaveLayer submits layer for saving and returns once it is queued. When
// Window layers are already pending it blocks until one finishes, until
// ctx is done or Config.Timeout passes (the error then wraps the context's
// error and the layer is not queued), or until Close (ErrClosed). A
// failure of the save itself is reported by WaitAll.
func (s *Saver) SaveLayer(ctx context.Context, layer int) error {
	ctx, cancel := bound(ctx, s.cfg.Timeout)
	defer cancel()
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("pipeline: save layer %d: window of %d layers full: %w", layer, s.cfg.Window, ctx.Err())
	case <-s.ctx.Done():
		return fmt.Errorf("pipeline: save layer %d: %w", layer, ErrClosed)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		<-s.slots
		return fmt.Errorf("pipeline: save layer %d: %w", layer, ErrClosed)
	}
	if !s.busy {
		s.busy = true
		s.idle = make(chan struct{})
	}
	s.queue = append(s.queue, layer)
	s.startLocked()
	return nil
}

// startLocked starts queued layers while fewer than Workers run.
func (s *Saver) startLocked() {
	for s.running < s.cfg.Workers && len(s.queue) > 0 {
		layer := s.queue[0]
		s.queue = s.queue[1:]
		s.running++
		s.wg.Add(1)
		go s.run(layer)
	}
}

// run saves one layer and records the outcome.
func (s *Saver) run(layer int) {
	defer s.wg.Done()
	var err error
	if s.ctx.Err() != nil {
		err = ErrClosed
	} else {
		ctx, cancel := bound(s.ctx, s.cfg.Timeout)
		err = s.save(ctx, layer)
		cancel()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("pipeline: save layer %d: %w", layer, err))
	}
	s.running--
	<-s.slots
	s.startLocked()
	if s.running == 0 && len(s.queue) == 0 && s.busy {
		s.busy = false
		close(s.idle)
	}
}

// WaitAll waits until no layer is pending and returns the failures of the
// saves that finished since the previous WaitAll (joined; nil if none),
// clearing them. It gives up when ctx is done or Config.Timeout passes,
// returning an error that wraps the context's error; the failures are
// then kept for the next WaitAll.
func (s *Saver) WaitAll(ctx context.Context) error {
	ctx, cancel := bound(ctx, s.cfg.Timeout)
	defer cancel()
	s.mu.Lock()
	idle := s.idle
	s.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
		return fmt.Errorf("pipeline: wait for %d pending layer saves: %w", s.Pending(), ctx.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := errors.Join(s.errs...)
	s.errs = nil
	return err
}

// Close cancels every pending save (queued layers are not started; running
// ones see their context cancelled) and waits for the save goroutines to
// return. Later SaveLayer calls return ErrClosed. Close is idempotent.
func (s *Saver) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}
