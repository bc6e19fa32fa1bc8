package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/kvpool"
)

func TestLookup(t *testing.T) {
	tests := []struct {
		name     string
		shards   int
		sync     bool
		present  [][]int // per shard: block indexes present
		nHashes  int
		tokens   int
		computed int
		want     LookupResult
		wantErr  error
	}{
		{name: "miss", shards: 1, present: [][]int{{}}, nHashes: 3, tokens: 50, want: LookupResult{}},
		{name: "prefix hit", shards: 1, present: [][]int{{0, 1}}, nHashes: 3, tokens: 50, want: LookupResult{32, true}},
		{name: "hit stops at first miss", shards: 1, present: [][]int{{0, 2}}, nHashes: 3, tokens: 50, want: LookupResult{16, true}},
		{name: "hit ending mid-block counts whole blocks", shards: 1, present: [][]int{{0, 1}}, nHashes: 2, tokens: 40, want: LookupResult{32, true}},
		{name: "hit ending mid-block, sync", shards: 1, sync: true, present: [][]int{{0, 1}}, nHashes: 2, tokens: 40, want: LookupResult{32, false}},
		{name: "full-prompt hit, async", shards: 1, present: [][]int{{0, 1, 2}}, nHashes: 3, tokens: 48, want: LookupResult{48, true}},
		{name: "full-prompt hit, sync leaves a token", shards: 1, sync: true, present: [][]int{{0, 1, 2}}, nHashes: 3, tokens: 48, want: LookupResult{32, false}},
		{name: "full-prompt hit, sync, one block", shards: 1, sync: true, present: [][]int{{0}}, nHashes: 1, tokens: 16, want: LookupResult{}},
		{name: "beyond the local hit", shards: 1, present: [][]int{{0, 1, 2}}, nHashes: 3, tokens: 50, computed: 16, want: LookupResult{32, true}},
		{name: "pool hole under the local hit", shards: 1, present: [][]int{{1, 2}}, nHashes: 3, tokens: 50, computed: 16, want: LookupResult{32, true}},
		{name: "local hit covers the pool hit", shards: 1, present: [][]int{{0}}, nHashes: 3, tokens: 50, computed: 32, want: LookupResult{}},
		{name: "sync full hit behind a local hit", shards: 1, sync: true, present: [][]int{{0, 1, 2}}, nHashes: 3, tokens: 48, computed: 32, want: LookupResult{}},
		{name: "every shard must hold the block", shards: 2, present: [][]int{{0, 1, 2}, {0, 2}}, nHashes: 3, tokens: 50, want: LookupResult{16, true}},
		{name: "more hashes than full blocks", shards: 1, present: [][]int{{0, 1, 2}}, nHashes: 3, tokens: 40, want: LookupResult{32, true}},
		{name: "local hit not in whole blocks", shards: 1, present: [][]int{{0}}, nHashes: 3, tokens: 50, computed: 5, wantErr: ErrInvalidRequest},
		{name: "more computed than tokens", shards: 1, present: [][]int{{0}}, nHashes: 3, tokens: 16, computed: 32, wantErr: ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := newFakePool()
			var shards []kvpool.Namespace
			hs := hashes("r", tt.nHashes)
			for sh := range tt.shards {
				ns := testNS(sh, tt.shards)
				shards = append(shards, ns)
				for _, b := range tt.present[sh] {
					pool.put(ns.Key(hs[b]))
				}
			}
			s, _ := halves(t, pool, SchedulerConfig{Shards: shards, SyncLoad: tt.sync}, WorkerConfig{})
			req := LookupRequest{ReqID: "r", BlockHashes: hs, NumTokens: tt.tokens, NumComputedTokens: tt.computed}
			got, err := s.Lookup(t.Context(), req)
			if !errors.Is(err, tt.wantErr) || got != tt.want {
				t.Fatalf("Lookup = %+v, %v; want %+v, %v", got, err, tt.want, tt.wantErr)
			}
			if err == nil && tt.nHashes*bt > tt.computed && tt.computed/bt < min(tt.nHashes, tt.tokens/bt) && pool.existN != 1 {
				t.Fatalf("%d existence checks, want one batch", pool.existN)
			}
			// Idempotent: asking again gives the same answer.
			if again, err2 := s.Lookup(t.Context(), req); again != got || !errors.Is(err2, tt.wantErr) {
				t.Fatalf("second Lookup = %+v, %v", again, err2)
			}
		})
	}
}

func TestLookupErrorsAndDeadline(t *testing.T) {
	pool := newFakePool()
	pool.existErr = errors.New("master down")
	s, _ := halves(t, pool, SchedulerConfig{}, WorkerConfig{})
	got, err := s.Lookup(t.Context(), LookupRequest{ReqID: "r", BlockHashes: hashes("r", 2), NumTokens: 32})
	if err == nil || got != (LookupResult{}) {
		t.Fatalf("Lookup with a failing Exister = %+v, %v", got, err)
	}
	// The existence check runs under LookupTimeout even without a caller
	// deadline.
	hang := existerFunc(func(ctx context.Context, keys []string) ([]bool, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	s2, err := NewScheduler(SchedulerConfig{Shards: []kvpool.Namespace{testNS(0, 1)}, Exister: hang, LookupTimeout: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Lookup(context.Background(), LookupRequest{ReqID: "r", BlockHashes: hashes("r", 2), NumTokens: 32}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lookup against a hanging Exister = %v", err)
	}
}

type existerFunc func(ctx context.Context, keys []string) ([]bool, error)

func (f existerFunc) BatchIsExist(ctx context.Context, keys []string) ([]bool, error) {
	return f(ctx, keys)
}

// TestLoadScenarios runs whole steps for several requests at once: lookup,
// allocation, the plan, the worker, and what the step reports.
func TestLoadScenarios(t *testing.T) {
	type req struct {
		id       string
		blocks   int   // full-block hashes
		tokens   int   // request tokens
		computed int   // local hit
		present  []int // blocks in the pool
		fail     []int // blocks whose load fails
		accept   bool  // the engine takes the offered tokens
	}
	tests := []struct {
		name        string
		sync        bool
		reqs        []req
		wantTokens  map[string]int
		wantRecving []string
		wantFailed  []string // "req/block index"
		wantLoadErr bool
	}{
		{
			name: "several requests",
			reqs: []req{
				{id: "a", blocks: 3, tokens: 50, present: []int{0, 1, 2}, accept: true},
				{id: "b", blocks: 3, tokens: 50, accept: true},
				{id: "c", blocks: 4, tokens: 64, computed: 16, present: []int{1, 2}, accept: true},
				{id: "d", blocks: 2, tokens: 40, present: []int{0, 1}, accept: false},
			},
			wantTokens:  map[string]int{"a": 48, "b": 0, "c": 32, "d": 32},
			wantRecving: []string{"a", "c"},
		},
		{
			name: "a failed load is reported as finished and its blocks as failed",
			reqs: []req{
				{id: "a", blocks: 3, tokens: 50, present: []int{0, 1, 2}, fail: []int{1}, accept: true},
				{id: "b", blocks: 2, tokens: 40, present: []int{0, 1}, accept: true},
			},
			wantTokens:  map[string]int{"a": 48, "b": 32},
			wantRecving: []string{"a", "b"},
			wantFailed:  []string{"a/1"},
		},
		{
			name:        "full-prompt hit, async",
			reqs:        []req{{id: "a", blocks: 3, tokens: 48, present: []int{0, 1, 2}, accept: true}},
			wantTokens:  map[string]int{"a": 48},
			wantRecving: []string{"a"},
		},
		{
			name:       "full-prompt hit, sync leaves the last block to compute",
			sync:       true,
			reqs:       []req{{id: "a", blocks: 3, tokens: 48, present: []int{0, 1, 2}, accept: true}},
			wantTokens: map[string]int{"a": 32},
		},
		{
			name:        "hit ending mid-block",
			reqs:        []req{{id: "a", blocks: 2, tokens: 45, present: []int{0, 1}, accept: true}},
			wantTokens:  map[string]int{"a": 32},
			wantRecving: []string{"a"},
		},
		{
			name:        "sync failed load is reported in its step, not as finished",
			sync:        true,
			reqs:        []req{{id: "a", blocks: 3, tokens: 50, present: []int{0, 1, 2}, fail: []int{0, 2}, accept: true}},
			wantTokens:  map[string]int{"a": 48},
			wantFailed:  []string{"a/0", "a/2"},
			wantLoadErr: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := newFakePool()
			ns := testNS(0, 1)
			s, w := halves(t, pool, SchedulerConfig{SyncLoad: tt.sync}, WorkerConfig{})
			blockID := map[string]int{} // "req/index" -> engine block id
			idOf := map[int]string{}
			next := 1 // block 0 is vLLM's null block
			for _, r := range tt.reqs {
				hs := hashes(r.id, r.blocks)
				for _, b := range r.present {
					pool.put(ns.Key(hs[b]))
				}
				for _, b := range r.fail {
					pool.failLoad[ns.Key(hs[b])] = true
				}
				res, err := s.Lookup(t.Context(), LookupRequest{ReqID: r.id, BlockHashes: hs, NumTokens: r.tokens, NumComputedTokens: r.computed})
				if err != nil {
					t.Fatal(err)
				}
				if res.Tokens != tt.wantTokens[r.id] || res.Async != (res.Tokens > 0 && !tt.sync) {
					t.Fatalf("Lookup(%s) = %+v, want %d tokens", r.id, res, tt.wantTokens[r.id])
				}
				ids := make([]int, (r.tokens+bt-1)/bt)
				for i := range ids {
					ids[i] = next
					blockID[fmt.Sprintf("%s/%d", r.id, i)] = next
					idOf[next] = fmt.Sprintf("%s/%d", r.id, i)
					next++
				}
				ext := 0
				if r.accept {
					ext = res.Tokens
				}
				if err := s.UpdateAfterAlloc(r.id, ids, ext); err != nil {
					t.Fatal(err)
				}
			}
			res := step(t, s, w, true)
			if (res.loadErr != nil) != tt.wantLoadErr {
				t.Fatalf("WaitForLoad = %v", res.loadErr)
			}
			if !slices.Equal(res.recving, tt.wantRecving) {
				t.Fatalf("finishedRecving %v, want %v", res.recving, tt.wantRecving)
			}
			var failed []string
			for _, b := range res.failed {
				failed = append(failed, idOf[b])
			}
			slices.Sort(failed)
			if !slices.Equal(failed, tt.wantFailed) {
				t.Fatalf("failed blocks %v, want %v", failed, tt.wantFailed)
			}
			// Every load that landed went to the right engine block, past
			// the local hit.
			for _, r := range tt.reqs {
				hs := hashes(r.id, r.blocks)
				for i := range hs {
					b, loaded := pool.loads[ns.Key(hs[i])]
					wantLoaded := r.accept && i >= r.computed/bt && i < (r.computed+tt.wantTokens[r.id])/bt && !slices.Contains(r.fail, i)
					if loaded != wantLoaded || (loaded && b != blockID[fmt.Sprintf("%s/%d", r.id, i)]) {
						t.Errorf("%s block %d: loaded=%v into %d, want loaded=%v into %d", r.id, i, loaded, b, wantLoaded, blockID[fmt.Sprintf("%s/%d", r.id, i)])
					}
				}
			}
			// A second step reports nothing again.
			if again := step(t, s, w, true); len(again.recving)+len(again.failed)+len(again.sending) != 0 {
				t.Fatalf("second step reported %+v", again)
			}
			for _, r := range tt.reqs {
				if s.RequestFinished(r.id) {
					t.Fatalf("RequestFinished(%s) holds blocks without saves", r.id)
				}
			}
			step(t, s, w, true)
			if s.Tracked() != 0 || w.Tracked() != 0 {
				t.Fatalf("state left: scheduler %d, worker %d", s.Tracked(), w.Tracked())
			}
		})
	}
}

// TestAbort finishes a request while its async load is in flight (or
// before the plan carrying it was built, or after it landed): the load is
// cancelled, the request is still reported in finishedRecving exactly
// once, its blocks are not reported failed, and nothing is left behind.
func TestAbort(t *testing.T) {
	tests := []struct {
		name     string
		when     string // "in flight", "before plan", "after landing"
		canceled uint64
	}{
		{"abort while loading", "in flight", 3},
		{"abort before the plan was built", "before plan", 3},
		{"finish after the load landed", "after landing", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := newFakePool()
			ns := testNS(0, 1)
			hs := hashes("a", 3)
			pool.put(ns.Keys(hs)...)
			gate := make(chan struct{})
			pool.loadGate = gate
			pool.loadStart = make(chan []string, 1)
			s, w := halves(t, pool, SchedulerConfig{}, WorkerConfig{})
			res, err := s.Lookup(t.Context(), LookupRequest{ReqID: "a", BlockHashes: hs, NumTokens: 50})
			if err != nil || !res.Async {
				t.Fatalf("Lookup = %+v, %v", res, err)
			}
			if err := s.UpdateAfterAlloc("a", []int{1, 2, 3, 4}, res.Tokens); err != nil {
				t.Fatal(err)
			}
			var recving []string
			switch tt.when {
			case "in flight":
				r1 := step(t, s, w, false)
				<-pool.loadStart
				recving = append(recving, r1.recving...)
				if s.RequestFinished("a") {
					t.Fatal("RequestFinished holds blocks without saves")
				}
			case "before plan":
				if s.RequestFinished("a") {
					t.Fatal("RequestFinished holds blocks without saves")
				}
			case "after landing":
				close(gate)
				r1 := step(t, s, w, true)
				recving = append(recving, r1.recving...)
				s.RequestFinished("a")
			}
			r2 := step(t, s, w, true)
			recving = append(recving, r2.recving...)
			if !slices.Equal(recving, []string{"a"}) || len(r2.failed) != 0 {
				t.Fatalf("finishedRecving %v, failed %v; want [a] once, no failed blocks", recving, r2.failed)
			}
			if st := w.Stats(); st.LoadCanceledBlocks != tt.canceled {
				t.Fatalf("stats %+v, want %d cancelled blocks", st, tt.canceled)
			}
			if s.Tracked() != 0 || w.Tracked() != 0 {
				t.Fatalf("state left: scheduler %d, worker %d", s.Tracked(), w.Tracked())
			}
		})
	}
}

// TestSaves checks save planning in chunks, de-duplication against the
// lookup's pool hit, the hold on finish, and finishedSending after the
// saves ran (also when one failed).
func TestSaves(t *testing.T) {
	pool := newFakePool()
	ns := testNS(0, 1)
	s, w := halves(t, pool, SchedulerConfig{}, WorkerConfig{SyncSave: true})
	hs := hashes("a", 5)
	pool.put(ns.Key(hs[0])) // block 0 in the pool already
	pool.failSave[ns.Key(hs[3])] = true
	ids := []int{10, 11, 12, 13, 14, 15}
	res, err := s.Lookup(t.Context(), LookupRequest{ReqID: "a", BlockHashes: hs, NumTokens: 90})
	if err != nil || res.Tokens != 16 {
		t.Fatalf("Lookup = %+v, %v", res, err)
	}
	if err := s.UpdateAfterAlloc("a", ids, 0); err != nil { // the engine recomputes
		t.Fatal(err)
	}
	// Chunked prefill: 40, then 90 tokens computed.
	if n, err := s.PlanSave(SaveRequest{ReqID: "a", BlockHashes: hs[:2], BlockIDs: ids, NumComputedTokens: 40}); n != 1 || err != nil {
		t.Fatalf("PlanSave(40 tokens) = %d, %v; want block 1 only", n, err)
	}
	if r := step(t, s, w, true); len(r.sending) != 0 {
		t.Fatalf("sending before finish: %v", r.sending)
	}
	if n, _ := s.PlanSave(SaveRequest{ReqID: "a", BlockHashes: hs, BlockIDs: ids, NumComputedTokens: 90}); n != 3 {
		t.Fatalf("PlanSave(90 tokens) = %d, want blocks 2..4", n)
	}
	if n, _ := s.PlanSave(SaveRequest{ReqID: "a", BlockHashes: hs, BlockIDs: ids, NumComputedTokens: 90}); n != 0 {
		t.Fatalf("PlanSave again = %d, want 0", n)
	}
	step(t, s, w, true)
	for i, want := range []bool{true, true, true, false, true} {
		if pool.present[ns.Key(hs[i])] != want {
			t.Errorf("block %d in pool = %v, want %v", i, !want, want)
		}
	}
	if !s.RequestFinished("a") {
		t.Fatal("RequestFinished = false with saves planned")
	}
	r := step(t, s, w, true)
	if !slices.Equal(r.sending, []string{"a"}) {
		t.Fatalf("finishedSending %v, want [a]", r.sending)
	}
	if st := w.Stats(); st.SavedBlocks != 3 || st.SaveFailedBlocks != 1 {
		t.Fatalf("stats %+v", st)
	}
	if r := step(t, s, w, true); len(r.sending) != 0 || s.Tracked() != 0 || w.Tracked() != 0 {
		t.Fatalf("after sending: %+v, scheduler %d, worker %d", r, s.Tracked(), w.Tracked())
	}

	// NoSave plans nothing and never holds blocks.
	s2, _ := halves(t, pool, SchedulerConfig{NoSave: true}, WorkerConfig{})
	if n, _ := s2.PlanSave(SaveRequest{ReqID: "b", BlockHashes: hs, BlockIDs: ids, NumComputedTokens: 90}); n != 0 || s2.RequestFinished("b") {
		t.Fatal("NoSave planned a save")
	}
}

// TestFinishWhileSaving holds a finished request until its in-flight
// saves are done, then reports it once.
func TestFinishWhileSaving(t *testing.T) {
	pool := newFakePool()
	gate := make(chan struct{})
	pool.saveGate = gate
	s, w := halves(t, pool, SchedulerConfig{}, WorkerConfig{})
	hs := hashes("a", 2)
	if n, _ := s.PlanSave(SaveRequest{ReqID: "a", BlockHashes: hs, BlockIDs: []int{1, 2}, NumComputedTokens: 32}); n != 2 {
		t.Fatal("no save planned")
	}
	step(t, s, w, false)
	if !s.RequestFinished("a") {
		t.Fatal("RequestFinished = false with a save in flight")
	}
	if r := step(t, s, w, false); len(r.sending) != 0 {
		t.Fatalf("sending %v while the save runs", r.sending)
	}
	close(gate)
	w.wg.Wait()
	if snd, _ := w.GetFinished(); !slices.Equal(snd, []string{"a"}) {
		t.Fatalf("finishedSending %v, want [a]", snd)
	}
	if w.Tracked() != 0 {
		t.Fatalf("worker keeps %d requests", w.Tracked())
	}
}

func TestDeadlines(t *testing.T) {
	t.Run("async load past LoadTimeout is a failed, finished load", func(t *testing.T) {
		pool := newFakePool()
		pool.loadGate = make(chan struct{}) // never opens
		s, w := halves(t, pool, SchedulerConfig{}, WorkerConfig{LoadTimeout: 5 * time.Millisecond})
		hs := hashes("a", 2)
		pool.put(testNS(0, 1).Keys(hs)...)
		res, _ := s.Lookup(t.Context(), LookupRequest{ReqID: "a", BlockHashes: hs, NumTokens: 40})
		_ = s.UpdateAfterAlloc("a", []int{7, 8, 9}, res.Tokens)
		r := step(t, s, w, true)
		if !slices.Equal(r.recving, []string{"a"}) || !slices.Equal(r.failed, []int{7, 8}) {
			t.Fatalf("step = %+v, want a finished with blocks 7, 8 failed", r)
		}
	})
	t.Run("sync load past the step deadline fails its blocks in the step", func(t *testing.T) {
		pool := newFakePool()
		gate := make(chan struct{})
		pool.loadGate = gate
		s, w := halves(t, pool, SchedulerConfig{SyncLoad: true}, WorkerConfig{LoadTimeout: time.Hour})
		hs := hashes("a", 3)
		pool.put(testNS(0, 1).Keys(hs)...)
		res, _ := s.Lookup(t.Context(), LookupRequest{ReqID: "a", BlockHashes: hs, NumTokens: 50})
		_ = s.UpdateAfterAlloc("a", []int{7, 8, 9, 10}, res.Tokens)
		if err := w.Start(s.BuildPlan()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
		defer cancel()
		if err := w.WaitForLoad(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitForLoad = %v", err)
		}
		if f := w.FailedBlocks(); !slices.Equal(f, []int{7, 8, 9}) {
			t.Fatalf("FailedBlocks = %v", f)
		}
		w.wg.Wait() // the cancelled load returns and is not reported twice
		if f := w.FailedBlocks(); len(f) != 0 {
			t.Fatalf("FailedBlocks again = %v", f)
		}
		if _, rcv := w.GetFinished(); len(rcv) != 0 {
			t.Fatalf("sync load reported in finishedRecving: %v", rcv)
		}
	})
	t.Run("a queued job times out waiting for a slot", func(t *testing.T) {
		pool := newFakePool()
		pool.saveGate = make(chan struct{}) // never opens
		s, w := halves(t, pool, SchedulerConfig{}, WorkerConfig{MaxInFlight: 1, SaveTimeout: 5 * time.Millisecond})
		for _, id := range []string{"a", "b"} {
			s.PlanSave(SaveRequest{ReqID: id, BlockHashes: hashes(id, 1), BlockIDs: []int{1}, NumComputedTokens: 16})
		}
		step(t, s, w, true)
		if st := w.Stats(); st.SaveFailedBlocks != 2 {
			t.Fatalf("stats %+v, want both saves failed", st)
		}
	})
	t.Run("WaitForSave is bounded", func(t *testing.T) {
		pool := newFakePool()
		gate := make(chan struct{})
		pool.saveGate = gate
		s, w := halves(t, pool, SchedulerConfig{}, WorkerConfig{SyncSave: true, SaveTimeout: time.Hour})
		s.PlanSave(SaveRequest{ReqID: "a", BlockHashes: hashes("a", 1), BlockIDs: []int{1}, NumComputedTokens: 16})
		_ = w.Start(s.BuildPlan())
		if err := w.WaitForSave(canceledCtx(t)); !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitForSave = %v", err)
		}
		close(gate)
		if err := w.WaitForSave(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

func canceledCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}

func TestPreemption(t *testing.T) {
	pool := newFakePool()
	gate := make(chan struct{})
	pool.saveGate = gate
	s, w := halves(t, pool, SchedulerConfig{}, WorkerConfig{})
	hs := hashes("a", 2)
	s.PlanSave(SaveRequest{ReqID: "a", BlockHashes: hs, BlockIDs: []int{1, 2}, NumComputedTokens: 32})
	step(t, s, w, false)
	s.RequestPreempted("a")
	if err := w.HandlePreemptions(canceledCtx(t), []string{"a"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("HandlePreemptions with a save in flight and a done context = %v", err)
	}
	close(gate)
	if err := w.HandlePreemptions(t.Context(), []string{"a", "unknown"}); err != nil {
		t.Fatal(err)
	}
	// After the preemption the request saves from the start again.
	if n, _ := s.PlanSave(SaveRequest{ReqID: "a", BlockHashes: hs, BlockIDs: []int{5, 6}, NumComputedTokens: 32}); n != 2 {
		t.Fatalf("PlanSave after preemption = %d, want 2", n)
	}
}

func TestInvalidInput(t *testing.T) {
	pool := newFakePool()
	s, w := halves(t, pool, SchedulerConfig{}, WorkerConfig{})
	if err := s.UpdateAfterAlloc("x", []int{1}, 16); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("alloc without lookup = %v", err)
	}
	hs := hashes("a", 2)
	pool.put(testNS(0, 1).Keys(hs)...)
	res, _ := s.Lookup(t.Context(), LookupRequest{ReqID: "a", BlockHashes: hs, NumTokens: 40})
	if err := s.UpdateAfterAlloc("a", []int{1, 2, 3}, res.Tokens-bt); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("alloc of other than the offer = %v", err)
	}
	res, _ = s.Lookup(t.Context(), LookupRequest{ReqID: "a", BlockHashes: hs, NumTokens: 40})
	if err := s.UpdateAfterAlloc("a", []int{1}, res.Tokens); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("alloc with too few blocks = %v", err)
	}
	if _, err := s.PlanSave(SaveRequest{ReqID: "a", NumComputedTokens: -1}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("PlanSave(-1) = %v", err)
	}
	// A malformed plan fails its loads (reported), never panics or hangs.
	err := w.Start(Plan{Loads: []LoadSpec{
		{ReqID: "m", Hashes: hashes("m", 1), BlockIDs: []int{4, 5}, Async: true},
		{ReqID: "e", Hashes: [][]byte{nil}, BlockIDs: []int{6}, Async: true},
		{ReqID: "z", Async: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	w.wg.Wait()
	_, rcv := w.GetFinished()
	slices.Sort(rcv)
	if f := w.FailedBlocks(); !slices.Equal(rcv, []string{"e", "m", "z"}) || len(f) != 3 {
		t.Fatalf("recving %v, failed %v", rcv, f)
	}

	cfgs := []struct {
		name string
		err  error
	}{
		{"scheduler without shards", func() error { _, err := NewScheduler(SchedulerConfig{Exister: pool}); return err }()},
		{"scheduler without exister", func() error {
			_, err := NewScheduler(SchedulerConfig{Shards: []kvpool.Namespace{testNS(0, 1)}})
			return err
		}()},
		{"shards with different block sizes", func() error {
			b := testNS(1, 2)
			b.BlockTokens = 32
			_, err := NewScheduler(SchedulerConfig{Shards: []kvpool.Namespace{testNS(0, 2), b}, Exister: pool})
			return err
		}()},
		{"invalid shard", func() error {
			_, err := NewScheduler(SchedulerConfig{Shards: []kvpool.Namespace{{}}, Exister: pool})
			return err
		}()},
		{"worker without loader", func() error { _, err := NewWorker(WorkerConfig{Namespace: testNS(0, 1), Saver: pool}); return err }()},
		{"worker with invalid namespace", func() error { _, err := NewWorker(WorkerConfig{Loader: pool, Saver: pool}); return err }()},
	}
	for _, c := range cfgs {
		if !errors.Is(c.err, ErrInvalidConfig) {
			t.Errorf("%s: %v", c.name, c.err)
		}
	}
	w.Close()
	if err := w.Start(Plan{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
}

// TestConcurrentRequests drives many requests through seeded random
// steps while loads and saves complete concurrently (run with -race): every
// async load is reported once, failed blocks no later than their request,
// every held request is reported sending once, and nothing is left.
func TestConcurrentRequests(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			pool := newFakePool()
			ns := testNS(0, 1)
			s, w := halves(t, pool, SchedulerConfig{}, WorkerConfig{MaxInFlight: 3})
			const nreq = 40
			type rq struct {
				id     string
				hs     [][]byte
				ids    []int
				tokens int
				failed map[int]bool // engine block ids whose load fails
				async  bool
				hold   bool
			}
			reqs := make([]*rq, nreq)
			next := 1
			for i := range reqs {
				r := &rq{id: fmt.Sprint("r", i), tokens: 16 + rng.IntN(100), failed: map[int]bool{}}
				r.hs = hashes(r.id, r.tokens/bt)
				for range (r.tokens + bt - 1) / bt {
					r.ids = append(r.ids, next)
					next++
				}
				hit := rng.IntN(len(r.hs) + 1)
				for b := range hit {
					pool.put(ns.Key(r.hs[b]))
					if rng.IntN(6) == 0 {
						pool.failLoad[ns.Key(r.hs[b])] = true
						r.failed[r.ids[b]] = true
					}
				}
				reqs[i] = r
			}
			// Concurrent lookups (the scheduler is safe for concurrent use).
			results := make([]LookupResult, nreq)
			var wg sync.WaitGroup
			for i, r := range reqs {
				wg.Go(func() {
					res, err := s.Lookup(t.Context(), LookupRequest{ReqID: r.id, BlockHashes: r.hs, NumTokens: r.tokens})
					if err != nil {
						t.Error(err)
					}
					results[i] = res
				})
			}
			wg.Wait()
			reported := map[int]bool{}
			recving := map[string]int{}
			sending := map[string]int{}
			pendingFinish := []*rq{}
			finished := map[string]bool{} // finish passed to the worker
			collect := func() {
				snd, rcv := w.GetFinished()
				for _, b := range w.FailedBlocks() {
					if reported[b] {
						t.Errorf("block %d reported failed twice", b)
					}
					reported[b] = true
				}
				for _, id := range snd {
					sending[id]++
				}
				for _, id := range rcv {
					recving[id]++
					var r *rq
					for _, x := range reqs {
						if x.id == id {
							r = x
						}
					}
					for b := range r.failed {
						// A request finished (aborted) before its load
						// landed has its failed blocks left unreported.
						if !reported[b] && !finished[id] {
							t.Errorf("%s finished before its failed block %d was reported", id, b)
						}
					}
				}
			}
			order := rng.Perm(nreq)
			for k, i := range order {
				r := reqs[i]
				r.async = results[i].Async
				if err := s.UpdateAfterAlloc(r.id, r.ids, results[i].Tokens); err != nil {
					t.Fatal(err)
				}
				if rng.IntN(2) == 0 {
					n, _ := s.PlanSave(SaveRequest{ReqID: r.id, BlockHashes: r.hs, BlockIDs: r.ids, NumComputedTokens: r.tokens})
					r.hold = n > 0
				}
				pendingFinish = append(pendingFinish, r)
				if k%5 == 4 { // a step every few requests, finishing some
					for _, f := range pendingFinish[:len(pendingFinish)/2] {
						if got := s.RequestFinished(f.id); got != f.hold {
							t.Errorf("RequestFinished(%s) = %v, want %v", f.id, got, f.hold)
						}
					}
					pendingFinish = pendingFinish[len(pendingFinish)/2:]
					p := s.BuildPlan()
					if err := w.Start(p); err != nil {
						t.Fatal(err)
					}
					for _, id := range p.Finished {
						finished[id] = true
					}
					collect()
				}
			}
			for _, f := range pendingFinish {
				if got := s.RequestFinished(f.id); got != f.hold {
					t.Errorf("RequestFinished(%s) = %v, want %v", f.id, got, f.hold)
				}
			}
			p := s.BuildPlan()
			if err := w.Start(p); err != nil {
				t.Fatal(err)
			}
			for _, id := range p.Finished {
				finished[id] = true
			}
			w.wg.Wait()
			collect()
			for _, r := range reqs {
				// An aborted async load is reported too; a request that
				// finished before its load landed has no failed blocks.
				if r.async && recving[r.id] != 1 {
					t.Errorf("%s (async) in finishedRecving %d times", r.id, recving[r.id])
				}
				if !r.async && recving[r.id] != 0 {
					t.Errorf("%s (no async load) in finishedRecving", r.id)
				}
				if want := map[bool]int{true: 1}[r.hold]; sending[r.id] != want {
					t.Errorf("%s in finishedSending %d times, want %d", r.id, sending[r.id], want)
				}
			}
			for b := range reported {
				found := false
				for _, r := range reqs {
					found = found || r.failed[b]
				}
				if !found {
					t.Errorf("block %d reported failed but its load could not fail", b)
				}
			}
			if s.Tracked() != 0 || w.Tracked() != 0 {
				t.Fatalf("state left: scheduler %d, worker %d", s.Tracked(), w.Tracked())
			}
		})
	}
}

// TestUpdateAfterAlloc checks the two allocation calls vLLM can make: a
// declined offer drops the load; a second call for extra blocks without a
// new lookup keeps it.
func TestUpdateAfterAlloc(t *testing.T) {
	pool := newFakePool()
	hs := hashes("a", 2)
	pool.put(testNS(0, 1).Keys(hs)...)
	s, _ := halves(t, pool, SchedulerConfig{}, WorkerConfig{})
	lookup := func() int {
		res, err := s.Lookup(t.Context(), LookupRequest{ReqID: "a", BlockHashes: hs, NumTokens: 40})
		if err != nil {
			t.Fatal(err)
		}
		return res.Tokens
	}
	n := lookup()
	if err := s.UpdateAfterAlloc("a", []int{1, 2, 3}, n); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateAfterAlloc("a", []int{1, 2, 3, 4}, 0); err != nil {
		t.Fatal(err)
	}
	if p := s.BuildPlan(); len(p.Loads) != 1 || !slices.Equal(p.Loads[0].BlockIDs, []int{1, 2}) {
		t.Fatalf("plan %+v, want the load kept", p)
	}
	lookup()
	if err := s.UpdateAfterAlloc("a", []int{1, 2, 3}, 0); err != nil {
		t.Fatal(err)
	}
	if p := s.BuildPlan(); len(p.Loads) != 0 {
		t.Fatalf("plan %+v after a declined offer", p)
	}
}

// TestJobOf checks that every Loader and Saver call sees its job: request,
// async flag and the Plan's Tag.
func TestJobOf(t *testing.T) {
	type seen struct {
		load bool
		info JobInfo
	}
	got := make(chan seen, 4)
	w, err := NewWorker(WorkerConfig{
		Namespace: testNS(0, 1),
		Loader: loaderFunc(func(ctx context.Context, keys []string, blocks []int) []error {
			info, ok := JobOf(ctx)
			if !ok {
				t.Error("Load: no job in the context")
			}
			got <- seen{true, info}
			return make([]error, len(keys))
		}),
		Saver: saverFunc(func(ctx context.Context, keys []string, blocks []int) []error {
			info, _ := JobOf(ctx)
			got <- seen{false, info}
			return make([]error, len(keys))
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tag := &struct{ step int }{7}
	if err := w.Start(Plan{
		Loads: []LoadSpec{{ReqID: "a", Hashes: [][]byte{{1}}, BlockIDs: []int{1}, Async: true}},
		Saves: []SaveSpec{{ReqID: "b", Hashes: [][]byte{{2}}, BlockIDs: []int{2}}},
		Tag:   tag,
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		s := <-got
		want := JobInfo{ReqID: "b", Tag: tag}
		if s.load {
			want = JobInfo{ReqID: "a", Async: true, Tag: tag}
		}
		if s.info != want {
			t.Errorf("load=%v: JobOf = %+v, want %+v", s.load, s.info, want)
		}
	}
	if _, ok := JobOf(context.Background()); ok {
		t.Error("JobOf of a plain context reports a job")
	}
}

type loaderFunc func(ctx context.Context, keys []string, blocks []int) []error

func (f loaderFunc) Load(ctx context.Context, keys []string, blocks []int) []error {
	return f(ctx, keys, blocks)
}

type saverFunc func(ctx context.Context, keys []string, blocks []int) []error

func (f saverFunc) Save(ctx context.Context, keys []string, blocks []int) []error {
	return f(ctx, keys, blocks)
}

// TestLookupLongPrompt checks that a prompt with more blocks than one
// existence check carries is asked about in chunks, stopping at the chunk
// where the prefix ends.
func TestLookupLongPrompt(t *testing.T) {
	p := newFakePool()
	s, err := NewScheduler(SchedulerConfig{Shards: []kvpool.Namespace{testNS(0, 1)}, Exister: p})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3*presentChunk + 10
	hs := hashes("long", n)
	hit := 2*presentChunk + 5
	p.put(testNS(0, 1).Keys(hs[:hit])...)
	res, err := s.Lookup(context.Background(), LookupRequest{ReqID: "long", BlockHashes: hs, NumTokens: n * bt})
	if err != nil || res.Tokens != hit*bt || !res.Async {
		t.Fatalf("Lookup = %+v, %v; want %d tokens async", res, err, hit*bt)
	}
	if p.existN != 3 {
		t.Errorf("%d existence checks, want 3 (the fourth chunk is past the end of the prefix)", p.existN)
	}
}
