package runtime

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/mooncake-go/mooncake/core/kvpool"
	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

const bt = 16 // block size in tokens

func testNS(tpRank, tpSize int) kvpool.Namespace {
	return kvpool.Namespace{Model: "m", DType: "bf16", Layout: "test", TPRank: tpRank, TPSize: tpSize, BlockTokens: bt}
}

// hashes returns n distinct block hashes for a request.
func hashes(req string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, "%s/%d", req, i)
	}
	return out
}

// fakePool is an in-memory pool shared by the fake Exister, Loader and
// Saver: a key set, with injected failures and gates.
type fakePool struct {
	mu        sync.Mutex
	present   map[string]bool
	failLoad  map[string]bool // keys whose load fails
	failSave  map[string]bool
	existErr  error
	existN    int            // BatchIsExist calls
	loads     map[string]int // key -> engine block it was loaded into
	loadGate  chan struct{}  // if set, Load waits on it (or ctx)
	loadStart chan []string  // if set, Load announces its keys
	saveGate  chan struct{}
}

func newFakePool() *fakePool {
	return &fakePool{present: map[string]bool{}, failLoad: map[string]bool{}, failSave: map[string]bool{}, loads: map[string]int{}}
}

func (p *fakePool) put(keys ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		p.present[k] = true
	}
}

func (p *fakePool) BatchIsExist(ctx context.Context, keys []string) ([]bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.existN++
	if p.existErr != nil {
		return nil, p.existErr
	}
	out := make([]bool, len(keys))
	for i, k := range keys {
		out[i] = p.present[k]
	}
	return out, nil
}

func (p *fakePool) Load(ctx context.Context, keys []string, blocks []int) []error {
	if p.loadStart != nil {
		p.loadStart <- slices.Clone(keys)
	}
	errs := make([]error, len(keys))
	if p.loadGate != nil {
		select {
		case <-p.loadGate:
		case <-ctx.Done():
			for i := range errs {
				errs[i] = ctx.Err()
			}
			return errs
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, k := range keys {
		switch {
		case p.failLoad[k]:
			errs[i] = fmt.Errorf("load %s: injected failure", k)
		case !p.present[k]:
			errs[i] = fmt.Errorf("load %s: not found", k)
		default:
			p.loads[k] = blocks[i]
		}
	}
	return errs
}

func (p *fakePool) Save(ctx context.Context, keys []string, blocks []int) []error {
	errs := make([]error, len(keys))
	if p.saveGate != nil {
		select {
		case <-p.saveGate:
		case <-ctx.Done():
			for i := range errs {
				errs[i] = ctx.Err()
			}
			return errs
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, k := range keys {
		if p.failSave[k] {
			errs[i] = fmt.Errorf("save %s: injected failure", k)
			continue
		}
		p.present[k] = true
	}
	return errs
}

// halves builds a Scheduler and one Worker (TP 1) over pool.
func halves(t *testing.T, pool *fakePool, sc SchedulerConfig, wc WorkerConfig) (*Scheduler, *Worker) {
	t.Helper()
	if sc.Shards == nil {
		sc.Shards = []kvpool.Namespace{testNS(0, 1)}
	}
	sc.Exister = pool
	s, err := NewScheduler(sc)
	if err != nil {
		t.Fatal(err)
	}
	if wc.Namespace.Model == "" {
		wc.Namespace = testNS(0, 1)
	}
	wc.Loader, wc.Saver = pool, pool
	w, err := NewWorker(wc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return s, w
}

// stepResult is what one engine step reported.
type stepResult struct {
	sending, recving []string
	failed           []int
	loadErr          error
}

// step runs one engine step the way vLLM orders the hooks; drain waits
// for every background job first, so the step sees all completions.
func step(t *testing.T, s *Scheduler, w *Worker, drain bool) stepResult {
	t.Helper()
	if err := w.Start(s.BuildPlan()); err != nil {
		t.Fatal(err)
	}
	var r stepResult
	r.loadErr = w.WaitForLoad(t.Context())
	if err := w.WaitForSave(t.Context()); err != nil {
		t.Fatal(err)
	}
	if drain {
		w.wg.Wait()
	}
	r.sending, r.recving = w.GetFinished()
	r.failed = w.FailedBlocks()
	slices.Sort(r.sending)
	slices.Sort(r.recving)
	slices.Sort(r.failed)
	return r
}
