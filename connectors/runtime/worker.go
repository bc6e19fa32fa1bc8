package runtime

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/core/kvpool"
)

// WorkerConfig configures the worker half of one engine worker (one TP/PP
// rank).
type WorkerConfig struct {
	// Namespace names this rank's objects; required.
	Namespace kvpool.Namespace
	// Loader and Saver move the bytes; required.
	Loader Loader
	Saver  Saver
	// MaxInFlight bounds the Load and Save calls running at once; default
	// 4. Jobs beyond it wait (cancellable, deadline-bound) for a slot.
	MaxInFlight int
	// LoadTimeout and SaveTimeout bound each job, waiting for a slot
	// included; default 30s each. A job past its deadline fails.
	LoadTimeout, SaveTimeout time.Duration
	// SyncSave makes WaitForSave wait for the step's saves; by default
	// saves run in the background and the engine keeps a finished
	// request's blocks until it is reported in finishedSending.
	SyncSave bool
}

// Validate reports the first problem with c as an error matching
// ErrInvalidConfig.
func (c WorkerConfig) Validate() error {
	switch {
	case c.Loader == nil || c.Saver == nil:
		return fmt.Errorf("%w: nil Loader or Saver", ErrInvalidConfig)
	case c.MaxInFlight < 0 || c.LoadTimeout < 0 || c.SaveTimeout < 0:
		return fmt.Errorf("%w: negative MaxInFlight %d, LoadTimeout %v or SaveTimeout %v", ErrInvalidConfig, c.MaxInFlight, c.LoadTimeout, c.SaveTimeout)
	}
	if err := c.Namespace.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// WorkerStats counts blocks by outcome since the Worker was made.
type WorkerStats struct {
	LoadedBlocks, LoadFailedBlocks, LoadCanceledBlocks uint64
	SavedBlocks, SaveFailedBlocks                      uint64
}

// Worker is the engine-neutral worker half of a KV connector: it runs a
// step's Plan (loads through the Loader, saves through the Saver, in the
// background), and tracks per request what has finished, so that every
// async load is reported in finishedRecving - landed, failed, timed out or
// cancelled by an abort - and every load failure in FailedBlocks. Per step
// the engine calls, in order: HandlePreemptions (if any), Start,
// WaitForLoad (before the forward reads loaded blocks), WaitForSave (after
// the forward), GetFinished, FailedBlocks. It is safe for concurrent use.
type Worker struct {
	cfg WorkerConfig
	// ctx is the Worker's own context, the parent of every job; Close
	// cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	// slots bounds the Load and Save calls in flight.
	slots chan struct{}
	wg    sync.WaitGroup
	stats struct {
		loaded, loadFailed, loadCanceled, saved, saveFailed atomic.Uint64
	}

	// mu guards the fields below it and every field of reqState, job and
	// group.
	mu     sync.Mutex
	closed bool
	reqs   map[string]*reqState
	// doneSending and doneRecving collect the ids GetFinished returns.
	doneSending, doneRecving []string
	// failed collects the block ids FailedBlocks returns.
	failed []int
	// step tracks the synchronous jobs of the current step.
	loads, saves *group
	// running counts the jobs in flight; news gets a token (never
	// blocking) each time one completes, for WaitReport.
	running int
	news    chan struct{}
}

// reqState is the worker's view of one request.
type reqState struct {
	loading    []*job // load jobs in flight
	asyncLoads int    // async load jobs in flight
	saving     []*job // save jobs in flight
	hadSaves   bool   // a save was ever started: report finishedSending
	finished   bool   // the engine finished the request
}

// job is one Load or Save call.
type job struct {
	req    string
	load   bool
	async  bool
	keys   []string
	blocks []int
	cancel context.CancelFunc
	grp    *group // the step group of a synchronous job, else nil
	// reported is set when the job's blocks were already reported failed
	// (a synchronous load abandoned at the step's deadline).
	reported bool
	done     bool
	// finished is closed when the job completed (with done set).
	finished chan struct{}
}

// group tracks the synchronous jobs of one step.
type group struct {
	jobs []*job
	left int
	done chan struct{} // closed when left drops to 0
}

func newGroup() *group {
	g := &group{done: make(chan struct{})}
	close(g.done)
	return g
}

func (g *group) addLocked(j *job) {
	if g.left == 0 {
		g.done = make(chan struct{})
	}
	g.left++
	g.jobs = append(g.jobs, j)
	j.grp = g
}

func (g *group) finishLocked() {
	g.left--
	if g.left == 0 {
		close(g.done)
		g.jobs = nil
	}
}

// NewWorker returns the worker half for cfg.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.LoadTimeout == 0 {
		cfg.LoadTimeout = DefaultLoadTimeout
	}
	if cfg.SaveTimeout == 0 {
		cfg.SaveTimeout = DefaultSaveTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Worker{
		cfg:    cfg,
		ctx:    ctx,
		cancel: cancel,
		slots:  make(chan struct{}, cfg.MaxInFlight),
		reqs:   make(map[string]*reqState),
		loads:  newGroup(),
		saves:  newGroup(),
		news:   make(chan struct{}, 1),
	}, nil
}

// Start runs a step's plan (vLLM: bind_connector_metadata and
// start_load_kv): it starts every load and save in the background and
// applies the finished requests - cancelling their unfinished loads,
// which are still reported in finishedRecving (their blocks are not
// reported failed: the request is gone). It does not block on I/O. After
// Close it returns ErrClosed.
func (w *Worker) Start(p Plan) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	// A new step: jobs of earlier steps that still run (abandoned by a
	// timed-out wait) keep their own group.
	w.loads, w.saves = newGroup(), newGroup()
	for _, l := range p.Loads {
		w.startLocked(l.ReqID, true, l.Async, l.Hashes, l.BlockIDs, p.Tag)
	}
	for _, s := range p.Saves {
		w.startLocked(s.ReqID, false, false, s.Hashes, s.BlockIDs, p.Tag)
	}
	for _, id := range p.Finished {
		st := w.reqs[id]
		if st == nil {
			continue
		}
		st.finished = true
		for _, j := range st.loading {
			j.cancel()
		}
		w.settleLocked(id, st)
	}
	return nil
}

// startLocked launches one job.
func (w *Worker) startLocked(req string, load, async bool, hashes [][]byte, blocks []int, tag any) {
	st := w.reqs[req]
	if st == nil {
		st = &reqState{}
		w.reqs[req] = st
	}
	timeout := w.cfg.SaveTimeout
	if load {
		timeout = w.cfg.LoadTimeout
	}
	ctx, cancel := context.WithTimeout(context.WithValue(w.ctx, jobInfoKey{}, JobInfo{ReqID: req, Async: async, Tag: tag}), timeout)
	j := &job{req: req, load: load, async: async, blocks: slices.Clone(blocks), cancel: cancel, finished: make(chan struct{})}
	var bad error
	if len(hashes) != len(blocks) {
		bad = fmt.Errorf("%w: request %q: %d hashes for %d blocks", ErrInvalidRequest, req, len(hashes), len(blocks))
	} else if slices.ContainsFunc(hashes, func(h []byte) bool { return len(h) == 0 }) {
		bad = fmt.Errorf("%w: request %q: empty block hash", ErrInvalidRequest, req)
	} else {
		j.keys = w.cfg.Namespace.Keys(hashes)
	}
	switch {
	case load && async:
		st.loading = append(st.loading, j)
		st.asyncLoads++
	case load:
		st.loading = append(st.loading, j)
		w.loads.addLocked(j)
	default:
		st.saving = append(st.saving, j)
		st.hadSaves = true
		if w.cfg.SyncSave {
			w.saves.addLocked(j)
		}
	}
	w.running++
	w.wg.Add(1)
	go w.run(ctx, j, bad)
}

// run executes one job on its own goroutine and records the outcome.
func (w *Worker) run(ctx context.Context, j *job, bad error) {
	defer w.wg.Done()
	defer j.cancel()
	var errs []error
	switch {
	case bad != nil:
	case len(j.keys) == 0:
		errs = []error{}
	default:
		select {
		case w.slots <- struct{}{}:
			if j.load {
				errs = w.cfg.Loader.Load(ctx, j.keys, j.blocks)
			} else {
				errs = w.cfg.Saver.Save(ctx, j.keys, j.blocks)
			}
			<-w.slots
		case <-ctx.Done():
			bad = ctx.Err()
		}
	}
	if bad == nil && len(errs) != len(j.blocks) {
		bad = fmt.Errorf("runtime: request %q: %d results for %d blocks", j.req, len(errs), len(j.blocks))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.completeLocked(j, bad, errs)
}

// completeLocked records a finished job and reports what it completes.
func (w *Worker) completeLocked(j *job, bad error, errs []error) {
	j.done = true
	close(j.finished)
	st := w.reqs[j.req]
	nfail := 0
	for i := range j.blocks {
		if bad != nil || errs[i] != nil {
			nfail++
		}
	}
	if j.load {
		st.loading = slices.DeleteFunc(st.loading, func(x *job) bool { return x == j })
		switch {
		case st.finished:
			w.stats.loadCanceled.Add(uint64(len(j.blocks)))
		case j.reported:
			w.stats.loadFailed.Add(uint64(len(j.blocks)))
		default:
			for i, b := range j.blocks {
				if bad != nil || errs[i] != nil {
					w.failed = append(w.failed, b)
				}
			}
			w.stats.loadFailed.Add(uint64(nfail))
			w.stats.loaded.Add(uint64(len(j.blocks) - nfail))
		}
		if j.async {
			st.asyncLoads--
			if st.asyncLoads == 0 {
				w.doneRecving = append(w.doneRecving, j.req)
			}
		}
	} else {
		st.saving = slices.DeleteFunc(st.saving, func(x *job) bool { return x == j })
		w.stats.saveFailed.Add(uint64(nfail))
		w.stats.saved.Add(uint64(len(j.blocks) - nfail))
	}
	if j.grp != nil {
		j.grp.finishLocked()
	}
	w.settleLocked(j.req, st)
	w.running--
	select {
	case w.news <- struct{}{}:
	default:
	}
}

// settleLocked reports a finished request's sends once its saves are done
// and forgets a request once nothing of it runs and nothing is left to
// report.
func (w *Worker) settleLocked(id string, st *reqState) {
	if len(st.saving) > 0 {
		return
	}
	if st.finished && st.hadSaves {
		w.doneSending = append(w.doneSending, id)
		st.hadSaves = false
	}
	if len(st.loading) == 0 && !st.hadSaves {
		delete(w.reqs, id)
	}
}

// WaitForLoad waits for this step's synchronous loads (vLLM:
// wait_for_layer_load with whole-block loads). When ctx is done or
// LoadTimeout passes first, the blocks of the loads still running are
// reported in FailedBlocks now (the engine recomputes them), the loads
// are cancelled, and the error wraps the context's error.
func (w *Worker) WaitForLoad(ctx context.Context) error {
	w.mu.Lock()
	g := w.loads
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, w.cfg.LoadTimeout)
	defer cancel()
	select {
	case <-g.done:
		return nil
	case <-ctx.Done():
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, j := range g.jobs {
		if !j.done && !j.reported {
			j.reported = true
			w.failed = append(w.failed, j.blocks...)
			j.cancel()
			n += len(j.blocks)
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("runtime: %d blocks of synchronous loads not landed: %w", n, ctx.Err())
}

// WaitForSave (vLLM: wait_for_save) waits for this step's saves when
// SyncSave is set, bounded by ctx and SaveTimeout; otherwise it returns at
// once.
func (w *Worker) WaitForSave(ctx context.Context) error {
	if !w.cfg.SyncSave {
		return nil
	}
	w.mu.Lock()
	g := w.saves
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, w.cfg.SaveTimeout)
	defer cancel()
	select {
	case <-g.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("runtime: waiting for this step's saves: %w", ctx.Err())
	}
}

// HandlePreemptions fences preempted requests before the engine reuses
// their blocks: it cancels their loads and waits, bounded by ctx and
// SaveTimeout, until none of their loads or saves runs.
func (w *Worker) HandlePreemptions(ctx context.Context, reqIDs []string) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.SaveTimeout)
	defer cancel()
	for _, id := range reqIDs {
		for {
			w.mu.Lock()
			st := w.reqs[id]
			var j *job
			if st != nil {
				for _, l := range st.loading {
					l.cancel()
				}
				if len(st.loading) > 0 {
					j = st.loading[0]
				} else if len(st.saving) > 0 {
					j = st.saving[0]
				}
			}
			w.mu.Unlock()
			if j == nil {
				break
			}
			if err := w.waitJob(ctx, j); err != nil {
				return fmt.Errorf("runtime: fencing preempted request %q: %w", id, err)
			}
		}
	}
	return nil
}

// waitJob waits until j completed.
func (w *Worker) waitJob(ctx context.Context, j *job) error {
	select {
	case <-j.finished:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// GetFinished returns, once each, the finished requests whose saves are
// all done (finishedSending; only requests that had saves, so exactly
// those for which Scheduler.RequestFinished returned true) and the
// requests whose async loads all completed (finishedRecving, whether
// they landed, failed or were cancelled). Call it before FailedBlocks in
// each step: the failed blocks of every request it returns are then
// reported in the same step.
func (w *Worker) GetFinished() (finishedSending, finishedRecving []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	finishedSending, finishedRecving = w.doneSending, w.doneRecving
	w.doneSending, w.doneRecving = nil, nil
	return finishedSending, finishedRecving
}

// WaitReport blocks until GetFinished or FailedBlocks has something to
// return, no job is in flight, ctx is done, or d passes, and reports
// whether something is to return. An engine calls it in a step that
// computes nothing (vLLM keeps stepping while finished requests' blocks
// are held for their saves, or requests wait for async loads), so that
// the empty steps wait for a completion instead of spinning on the CPU
// the transfers need. d <= 0 returns at once.
func (w *Worker) WaitReport(ctx context.Context, d time.Duration) bool {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	for {
		w.mu.Lock()
		has := len(w.doneSending)+len(w.doneRecving)+len(w.failed) > 0
		idle := w.running == 0
		w.mu.Unlock()
		if has || idle || d <= 0 {
			return has
		}
		select {
		case <-w.news:
		case <-timeout:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// FailedBlocks returns, once each, the engine block ids whose load failed
// (vLLM: get_block_ids_with_load_errors).
func (w *Worker) FailedBlocks() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.failed
	w.failed = nil
	return out
}

// Stats returns the block counts.
func (w *Worker) Stats() WorkerStats {
	return WorkerStats{
		LoadedBlocks:       w.stats.loaded.Load(),
		LoadFailedBlocks:   w.stats.loadFailed.Load(),
		LoadCanceledBlocks: w.stats.loadCanceled.Load(),
		SavedBlocks:        w.stats.saved.Load(),
		SaveFailedBlocks:   w.stats.saveFailed.Load(),
	}
}

// Tracked returns the number of requests with worker-side state: jobs
// running, or saves done for a request not yet finished (its
// finishedSending is still to come).
func (w *Worker) Tracked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.reqs)
}

// Close cancels every job and waits for their goroutines; cancelled async
// loads are still reported by GetFinished. Later Start calls return
// ErrClosed. Close is idempotent.
func (w *Worker) Close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cancel()
	w.wg.Wait()
}
