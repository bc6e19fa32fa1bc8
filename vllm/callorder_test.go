package vllm

// The call-order harness's Go twin. vllm/python/tests/vllm_sim.py drives
// the Python connector in vLLM's call order through libmooncake.so, which
// cannot be a -race build inside a Python process (ThreadSanitizer cannot
// map its shadow there); this file drives the same Go halves the shim
// calls (Scheduler, one Worker per TP rank) from a compact model of vLLM's
// engine loop, over a real in-process pool, so `go test -race` covers the
// whole call order.
//
// The model (coEngine) has a waiting queue and a running list, allocates
// blocks from a free list (block 0 is vLLM's null block), runs chunked
// prefill under a per-step token budget, chains sha256 block hashes over
// full blocks, parks async loads until every worker reported them in
// finished-receiving, backs off one token after a full-prompt load,
// preempts (blocks freed, progress reset, fenced, resumed), aborts (a
// loading request's blocks come back once its load is reported), holds a
// finished request's blocks while its saves run, and applies vLLM's
// "recompute" policy to failed blocks. Its forward writes, for every
// scheduled token and layer, K and V bytes that depend only on the token
// prefix, the layer, K or V and the TP rank, so every loaded token is
// checked against what this engine computes for it, and at a request's end
// every token's KV in its blocks must be right.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
)

// Model geometry: a FlashAttention-like KV cache of coLayers layers, each a
// K and a V region of coBlocks blocks; a token's K (or V) in one layer is
// coHeads x coHeadDim elements of coElem bytes (NHD inside a block).
const (
	coLayers  = 4
	coHeads   = 2
	coHeadDim = 8
	coElem    = 2
	coSlot    = coHeads * coHeadDim * coElem
	coBlocks  = 48
	coBudget  = 12 // tokens per engine step
)

// coStatus is a request's state, as vLLM's RequestStatus.
type coStatus int

const (
	coWaiting coStatus = iota
	coWaitingForRemoteKVs
	coRunning
	coPreempted
	coLengthCapped
	coAborted
)

func (s coStatus) String() string {
	return [...]string{"WAITING", "WAITING_FOR_REMOTE_KVS", "RUNNING", "PREEMPTED", "FINISHED_LENGTH_CAPPED", "FINISHED_ABORTED"}[s]
}

// coNoneHash seeds the block hash chain (vLLM's NONE_HASH).
var coNoneHash = sha256.Sum256([]byte("mooncake-go vllm call-order twin"))

// coRequest is one request of the model engine. Its token-derived fields
// (tokens, hashes, prefix) change only between engine steps, so workers
// read them concurrently during a step.
type coRequest struct {
	id        string
	tokens    []int64 // prompt, then sampled tokens
	numPrompt int
	maxTokens int
	output    int // tokens sampled
	computed  int // num_computed_tokens
	status    coStatus
	resumed   bool // preempted and not yet scheduled again
	// hashes are the chained block hashes of the full blocks; prefix[p]
	// identifies tokens[:p+1] (a token's KV depends on its whole prefix).
	hashes [][]byte
	prefix []uint64
}

func newCoRequest(id string, prompt []int64, maxTokens, bs int) *coRequest {
	r := &coRequest{id: id, numPrompt: len(prompt), maxTokens: maxTokens}
	for _, tok := range prompt {
		r.append(tok, bs)
	}
	return r
}

// append adds a token, extending the prefix ids and the block hashes.
func (r *coRequest) append(tok int64, bs int) {
	prev := uint64(0x6d6f6f6e63616b65)
	if n := len(r.prefix); n > 0 {
		prev = r.prefix[n-1]
	}
	r.tokens = append(r.tokens, tok)
	r.prefix = append(r.prefix, coMix(prev^uint64(tok)))
	if len(r.tokens)%bs != 0 {
		return
	}
	h := sha256.New()
	if n := len(r.hashes); n > 0 {
		h.Write(r.hashes[n-1])
	} else {
		h.Write(coNoneHash[:])
	}
	for _, t := range r.tokens[len(r.tokens)-bs:] {
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(t)))
	}
	r.hashes = append(r.hashes, h.Sum(nil))
}

func (r *coRequest) numTokens() int { return len(r.tokens) }

// coMix is splitmix64's finalizer.
func coMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// coKV writes into dst the K (kv 0) or V (kv 1) bytes the forward computes
// for the token whose prefix id is prefix, in layer layer on TP rank rank.
func coKV(dst []byte, prefix uint64, layer, kv, rank int) {
	seed := coMix(prefix ^ uint64(layer)<<48 ^ uint64(kv)<<40 ^ uint64(rank)<<32)
	for i := 0; i < len(dst); i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], coMix(seed+uint64(i)))
	}
}

// coPrompt is n tokens drawn from seed.
func coPrompt(seed uint64, n int) []int64 {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]int64, n)
	for i := range out {
		out[i] = 1 + rng.Int64N(30000)
	}
	return out
}

// coConcat is a new slice holding a then b.
func coConcat(a, b []int64) []int64 { return append(slices.Clone(a), b...) }

// coWorker is one TP rank: its connector worker and its KV cache, one K
// and one V region per layer (Region.Layer set), as FlashAttention's
// [2, num_blocks, block_size, heads, head_dim] tensor per layer.
type coWorker struct {
	w    *Worker
	kc   *kvCache
	rank int
	bs   int
}

// slot is the K (kv 0) or V (kv 1) bytes of token pos in block b, layer l.
func (cw *coWorker) slot(b, pos, l, kv int) []byte {
	reg := cw.kc.regions[2*l+kv]
	off := uint64(b)*reg.BlockBytes + uint64(pos%cw.bs*coSlot)
	return reg.Buf[off : off+coSlot]
}

// write is the forward's K and V of token pos of r in layer l, into block b.
func (cw *coWorker) write(r *coRequest, pos, b, l int) {
	for kv := range 2 {
		coKV(cw.slot(b, pos, l, kv), r.prefix[pos], l, kv, cw.rank)
	}
}

// check reports how token pos of r in block b differs from the KV this
// engine computes for it (nil when every layer's K and V match).
func (cw *coWorker) check(r *coRequest, pos, b int) error {
	want := make([]byte, coSlot)
	for l := range coLayers {
		for kv := range 2 {
			coKV(want, r.prefix[pos], l, kv, cw.rank)
			if got := cw.slot(b, pos, l, kv); string(got) != string(want) {
				return fmt.Errorf("request %s: rank %d token %d (block %d) layer %d %s holds %x, want %x",
					r.id, cw.rank, pos, b, l, [...]string{"K", "V"}[kv], got[:8], want[:8])
			}
		}
	}
	return nil
}

// coSpan is a range of a request's tokens loaded from the pool.
type coSpan struct{ first, n int }

// coEvent is an entry of an engine's log. alloc: a external tokens, flag
// async; verified-load: tokens [a, a+b) checked; load-error: a is the
// first failed block's index; finished: note the status, flag hold.
type coEvent struct {
	kind, req string
	a, b      int
	flag      bool
	note      string
}

// coForward is one scheduled request's work in a step's forward: tokens
// [from, to) into blocks.
type coForward struct {
	r        *coRequest
	from, to int
	blocks   []int
}

// coConfig describes one engine instance.
type coConfig struct {
	model  string         // keys' model name: instances share blocks when equal
	tp     int            // TP size (0: 1)
	budget int            // tokens per step (0: coBudget)
	extra  map[string]any // kv_connector_extra_config
}

// coEngine is the engine loop of one vLLM instance: a scheduler half and
// one worker per TP rank, all state owned by the test goroutine except
// during a step's worker phase, when the workers run concurrently (as
// vLLM's worker processes do) and read only the step's forward list.
type coEngine struct {
	t      testing.TB
	ctx    context.Context
	s      Settings // the scheduler's
	bs     int
	budget int
	sched  *Scheduler
	ws     []*coWorker

	free             []int
	waiting, running []*coRequest
	blocks           map[string][]int
	held             map[string][]int  // blocks of finished requests kept for saves or loads
	ready            map[string]bool   // async loads every worker reported
	loading          map[string]coSpan // async loads in flight (and ready, not yet scheduled)
	syncLoaded       map[string]coSpan // synchronous loads of this step
	done             map[string]*coRequest
	sendCount        map[string]int // workers that reported a request finished-sending
	recvCount        map[string]int // ... finished-receiving
	preemptedNext    []string       // preempted since the previous step
	log              []coEvent
}

// newCoEngine starts an instance over the pool cl (lookups through pc).
func newCoEngine(t *testing.T, cl *localcluster.Cluster, pc *client.Client, cfg coConfig) *coEngine {
	t.Helper()
	tp := max(cfg.tp, 1)
	over := func(rank int) map[string]any {
		return map[string]any{"model": "org/" + cfg.model + "/", "tp_size": tp, "tp_rank": rank, "num_layers": coLayers}
	}
	s := mustSettings(t, KVBoth, cfg.extra, over(0))
	sc, err := newStoreScheduler(s, nil, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	e := &coEngine{
		t: t, ctx: testContext(t), s: s, bs: s.BlockSize, budget: cfg.budget, sched: sc,
		blocks: map[string][]int{}, held: map[string][]int{}, ready: map[string]bool{},
		loading: map[string]coSpan{}, syncLoaded: map[string]coSpan{}, done: map[string]*coRequest{},
		sendCount: map[string]int{}, recvCount: map[string]int{},
	}
	if e.budget == 0 {
		e.budget = coBudget
	}
	for b := 1; b < coBlocks; b++ {
		e.free = append(e.free, b)
	}
	regionBytes := uint64(s.BlockSize * coSlot)
	sizes := make([]uint64, 2*coLayers)
	for i := range sizes {
		sizes[i] = regionBytes
	}
	for rank := range tp {
		kc := newKVCache(t, 100+rank, coBlocks, sizes...) // arbitrary bytes, as fresh GPU memory
		for i := range kc.regions {
			kc.regions[i].Layer = i / 2
		}
		w := newWorker(mustSettings(t, KVBoth, cfg.extra, over(rank)), poolOpener(cl), nil)
		t.Cleanup(func() { w.Close() }) // before the cache is unmapped
		if err := w.RegisterKVCaches(e.ctx, kc.regions); err != nil {
			t.Fatalf("rank %d: RegisterKVCaches: %v", rank, err)
		}
		e.ws = append(e.ws, &coWorker{w: w, kc: kc, rank: rank, bs: s.BlockSize})
	}
	return e
}

// add queues a request.
func (e *coEngine) add(id string, prompt []int64, maxTokens int) *coRequest {
	r := newCoRequest(id, prompt, maxTokens, e.bs)
	e.waiting = append(e.waiting, r)
	return r
}

// alloc takes n blocks from the free list (false when too few are free).
func (e *coEngine) alloc(n int) ([]int, bool) {
	if n > len(e.free) {
		return nil, false
	}
	out := slices.Clone(e.free[:n])
	e.free = e.free[n:]
	return out, true
}

func coCeil(a, b int) int { return (a + b - 1) / b }

// abort aborts a waiting or running request (vLLM: abort_requests).
func (e *coEngine) abort(id string) {
	for _, q := range []*[]*coRequest{&e.waiting, &e.running} {
		if i := slices.IndexFunc(*q, func(r *coRequest) bool { return r.id == id }); i >= 0 {
			r := (*q)[i]
			*q = slices.Delete(*q, i, i+1)
			loading := r.status == coWaitingForRemoteKVs && !e.ready[id]
			r.status = coAborted
			e.finish(r, loading)
			return
		}
	}
	e.t.Fatalf("abort: no request %q", id)
}

// finish frees a finished request (request_finished): its blocks are held
// while the connector saves them, or while its async load still runs.
func (e *coEngine) finish(r *coRequest, loading bool) {
	blocks := e.blocks[r.id]
	delete(e.blocks, r.id)
	res, err := e.sched.RequestFinished(FinishArgs{ReqID: r.id, BlockIDs: blocks, LengthCapped: r.status == coLengthCapped})
	if err != nil {
		e.t.Fatalf("RequestFinished(%s): %v", r.id, err)
	}
	if res.Hold && loading {
		e.t.Fatalf("request %s holds blocks for saves while its load runs", r.id)
	}
	delete(e.loading, r.id)
	delete(e.ready, r.id)
	e.log = append(e.log, coEvent{kind: "finished", req: r.id, flag: res.Hold, note: r.status.String()})
	if res.Hold || loading {
		e.held[r.id] = blocks
	} else {
		e.free = append(e.free, blocks...)
	}
	e.done[r.id] = r
}

// preempt preempts a running request as vLLM does when blocks run out
// (reported in the next step, which schedules no waiting request): its
// blocks go back in reverse order (as vLLM frees them), at the front of
// the free list so that they are reused first (by the request itself when
// it resumes: its tokens then land in other blocks than before), its
// progress resets, and it waits at the head of the queue.
func (e *coEngine) preempt(id string) {
	i := slices.IndexFunc(e.running, func(r *coRequest) bool { return r.id == id })
	if i < 0 {
		e.t.Fatalf("preempt: %q is not running", id)
	}
	r := e.running[i]
	e.running = slices.Delete(e.running, i, i+1)
	freed := slices.Clone(e.blocks[id])
	slices.Reverse(freed)
	e.free = append(freed, e.free...)
	delete(e.blocks, id)
	r.status, r.computed, r.resumed = coPreempted, 0, true
	e.waiting = slices.Insert(e.waiting, 0, r)
	e.preemptedNext = append(e.preemptedNext, id)
	e.log = append(e.log, coEvent{kind: "preempted", req: id})
}

// step runs one engine step: schedule, build the connector metadata (as
// the shim's build_connector_meta), run every worker (handle_preemptions,
// start_load_kv, per layer wait_for_layer_load / forward / save_kv_layer,
// wait_for_save, get_finished), then apply the outputs. beforeBuild, when
// set, runs between scheduling and build_connector_meta. It returns the
// tokens scheduled.
func (e *coEngine) step(beforeBuild func(*coEngine)) int {
	t, bs := e.t, e.bs
	t.Helper()
	preempted := e.preemptedNext
	e.preemptedNext = nil
	budget := e.budget
	var order, newReqs, cached []string // scheduled requests; new ones; cached (continuing or resumed) ones
	numSched := map[string]int{}
	computedAt := map[string]int{} // num_computed_tokens in the scheduler output
	resumed := map[string]bool{}
	schedule := func(r *coRequest, n int, isNew bool) {
		budget -= n
		numSched[r.id], computedAt[r.id] = n, r.computed
		order = append(order, r.id)
		if isNew {
			newReqs = append(newReqs, r.id)
		} else {
			cached = append(cached, r.id)
		}
	}

	// Running requests first: a decode token or the next prefill chunk.
	for _, r := range slices.Clone(e.running) {
		n := min(r.numTokens()-r.computed, budget)
		if n <= 0 {
			continue
		}
		more, ok := e.alloc(max(coCeil(r.computed+n, bs)-len(e.blocks[r.id]), 0))
		if !ok {
			continue
		}
		e.blocks[r.id] = append(e.blocks[r.id], more...)
		schedule(r, n, false)
	}
	// Then the waiting queue, unless this step preempted (as vLLM, which
	// resumes a preempted request in a later step).
	for _, r := range slices.Clone(e.waiting) {
		if budget <= 0 || len(preempted) > 0 {
			break
		}
		if r.status == coWaitingForRemoteKVs {
			if !e.ready[r.id] {
				continue // its load still runs
			}
			sp := e.loading[r.id]
			computed := sp.first + sp.n
			if computed >= r.numTokens() {
				computed = r.numTokens() - 1 // a full-prompt hit: the last token is computed again
			}
			n := min(r.numTokens()-computed, budget)
			more, ok := e.alloc(max(coCeil(computed+n, bs)-len(e.blocks[r.id]), 0))
			if !ok {
				break
			}
			delete(e.ready, r.id)
			delete(e.loading, r.id)
			r.computed = computed
			e.blocks[r.id] = append(e.blocks[r.id], more...)
			e.checkLoaded(r, sp.first, sp.n)
			e.waiting = slices.DeleteFunc(e.waiting, func(x *coRequest) bool { return x == r })
			e.running = append(e.running, r)
			r.status = coRunning
			schedule(r, n, true)
			continue
		}
		ext, async, err := e.sched.Lookup(e.ctx, LookupArgs{ReqID: r.id, Hashes: r.hashes, NumTokens: r.numTokens()})
		if err != nil {
			t.Fatalf("Lookup(%s): %v", r.id, err)
		}
		switch {
		case ext%bs != 0:
			t.Fatalf("Lookup(%s) = %d tokens: not whole blocks", r.id, ext)
		case ext > 0 && !async && ext >= r.numTokens():
			t.Fatalf("Lookup(%s) = %d of %d tokens, synchronously: a sync load claimed every token", r.id, ext, r.numTokens())
		case ext > r.numTokens():
			t.Fatalf("Lookup(%s) = %d of %d tokens", r.id, ext, r.numTokens())
		}
		n := 0
		if !async {
			n = min(r.numTokens()-ext, budget)
		}
		ids, ok := e.alloc(coCeil(ext+n, bs))
		if !ok {
			break
		}
		e.blocks[r.id] = ids
		if err := e.sched.UpdateAfterAlloc(AllocArgs{ReqID: r.id, BlockIDs: ids, UnhashedBlockIDs: ids, NumExternalTokens: ext}); err != nil {
			t.Fatalf("UpdateAfterAlloc(%s): %v", r.id, err)
		}
		e.log = append(e.log, coEvent{kind: "alloc", req: r.id, a: ext, flag: async})
		wasResumed := r.resumed
		r.resumed = false
		if async {
			r.status = coWaitingForRemoteKVs
			e.loading[r.id] = coSpan{0, ext}
			continue
		}
		e.waiting = slices.DeleteFunc(e.waiting, func(x *coRequest) bool { return x == r })
		e.running = append(e.running, r)
		r.status, r.computed = coRunning, ext
		if ext > 0 {
			e.syncLoaded[r.id] = coSpan{0, ext}
		}
		if wasResumed {
			resumed[r.id] = true // vLLM lists a resumed request among the cached ones
		}
		schedule(r, n, !wasResumed)
	}

	if beforeBuild != nil {
		beforeBuild(e)
		for _, id := range order {
			if e.done[id] != nil {
				t.Fatalf("beforeBuild finished the scheduled request %s", id)
			}
		}
	}
	meta := e.buildMeta(preempted, newReqs, cached, resumed, numSched, computedAt)

	// The workers, concurrently.
	var fw []coForward
	for _, id := range order {
		r := e.runningReq(id)
		fw = append(fw, coForward{r: r, from: r.computed, to: r.computed + numSched[id], blocks: slices.Clone(e.blocks[id])})
	}
	outs := make([]Finished, len(e.ws))
	errs := make([]error, len(e.ws))
	var wg sync.WaitGroup
	for i, cw := range e.ws {
		wg.Go(func() { outs[i], errs[i] = e.workerStep(cw, meta, preempted, fw) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}

	// A request counts as finished-sending (receiving) once every worker
	// reported it; failed blocks are the union.
	var finSend, finRecv []string
	failed := map[int]bool{}
	for _, f := range outs {
		for _, id := range f.Sending {
			if e.sendCount[id]++; e.sendCount[id] == len(e.ws) {
				delete(e.sendCount, id)
				finSend = append(finSend, id)
			}
		}
		for _, id := range f.Recving {
			if e.recvCount[id]++; e.recvCount[id] == len(e.ws) {
				delete(e.recvCount, id)
				finRecv = append(finRecv, id)
			}
		}
		for _, b := range f.FailedBlocks {
			failed[b] = true
		}
	}
	e.update(order, numSched, finSend, finRecv, failed)
	n := 0
	for _, k := range numSched {
		n += k
	}
	return n
}

// buildMeta is the shim's build_connector_meta: it plans the saves of
// every scheduled request up to the end of this step, reports the
// preempted and resumed requests, and builds the metadata.
func (e *coEngine) buildMeta(preempted, newReqs, cached []string, resumed map[string]bool, numSched, computedAt map[string]int) []byte {
	pre := slices.Clone(preempted)
	plan := func(id string) {
		r := e.runningReq(id)
		if _, err := e.sched.PlanSave(SaveArgs{
			ReqID: id, Hashes: r.hashes, BlockIDs: e.blocks[id],
			NumComputedTokens: computedAt[id] + numSched[id], NumPromptTokens: r.numPrompt,
		}); err != nil {
			e.t.Fatalf("PlanSave(%s): %v", id, err)
		}
	}
	for _, id := range newReqs {
		plan(id)
	}
	for _, id := range cached {
		if resumed[id] && !slices.Contains(pre, id) {
			pre = append(pre, id)
		}
		plan(id)
	}
	if len(pre) > 0 {
		sort.Strings(pre)
		e.sched.Preempted(pre)
	}
	meta, err := e.sched.BuildMeta()
	if err != nil {
		e.t.Fatalf("BuildMeta: %v", err)
	}
	return meta
}

// workerStep is one rank's part of a step.
func (e *coEngine) workerStep(cw *coWorker, meta []byte, preempted []string, fw []coForward) (Finished, error) {
	w := cw.w
	if len(preempted) > 0 {
		if err := w.HandlePreemptions(e.ctx, preempted); err != nil {
			return Finished{}, fmt.Errorf("HandlePreemptions: %w", err)
		}
	}
	if err := w.StartLoad(e.ctx, meta); err != nil {
		return Finished{}, fmt.Errorf("StartLoad: %w", err)
	}
	if len(fw) > 0 {
		// The forward, layer by layer as vLLM's attention layers run.
		for l := range coLayers {
			if err := w.WaitLayerLoad(e.ctx, l); err != nil {
				return Finished{}, fmt.Errorf("WaitLayerLoad(%d): %w", l, err)
			}
			for _, f := range fw {
				for pos := f.from; pos < f.to; pos++ {
					cw.write(f.r, pos, f.blocks[pos/cw.bs], l)
				}
			}
			w.SaveLayer(l)
		}
		if err := w.WaitForSave(); err != nil {
			return Finished{}, fmt.Errorf("WaitForSave: %w", err)
		}
	}
	f, err := w.GetFinished()
	if err != nil {
		return f, fmt.Errorf("GetFinished: %w", err)
	}
	return f, nil
}

// update applies a step's outputs (vLLM: update_from_output).
func (e *coEngine) update(order []string, numSched map[string]int, finSend, finRecv []string, failed map[int]bool) {
	t, bs := e.t, e.bs
	t.Helper()
	// Failed blocks first ("recompute"): progress goes back to the first
	// failed block.
	for _, r := range slices.Concat(e.running, e.waiting) {
		bad := slices.IndexFunc(e.blocks[r.id], func(b int) bool { return failed[b] })
		if bad < 0 {
			continue
		}
		e.log = append(e.log, coEvent{kind: "load-error", req: r.id, a: bad})
		if r.status == coWaitingForRemoteKVs {
			sp := e.loading[r.id]
			sp.n = max(min(sp.n, bad*bs-sp.first), 0)
			e.loading[r.id] = sp
		} else {
			r.computed = min(r.computed, bad*bs)
			delete(numSched, r.id)
		}
	}
	// Synchronous loads: the forward read them; check them now.
	for id, sp := range e.syncLoaded {
		delete(e.syncLoaded, id)
		if r := e.findRunning(id); r != nil {
			e.checkLoaded(r, sp.first, max(min(sp.n, r.computed-sp.first), 0))
		}
	}
	for _, id := range finRecv {
		if blocks, ok := e.held[id]; ok && e.done[id] != nil { // aborted while loading
			delete(e.held, id)
			e.free = append(e.free, blocks...)
			e.log = append(e.log, coEvent{kind: "recv-after-finish", req: id})
			continue
		}
		if _, ok := e.loading[id]; !ok {
			t.Fatalf("finished-receiving %s: no load of it in flight", id)
		}
		e.ready[id] = true
		e.log = append(e.log, coEvent{kind: "recv", req: id})
	}
	for _, id := range finSend {
		blocks, ok := e.held[id]
		if !ok {
			t.Fatalf("finished-sending %s: its blocks are not held", id)
		}
		delete(e.held, id)
		e.free = append(e.free, blocks...)
		e.log = append(e.log, coEvent{kind: "sent", req: id})
	}
	for _, id := range order {
		n, ok := numSched[id]
		if !ok {
			continue
		}
		r := e.runningReq(id)
		r.computed += n
		if r.computed < r.numTokens() {
			continue
		}
		r.append(int64(100000+r.output), bs) // sampled a token
		r.output++
		if r.output >= r.maxTokens {
			e.running = slices.DeleteFunc(e.running, func(x *coRequest) bool { return x == r })
			r.status = coLengthCapped
			e.verifyAll(r)
			e.finish(r, false)
		}
	}
}

// findRunning returns the running request id, or nil.
func (e *coEngine) findRunning(id string) *coRequest {
	if i := slices.IndexFunc(e.running, func(r *coRequest) bool { return r.id == id }); i >= 0 {
		return e.running[i]
	}
	return nil
}

// runningReq is findRunning for a request that must be running.
func (e *coEngine) runningReq(id string) *coRequest {
	r := e.findRunning(id)
	if r == nil {
		e.t.Fatalf("request %s is not running", id)
	}
	return r
}

// checkLoaded checks that tokens [first, first+n) of r hold, on every
// rank, the KV this engine computes for them.
func (e *coEngine) checkLoaded(r *coRequest, first, n int) {
	e.t.Helper()
	for _, cw := range e.ws {
		for pos := first; pos < first+n; pos++ {
			if err := cw.check(r, pos, e.blocks[r.id][pos/e.bs]); err != nil {
				e.t.Fatalf("after the load: %v", err)
			}
		}
	}
	e.log = append(e.log, coEvent{kind: "verified-load", req: r.id, a: first, b: n})
}

// verifyAll checks, at a request's end, every token with KV in its blocks
// (all but the last sampled one) on every rank.
func (e *coEngine) verifyAll(r *coRequest) {
	e.t.Helper()
	for _, cw := range e.ws {
		for pos := range r.numTokens() - 1 {
			if err := cw.check(r, pos, e.blocks[r.id][pos/e.bs]); err != nil {
				e.t.Fatalf("at the end: %v", err)
			}
		}
	}
}

func (e *coEngine) idle() bool {
	return len(e.waiting)+len(e.running)+len(e.held)+len(e.loading) == 0
}

// run steps until nothing waits, runs or is held, bounded by testTimeout
// (saves and async loads finish on the workers' goroutines: a step that
// schedules nothing waits for the next tick, as collect polls), then
// checks that every block came back and no connector state is left.
func (e *coEngine) run() {
	t := e.t
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(testTimeout)
	for !e.idle() {
		if time.Now().After(deadline) {
			ids := func(rs []*coRequest) (out []string) {
				for _, r := range rs {
					out = append(out, r.id)
				}
				return out
			}
			t.Fatalf("engine did not drain in %v: waiting %v, running %v, held %v, loading %v",
				testTimeout, ids(e.waiting), ids(e.running), e.held, e.loading)
		}
		if e.step(nil) == 0 {
			<-tick.C
		}
	}
	if len(e.free) != coBlocks-1 {
		t.Errorf("%d of %d blocks free after draining", len(e.free), coBlocks-1)
	}
	if n := e.sched.Tracked(); n != 0 {
		t.Errorf("scheduler tracks %d requests after draining", n)
	}
	for _, cw := range e.ws {
		if n := cw.w.Tracked(); n != 0 {
			t.Errorf("rank %d tracks %d requests after draining", cw.rank, n)
		}
	}
}

// allocs returns each request's last allocation: external tokens and
// whether they load asynchronously.
func (e *coEngine) allocs() map[string]coEvent {
	out := map[string]coEvent{}
	for _, ev := range e.log {
		if ev.kind == "alloc" {
			out[ev.req] = ev
		}
	}
	return out
}

// wantAllocs fails t unless every listed request's last allocation took
// ext external tokens, async as listed.
func (e *coEngine) wantAllocs(want map[string]coEvent) {
	e.t.Helper()
	got := e.allocs()
	for id, w := range want {
		if g := got[id]; g.a != w.a || g.flag != w.flag {
			e.t.Errorf("%s: allocation with %d external tokens (async %v), want %d (async %v)", id, g.a, g.flag, w.a, w.flag)
		}
	}
}

// wantLogged fails t unless the log holds every event in evs.
func (e *coEngine) wantLogged(evs ...coEvent) {
	e.t.Helper()
	for _, ev := range evs {
		if !slices.Contains(e.log, ev) {
			e.t.Errorf("log lacks %+v", ev)
		}
	}
}

// stats returns the workers' counters since the previous call, summed.
func (e *coEngine) stats() Stats {
	var s Stats
	for _, cw := range e.ws {
		st := cw.w.TakeStats()
		s.SavedBlocks += st.SavedBlocks
		s.LoadedBlocks += st.LoadedBlocks
		s.FailedBlocks += st.FailedBlocks
	}
	return s
}

// coAlloc is an expected allocation: ext external tokens, async or not.
func coAlloc(ext int, async bool) coEvent { return coEvent{a: ext, flag: async} }

// TestCallOrderSaveThenLoad: instance A computes and saves several
// requests with chunked prefill (and loads a shared prefix from its own
// saves); instance B, with fresh workers on the same pool, gets a
// full-prompt hit, a hit ending where A's prompt ended mid-block, a
// shared-prefix partial hit and a miss, all checked token by token on
// every rank; TP 1 and 2, whole-block and layer-wise.
func TestCallOrderSaveThenLoad(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	pc := newPoolClient(t, cl)
	tests := []struct {
		name      string
		tp        int
		layerwise bool
	}{
		{"tp1", 1, false},
		{"tp2", 2, false},
		{"tp2-layerwise", 2, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := coConfig{model: "co-save-" + tc.name, tp: tc.tp}
			if tc.layerwise {
				cfg.extra = map[string]any{"mc_layerwise": true}
			}
			tp := uint64(tc.tp)
			p1, p2, p3 := coPrompt(1, 20), coPrompt(2, 10), coPrompt(3, 10)

			a := newCoEngine(t, cl, pc, cfg)
			a.add("a1", p1, 2) // 5 full blocks, prefilled over two steps
			a.add("a2", p2, 2) // 2 full blocks and 2 tokens
			a.run()
			a.add("a3", coConcat(p1[:12], coPrompt(4, 5)), 2) // a1's first 3 blocks, then 1 of its own
			a.run()
			a.wantAllocs(map[string]coEvent{"a1": coAlloc(0, false), "a2": coAlloc(0, false), "a3": coAlloc(12, true)})
			a.wantLogged(coEvent{kind: "verified-load", req: "a3", a: 0, b: 12})
			if st := a.stats(); st.SavedBlocks != (5+2+1)*tp || st.LoadedBlocks != 3*tp || st.FailedBlocks != 0 {
				t.Errorf("A: stats %+v, want %d saved, %d loaded, 0 failed", st, (5+2+1)*tp, 3*tp)
			}

			b := newCoEngine(t, cl, pc, cfg)
			b.add("b-full", p1, 2)
			b.add("b-mid", coConcat(p2, coPrompt(5, 3)), 2) // a2 saved 2 of its 3 blocks
			b.add("b-prefix", coConcat(p1[:12], coPrompt(6, 7)), 2)
			b.add("b-miss", p3, 2)
			b.run()
			b.wantAllocs(map[string]coEvent{
				"b-full": coAlloc(20, true), "b-mid": coAlloc(8, true),
				"b-prefix": coAlloc(12, true), "b-miss": coAlloc(0, false),
			})
			b.wantLogged(
				coEvent{kind: "verified-load", req: "b-full", a: 0, b: 20},
				coEvent{kind: "verified-load", req: "b-mid", a: 0, b: 8},
				coEvent{kind: "verified-load", req: "b-prefix", a: 0, b: 12},
			)
			// B saves what A had not: b-mid's third block, b-prefix's
			// fourth, b-miss's two.
			if st := b.stats(); st.LoadedBlocks != (5+2+3)*tp || st.SavedBlocks != 4*tp || st.FailedBlocks != 0 {
				t.Errorf("B: stats %+v, want %d loaded, %d saved, 0 failed", st, (5+2+3)*tp, 4*tp)
			}
		})
	}
}

// TestCallOrderSyncLoad: with load_async false the load completes inside
// the step, never claims a fully cached prompt's last token, and the
// forward reads landed blocks; layer-wise, one object per block and layer
// and the forward waits for each layer only.
func TestCallOrderSyncLoad(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	pc := newPoolClient(t, cl)
	for _, layerwise := range []bool{false, true} {
		t.Run(fmt.Sprintf("layerwise=%v", layerwise), func(t *testing.T) {
			extra := map[string]any{}
			if layerwise {
				extra["mc_layerwise"] = true
			}
			model := fmt.Sprintf("co-sync-%v", layerwise)
			p := coPrompt(10, 16)
			a := newCoEngine(t, cl, pc, coConfig{model: model, extra: extra})
			r := a.add("s1", p, 1)
			a.run()
			key := a.s.Namespace(0, 0).Key(r.hashes[3])
			keys := []string{key}
			for l := range coLayers {
				keys = append(keys, layerKey(key, l))
			}
			found, err := pc.BatchIsExist(testContext(t), keys)
			if err != nil {
				t.Fatal(err)
			}
			for i, ok := range found {
				if want := (i == 0) != layerwise; ok != want {
					t.Errorf("key %s exists: %v, want %v", keys[i], ok, want)
				}
			}

			extra["load_async"] = false
			b := newCoEngine(t, cl, pc, coConfig{model: model, extra: extra})
			b.add("s2", p, 3)
			b.add("s3", coConcat(p[:8], coPrompt(11, 6)), 2)
			b.run()
			b.wantAllocs(map[string]coEvent{"s2": coAlloc(12, false), "s3": coAlloc(8, false)})
			b.wantLogged(
				coEvent{kind: "verified-load", req: "s2", a: 0, b: 12},
				coEvent{kind: "verified-load", req: "s3", a: 0, b: 8},
			)
			if st := b.stats(); st.LoadedBlocks != 5 || st.FailedBlocks != 0 {
				t.Errorf("B: stats %+v, want 5 loaded, 0 failed", st)
			}
		})
	}
}

// TestCallOrderPreemption: a request preempted in the middle of its
// chunked prefill is fenced (while the saves of its blocks may still run,
// or once they landed), resumed with its saved blocks loaded back into
// other blocks (asynchronously, or synchronously as a resumed request),
// and finished right, saving each block once; another instance then loads
// its whole prompt byte-exact.
func TestCallOrderPreemption(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	pc := newPoolClient(t, cl)
	tests := []struct {
		name   string
		landed bool // wait until the saves landed before preempting
		async  bool
	}{
		{"saves in flight", false, true},
		{"saves landed", true, true},
		{"sync resume", false, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := coConfig{model: fmt.Sprintf("co-preempt-%d", i), budget: 8, extra: map[string]any{"load_async": tc.async}}
			p := coPrompt(20, 24)
			a := newCoEngine(t, cl, pc, cfg)
			r := a.add("p1", p, 2)
			a.step(nil)
			a.step(nil) // 16 of 24 tokens computed, 4 blocks planned for saving
			if r.computed != 16 {
				t.Fatalf("p1: %d tokens computed after two steps, want 16", r.computed)
			}
			if tc.landed {
				coAwaitKeys(t, pc, a.s.Namespace(0, 0).Keys(r.hashes[:4]))
			}
			a.preempt("p1")
			a.run()
			// The fence completed the saves before the resumed lookup.
			a.wantAllocs(map[string]coEvent{"p1": coAlloc(16, tc.async)})
			a.wantLogged(
				coEvent{kind: "preempted", req: "p1"},
				coEvent{kind: "verified-load", req: "p1", a: 0, b: 16},
				coEvent{kind: "finished", req: "p1", flag: true, note: "FINISHED_LENGTH_CAPPED"},
			)
			if st := a.stats(); st.SavedBlocks != 6 || st.LoadedBlocks != 4 || st.FailedBlocks != 0 {
				t.Errorf("A: stats %+v, want 6 saved, 4 loaded, 0 failed", st)
			}

			cfg.budget = 0
			b := newCoEngine(t, cl, pc, cfg)
			b.add("p2", p, 1)
			b.run()
			b.wantAllocs(map[string]coEvent{"p2": coAlloc(24-4*btoi(!tc.async), tc.async)})
			b.wantLogged(coEvent{kind: "verified-load", req: "p2", a: 0, b: 24 - 4*btoi(!tc.async)})
		})
	}
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// coAwaitKeys polls the pool, once a millisecond, until every key is
// there or testTimeout passes (then t fails).
func coAwaitKeys(t *testing.T, pc *client.Client, keys []string) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(testTimeout)
	for {
		found, err := pc.BatchIsExist(testContext(t), keys)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(found, false) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys %v: present %v after %v", keys, found, testTimeout)
		}
		<-tick.C
	}
}

// TestCallOrderAbortWhileLoading: a request aborted in the step its async
// load is planned is still reported finished-receiving, and only then do
// its blocks come back.
func TestCallOrderAbortWhileLoading(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	pc := newPoolClient(t, cl)
	p := coPrompt(30, 16)
	a := newCoEngine(t, cl, pc, coConfig{model: "co-abort"})
	a.add("x1", p, 1)
	a.run()

	b := newCoEngine(t, cl, pc, coConfig{model: "co-abort"})
	b.add("x2", p, 4)
	b.step(func(e *coEngine) {
		e.abort("x2")
		if _, ok := e.held["x2"]; !ok {
			t.Error("x2's blocks were freed while its load may still write them")
		}
	})
	b.run()
	b.wantAllocs(map[string]coEvent{"x2": coAlloc(16, true)})
	b.wantLogged(
		coEvent{kind: "finished", req: "x2", note: "FINISHED_ABORTED"},
		coEvent{kind: "recv-after-finish", req: "x2"},
	)
}

// TestCallOrderFailedLoad: a block that leaves the pool between the lookup
// and the step's metadata comes back in FailedBlocks (an async load's in
// the step its request is reported finished-receiving, or before; a
// synchronous load's in its own step), the engine recomputes from that
// block and the end result is right: a whole-block key, one layer of a
// layer-wise block (async and synchronous), and one TP shard's key (only
// that rank fails).
func TestCallOrderFailedLoad(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	pc := newPoolClient(t, cl)
	blockKey := func(s Settings, h []byte) string { return s.Namespace(0, 0).Key(h) }
	layerKey1 := func(s Settings, h []byte) string { return layerKey(s.Namespace(0, 0).Key(h), 1) }
	tests := []struct {
		name       string
		tp         int
		extra      map[string]any
		key        func(s Settings, hash []byte) string
		wantLoaded uint64
	}{
		{"block", 1, nil, blockKey, 4},
		{"layer", 1, map[string]any{"mc_layerwise": true}, layerKey1, 4},
		{"layer-sync", 1, map[string]any{"mc_layerwise": true, "load_async": false}, layerKey1, 3},
		{"tp-shard", 2, nil, func(s Settings, h []byte) string { return s.Namespace(1, 0).Key(h) }, 5 + 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := coConfig{model: "co-fail-" + tc.name, tp: tc.tp, extra: tc.extra}
			p := coPrompt(40, 20)
			a := newCoEngine(t, cl, pc, cfg)
			a.add("f1", p, 1)
			a.run()

			b := newCoEngine(t, cl, pc, cfg)
			r := b.add("f2", p, 2)
			key := tc.key(b.s, r.hashes[2])
			b.step(func(e *coEngine) {
				if err := pc.Remove(e.ctx, key, true); err != nil {
					t.Fatalf("remove %s: %v", key, err)
				}
			})
			b.run()
			async := b.s.LoadAsync
			ext := 20 // a synchronous load leaves the last block's last token
			if !async {
				ext = 16
			}
			b.wantAllocs(map[string]coEvent{"f2": coAlloc(ext, async)})
			b.wantLogged(
				coEvent{kind: "load-error", req: "f2", a: 2},
				coEvent{kind: "verified-load", req: "f2", a: 0, b: 8},
			)
			if got := slices.Contains(b.log, coEvent{kind: "recv", req: "f2"}); got != async {
				t.Errorf("f2 reported finished-receiving: %v, want %v", got, async)
			}
			if st := b.stats(); st.FailedBlocks != 1 || st.LoadedBlocks != tc.wantLoaded {
				t.Errorf("B: stats %+v, want 1 failed, %d loaded", st, tc.wantLoaded)
			}
		})
	}
}
