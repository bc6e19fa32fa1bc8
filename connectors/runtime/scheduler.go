package runtime

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/core/kvpool"
)

// SchedulerConfig configures the scheduler half.
type SchedulerConfig struct {
	// Shards are the namespaces whose objects must all be present for a
	// block to count as a hit: one per TP shard (and PP stage) of the
	// engine, or one with SharedMLA set. All must share BlockTokens.
	// Required.
	Shards []kvpool.Namespace
	// Exister answers the existence checks; required.
	// core/store/client.Client fits.
	Exister kvpool.Exister
	// SyncLoad makes loads complete inside the step that schedules them;
	// the default (false) loads asynchronously across steps, as
	// MooncakeStoreConnector's load_async. A synchronous lookup never
	// claims every prompt token (the engine must compute at least one).
	SyncLoad bool
	// NoSave disables saving (a kv_consumer instance).
	NoSave bool
	// LookupTimeout bounds one Lookup's existence check; default 5s.
	LookupTimeout time.Duration
}

// Validate reports the first problem with c as an error matching
// ErrInvalidConfig.
func (c SchedulerConfig) Validate() error {
	switch {
	case len(c.Shards) == 0:
		return fmt.Errorf("%w: no Shards", ErrInvalidConfig)
	case c.Exister == nil:
		return fmt.Errorf("%w: nil Exister", ErrInvalidConfig)
	case c.LookupTimeout < 0:
		return fmt.Errorf("%w: LookupTimeout %v", ErrInvalidConfig, c.LookupTimeout)
	}
	for i, ns := range c.Shards {
		if err := ns.Validate(); err != nil {
			return fmt.Errorf("%w: shard %d: %w", ErrInvalidConfig, i, err)
		}
		if ns.BlockTokens != c.Shards[0].BlockTokens {
			return fmt.Errorf("%w: shard %d has BlockTokens %d, shard 0 %d", ErrInvalidConfig, i, ns.BlockTokens, c.Shards[0].BlockTokens)
		}
	}
	return nil
}

// LookupRequest is what the scheduler half knows about a waiting request
// (vLLM: get_num_new_matched_tokens).
type LookupRequest struct {
	ReqID string
	// BlockHashes are the engine's chained hashes of the request's full
	// blocks, in order.
	BlockHashes [][]byte
	// NumTokens is the request's token count (prompt, plus output after a
	// preemption).
	NumTokens int
	// NumComputedTokens is the engine's local prefix-cache hit, in whole
	// blocks.
	NumComputedTokens int
}

// LookupResult answers a LookupRequest.
type LookupResult struct {
	// Tokens the pool can supply beyond NumComputedTokens, in whole
	// blocks; 0 for none.
	Tokens int
	// Async reports that the load completes across steps (false when
	// Tokens is 0).
	Async bool
}

// SaveRequest tells the scheduler half how far a running request has
// got by the end of this step.
type SaveRequest struct {
	ReqID       string
	BlockHashes [][]byte // hashes of the request's full blocks so far
	BlockIDs    []int    // the request's engine blocks, in order
	// NumComputedTokens is the tokens whose KV will be in the engine's
	// blocks once this step ran.
	NumComputedTokens int
}

// Scheduler is the engine-neutral scheduler half of a KV connector: it
// answers lookups, turns allocations into loads and progress into saves,
// and builds one Plan per engine step. It is safe for concurrent use; the
// existence check runs without its lock held.
type Scheduler struct {
	cfg SchedulerConfig
	bt  int // block size in tokens

	// mu guards the fields below it.
	mu sync.Mutex
	// lookups holds the last lookup answer per request until the
	// allocation or the finish.
	lookups map[string]lookupEntry
	// reqs holds the save progress per request until it finishes.
	reqs map[string]*reqTrack
	// plan accumulates this step's work.
	plan Plan
}

type lookupEntry struct {
	hashes   [][]byte
	local    int // local hit, blocks
	poolHit  int // blocks known present in the pool (prefix)
	extBlock int // blocks offered beyond the local hit
	async    bool
}

type reqTrack struct {
	saved     int // blocks saved or known in the pool, from the first
	saveCount int // saves planned for the request
}

// NewScheduler returns the scheduler half for cfg.
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.LookupTimeout == 0 {
		cfg.LookupTimeout = DefaultLookupTimeout
	}
	cfg.Shards = slices.Clone(cfg.Shards)
	return &Scheduler{
		cfg:     cfg,
		bt:      cfg.Shards[0].BlockTokens,
		lookups: make(map[string]lookupEntry),
		reqs:    make(map[string]*reqTrack),
	}, nil
}

// Lookup answers how many tokens beyond the local hit the pool can supply
// now, in whole blocks: it checks, in one BatchIsExist call bounded by ctx
// and LookupTimeout, the keys of every shard for the blocks past the local
// hit, and counts the leading blocks present on every shard. A block
// hashed from a partial block never exists (engines hash full blocks
// only), so a hit ends on a block boundary. With SyncLoad a hit covering
// every token is cut back to leave the last one to compute. Lookup may be
// called again for the same request (the last answer counts); its only
// state is that answer, dropped at UpdateAfterAlloc or RequestFinished.
// On error the result is zero (compute everything).
func (s *Scheduler) Lookup(ctx context.Context, r LookupRequest) (LookupResult, error) {
	bt := s.bt
	if r.NumComputedTokens < 0 || r.NumComputedTokens%bt != 0 || r.NumTokens < r.NumComputedTokens {
		return LookupResult{}, fmt.Errorf("%w: request %q: %d computed of %d tokens, block size %d",
			ErrInvalidRequest, r.ReqID, r.NumComputedTokens, r.NumTokens, bt)
	}
	usable := min(len(r.BlockHashes), r.NumTokens/bt)
	local := r.NumComputedTokens / bt
	hit := local
	if usable > local {
		n, err := s.present(ctx, r.BlockHashes[local:usable])
		if err != nil {
			return LookupResult{}, fmt.Errorf("runtime: lookup of request %q: %w", r.ReqID, err)
		}
		hit = local + n
	}
	poolHit := hit
	if s.cfg.SyncLoad && hit*bt >= r.NumTokens {
		hit = (r.NumTokens - 1) / bt
	}
	ext := max(hit-local, 0)
	res := LookupResult{Tokens: ext * bt, Async: ext > 0 && !s.cfg.SyncLoad}
	s.mu.Lock()
	s.lookups[r.ReqID] = lookupEntry{
		hashes:   slices.Clone(r.BlockHashes[:usable]),
		local:    local,
		poolHit:  poolHit,
		extBlock: ext,
		async:    res.Async,
	}
	s.mu.Unlock()
	return res, nil
}

// presentChunk bounds one existence check to this many blocks (times the
// shards): a long prompt's keys would not fit in one master RPC (about 35k
// blocks of 100-byte keys exceed gRPC's 4 MiB), and a chunk that misses
// ends the prefix without asking about the rest.
const presentChunk = 1024

// present returns how many leading hashes have an object on every shard.
func (s *Scheduler) present(ctx context.Context, hashes [][]byte) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.LookupTimeout)
	defer cancel()
	done := 0
	for done < len(hashes) {
		chunk := hashes[done:min(done+presentChunk, len(hashes))]
		n, err := s.presentChunk(ctx, chunk)
		if err != nil {
			return 0, err
		}
		done += n
		if n < len(chunk) {
			break
		}
	}
	return done, nil
}

// presentChunk is present for at most presentChunk hashes, in one call.
func (s *Scheduler) presentChunk(ctx context.Context, hashes [][]byte) (int, error) {
	shards := len(s.cfg.Shards)
	keys := make([]string, 0, len(hashes)*shards)
	for _, ns := range s.cfg.Shards {
		keys = append(keys, ns.Keys(hashes)...)
	}
	found, err := s.cfg.Exister.BatchIsExist(ctx, keys)
	if err != nil {
		return 0, fmt.Errorf("existence check of %d keys from %q: %w", len(keys), keys[0], err)
	}
	if len(found) != len(keys) {
		return 0, fmt.Errorf("existence check of %d keys from %q answered %d", len(keys), keys[0], len(found))
	}
	for b := range hashes {
		for sh := range shards {
			if !found[sh*len(hashes)+b] {
				return b, nil
			}
		}
	}
	return len(hashes), nil
}

// UpdateAfterAlloc records the engine's allocation for a request (vLLM:
// update_state_after_alloc): blockIDs are all of the request's blocks
// (local hit first) and numExternalTokens what the engine accepted from
// the last Lookup. A non-zero count plans a load of the offered blocks
// into blockIDs in this step's plan. 0 loads nothing: right after a
// Lookup it also drops a load of the request not yet in a built plan; a
// later call without a new Lookup (vLLM calls again for an async load's
// extra blocks) changes nothing.
func (s *Scheduler) UpdateAfterAlloc(reqID string, blockIDs []int, numExternalTokens int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ent, ok := s.lookups[reqID]
	delete(s.lookups, reqID)
	tr := s.trackLocked(reqID)
	if ok {
		tr.saved = max(tr.saved, ent.poolHit)
	}
	if numExternalTokens == 0 {
		if ok { // the engine declined this lookup's offer
			s.plan.Loads = slices.DeleteFunc(s.plan.Loads, func(l LoadSpec) bool { return l.ReqID == reqID })
		}
		return nil
	}
	switch {
	case !ok:
		return fmt.Errorf("%w: request %q: %d external tokens without a lookup", ErrInvalidRequest, reqID, numExternalTokens)
	case numExternalTokens != ent.extBlock*s.bt:
		return fmt.Errorf("%w: request %q: %d external tokens, lookup offered %d", ErrInvalidRequest, reqID, numExternalTokens, ent.extBlock*s.bt)
	case len(blockIDs) < ent.local+ent.extBlock:
		return fmt.Errorf("%w: request %q: %d block ids for %d local and %d external blocks", ErrInvalidRequest, reqID, len(blockIDs), ent.local, ent.extBlock)
	}
	lo, hi := ent.local, ent.local+ent.extBlock
	s.plan.Loads = append(s.plan.Loads, LoadSpec{
		ReqID:    reqID,
		Hashes:   ent.hashes[lo:hi],
		BlockIDs: slices.Clone(blockIDs[lo:hi]),
		Async:    ent.async,
	})
	return nil
}

func (s *Scheduler) trackLocked(reqID string) *reqTrack {
	tr := s.reqs[reqID]
	if tr == nil {
		tr = &reqTrack{}
		s.reqs[reqID] = tr
	}
	return tr
}

// PlanSave plans saving the request's blocks that are full by the end of
// this step and not yet saved (or known in the pool). It returns the
// number of blocks planned. Nothing is planned with NoSave.
func (s *Scheduler) PlanSave(r SaveRequest) (int, error) {
	if s.cfg.NoSave {
		return 0, nil
	}
	if r.NumComputedTokens < 0 {
		return 0, fmt.Errorf("%w: request %q: %d computed tokens", ErrInvalidRequest, r.ReqID, r.NumComputedTokens)
	}
	full := min(len(r.BlockHashes), r.NumComputedTokens/s.bt, len(r.BlockIDs))
	s.mu.Lock()
	defer s.mu.Unlock()
	tr := s.trackLocked(r.ReqID)
	if full <= tr.saved {
		return 0, nil
	}
	s.plan.Saves = append(s.plan.Saves, SaveSpec{
		ReqID:    r.ReqID,
		Hashes:   slices.Clone(r.BlockHashes[tr.saved:full]),
		BlockIDs: slices.Clone(r.BlockIDs[tr.saved:full]),
	})
	n := full - tr.saved
	tr.saved = full
	tr.saveCount++
	return n, nil
}

// RequestPreempted resets a preempted request's progress: its blocks
// were freed, so it will be looked up and saved afresh. (The worker half
// fences the request's in-flight saves: Worker.HandlePreemptions.)
func (s *Scheduler) RequestPreempted(reqID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.lookups, reqID)
	if tr := s.reqs[reqID]; tr != nil {
		tr.saved = 0
	}
}

// RequestFinished forgets a finished (or aborted) request and tells the
// workers in the next plan. It returns true when saves were planned for
// the request: the engine must then keep its blocks until every worker
// reports the request in finishedSending. A load already planned is not
// withdrawn; the worker cancels it and still reports it finished.
func (s *Scheduler) RequestFinished(reqID string) (holdBlocks bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.lookups, reqID)
	tr := s.reqs[reqID]
	delete(s.reqs, reqID)
	s.plan.Finished = append(s.plan.Finished, reqID)
	return tr != nil && tr.saveCount > 0
}

// BuildPlan returns this step's plan and starts an empty one (vLLM:
// build_connector_meta).
func (s *Scheduler) BuildPlan() Plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.plan
	s.plan = Plan{}
	return p
}

// Tracked returns the number of requests with scheduler-side state.
func (s *Scheduler) Tracked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.reqs)
	for id := range s.lookups {
		if s.reqs[id] == nil {
			n++
		}
	}
	return n
}
