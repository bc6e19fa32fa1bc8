package replay_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"

	"github.com/mooncake-go/mooncake/core/replay"
	"github.com/mooncake-go/mooncake/core/replay/trace"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
	"github.com/mooncake-go/mooncake/core/store/master"
)

const (
	tracePath     = "traces/conversation_trace.jsonl"
	bytesPerToken = 16
)

// TestMain fails the package when its tests leave pool goroutines behind.
// Connection shutdown is asynchronous, so the check polls for a bounded
// time.
func TestMain(m *testing.M) { leakcheck.Main(m) }

// startPool starts a 2-node in-process pool holding capacityTokens tokens
// at bytesPerToken and a client of it; both are closed at cleanup.
func startPool(t *testing.T, capacityTokens int64) (*localcluster.Cluster, *client.Client) {
	t.Helper()
	return startPolicyPool(t, capacityTokens, "")
}

// startPolicyPool is startPool with the master's eviction policy.
func startPolicyPool(t *testing.T, capacityTokens int64, policy string) (*localcluster.Cluster, *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const nodes = 2
	seg := uint64((capacityTokens*bytesPerToken + nodes - 1) / nodes)
	lc, err := localcluster.Start(ctx, localcluster.Options{Nodes: nodes, SegmentSize: seg, Master: master.Config{
		DefaultLeaseTTL: 100 * time.Millisecond, EvictionHighWatermark: 1.0, EvictionPolicy: policy}})
	if err != nil {
		t.Fatalf("localcluster.Start: %v", err)
	}
	t.Cleanup(lc.Close)
	c, err := lc.NewClient(ctx, client.Config{LocalHostname: "replay-test-client"})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return lc, c
}

func readTrace(t *testing.T, limit int) []trace.Request {
	t.Helper()
	reqs, err := trace.ReadFile(tracePath, limit)
	if err != nil {
		t.Fatalf("trace.ReadFile: %v", err)
	}
	if len(reqs) != limit {
		t.Fatalf("read %d requests, want %d", len(reqs), limit)
	}
	return reqs
}

// naiveLRU is a deliberately simple reference for the offline bound: a
// slice ordered from least to most recently used, searched linearly.
type naiveLRU struct {
	capacity, used int64
	blocks         []naiveBlock
}

type naiveBlock struct {
	id     uint64
	tokens int64
}

func (l *naiveLRU) find(id uint64) int {
	for i, b := range l.blocks {
		if b.id == id {
			return i
		}
	}
	return -1
}

// request returns the hit prefix (blocks, tokens) measured before any of
// the request's blocks is inserted, then touches every block in order.
func (l *naiveLRU) request(q trace.Request) (int, int64) {
	tokens := func(i int) int64 {
		if i < len(q.HashIDs)-1 {
			return 512
		}
		return int64(q.InputLength - 512*(len(q.HashIDs)-1))
	}
	hit, hitTokens := 0, int64(0)
	for i, id := range q.HashIDs {
		if l.find(id) < 0 {
			break
		}
		hit++
		hitTokens += tokens(i)
	}
	for i, id := range q.HashIDs {
		n := tokens(i)
		if j := l.find(id); j >= 0 {
			l.used -= l.blocks[j].tokens
			l.blocks = append(l.blocks[:j], l.blocks[j+1:]...)
		}
		if n > l.capacity {
			continue
		}
		l.blocks = append(l.blocks, naiveBlock{id, n})
		l.used += n
		for l.used > l.capacity {
			l.used -= l.blocks[0].tokens
			l.blocks = l.blocks[1:]
		}
	}
	return hit, hitTokens
}

// naiveBound runs the reference over reqs and returns its hit ratios.
func naiveBound(reqs []trace.Request, capacity int64) (blockRatio, tokenRatio float64) {
	l := &naiveLRU{capacity: capacity}
	var blocks, blocksHit, tokens, tokensHit int64
	for _, q := range reqs {
		h, ht := l.request(q)
		blocks += int64(len(q.HashIDs))
		blocksHit += int64(h)
		tokens += int64(q.InputLength)
		tokensHit += ht
	}
	return float64(blocksHit) / float64(blocks), float64(tokensHit) / float64(tokens)
}

func TestNaiveLRUSanity(t *testing.T) {
	// Capacity 1024 tokens: two full blocks.
	l := &naiveLRU{capacity: 1024}
	req := func(in int, ids ...uint64) trace.Request { return trace.Request{InputLength: in, HashIDs: ids} }
	steps := []struct {
		q          trace.Request
		hit        int
		hitTokens  int64
		wantCached []uint64
	}{
		{req(1024, 1, 2), 0, 0, []uint64{1, 2}},
		{req(1024, 1, 2), 2, 1024, []uint64{1, 2}},
		{req(600, 1, 3), 1, 512, []uint64{1, 3}}, // 3 holds 88 tokens: 1112 > 1024, so 2 goes
		{req(600, 1, 3), 2, 600, []uint64{1, 3}},
		{req(2000, 9, 8, 7, 6), 0, 0, []uint64{7, 6}}, // the last block holds 464 tokens
	}
	for i, s := range steps {
		h, ht := l.request(s.q)
		var ids []uint64
		for _, b := range l.blocks {
			ids = append(ids, b.id)
		}
		if h != s.hit || ht != s.hitTokens || fmt.Sprint(ids) != fmt.Sprint(s.wantCached) {
			t.Fatalf("step %d: hit %d/%d tokens, cached %v; want %d/%d, %v", i, h, ht, ids, s.hit, s.hitTokens, s.wantCached)
		}
	}
}

func TestRunMatchesOfflineBound(t *testing.T) {
	const capacity = 300_000
	_, c := startPool(t, capacity)
	reqs := readTrace(t, 500)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := replay.Run(ctx, c, reqs, replay.Config{BytesPerToken: bytesPerToken, CapacityTokens: capacity})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("report: %+v", rep)

	var blocks, tokens int64
	for _, q := range reqs {
		blocks += int64(len(q.HashIDs))
		tokens += int64(q.InputLength)
	}
	if rep.ContentMismatches != 0 || rep.PutFailures != 0 {
		t.Errorf("mismatches %d, put failures %d; want 0", rep.ContentMismatches, rep.PutFailures)
	}
	// Nothing else writes and the pool only evicts on a failed allocation,
	// so a hit block's read can fail only by outliving its 100 ms lease (a
	// loaded machine under -race); such a block is rewritten, not counted.
	if rep.ReadFailures != rep.LeaseExpired {
		t.Errorf("read failures %d, of which %d lease expiries; want only lease expiries", rep.ReadFailures, rep.LeaseExpired)
	}
	if rep.Requests != 500 || rep.BlocksTotal != blocks || rep.TokensTotal != tokens {
		t.Errorf("requests %d, blocks %d, tokens %d; want 500, %d, %d", rep.Requests, rep.BlocksTotal, rep.TokensTotal, blocks, tokens)
	}
	if rep.CapacityTokens != capacity || rep.BytesPerToken != bytesPerToken {
		t.Errorf("capacity %d tokens at %d B/token, want %d at %d", rep.CapacityTokens, rep.BytesPerToken, capacity, bytesPerToken)
	}
	// Every hit block was read whole, every other block (a failed read
	// included) written whole.
	if rep.BytesRead != rep.TokensHit*bytesPerToken {
		t.Errorf("bytes read %d, want tokens hit %d * %d", rep.BytesRead, rep.TokensHit, bytesPerToken)
	}
	if rep.BytesWritten <= 0 || rep.BytesWritten != (rep.TokensTotal-rep.TokensHit)*bytesPerToken {
		t.Errorf("bytes written %d, want (tokens %d - hit %d) * %d", rep.BytesWritten, rep.TokensTotal, rep.TokensHit, bytesPerToken)
	}
	if rep.BlocksHit > rep.BlocksTotal || rep.TokensHit > rep.TokensTotal {
		t.Errorf("hits exceed totals: %+v", rep)
	}
	if want := float64(rep.BlocksHit) / float64(rep.BlocksTotal); rep.BlockHitRatio != want {
		t.Errorf("block hit ratio %v, want %v", rep.BlockHitRatio, want)
	}
	if want := float64(rep.TokensHit) / float64(rep.TokensTotal); rep.TokenHitRatio != want {
		t.Errorf("token hit ratio %v, want %v", rep.TokenHitRatio, want)
	}
	if rep.RequestsWithHit < 1 || rep.RequestsWithHit > rep.Requests {
		t.Errorf("requests with hit %d, want in [1, %d]", rep.RequestsWithHit, rep.Requests)
	}

	wantBlock, wantToken := naiveBound(reqs, capacity)
	if rep.LRURefBlockHitRatio != wantBlock || rep.LRURefTokenHitRatio != wantToken {
		t.Errorf("LRU reference %v blocks, %v tokens; naive reference %v, %v", rep.LRURefBlockHitRatio, rep.LRURefTokenHitRatio, wantBlock, wantToken)
	}
	if d := math.Abs(rep.BlockHitRatio - rep.LRURefBlockHitRatio); d > 0.05 {
		t.Errorf("block hit ratio %v is %v from the bound %v", rep.BlockHitRatio, d, rep.LRURefBlockHitRatio)
	}

	if rep.ElapsedS <= 0 || rep.WriteGBps <= 0 || rep.ReadGBps <= 0 {
		t.Errorf("elapsed %v s, write %v GB/s, read %v GB/s; want > 0", rep.ElapsedS, rep.WriteGBps, rep.ReadGBps)
	}
	if rep.PutP50ms <= 0 || rep.PutP99ms < rep.PutP50ms || rep.GetP50ms <= 0 || rep.GetP99ms < rep.GetP50ms {
		t.Errorf("latencies put p50 %v p99 %v, get p50 %v p99 %v", rep.PutP50ms, rep.PutP99ms, rep.GetP50ms, rep.GetP99ms)
	}
}

func TestRunEvictsAndStillVerifies(t *testing.T) {
	const capacity = 30_000 // 480 kB: a few requests' worth
	_, c := startPool(t, capacity)
	reqs := readTrace(t, 100)

	var progress []int
	cfg := replay.Config{
		BytesPerToken: bytesPerToken, CapacityTokens: capacity,
		Speed: 1000, // 100 lines span ~36 s of trace: ~36 ms here
		Progress: func(done, total int) {
			if total != len(reqs) {
				t.Errorf("progress total %d, want %d", total, len(reqs))
			}
			progress = append(progress, done)
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := replay.Run(ctx, c, reqs, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("report: %+v", rep)
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.EvictedObjects == 0 {
		t.Errorf("no object evicted from a %d-byte pool", st.Capacity)
	}
	if st.Capacity != capacity*bytesPerToken {
		t.Errorf("pool capacity %d bytes, want %d", st.Capacity, capacity*bytesPerToken)
	}
	if rep.ContentMismatches != 0 {
		t.Errorf("%d content mismatches", rep.ContentMismatches)
	}
	if rep.Requests != len(reqs) || len(progress) != len(reqs) {
		t.Fatalf("requests %d, progress calls %d; want %d", rep.Requests, len(progress), len(reqs))
	}
	for i, d := range progress {
		if d != i+1 {
			t.Fatalf("progress call %d reported %d done", i, d)
		}
	}
	last := reqs[len(reqs)-1].Timestamp
	if min := float64(last) / cfg.Speed / 1000; rep.ElapsedS < min {
		t.Errorf("elapsed %v s at speed %v, want >= %v s", rep.ElapsedS, cfg.Speed, min)
	}
	// Failed reads are rewritten, so the written bytes are still those of
	// the blocks not hit, less any put that failed.
	if rep.PutFailures == 0 && rep.BytesWritten != (rep.TokensTotal-rep.TokensHit)*bytesPerToken {
		t.Errorf("bytes written %d, want (tokens %d - hit %d) * %d", rep.BytesWritten, rep.TokensTotal, rep.TokensHit, bytesPerToken)
	}
	if rep.BytesRead < rep.TokensHit*bytesPerToken {
		t.Errorf("bytes read %d < hit tokens %d * %d", rep.BytesRead, rep.TokensHit, bytesPerToken)
	}
	wantBlock, wantToken := naiveBound(reqs, capacity)
	if rep.LRURefBlockHitRatio != wantBlock || rep.LRURefTokenHitRatio != wantToken {
		t.Errorf("LRU reference %v blocks, %v tokens; naive reference %v, %v", rep.LRURefBlockHitRatio, rep.LRURefTokenHitRatio, wantBlock, wantToken)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  replay.Config
		want string
	}{
		{"zero bytes per token", replay.Config{CapacityTokens: 1}, "bytes per token"},
		{"negative bytes per token", replay.Config{BytesPerToken: -1, CapacityTokens: 1}, "bytes per token"},
		{"zero capacity", replay.Config{BytesPerToken: 16}, "capacity"},
		{"buffer below one block", replay.Config{BytesPerToken: 16, CapacityTokens: 1, BufferBytes: 512*16 - 1}, "buffer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The config is checked before the client is touched.
			_, err := replay.Run(context.Background(), nil, nil, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run(%+v) = %v, want an error about %s", tc.cfg, err, tc.want)
			}
		})
	}
}

// TestRunRejectsEmptyTrace: no requests is an error that says so, not a
// report of zeros; it is found before the client is touched.
func TestRunRejectsEmptyTrace(t *testing.T) {
	for _, reqs := range [][]trace.Request{nil, {}} {
		rep, err := replay.Run(context.Background(), nil, reqs, replay.Config{BytesPerToken: 16, CapacityTokens: 1})
		require.ErrorIs(t, err, replay.ErrNoRequests)
		assert.Contains(t, err.Error(), "empty trace")
		assert.Zero(t, rep.Requests)
	}
}

// TestPoolNeverAboveOPT replays the start of both FAST'25 traces on the
// in-process pool at several capacities: the pool's block hit ratio lies
// in [0, OPT bound], and the LRU reference does too.
func TestPoolNeverAboveOPT(t *testing.T) {
	for _, tc := range []struct {
		file  string
		limit int
	}{{"traces/conversation_trace.jsonl", 400}, {"traces/synthetic_trace.jsonl", 250}} {
		reqs, err := trace.ReadFile(tc.file, tc.limit)
		require.NoError(t, err)
		for _, capacity := range []int64{60_000, 300_000} {
			for _, policy := range master.EvictionPolicies() {
				t.Run(fmt.Sprintf("%s/%d/%s", tc.file, capacity, policy), func(t *testing.T) {
					_, c := startPolicyPool(t, capacity, policy)
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					rep, err := replay.Run(ctx, c, reqs, replay.Config{BytesPerToken: bytesPerToken, CapacityTokens: capacity})
					require.NoError(t, err)
					t.Logf("pool %.4f, LRU reference %.4f, OPT bound %.4f", rep.BlockHitRatio, rep.LRURefBlockHitRatio, rep.OPTBlockHitRatio)
					assert.Greater(t, rep.OPTBlockHitRatio, 0.0)
					assert.GreaterOrEqual(t, rep.BlockHitRatio, 0.0)
					assert.LessOrEqual(t, rep.BlockHitRatio, rep.OPTBlockHitRatio)
					assert.LessOrEqual(t, rep.LRURefBlockHitRatio, rep.OPTBlockHitRatio)
					assert.Zero(t, rep.ContentMismatches)
				})
			}
		}
	}
}

// TestRunRouted replays the start of the conversation trace over three
// instances: sharing one pool, the hit ratio does not depend on routing
// and beats three local caches of a third each under random routing;
// over local caches,
// cache-aware routing beats random routing; random routing is the same
// under the same seed.
func TestRunRouted(t *testing.T) {
	const capacity = 600_000
	reqs := readTrace(t, 1500)
	run := func(t *testing.T, routing string, local bool, seed uint64) replay.RoutedReport {
		var insts []replay.Instance
		if local {
			for range 3 {
				_, c := startPool(t, capacity/3)
				insts = append(insts, replay.Instance{Client: c})
			}
		} else {
			lc, c := startPool(t, capacity)
			insts = append(insts, replay.Instance{Client: c})
			for i := range 2 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				c2, err := lc.NewClient(ctx, client.Config{LocalHostname: fmt.Sprint("replay-test-instance-", i)})
				cancel()
				require.NoError(t, err)
				t.Cleanup(func() { c2.Close() })
				insts = append(insts, replay.Instance{Client: c2})
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a bound on hangs, generous for -race on a loaded 2-core machine
		defer cancel()
		rep, err := replay.RunRouted(ctx, insts, reqs, replay.RouteConfig{
			Config:  replay.Config{BytesPerToken: bytesPerToken, CapacityTokens: capacity},
			Routing: routing, Seed: seed, Shared: !local})
		require.NoError(t, err)
		require.Equal(t, len(reqs), rep.Requests)
		sum := 0
		for _, n := range rep.InstanceRequests {
			sum += n
		}
		require.Equal(t, len(reqs), sum)
		assert.Zero(t, rep.ContentMismatches)
		assert.LessOrEqual(t, rep.BlockHitRatio, rep.OPTBlockHitRatio)
		t.Logf("%s local=%v: block hit ratio %.4f, per instance %v, mean queue %.2f s", routing, local, rep.BlockHitRatio, rep.InstanceRequests, rep.MeanQueueS)
		return rep
	}
	globalRR := run(t, replay.RouteRoundRobin, false, 1)
	globalRandom := run(t, replay.RouteRandom, false, 1)
	assert.InDelta(t, globalRR.BlockHitRatio, globalRandom.BlockHitRatio, 0.01, "one shared pool: routing does not matter")
	localRandom := run(t, replay.RouteRandom, true, 1)
	localAware := run(t, replay.RouteCacheAware, true, 1)
	// (On this short prefix cache-aware local caches can match the shared
	// pool; the whole traces, in the README, put the shared pool ahead.)
	assert.Greater(t, globalRandom.BlockHitRatio, localRandom.BlockHitRatio)
	assert.Greater(t, localAware.BlockHitRatio, localRandom.BlockHitRatio)
	again := run(t, replay.RouteRandom, true, 1)
	assert.Equal(t, localRandom.InstanceRequests, again.InstanceRequests, "random routing is seeded")
	other := run(t, replay.RouteRandom, true, 2)
	assert.NotEqual(t, localRandom.InstanceRequests, other.InstanceRequests)

	for _, tc := range []struct {
		cfg  replay.RouteConfig
		want string
	}{
		{replay.RouteConfig{Routing: "sticky", Config: replay.Config{BytesPerToken: 16, CapacityTokens: 1}}, `unknown routing "sticky"`},
		{replay.RouteConfig{Routing: replay.RouteRandom, Config: replay.Config{BytesPerToken: 16, CapacityTokens: 1, Speed: 1}}, "speed 1 must be 0"},
	} {
		_, err := replay.RunRouted(context.Background(), []replay.Instance{{}}, reqs, tc.cfg)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
	_, err := replay.RunRouted(context.Background(), nil, reqs, replay.RouteConfig{Routing: replay.RouteRandom})
	assert.ErrorContains(t, err, "no instances")
}
