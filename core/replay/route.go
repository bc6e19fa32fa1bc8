package replay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/mooncake-go/mooncake/core/replay/trace"
	"github.com/mooncake-go/mooncake/core/store/client"
)

// Routing policies: how RunRouted picks the engine instance that serves a
// request (Mooncake's Conductor role).
const (
	// RouteRandom picks an instance uniformly at random (seeded).
	RouteRandom = "random"
	// RouteRoundRobin picks instances in turn.
	RouteRoundRobin = "round-robin"
	// RouteLeastLoaded picks the instance with the least queued prefill
	// work (ties: the lowest index).
	RouteLeastLoaded = "least-loaded"
	// RouteCacheAware picks, among the instances whose queued prefill
	// work is under RouteConfig.LoadCapS, the one whose cache holds the
	// longest prefix of the request (ties: least loaded, then lowest
	// index); when every instance is over the cap, the least loaded. The
	// prefixes are read with BatchGetSize, which grants no lease and
	// counts as no use for eviction, as a Conductor reads its global view
	// of the caches. Over one shared pool every instance sees the same
	// prefix, so this is least-loaded there.
	RouteCacheAware = "cache-aware"
)

// Routings lists the routing policies.
func Routings() []string {
	return []string{RouteRandom, RouteRoundRobin, RouteLeastLoaded, RouteCacheAware}
}

// Instance is one engine instance: the client it reaches its cache
// through. Instances of a shared pool use clients of one pool; with local
// caches each has a pool of its own.
type Instance struct {
	Client *client.Client
}

// RouteConfig configures RunRouted.
type RouteConfig struct {
	// Config is each instance's replay config; CapacityTokens is the
	// capacity of all caches together (the references are for one cache
	// of that size), Speed must be 0 (routing replays as fast as it can,
	// on the trace's clock).
	Config
	// Routing is one of Routings().
	Routing string
	// Seed seeds RouteRandom.
	Seed uint64
	// PrefillTokensPerS is the instance model: an instance prefills the
	// tokens a request missed at this rate, one request at a time, in
	// arrival order (trace timestamps); its queue is the work not done by
	// a request's arrival. Default 50,000 tokens/s.
	PrefillTokensPerS float64
	// LoadCapS is RouteCacheAware's cap on an instance's queue, in
	// seconds of prefill. Default 2.
	LoadCapS float64
	// Shared says the instances share one pool: RouteCacheAware then
	// skips the lookups (every instance sees the same prefix).
	Shared bool
}

// RoutedReport is RunRouted's outcome: the merged Report and the
// per-instance figures.
type RoutedReport struct {
	Report
	// InstanceRequests is the number of requests each instance served.
	InstanceRequests []int `json:"instance_requests"`
	// MeanQueueS and MaxQueueS are the queue (seconds of prefill ahead of
	// it) a request met on its instance, averaged and at worst.
	MeanQueueS float64 `json:"mean_queue_s"`
	MaxQueueS  float64 `json:"max_queue_s"`
}

// RunRouted replays reqs over the instances, routing each request as
// cfg.Routing says, and reports hit ratios over all of them plus the LRU
// reference and OPT bound of one cache of cfg.CapacityTokens. Errors:
// a bad config (unknown routing, no instances, Speed > 0), ErrNoRequests,
// a failed lookup or context end (with the report so far).
func RunRouted(ctx context.Context, insts []Instance, reqs []trace.Request, cfg RouteConfig) (RoutedReport, error) {
	if !slices.Contains(Routings(), cfg.Routing) {
		return RoutedReport{}, fmt.Errorf("replay: unknown routing %q (want one of %v)", cfg.Routing, Routings())
	}
	if len(insts) == 0 {
		return RoutedReport{}, fmt.Errorf("replay: routing over no instances")
	}
	if cfg.Speed != 0 {
		return RoutedReport{}, fmt.Errorf("replay: routing replays on the trace's clock; speed %v must be 0", cfg.Speed)
	}
	if cfg.PrefillTokensPerS <= 0 {
		cfg.PrefillTokensPerS = 50_000
	}
	if cfg.LoadCapS <= 0 {
		cfg.LoadCapS = 2
	}
	if err := cfg.Config.check(); err != nil {
		return RoutedReport{}, err
	}
	if len(reqs) == 0 {
		return RoutedReport{}, ErrNoRequests
	}
	rs := make([]*Replayer, len(insts))
	for i, in := range insts {
		r, err := NewReplayer(ctx, in.Client, cfg.Config)
		if err != nil {
			for _, x := range rs[:i] {
				x.Close()
			}
			return RoutedReport{}, err
		}
		defer r.Close()
		rs[i] = r
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6d6f6f6e))
	busy := make([]float64, len(insts)) // when each instance's queue empties, trace seconds
	queue := make([]float64, len(insts))
	out := RoutedReport{InstanceRequests: make([]int, len(insts))}
	var queued float64
	start := time.Now()
	var err error
	for t, q := range reqs {
		if err = ctx.Err(); err != nil {
			break
		}
		now := float64(q.Timestamp) / 1000
		for i := range insts {
			queue[i] = max(0, busy[i]-now)
		}
		var pick int
		switch cfg.Routing {
		case RouteRandom:
			pick = rng.IntN(len(insts))
		case RouteRoundRobin:
			pick = t % len(insts)
		case RouteLeastLoaded:
			pick = leastLoaded(queue, nil)
		case RouteCacheAware:
			if cfg.Shared {
				pick = leastLoaded(queue, nil)
				break
			}
			if pick, err = cacheAware(ctx, rs, q, queue, cfg.LoadCapS); err != nil {
				err = fmt.Errorf("replay: request %d: route: %w", t+1, err)
			}
		}
		if err != nil {
			break
		}
		r := rs[pick]
		hitTokens0 := r.rep.TokensHit
		if _, err = r.Request(ctx, q); err != nil {
			err = fmt.Errorf("replay: request %d: %w", t+1, err)
			break
		}
		miss := float64(int64(q.InputLength) - (r.rep.TokensHit - hitTokens0))
		queued += queue[pick]
		out.MaxQueueS = max(out.MaxQueueS, queue[pick])
		busy[pick] = max(busy[pick], now) + miss/cfg.PrefillTokensPerS
		out.InstanceRequests[pick]++
		if cfg.Progress != nil {
			cfg.Progress(t+1, len(reqs))
		}
	}
	out.Report = Merge(rs...)
	out.ElapsedS = time.Since(start).Seconds()
	References(&out.Report, reqs[:out.Requests], cfg.CapacityTokens)
	if out.Requests > 0 {
		out.MeanQueueS = queued / float64(out.Requests)
	}
	return out, err
}

// leastLoaded is the index of the smallest queue among ok (all when nil);
// ties go to the lowest index.
func leastLoaded(queue []float64, ok []bool) int {
	best := -1
	for i, q := range queue {
		if ok != nil && !ok[i] {
			continue
		}
		if best < 0 || q < queue[best] {
			best = i
		}
	}
	return best
}

// cacheAware is RouteCacheAware's pick.
func cacheAware(ctx context.Context, rs []*Replayer, q trace.Request, queue []float64, capS float64) (int, error) {
	keys := make([]string, len(q.HashIDs))
	for i, id := range q.HashIDs {
		keys[i] = rs[0].cfg.Namespace + strconv.FormatUint(id, 10)
	}
	best, bestLen := -1, -1
	for i, r := range rs {
		if queue[i] > capS {
			continue
		}
		_, errs := r.c.BatchGetSize(ctx, keys)
		n := 0
		for n < len(errs) && errs[n] == nil {
			n++
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if n > bestLen || (n == bestLen && queue[i] < queue[best]) {
			best, bestLen = i, n
		}
	}
	if best < 0 {
		return leastLoaded(queue, nil), nil
	}
	return best, nil
}
