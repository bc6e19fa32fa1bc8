package replay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/replay/trace"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/policy"
)

// Config configures a replay.
type Config struct {
	// BytesPerToken is the KV bytes of one token; a block of n tokens is
	// n*BytesPerToken bytes. Required (> 0).
	BytesPerToken int64
	// CapacityTokens is the pool capacity expressed in tokens, used for the
	// offline LRU reference and OPT bound (and reported). Required (> 0).
	CapacityTokens int64
	// Speed scales arrival times: 0 = as fast as possible; 1 = real time
	// from the timestamps; 2 = twice as fast.
	Speed float64
	// Namespace prefixes every key; default "mooncake-go/replay/<bpt>B/".
	Namespace string
	// BufferBytes is the registered read/write buffer; default
	// max(64 MiB, 2 blocks).
	BufferBytes int64
	// Progress, if set, is called after each request with (done, total).
	Progress func(done, total int)
}

// Report is the outcome of a replay. JSON names are the `--json` output.
type Report struct {
	Requests          int     `json:"requests"`
	BlocksTotal       int64   `json:"blocks_total"`
	BlocksHit         int64   `json:"blocks_hit"`
	BlockHitRatio     float64 `json:"block_hit_ratio"`
	TokensTotal       int64   `json:"tokens_total"`
	TokensHit         int64   `json:"tokens_hit"`
	TokenHitRatio     float64 `json:"token_hit_ratio"`
	RequestsWithHit   int     `json:"requests_with_hit"`
	BytesWritten      int64   `json:"bytes_written"`
	BytesRead         int64   `json:"bytes_read"`
	ElapsedS          float64 `json:"elapsed_s"`
	WriteGBps         float64 `json:"write_gbps"` // bytes written / time spent in put operations, 1e9 B/s
	ReadGBps          float64 `json:"read_gbps"`  // bytes read / time spent in get operations
	PutP50ms          float64 `json:"put_p50_ms"` // per request: all its missed blocks written
	PutP99ms          float64 `json:"put_p99_ms"`
	GetP50ms          float64 `json:"get_p50_ms"` // per request with hits: all its hit blocks read
	GetP99ms          float64 `json:"get_p99_ms"`
	LookupP50ms       float64 `json:"lookup_p50_ms"`
	EvictedObjects    uint64  `json:"evicted_objects"`
	ContentMismatches int64   `json:"content_mismatches"`
	ReadFailures      int64   `json:"read_failures"`           // hit blocks whose read failed (then rewritten as misses)
	LeaseExpired      int64   `json:"lease_expired"`           // of those, reads that outlived their lease
	PutFailures       int64   `json:"put_failures"`            // missed blocks that could not be stored
	PutNoHandle       int64   `json:"put_no_available_handle"` // of those, refused for lack of DRAM (NO_AVAILABLE_HANDLE)
	CapacityTokens    int64   `json:"capacity_tokens"`
	BytesPerToken     int64   `json:"bytes_per_token"`
	PoolBytes         uint64  `json:"pool_bytes"`
	// LRU reference: an offline LRU over blocks with CapacityTokens of
	// room (policy.LRUBound), what upstream's eviction would reach
	// without eviction batches, leases or allocator slack.
	LRURefBlockHitRatio float64 `json:"lru_reference_block_hit_ratio"`
	LRURefTokenHitRatio float64 `json:"lru_reference_token_hit_ratio"`
	// OPT bound: the offline optimum of block hits with
	// CapacityTokens/512 whole-block slots (policy.OPT: Belady with
	// bypass); no policy holding that many blocks hits more blocks. The
	// token figure is the tokens of those same hits, not an optimum.
	OPTBlockHitRatio float64 `json:"opt_bound_block_hit_ratio"`
	OPTTokenHitRatio float64 `json:"opt_bound_token_hit_ratio"`
}

// ErrNoRequests is Run's error for an empty request list (an empty
// trace): a replay of nothing has no hit ratio to report.
var ErrNoRequests = errors.New("replay: no requests to replay (empty trace)")

// Run replays reqs against the pool through c. The pool is reached only
// through c; evicted_objects and pool_bytes are filled in by the caller.
// Errors: invalid config; ErrNoRequests for no reqs; a failed lookup (RPC) or context end stops the
// replay and returns the report so far with the error. Per-block read and
// write failures are counted, not fatal.
func Run(ctx context.Context, c *client.Client, reqs []trace.Request, cfg Config) (Report, error) {
	if len(reqs) == 0 {
		if err := cfg.check(); err != nil {
			return Report{}, err
		}
		return Report{}, ErrNoRequests
	}
	r, err := NewReplayer(ctx, c, cfg)
	if err != nil {
		return Report{}, err
	}
	defer r.Close()
	start := time.Now()
	for i, q := range reqs {
		if cfg.Speed > 0 {
			due := start.Add(time.Duration(float64(q.Timestamp) / cfg.Speed * float64(time.Millisecond)))
			if d := time.Until(due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
			}
		}
		if err = ctx.Err(); err != nil {
			break
		}
		if _, err = r.Request(ctx, q); err != nil {
			err = fmt.Errorf("replay: request %d: %w", i+1, err)
			break
		}
		if cfg.Progress != nil {
			cfg.Progress(i+1, len(reqs))
		}
	}
	rep := Merge(r)
	rep.ElapsedS = time.Since(start).Seconds()
	References(&rep, reqs[:rep.Requests], cfg.CapacityTokens)
	return rep, err
}

// References fills in rep's LRU reference and OPT bound for reqs at
// capacityTokens.
func References(rep *Report, reqs []trace.Request, capacityTokens int64) {
	l := policy.NewLRUBound(capacityTokens)
	for _, q := range reqs {
		l.Request(q.HashIDs, q.BlockTokens)
	}
	b := l.Result()
	rep.LRURefBlockHitRatio, rep.LRURefTokenHitRatio = b.BlockHitRatio, b.TokenHitRatio
	o := optBound(reqs, capacityTokens)
	rep.OPTBlockHitRatio, rep.OPTTokenHitRatio = o.BlockHitRatio, o.TokenHitRatio
}

// check validates cfg and fills in its defaults.
func (cfg *Config) check() error {
	if cfg.BytesPerToken <= 0 {
		return fmt.Errorf("replay: bytes per token %d must be > 0", cfg.BytesPerToken)
	}
	if cfg.CapacityTokens <= 0 {
		return fmt.Errorf("replay: capacity %d tokens must be > 0", cfg.CapacityTokens)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "mooncake-go/replay/" + strconv.FormatInt(cfg.BytesPerToken, 10) + "B/"
	}
	block := trace.BlockTokens * cfg.BytesPerToken
	if cfg.BufferBytes <= 0 {
		cfg.BufferBytes = max(64<<20, 2*block)
	}
	if cfg.BufferBytes < block {
		return fmt.Errorf("replay: buffer of %d bytes cannot hold one %d-byte block", cfg.BufferBytes, block)
	}
	return nil
}

// Replayer replays requests one at a time against a pool through one
// client (one engine instance), keeping the totals. Not safe for
// concurrent use.
type Replayer struct {
	c     *client.Client
	cfg   Config
	buf   []byte
	close func()
	rep   Report

	puts, gets, lookups []time.Duration
	putTime, getTime    time.Duration
}

// NewReplayer registers a read/write buffer of cfg.BufferBytes with c
// (Close unregisters it). cfg.Speed and cfg.Progress are not used here.
// Errors: invalid config; mapping or registering the buffer.
func NewReplayer(ctx context.Context, c *client.Client, cfg Config) (*Replayer, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	buf, err := memory.Map(int(cfg.BufferBytes))
	if err != nil {
		return nil, err
	}
	if err := c.RegisterBuffer(ctx, buf.Bytes()); err != nil {
		buf.Close()
		return nil, err
	}
	r := &Replayer{c: c, cfg: cfg, buf: buf.Bytes()}
	r.close = func() {
		c.UnregisterBuffer(context.Background(), buf.Bytes())
		buf.Close()
	}
	return r, nil
}

// Close releases the buffer; the Replayer is unusable afterwards.
func (r *Replayer) Close() {
	if r.close != nil {
		r.close()
		r.close = nil
	}
}

// Merge sums the totals of rs into one Report (ratios, throughput and
// latency percentiles over all of them); elapsed time and the offline
// references are left to the caller.
func Merge(rs ...*Replayer) Report {
	var rep Report
	var puts, gets, lookups []time.Duration
	var putTime, getTime time.Duration
	for _, r := range rs {
		x := r.rep
		rep.Requests += x.Requests
		rep.BlocksTotal += x.BlocksTotal
		rep.BlocksHit += x.BlocksHit
		rep.TokensTotal += x.TokensTotal
		rep.TokensHit += x.TokensHit
		rep.RequestsWithHit += x.RequestsWithHit
		rep.BytesWritten += x.BytesWritten
		rep.BytesRead += x.BytesRead
		rep.ContentMismatches += x.ContentMismatches
		rep.ReadFailures += x.ReadFailures
		rep.LeaseExpired += x.LeaseExpired
		rep.PutFailures += x.PutFailures
		rep.PutNoHandle += x.PutNoHandle
		puts, gets, lookups = append(puts, r.puts...), append(gets, r.gets...), append(lookups, r.lookups...)
		putTime += r.putTime
		getTime += r.getTime
	}
	if len(rs) > 0 {
		rep.CapacityTokens, rep.BytesPerToken = rs[0].cfg.CapacityTokens, rs[0].cfg.BytesPerToken
	}
	if rep.BlocksTotal > 0 {
		rep.BlockHitRatio = float64(rep.BlocksHit) / float64(rep.BlocksTotal)
	}
	if rep.TokensTotal > 0 {
		rep.TokenHitRatio = float64(rep.TokensHit) / float64(rep.TokensTotal)
	}
	if putTime > 0 {
		rep.WriteGBps = float64(rep.BytesWritten) / putTime.Seconds() / 1e9
	}
	if getTime > 0 {
		rep.ReadGBps = float64(rep.BytesRead) / getTime.Seconds() / 1e9
	}
	rep.PutP50ms, rep.PutP99ms = pct(puts, 0.50), pct(puts, 0.99)
	rep.GetP50ms, rep.GetP99ms = pct(gets, 0.50), pct(gets, 0.99)
	rep.LookupP50ms = pct(lookups, 0.50)
	return rep
}

// optBound is policy.OPT over reqs with capacityTokens/512 block slots.
func optBound(reqs []trace.Request, capacityTokens int64) policy.BoundResult {
	ids := make([][]uint64, len(reqs))
	for i, q := range reqs {
		ids[i] = q.HashIDs
	}
	return policy.OPT(ids, func(t, i int) int { return reqs[t].BlockTokens(i) }, capacityTokens/trace.BlockTokens)
}

// pct is the p-quantile (nearest rank) of ds in milliseconds; 0 when empty.
func pct(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	i = min(max(i, 0), len(s)-1)
	return float64(s[i]) / float64(time.Millisecond)
}

func (r *Replayer) key(id uint64) string { return r.cfg.Namespace + strconv.FormatUint(id, 10) }

// Request replays one trace line: the longest cached prefix is looked
// up, read and verified, the rest written. It returns the blocks hit.
// Errors: the lookup failed (RPC); read and write failures are counted.
func (r *Replayer) Request(ctx context.Context, q trace.Request) (hit int, err error) {
	n := len(q.HashIDs)
	keys := make([]string, n)
	sizes := make([]int64, n)
	var tokens int64
	for i, id := range q.HashIDs {
		keys[i] = r.key(id)
		sizes[i] = int64(q.BlockTokens(i)) * r.cfg.BytesPerToken
		tokens += int64(q.BlockTokens(i))
	}
	t0 := time.Now()
	exist, err := r.c.BatchIsExist(ctx, keys)
	if err != nil {
		return 0, err
	}
	r.lookups = append(r.lookups, time.Since(t0))
	prefix := 0
	for prefix < n && exist[prefix] {
		prefix++
	}

	if prefix > 0 {
		t := time.Now()
		hit = r.read(ctx, q.HashIDs[:prefix], keys[:prefix], sizes[:prefix])
		d := time.Since(t)
		r.gets = append(r.gets, d)
		r.getTime += d
	}
	if hit < n {
		t := time.Now()
		r.write(ctx, q.HashIDs[hit:], keys[hit:], sizes[hit:])
		d := time.Since(t)
		r.puts = append(r.puts, d)
		r.putTime += d
	}
	r.rep.Requests++
	r.rep.BlocksTotal += int64(n)
	r.rep.BlocksHit += int64(hit)
	r.rep.TokensTotal += tokens
	for i := 0; i < hit; i++ {
		r.rep.TokensHit += int64(q.BlockTokens(i))
	}
	if hit > 0 {
		r.rep.RequestsWithHit++
	}
	return hit, nil
}

// chunks splits sizes into consecutive groups that fit the buffer.
func (r *Replayer) chunks(sizes []int64, f func(lo, hi int) bool) {
	for lo := 0; lo < len(sizes); {
		hi, used := lo, int64(0)
		for hi < len(sizes) && used+align(sizes[hi]) <= int64(len(r.buf)) {
			used += align(sizes[hi])
			hi++
		}
		if !f(lo, hi) {
			return
		}
		lo = hi
	}
}

func align(n int64) int64 { return (n + 63) &^ 63 }

// read reads the hit prefix and returns how many leading blocks were read
// and verified; blocks after the first failure count as misses.
func (r *Replayer) read(ctx context.Context, ids []uint64, keys []string, sizes []int64) int {
	good := 0
	r.chunks(sizes, func(lo, hi int) bool {
		dsts := make([][]byte, hi-lo)
		off := int64(0)
		for i := lo; i < hi; i++ {
			dsts[i-lo] = r.buf[off : off+sizes[i]]
			off += align(sizes[i])
		}
		got, errs := r.c.BatchGetInto(ctx, keys[lo:hi], dsts)
		for j := range dsts {
			if errs[j] != nil {
				r.rep.ReadFailures++
				if errors.Is(errs[j], store.ErrLeaseExpired) {
					r.rep.LeaseExpired++
				}
				return false
			}
			r.rep.BytesRead += int64(got[j])
			if !Verify(ids[lo+j], dsts[j][:got[j]]) {
				r.rep.ContentMismatches++
				return false
			}
			good++
		}
		return true
	})
	return good
}

// write stores the missed blocks.
func (r *Replayer) write(ctx context.Context, ids []uint64, keys []string, sizes []int64) {
	r.chunks(sizes, func(lo, hi int) bool {
		srcs := make([][]byte, hi-lo)
		off := int64(0)
		for i := lo; i < hi; i++ {
			srcs[i-lo] = r.buf[off : off+sizes[i]]
			Fill(ids[i], srcs[i-lo])
			off += align(sizes[i])
		}
		errs := r.c.BatchPutFrom(ctx, keys[lo:hi], srcs, nil)
		for j, e := range errs {
			if e != nil {
				r.rep.PutFailures++
				if errors.Is(e, store.ErrNoAvailableHandle) {
					r.rep.PutNoHandle++
				}
			} else {
				r.rep.BytesWritten += int64(len(srcs[j]))
			}
		}
		return true
	})
}
