package pipeline

import (
	"context"
	"fmt"
	"sync"
)

// Prefetcher loads the layers of one step (a pass) ahead of the consumer:
// Start(n) begins loading layers 0..n-1 in order, and the consumer calls
// WaitLayer(ctx, i) before it reads layer i. Layer j is started only once
// the consumer has entered WaitLayer for layer j-Window+1 or later (or
// j < Window), so at most Window layers - the one the consumer reads
// included - are loaded or loading and not yet released; at most Workers
// loads run at once.
//
// A pass ends when every layer has landed or failed; Cancel ends it early.
// Start refuses (ErrBusy) while the previous pass has loads outstanding, so
// two passes never write the same buffers at once.
type Prefetcher struct {
	load LayerFunc
	cfg  Config

	// ctx is the Prefetcher's own context, the parent of every pass;
	// Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts running load goroutines.
	wg sync.WaitGroup

	// mu guards the fields below it and every field of pass.
	mu     sync.Mutex
	cur    *pass
	closed bool
}

// pass is the state of one Start; all fields are guarded by
// Prefetcher.mu.
type pass struct {
	// ctx is the parent of this pass's loads; cancel ends them.
	ctx    context.Context
	cancel context.CancelFunc
	n      int
	// next is the next layer to start; layers >= next have not started.
	next int
	// consumed is the consumer's position (the highest layer it entered
	// WaitLayer for): layers < consumed are released.
	consumed int
	running  int
	// done[i] is closed once layer i landed or failed; errs[i] is then
	// its outcome.
	done []chan struct{}
	errs []error
	// quiet is closed once no load of the pass runs or will start.
	quiet       chan struct{}
	quietClosed bool
}

// NewPrefetcher returns a Prefetcher that runs load for each layer of a
// pass, with the bounds of cfg.
func NewPrefetcher(load LayerFunc, cfg Config) (*Prefetcher, error) {
	if load == nil {
		return nil, fmt.Errorf("%w: nil load func", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Prefetcher{load: load, cfg: cfg.withDefaults(), ctx: ctx, cancel: cancel}, nil
}

// Start begins a pass over layers 0..layers-1 and returns at once. It
// fails with ErrBusy while the previous pass has loads running or layers
// not yet started (consume them or Cancel it first), and with ErrClosed
// after Close.
func (p *Prefetcher) Start(layers int) error {
	if layers < 0 {
		return fmt.Errorf("pipeline: start pass of %d layers: %w", layers, ErrLayerRange)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("pipeline: start pass: %w", ErrClosed)
	}
	if c := p.cur; c != nil && !c.quietClosed {
		return fmt.Errorf("pipeline: start pass of %d layers: %w (%d of %d layers not done)", layers, ErrBusy, c.n-c.landedLocked(), c.n)
	}
	ctx, cancel := context.WithCancel(p.ctx)
	ps := &pass{ctx: ctx, cancel: cancel, n: layers, done: make([]chan struct{}, layers), errs: make([]error, layers), quiet: make(chan struct{})}
	for i := range ps.done {
		ps.done[i] = make(chan struct{})
	}
	p.cur = ps
	p.startLocked(ps)
	return nil
}

// landedLocked counts the layers whose outcome is known.
func (ps *pass) landedLocked() int {
	n := 0
	for _, d := range ps.done[:ps.next] {
		select {
		case <-d:
			n++
		default:
		}
	}
	return n
}

// startLocked starts the layers the window and the worker bound allow,
// and closes quiet once the pass has nothing left to run.
func (p *Prefetcher) startLocked(ps *pass) {
	for ps.running < p.cfg.Workers && ps.next < ps.n && ps.next < ps.consumed+p.cfg.Window {
		layer := ps.next
		ps.next++
		ps.running++
		p.wg.Add(1)
		go p.run(ps, layer)
	}
	if ps.running == 0 && ps.next == ps.n && !ps.quietClosed {
		ps.quietClosed = true
		ps.cancel()
		close(ps.quiet)
	}
}

// run loads one layer of ps and records the outcome.
func (p *Prefetcher) run(ps *pass, layer int) {
	defer p.wg.Done()
	ctx, cancel := bound(ps.ctx, p.cfg.Timeout)
	err := p.load(ctx, layer)
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		ps.errs[layer] = fmt.Errorf("pipeline: load layer %d: %w", layer, err)
	}
	close(ps.done[layer])
	ps.running--
	p.startLocked(ps)
}

// WaitLayer blocks until layer i of the current pass has landed (nil) or
// failed (its error), until ctx is done or Config.Timeout passes (an error
// wrapping the context's error; the layer may still land later). Entering
// WaitLayer(i) tells the Prefetcher the consumer is done with layers < i,
// releasing them from the window so later layers start; layer i itself
// stays held while the consumer reads it. Consumers wait in layer order
// (waiting for a later layer releases the ones skipped).
func (p *Prefetcher) WaitLayer(ctx context.Context, i int) error {
	p.mu.Lock()
	ps := p.cur
	if ps == nil {
		p.mu.Unlock()
		return fmt.Errorf("pipeline: wait for layer %d: %w", i, ErrNoPass)
	}
	if i < 0 || i >= ps.n {
		p.mu.Unlock()
		return fmt.Errorf("pipeline: wait for layer %d of %d: %w", i, ps.n, ErrLayerRange)
	}
	if ps.consumed < i {
		ps.consumed = i
		p.startLocked(ps)
	}
	done := ps.done[i]
	p.mu.Unlock()

	ctx, cancel := bound(ctx, p.cfg.Timeout)
	defer cancel()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("pipeline: wait for layer %d: %w", i, ctx.Err())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return ps.errs[i]
}

// Cancel ends the current pass: layers not yet started fail with
// ErrCanceled (waking their waiters), running loads see their context
// cancelled, and Cancel waits until they returned - or until ctx is done
// or Config.Timeout passes (an error wrapping the context's error; Start
// keeps refusing until they returned). Without a pass it returns nil.
func (p *Prefetcher) Cancel(ctx context.Context) error {
	p.mu.Lock()
	ps := p.cur
	if ps == nil {
		p.mu.Unlock()
		return nil
	}
	p.cancelLocked(ps)
	quiet := ps.quiet
	p.mu.Unlock()

	ctx, cancel := bound(ctx, p.cfg.Timeout)
	defer cancel()
	select {
	case <-quiet:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pipeline: cancel pass: loads still running: %w", ctx.Err())
	}
}

// cancelLocked fails the unstarted layers of ps and cancels its loads.
func (p *Prefetcher) cancelLocked(ps *pass) {
	for ; ps.next < ps.n; ps.next++ {
		ps.errs[ps.next] = fmt.Errorf("pipeline: load layer %d: %w", ps.next, ErrCanceled)
		close(ps.done[ps.next])
	}
	ps.cancel()
	p.startLocked(ps) // closes quiet if nothing runs
}

// Close cancels the current pass and waits for every load goroutine to
// return. Later Start calls return ErrClosed. Close is idempotent.
func (p *Prefetcher) Close() {
	p.mu.Lock()
	p.closed = true
	if p.cur != nil {
		p.cancelLocked(p.cur)
	}
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
}
