package vllm

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/connectors/poolclient"
	"github.com/mooncake-go/mooncake/connectors/runtime"
	"github.com/mooncake-go/mooncake/core/kvpool"
)

// Params are the kv_transfer_params keys the connector reads (spec
// section 6): set by the proxy on the way in, returned by the producer's
// request_finished on the way out.
type Params struct {
	DoRemotePrefill     bool   `json:"do_remote_prefill"`
	DoRemoteDecode      bool   `json:"do_remote_decode"`
	TransferID          string `json:"transfer_id,omitempty"`
	RemoteBootstrapAddr string `json:"remote_bootstrap_addr,omitempty"`
	RemoteEngineID      string `json:"remote_engine_id,omitempty"`
	RemoteHost          string `json:"remote_host,omitempty"`
	RemotePort          int    `json:"remote_port,omitempty"`
}

// bootstrap is the consumer's view of where the producer's bootstrap
// server is: remote_bootstrap_addr, else http://remote_host:remote_port.
func (p *Params) bootstrap() string {
	if p.RemoteBootstrapAddr != "" {
		return p.RemoteBootstrapAddr
	}
	if p.RemoteHost != "" && p.RemotePort > 0 {
		return "http://" + net.JoinHostPort(p.RemoteHost, strconv.Itoa(p.RemotePort))
	}
	return ""
}

// LookupArgs is get_num_new_matched_tokens' input.
type LookupArgs struct {
	ReqID string `json:"req_id"`
	// Hashes are request.block_hashes (full blocks only), in order.
	Hashes [][]byte `json:"hashes"`
	// NumTokens is request.num_tokens; NumComputedTokens the local hit.
	NumTokens         int `json:"num_tokens"`
	NumComputedTokens int `json:"num_computed_tokens"`
	// Params is request.kv_transfer_params (nil for none).
	Params *Params `json:"params"`
}

// AllocArgs is update_state_after_alloc's input.
type AllocArgs struct {
	ReqID string `json:"req_id"`
	// BlockIDs are blocks.get_block_ids()[0]: every block of the request,
	// local hit first. UnhashedBlockIDs are get_unhashed_block_ids(): the
	// blocks not served by the local prefix cache (P/D receive targets).
	BlockIDs          []int   `json:"block_ids"`
	UnhashedBlockIDs  []int   `json:"unhashed_block_ids"`
	NumExternalTokens int     `json:"num_external_tokens"`
	Params            *Params `json:"params"`
}

// SaveArgs describes a running request at the end of a step (for
// build_connector_meta): its hashes and blocks so far and the tokens whose
// KV this step's forward leaves in the blocks.
type SaveArgs struct {
	ReqID             string   `json:"req_id"`
	Hashes            [][]byte `json:"hashes"`
	BlockIDs          []int    `json:"block_ids"`
	NumComputedTokens int      `json:"num_computed_tokens"`
	// NumPromptTokens caps what is saved unless save_decode_cache is set
	// (upstream saves the prefill range only).
	NumPromptTokens int `json:"num_prompt_tokens"`
}

// FinishArgs is request_finished's input.
type FinishArgs struct {
	ReqID    string `json:"req_id"`
	BlockIDs []int  `json:"block_ids"`
	// LengthCapped is status == FINISHED_LENGTH_CAPPED: only then does a
	// P/D producer send the KV (the proxy asked for one token).
	LengthCapped bool    `json:"length_capped"`
	Params       *Params `json:"params"`
}

// FinishResult is request_finished's answer: Hold keeps the request's
// blocks until every worker lists it in finished-sending; Params (nil for
// none) goes back to the client as the response's kv_transfer_params.
type FinishResult struct {
	Hold   bool            `json:"hold"`
	Params json.RawMessage `json:"params"`
}

// Scheduler is the scheduler half of the connector (vLLM's
// KVConnectorRole.SCHEDULER, in the EngineCore process). In store mode it
// answers lookups against the pool (as a pure requester: it mounts no
// memory) and plans loads and saves through connectors/runtime; in pd
// mode it turns kv_transfer_params into sends and receives. It is safe
// for concurrent use.
type Scheduler struct {
	s    Settings
	pool *poolclient.Pool   // store mode; nil while poolErr is set
	rt   *runtime.Scheduler // store mode
	// poolErr is why a store-mode scheduler has no pool (mc_pool_required
	// false); set once by NewScheduler.
	poolErr error
	// notes are the pool config's remarks until TakeNotes (guarded by mu).
	notes []string
	// breaker guards lookups against a pool that does not answer, and
	// suspects hides blocks whose load failed (store mode with a real
	// pool; set once by NewScheduler).
	breaker  *runtime.Breaker
	suspects *suspects

	mu sync.Mutex
	// pending are P/D requests seen by UpdateAfterAlloc (producer: to be
	// sent) by request id.
	pending map[string]Params
	meta    Meta // this step's P/D work and preemptions
	// allocated are the store-mode requests allocated since the last
	// BuildMeta (see Preempted).
	allocated map[string]bool
}

// NewScheduler starts the scheduler half. Store mode opens a pool client
// from s.PoolConfig (env nil: the process environment). Errors:
// ErrBadConfig, the pool's.
func NewScheduler(ctx context.Context, s Settings, env map[string]string) (*Scheduler, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	sc := &Scheduler{s: s, pending: make(map[string]Params)}
	if s.Mode != ModeStore {
		return sc, nil
	}
	pc, notes, err := s.poolConfig(env)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	pool, err := poolclient.Open(ctx, pc, poolclient.Options{Host: s.Host, NoSegment: true, NoShm: true, Env: env, Timeout: s.ConnectTimeout})
	if err != nil {
		err = poolUnavailable(pc, s.ConnectTimeout, err)
		if !degradable(s, err) {
			return nil, err
		}
		sc, serr := newStoreScheduler(s, nil, missExister{})
		if serr != nil {
			return nil, serr
		}
		sc.poolErr, sc.notes = err, notes
		return sc, nil
	}
	// A hung master must cost the engine one lookup timeout, not one per
	// request (runtime.Breaker).
	br := runtime.NewBreaker(pool.Client, runtime.BreakerConfig{})
	sus := newSuspects(br, SuspectTTL, time.Now)
	sc, err = newStoreScheduler(s, pool, sus)
	if err != nil {
		br.Close()
		return nil, err
	}
	sc.notes, sc.breaker, sc.suspects = notes, br, sus
	return sc, nil
}

// TakeNotes returns, once, the remarks on this connector's pool config an
// operator should see in the log (a misspelled key in the
// MOONCAKE_CONFIG_PATH file, a key only another integration reads).
func (sc *Scheduler) TakeNotes() []string {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	n := sc.notes
	sc.notes = nil
	return n
}

// PoolError is the error that left a store-mode connector without its
// pool (mc_pool_required false: it serves without the cache), or nil.
func (sc *Scheduler) PoolError() error { return sc.poolErr }

// missExister answers every key absent: the lookups of a scheduler
// serving without its pool are misses, not errors.
type missExister struct{}

func (missExister) BatchIsExist(_ context.Context, keys []string) ([]bool, error) {
	return make([]bool, len(keys)), nil
}

// newStoreScheduler wires the runtime to an Exister (tests pass a fake).
func newStoreScheduler(s Settings, pool *poolclient.Pool, ex kvpool.Exister) (*Scheduler, error) {
	if s.Layerwise {
		ex = layerExister{inner: ex, layers: s.NumLayers}
	}
	rt, err := runtime.NewScheduler(runtime.SchedulerConfig{
		Shards:        s.shards(),
		Exister:       ex,
		SyncLoad:      !s.LoadAsync,
		NoSave:        s.KVRole == KVConsumer,
		LookupTimeout: s.LookupTimeout,
	})
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	return &Scheduler{s: s, pool: pool, rt: rt, pending: make(map[string]Params), allocated: make(map[string]bool)}, nil
}

// Close closes the pool client.
func (sc *Scheduler) Close() error {
	if sc.breaker != nil {
		sc.breaker.Close()
	}
	if sc.pool != nil {
		return sc.pool.Close()
	}
	return nil
}

// Lookup answers get_num_new_matched_tokens: the tokens beyond the local
// hit the connector can supply and whether they load asynchronously.
// Store mode: the pool's hit in whole blocks (kv_producer instances never
// load); pd mode: a consumer request with do_remote_prefill gets every
// token past the local hit, asynchronously (upstream MooncakeConnector);
// anything else 0. A pool error answers 0 with the error (the shim logs
// it and computes).
func (sc *Scheduler) Lookup(ctx context.Context, a LookupArgs) (tokens int, async bool, err error) {
	if a.NumTokens < 0 || a.NumComputedTokens < 0 || a.NumComputedTokens > a.NumTokens {
		return 0, false, fmt.Errorf("%w: request %q: %d computed of %d tokens", ErrBadInput, a.ReqID, a.NumComputedTokens, a.NumTokens)
	}
	if sc.s.Mode == ModePD {
		if a.Params != nil && a.Params.DoRemotePrefill && sc.s.KVRole != KVProducer {
			if n := a.NumTokens - a.NumComputedTokens; n > 0 {
				return n, true, nil
			}
		}
		return 0, false, nil
	}
	if sc.s.KVRole == KVProducer {
		return 0, false, nil
	}
	r, err := sc.rt.Lookup(ctx, runtime.LookupRequest{ReqID: a.ReqID, BlockHashes: a.Hashes, NumTokens: a.NumTokens, NumComputedTokens: a.NumComputedTokens})
	return r.Tokens, r.Async, err
}

// UpdateAfterAlloc is update_state_after_alloc. Store mode plans the load
// the engine accepted. Pd mode: a consumer request with do_remote_prefill
// gets a receive into its unhashed blocks (none when the local cache
// covered everything: the producer is still told, to free its blocks) and
// the shim then clears do_remote_prefill; a producer request with
// do_remote_decode is remembered for request_finished.
func (sc *Scheduler) UpdateAfterAlloc(a AllocArgs) error {
	if sc.s.Mode == ModeStore {
		sc.mu.Lock()
		sc.allocated[a.ReqID] = true
		sc.mu.Unlock()
		return sc.rt.UpdateAfterAlloc(a.ReqID, a.BlockIDs, a.NumExternalTokens)
	}
	p := a.Params
	if p == nil {
		return nil
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	switch {
	case p.DoRemotePrefill && sc.s.KVRole != KVProducer:
		r, err := sc.recvLocked(a.ReqID, p)
		if err != nil {
			return err
		}
		if a.NumExternalTokens > 0 {
			r.BlockIDs = slices.Clone(a.UnhashedBlockIDs)
		}
		sc.meta.Recvs = append(sc.meta.Recvs, r)
	case p.DoRemoteDecode && sc.s.KVRole != KVConsumer:
		q := *p
		if q.TransferID == "" {
			q.TransferID = a.ReqID // sequential proxies that send none
		}
		sc.pending[a.ReqID] = q
	}
	return nil
}

func (sc *Scheduler) recvLocked(reqID string, p *Params) (Recv, error) {
	r := Recv{ReqID: reqID, TransferID: p.TransferID, BootstrapAddr: p.bootstrap(), EngineID: p.RemoteEngineID}
	if r.TransferID == "" || r.BootstrapAddr == "" {
		return r, fmt.Errorf("%w: request %q: kv_transfer_params with do_remote_prefill need transfer_id and remote_bootstrap_addr (or remote_host and remote_port), got %+v", ErrBadInput, reqID, *p)
	}
	return r, nil
}

// PlanSave plans this step's saves of a running request (store mode,
// kv_both and kv_producer); it returns the blocks planned.
func (sc *Scheduler) PlanSave(a SaveArgs) (int, error) {
	if sc.s.Mode != ModeStore || sc.s.KVRole == KVConsumer {
		return 0, nil
	}
	n := a.NumComputedTokens
	if !sc.s.SaveDecodeCache && a.NumPromptTokens > 0 {
		n = min(n, a.NumPromptTokens)
	}
	return sc.rt.PlanSave(runtime.SaveRequest{ReqID: a.ReqID, BlockHashes: a.Hashes, BlockIDs: a.BlockIDs, NumComputedTokens: n})
}

// Preempted records requests vLLM preempted: their progress resets and
// workers fence their jobs in the next step. A request allocated in this
// step is being resumed (vLLM never resumes a request in the step that
// preempts it; the shim also reports resumed requests, for engines that
// list no preemptions): it is fenced, but its progress as this step's
// lookup left it is kept (else it would save again the blocks it just
// loaded).
func (sc *Scheduler) Preempted(reqIDs []string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, id := range reqIDs {
		if sc.rt != nil && !sc.allocated[id] {
			sc.rt.RequestPreempted(id)
		}
		sc.meta.Preempted = append(sc.meta.Preempted, id)
	}
}

// RequestFinished is request_finished. Store mode: hold the blocks while
// saves run. Pd producer: a length-capped request with do_remote_decode
// is handed to the workers to send (blocks held until sent, or until the
// abort timeout) and the answer carries the consumer's kv_transfer_params
// (do_remote_prefill, transfer_id, remote_engine_id,
// remote_bootstrap_addr, remote_host, remote_port); any other finish
// drops the send. Pd consumer: a request that still has
// do_remote_prefill (aborted before its allocation) sends an empty
// receive so the producer frees its blocks.
func (sc *Scheduler) RequestFinished(a FinishArgs) (FinishResult, error) {
	if sc.s.Mode == ModeStore {
		return FinishResult{Hold: sc.rt.RequestFinished(a.ReqID)}, nil
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if p := a.Params; p != nil && p.DoRemotePrefill && sc.s.KVRole != KVProducer {
		if r, err := sc.recvLocked(a.ReqID, p); err == nil {
			r.Release = true
			sc.meta.Recvs = append(sc.meta.Recvs, r)
		}
		return FinishResult{}, nil
	}
	q, ok := sc.pending[a.ReqID]
	delete(sc.pending, a.ReqID)
	if !ok {
		return FinishResult{}, nil
	}
	if !a.LengthCapped {
		sc.meta.Drops = append(sc.meta.Drops, Drop{ReqID: a.ReqID, TransferID: q.TransferID})
		return FinishResult{}, nil
	}
	sc.meta.Sends = append(sc.meta.Sends, Send{ReqID: a.ReqID, TransferID: q.TransferID, BlockIDs: slices.Clone(a.BlockIDs)})
	host := sc.s.Host
	out := Params{
		DoRemotePrefill: true, TransferID: q.TransferID, RemoteEngineID: sc.s.EngineID,
		RemoteBootstrapAddr: "http://" + net.JoinHostPort(host, strconv.Itoa(sc.s.BootstrapPort)),
		RemoteHost:          host, RemotePort: sc.s.BootstrapPort,
	}
	if b := sc.s.BootstrapAddr; b != "" {
		out.RemoteBootstrapAddr = b
		if !strings.Contains(b, "://") {
			out.RemoteBootstrapAddr = "http://" + b
		}
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return FinishResult{}, err
	}
	return FinishResult{Hold: true, Params: raw}, nil
}

// BuildMeta is build_connector_meta: this step's work as the bytes vLLM
// ships to every worker; it starts an empty step.
func (sc *Scheduler) BuildMeta() ([]byte, error) {
	sc.mu.Lock()
	m := sc.meta
	sc.meta = Meta{}
	clear(sc.allocated)
	sc.mu.Unlock()
	if sc.rt != nil {
		m.Plan = sc.rt.BuildPlan()
	}
	return json.Marshal(&m)
}

// Reset removes every object of this connector's namespaces (all shards)
// from the pool (reset_cache) and returns how many went. Pd mode: 0.
// Only keys of the namespace itself go: a block key (the hash in hex,
// with a "/l<layer>" suffix for a layer key) right after the prefix, so
// the namespaces of other tenants (cache_prefix), whose prefixes extend
// this one, are kept.
func (sc *Scheduler) Reset(ctx context.Context) (int, error) {
	if sc.pool == nil {
		return 0, nil
	}
	total := 0
	for _, ns := range sc.s.shards() {
		n, err := sc.pool.RemoveByRegex(ctx, "^"+regexpQuote(ns.Prefix())+"[0-9a-f]+(/l[0-9]+)?$", true)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// Tracked returns the requests with scheduler-side state.
func (sc *Scheduler) Tracked() int {
	sc.mu.Lock()
	n := len(sc.pending)
	sc.mu.Unlock()
	if sc.rt != nil {
		n += sc.rt.Tracked()
	}
	return n
}

// regexpQuote escapes s for a RE2 pattern.
func regexpQuote(s string) string { return regexp.QuoteMeta(s) }
