package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/mooncake-go/mooncake/core/kvpool/geometry"
	"github.com/mooncake-go/mooncake/core/replay"
	"github.com/mooncake-go/mooncake/core/replay/trace"
	"github.com/mooncake-go/mooncake/core/replay/traces"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// replayFlags are `mooncake replay`'s flags.
type replayFlags struct {
	tracePath, masterAddr, clusterID, metaURL, poolSize, model string
	nodes, limit                                               int
	capacityTokens, bytesPerToken                              int64
	speed                                                      float64
	jsonOut                                                    bool
	leaseTTL                                                   time.Duration
	evictRatio, watermark                                      float64
	tls                                                        tlsFlags
	// poolTLS and etcdTLS are loaded from tls by runReplay.
	poolTLS, etcdTLS                         *tlsconfig.Config
	capacities, plotPath, policies, routings string
	instances                                int
	localCaches                              bool
	seed                                     uint64
}

// runResult is one run of a replay (one capacity, policy and routing) as
// `--json` prints it: the replay.Report's fields plus what was run.
type runResult struct {
	replay.Report
	Trace       string `json:"trace"`
	Policy      string `json:"eviction_policy"` // "external" with --master: the master's own
	Routing     string `json:"routing"`         // "none" for one instance
	Instances   int    `json:"instances"`
	LocalCaches bool   `json:"local_caches"`
	PoolMode    string `json:"pool_mode"` // "in-process" or "external"
	Nodes       int    `json:"nodes"`
	// LeaseTTLms, EvictionRatio and Watermark are the in-process master's settings.
	LeaseTTLms    float64 `json:"lease_ttl_ms"`
	EvictionRatio float64 `json:"eviction_ratio"`
	Watermark     float64 `json:"eviction_high_watermark"`
	Speed         float64 `json:"speed"`
	Limit         int     `json:"limit"`
	// With --instances > 1: requests per instance and the prefill queue
	// requests met (replay.RoutedReport).
	InstanceRequests []int   `json:"instance_requests,omitempty"`
	MeanQueueS       float64 `json:"mean_queue_s,omitempty"`
	MaxQueueS        float64 `json:"max_queue_s,omitempty"`
}

// defaultCapacityTokens sizes the pool when neither --pool-size nor
// --capacity-tokens is given: 3M tokens, the local-cache size the FAST'25
// paper discusses.
const defaultCapacityTokens = 3_000_000

// defaultBytesPerToken is a scaled-down KV geometry (16 B/token = 8 KiB
// blocks) so the whole conversation trace replays in about a minute on 2
// cores; hit ratios depend only on tokens, not on bytes per token.
const defaultBytesPerToken = 16

func replayCmd() *cobra.Command {
	var f replayFlags
	c := &cobra.Command{
		Use:   "replay",
		Short: "Replay a Mooncake request trace against a KV-cache pool (default: the embedded conversation trace on an in-process pool)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return runReplay(cmd, f) },
	}
	fl := c.Flags()
	fl.StringVar(&f.tracePath, "trace", "", "JSONL trace file (default: the embedded conversation_trace.jsonl)")
	fl.StringVar(&f.masterAddr, "master", "", "master gRPC address; empty = start a master and --nodes nodes in-process on 127.0.0.1")
	fl.StringVar(&f.clusterID, "cluster-id", "mooncake_cluster", "HA cluster an etcd:// --master follows (the masters' --cluster_id)")
	fl.StringVar(&f.metaURL, "metadata-server", "", "transfer metadata URL with --master (default http://<master host>:8080/metadata)")
	fl.IntVar(&f.nodes, "nodes", 2, "in-process storage nodes")
	fl.StringVar(&f.poolSize, "pool-size", "", "pool size, e.g. 512MiB, 4GiB (exclusive with --capacity-tokens)")
	fl.Int64Var(&f.capacityTokens, "capacity-tokens", 0, "size the pool to hold N tokens at the chosen geometry (default 3000000; with --master, the pool's capacity)")
	fl.Int64Var(&f.bytesPerToken, "bytes-per-token", 0, "KV bytes per token (default 16, or the --model's)")
	fl.StringVar(&f.model, "model", "", "model geometry preset: "+fmt.Sprint(geometry.Names()))
	fl.Float64Var(&f.speed, "speed", 0, "0 = as fast as possible; 1 = real time from the timestamps; X = X times real time")
	fl.IntVar(&f.limit, "limit", 0, "replay only the first N requests (0 = all)")
	fl.BoolVar(&f.jsonOut, "json", false, "print one JSON object instead of the report (a list of them, one per run, for a sweep)")
	fl.StringVar(&f.capacities, "capacities", "", "sweep: comma-separated capacities, tokens (500000, 0.5M, 3M) or sizes (512MiB, 4GiB), one in-process run each, one after another")
	fl.StringVar(&f.plotPath, "plot", "", "sweep: draw block hit ratio vs capacity (one line per policy, the LRU reference and the OPT bound) into this PNG file")
	fl.IntVar(&f.instances, "instances", 1, "engine instances the trace is routed over (in-process pools only); they share one pool of the capacity, or see --local-caches")
	fl.StringVar(&f.routings, "routing", replay.RouteCacheAware, "with --instances > 1: "+strings.Join(replay.Routings(), "|")+"; a comma-separated list runs each")
	fl.BoolVar(&f.localCaches, "local-caches", false, "with --instances N: each instance has its own pool of capacity/N instead of sharing one")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of --routing random")
	fl.StringVar(&f.policies, "eviction-policy", "lru", "in-process master's eviction policy: "+strings.Join(master.EvictionPolicies(), "|")+"; a comma-separated list runs each (a sweep)")
	fl.DurationVar(&f.leaseTTL, "lease-ttl", 100*time.Millisecond, "in-process master: lease granted by each read (a replay at full speed touches thousands of blocks per second; a 10 s lease would pin the whole pool)")
	fl.Float64Var(&f.evictRatio, "eviction-ratio", 0.05, "in-process master: fraction of capacity freed per eviction pass")
	f.tls.register(fl, "to --master and its metadata server; without --master the in-process pool runs with it too", true, true)
	fl.Float64Var(&f.watermark, "eviction-high-watermark", 1.0, "in-process master: usage above which eviction runs; 1.0 = only when an allocation fails, so the whole pool holds blocks as the offline bound assumes")
	return c
}

func usage(format string, args ...any) error {
	return &exitError{2, "mooncake replay: " + fmt.Sprintf(format, args...)}
}

func runReplay(cmd *cobra.Command, f replayFlags) error {
	// Geometry and capacity. 0 is not a size: an explicit 0 is refused
	// rather than read as "the default" (the flags' zero values only mean
	// "not given").
	if cmd.Flags().Changed("bytes-per-token") && f.bytesPerToken == 0 {
		return usage("--bytes-per-token 0: must be > 0 (omit it for the default: %d B/token, or the --model's)", defaultBytesPerToken)
	}
	if cmd.Flags().Changed("capacity-tokens") && f.capacityTokens == 0 {
		return usage("--capacity-tokens 0: must be > 0 (omit it for the default: %d tokens in-process, the pool's capacity with --master)", defaultCapacityTokens)
	}
	bpt := f.bytesPerToken
	if f.model != "" {
		m, err := geometry.Lookup(f.model)
		if err != nil {
			return usage("--model: %v", err)
		}
		if bpt != 0 && bpt != m.BytesPerToken() {
			return usage("--bytes-per-token %d contradicts --model %s (%d B/token)", bpt, m.Name, m.BytesPerToken())
		}
		bpt = m.BytesPerToken()
	}
	if bpt == 0 {
		bpt = defaultBytesPerToken
	}
	if bpt < 0 {
		return usage("--bytes-per-token %d must be > 0", bpt)
	}
	if f.poolSize != "" && f.capacityTokens != 0 {
		return usage("give --pool-size or --capacity-tokens, not both")
	}
	capTokens := f.capacityTokens
	if f.poolSize != "" {
		n, err := geometry.ParseSize(f.poolSize)
		if err != nil || n <= 0 {
			return usage("--pool-size %q: must be a positive size such as 512MiB or 4GiB", f.poolSize)
		}
		capTokens = n / bpt
		if capTokens == 0 {
			return usage("--pool-size %s holds less than one token at %d B/token", f.poolSize, bpt)
		}
	}
	if capTokens < 0 {
		return usage("--capacity-tokens %d must be > 0", capTokens)
	}
	sweep := cmd.Flags().Changed("capacities")
	var caps []int64
	if sweep {
		if f.poolSize != "" || f.capacityTokens != 0 {
			return usage("give --capacities, or one --pool-size / --capacity-tokens, not both")
		}
		if f.masterAddr != "" {
			return usage("--capacities runs in-process pools; it cannot be used with --master")
		}
		var err error
		if caps, err = parseCapacities(f.capacities, bpt); err != nil {
			return usage("%v", err)
		}
	} else {
		if capTokens == 0 {
			capTokens = defaultCapacityTokens
		}
		caps = []int64{capTokens}
	}
	policies := strings.Split(f.policies, ",")
	for i, p := range policies {
		policies[i] = strings.TrimSpace(p)
		if !slices.Contains(master.EvictionPolicies(), policies[i]) {
			return usage("--eviction-policy item %d %q: unknown policy (want %s)", i+1, p, strings.Join(master.EvictionPolicies(), "|"))
		}
	}
	routings := []string{"none"}
	if f.instances < 1 {
		return usage("--instances %d must be >= 1", f.instances)
	}
	if f.instances > 1 {
		if f.masterAddr != "" {
			return usage("--instances runs in-process pools; it cannot be used with --master")
		}
		if f.speed != 0 {
			return usage("--instances replays on the trace's clock as fast as it can; --speed must be 0")
		}
		routings = strings.Split(f.routings, ",")
		for i, r := range routings {
			routings[i] = strings.TrimSpace(r)
			if !slices.Contains(replay.Routings(), routings[i]) {
				return usage("--routing item %d %q: unknown routing (want %s)", i+1, r, strings.Join(replay.Routings(), "|"))
			}
		}
	} else if cmd.Flags().Changed("routing") || f.localCaches {
		return usage("--routing and --local-caches need --instances N > 1")
	}
	if f.masterAddr != "" && cmd.Flags().Changed("eviction-policy") {
		return usage("--eviction-policy sets the in-process master's policy; an external master has its own (mooncake master --eviction_policy)")
	}
	if f.plotPath != "" && f.jsonOut && f.plotPath == "-" {
		return usage("--plot needs a file name")
	}
	if f.nodes <= 0 {
		return usage("--nodes %d must be > 0", f.nodes)
	}
	if f.speed < 0 || math.IsNaN(f.speed) || math.IsInf(f.speed, 0) {
		return usage("--speed %v must be a finite number >= 0", f.speed)
	}
	if f.limit < 0 {
		return usage("--limit %d must be >= 0 (0 = all)", f.limit)
	}
	if f.leaseTTL <= 0 {
		return usage("--lease-ttl %v must be > 0", f.leaseTTL)
	}
	if f.evictRatio <= 0 || f.evictRatio > 1 || f.watermark <= 0 || f.watermark > 1 {
		return usage("--eviction-ratio %v and --eviction-high-watermark %v must be in (0,1]", f.evictRatio, f.watermark)
	}
	for _, c := range caps {
		if c > math.MaxInt64/bpt {
			return usage("%d tokens at %d B/token overflow", c, bpt)
		}
	}
	if f.masterAddr == "" {
		// The in-process pool maps its memory here: refuse sizes this
		// machine cannot hold instead of swapping or being killed.
		// Half: the replay client's buffers and the kernel's page cache
		// share the machine with the pool. Sweep runs are one at a time.
		big := slices.Max(caps)
		if err := checkMemory(fmt.Sprintf("an in-process pool of %d tokens at %d B/token", big, bpt), big*bpt, availableMemory(), 0.5); err != nil {
			return usage("%v; pass a smaller --pool-size, --capacity-tokens or --capacities", err)
		}
	}

	// Trace: parsed whole before anything starts, so a bad line costs nothing.
	var reqs []trace.Request
	var err error
	if f.tracePath == "" {
		reqs, err = readAll(trace.NewReader(bytes.NewReader(traces.Conversation), traces.ConversationName), f.limit)
	} else {
		reqs, err = trace.ReadFile(f.tracePath, f.limit)
	}
	if err != nil {
		var le *trace.LineError
		if errors.As(err, &le) {
			return &exitError{2, le.Error()}
		}
		var pe *os.PathError
		if errors.As(err, &pe) {
			// The input the command line names is not there: a usage
			// error, as a malformed line is.
			return usage("cannot read trace %s: %v", pe.Path, pe.Err)
		}
		return &exitError{1, "mooncake replay: " + err.Error()}
	}
	if len(reqs) == 0 {
		name := f.tracePath
		if name == "" {
			name = traces.ConversationName
		}
		return usage("trace %s is empty: it holds no requests (one JSON object per line: timestamp, input_length, output_length, hash_ids)", name)
	}

	if f.poolTLS, f.etcdTLS, err = f.tls.load("replay"); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// Keys are namespaced by trace and geometry, so replays of different
	// traces against one pool do not read each other's blocks.
	traceName := traces.ConversationName
	if f.tracePath != "" {
		traceName = filepath.Base(f.tracePath)
	}
	traceName = strings.TrimSuffix(strings.TrimSuffix(traceName, " (embedded)"), ".jsonl")

	type job struct {
		capTokens int64
		policy    string
		routing   string
	}
	var jobs []job
	for _, p := range policies {
		for _, rt := range routings {
			for _, c := range caps {
				jobs = append(jobs, job{c, p, rt})
			}
		}
	}
	var progress func(run, done int)
	if term.IsTerminal(int(os.Stderr.Fd())) && !f.jsonOut {
		bar := progressbar.NewOptions(len(reqs)*len(jobs), progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription("replay"), progressbar.OptionShowCount(),
			progressbar.OptionShowIts(), progressbar.OptionSetItsString("req"),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
		progress = func(run, done int) {
			if done == 1 && len(jobs) > 1 {
				bar.Describe(fmt.Sprintf("replay %d/%d (%s, %s tokens)", run+1, len(jobs), jobs[run].policy, formatTokens(jobs[run].capTokens)))
			}
			bar.Set(run*len(reqs) + done)
		}
		defer bar.Finish()
	}
	var results []runResult
	var runErr error
	for i, j := range jobs {
		res, ran, err := replayOne(ctx, f, reqs, traceName, bpt, j.capTokens, j.policy, j.routing, func(done int) {
			if progress != nil {
				progress(i, done)
			}
		})
		if ran {
			results = append(results, res)
		}
		if err != nil {
			if !ran {
				return err
			}
			runErr = err // report what ran, then fail
			break
		}
	}

	out := cmd.OutOrStdout()
	if f.plotPath != "" {
		title := fmt.Sprintf("%s: block hit ratio vs capacity (%d requests)", traceName, len(reqs))
		if err := plotSweep(f.plotPath, title, results); err != nil {
			return &exitError{1, "mooncake replay: --plot " + f.plotPath + ": " + err.Error()}
		}
	}
	switch {
	case f.jsonOut && len(results) == 1 && !sweep:
		if err := json.NewEncoder(out).Encode(results[0]); err != nil {
			return err
		}
	case f.jsonOut:
		if err := json.NewEncoder(out).Encode(results); err != nil {
			return err
		}
	case len(results) == 1 && !sweep:
		printReport(out, f, results[0].Report, len(reqs))
	default:
		src := f.tracePath
		if src == "" {
			src = traces.ConversationName
		}
		printSweep(out, src, len(reqs), results)
	}
	return runErr
}

// replayOne replays reqs once against an in-process pool of capTokens
// tokens run by policy, or against --master; progress gets the requests
// done. ran reports whether the replay started (its result is worth
// printing). A run that fails, or whose blocks could not be stored or
// read back, is an *exitError.
func replayOne(ctx context.Context, f replayFlags, reqs []trace.Request, traceName string, bpt, capTokens int64, policy, routing string, progress func(done int)) (res runResult, ran bool, err error) {
	res = runResult{Trace: traceName, Policy: policy, Routing: routing, Instances: 1, PoolMode: "in-process", Nodes: f.nodes,
		LeaseTTLms: float64(f.leaseTTL) / float64(time.Millisecond), EvictionRatio: f.evictRatio, Watermark: f.watermark,
		Speed: f.speed, Limit: f.limit}
	if f.instances > 1 {
		return replayRouted(ctx, f, reqs, res, bpt, capTokens, progress)
	}
	poolBytes := capTokens * bpt
	var cl *client.Client
	if f.masterAddr == "" {
		lc, err := startPool(ctx, f, poolBytes, policy)
		if err != nil {
			return res, false, err
		}
		defer lc.Close()
		if cl, err = lc.NewClient(ctx, client.Config{LocalHostname: "replay-client"}); err != nil {
			return res, false, &exitError{1, "mooncake replay: " + err.Error()}
		}
	} else {
		res.PoolMode, res.Policy, res.Nodes = "external", "external", 0
		res.LeaseTTLms, res.EvictionRatio, res.Watermark = 0, 0, 0
		mc, err := openMetadata(ctx, f.metaURL, f.masterAddr, f.poolTLS, f.etcdTLS)
		if err != nil {
			return res, false, metaExit("replay", err)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cl, err = client.New(cctx, client.Config{MasterAddr: f.masterAddr, ClusterID: f.clusterID, Metadata: mc, Transport: tcp.New(tcp.Config{}), RPCTimeout: 10 * time.Second,
			TLS: f.poolTLS, EtcdTLS: f.etcdTLS})
		cancel()
		if err != nil {
			if _, ok := client.Unreachable(err); ok {
				return res, false, masterExit("replay", f.masterAddr, err)
			}
			return res, false, &exitError{1, fmt.Sprintf("mooncake replay: cannot join the pool of master %s: %s", f.masterAddr, oneLineErr(err))}
		}
	}
	defer cl.Close()
	if f.masterAddr != "" && f.poolSize == "" && f.capacityTokens == 0 {
		// The references model the pool that is there, not the in-process default.
		if st, err := cl.Stats(ctx); err == nil && int64(st.Capacity)/bpt > 0 {
			capTokens = int64(st.Capacity) / bpt
		}
	}
	cfg := replay.Config{BytesPerToken: bpt, CapacityTokens: capTokens, Speed: f.speed,
		Namespace: fmt.Sprintf("mooncake-go/replay/%s/%dB/", traceName, bpt),
		Progress:  func(done, total int) { progress(done) }}
	rep, runErr := replay.Run(ctx, cl, reqs, cfg)
	diskTier := false
	if st, err := cl.Stats(context.Background()); err == nil {
		rep.EvictedObjects, rep.PoolBytes = st.EvictedObjects, st.Capacity
		diskTier = st.DiskCapacity > 0 || st.Offloads > 0
	}
	res.Report = rep
	return res, true, runFailure(f, rep, runErr, diskTier, len(reqs))
}

// startPool starts an in-process pool of poolBytes over f.nodes nodes
// whose master evicts by policy.
func startPool(ctx context.Context, f replayFlags, poolBytes int64, policy string) (*localcluster.Cluster, error) {
	seg := uint64((poolBytes + int64(f.nodes) - 1) / int64(f.nodes))
	lc, err := localcluster.Start(ctx, localcluster.Options{Nodes: f.nodes, SegmentSize: seg, TLS: f.poolTLS, Master: master.Config{
		DefaultLeaseTTL: f.leaseTTL, EvictionRatio: f.evictRatio, EvictionHighWatermark: f.watermark, EvictionPolicy: policy}})
	if err != nil {
		return nil, &exitError{1, "mooncake replay: start in-process pool: " + err.Error()}
	}
	return lc, nil
}

// replayRouted is replayOne over f.instances engine instances: one
// shared pool of capTokens, or (--local-caches) one pool of capTokens/N
// each.
func replayRouted(ctx context.Context, f replayFlags, reqs []trace.Request, res runResult, bpt, capTokens int64, progress func(done int)) (runResult, bool, error) {
	res.Instances, res.LocalCaches = f.instances, f.localCaches
	pools := 1
	poolBytes := capTokens * bpt
	if f.localCaches {
		pools = f.instances
		poolBytes /= int64(f.instances)
	}
	var lcs []*localcluster.Cluster
	defer func() {
		for _, lc := range lcs {
			lc.Close()
		}
	}()
	for range pools {
		lc, err := startPool(ctx, f, poolBytes, res.Policy)
		if err != nil {
			return res, false, err
		}
		lcs = append(lcs, lc)
	}
	insts := make([]replay.Instance, f.instances)
	for i := range insts {
		cl, err := lcs[i%pools].NewClient(ctx, client.Config{LocalHostname: fmt.Sprintf("replay-instance-%d", i)})
		if err != nil {
			return res, false, &exitError{1, "mooncake replay: " + err.Error()}
		}
		defer cl.Close()
		insts[i] = replay.Instance{Client: cl}
	}
	cfg := replay.RouteConfig{Config: replay.Config{BytesPerToken: bpt, CapacityTokens: capTokens,
		Namespace: fmt.Sprintf("mooncake-go/replay/%s/%dB/", res.Trace, bpt),
		Progress:  func(done, total int) { progress(done) }},
		Routing: res.Routing, Seed: f.seed, Shared: !f.localCaches}
	rr, runErr := replay.RunRouted(ctx, insts, reqs, cfg)
	for p := range pools { // instance p is on pool p
		if st, err := insts[p].Client.Stats(context.Background()); err == nil {
			rr.PoolBytes += st.Capacity
			rr.EvictedObjects += st.EvictedObjects
		}
	}
	res.Report = rr.Report
	res.InstanceRequests, res.MeanQueueS, res.MaxQueueS = rr.InstanceRequests, rr.MeanQueueS, rr.MaxQueueS
	return res, true, runFailure(f, rr.Report, runErr, false, len(reqs))
}

// runFailure is the *exitError for a replay that failed (runErr) or
// stored or read blocks wrongly, or nil.
func runFailure(f replayFlags, rep replay.Report, runErr error, diskTier bool, n int) error {
	if runErr != nil {
		if _, ok := client.Unreachable(runErr); ok && f.masterAddr != "" {
			return &exitError{1, fmt.Sprintf("mooncake replay: %s (after %d of %d requests)", client.MasterError(f.masterAddr, runErr), rep.Requests, n)}
		}
		return &exitError{1, "mooncake replay: " + oneLineErr(runErr)}
	}
	if rep.ContentMismatches > 0 || rep.PutFailures > 0 {
		hint := "is the pool smaller than a request, or are its nodes unreachable?"
		if rep.PutNoHandle > 0 && diskTier {
			hint = fmt.Sprintf("%d refused with NO_AVAILABLE_HANDLE: the DRAM was held by readers' leases (--default_kv_lease_ttl per read) or, with --offload_on_evict, by evicted objects still being copied to the disk tier (eviction is asynchronous); a put waits up to 1 s for either before it is refused: give the nodes more DRAM or shorten the lease", rep.PutNoHandle)
		} else if rep.PutNoHandle > 0 {
			hint = fmt.Sprintf("%d refused with NO_AVAILABLE_HANDLE: is the pool smaller than a request, or is its DRAM held by readers' leases or pins?", rep.PutNoHandle)
		}
		return &exitError{1, fmt.Sprintf("mooncake replay: %d content mismatches, %d blocks could not be stored (%s)", rep.ContentMismatches, rep.PutFailures, hint)}
	}
	return nil
}

func readAll(r *trace.Reader, limit int) ([]trace.Request, error) {
	var out []trace.Request
	for limit <= 0 || len(out) < limit {
		q, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, nil
}

func printReport(w io.Writer, f replayFlags, r replay.Report, n int) {
	src := f.tracePath
	if src == "" {
		src = traces.ConversationName
	}
	pool := "in-process (master + " + fmt.Sprint(f.nodes) + " nodes, tcp on 127.0.0.1)"
	if f.masterAddr != "" {
		pool = "master " + f.masterAddr
	}
	fmt.Fprintf(w, "Mooncake trace replay\n")
	fmt.Fprintf(w, "  trace            %s (%d requests)\n", src, n)
	fmt.Fprintf(w, "  pool             %s, %s = %d tokens at %d B/token\n", pool, geometry.FormatSize(int64(r.PoolBytes)), r.CapacityTokens, r.BytesPerToken)
	fmt.Fprintf(w, "Prefix hits\n")
	fmt.Fprintf(w, "  blocks           %d of %d hit: %.4f   (LRU reference %.4f, OPT bound %.4f)\n", r.BlocksHit, r.BlocksTotal, r.BlockHitRatio, r.LRURefBlockHitRatio, r.OPTBlockHitRatio)
	fmt.Fprintf(w, "  tokens           %d of %d hit: %.4f   (LRU reference %.4f)\n", r.TokensHit, r.TokensTotal, r.TokenHitRatio, r.LRURefTokenHitRatio)
	fmt.Fprintf(w, "  requests         %d of %d had a hit\n", r.RequestsWithHit, r.Requests)
	fmt.Fprintf(w, "Data\n")
	fmt.Fprintf(w, "  written          %s at %.3f GB/s (in put operations)\n", geometry.FormatSize(r.BytesWritten), r.WriteGBps)
	fmt.Fprintf(w, "  read             %s at %.3f GB/s (in get operations), %d content mismatches\n", geometry.FormatSize(r.BytesRead), r.ReadGBps, r.ContentMismatches)
	fmt.Fprintf(w, "  latency          put p50 %.3f ms p99 %.3f ms; get p50 %.3f ms p99 %.3f ms (per request)\n", r.PutP50ms, r.PutP99ms, r.GetP50ms, r.GetP99ms)
	fmt.Fprintf(w, "  evicted          %d objects\n", r.EvictedObjects)
	if r.ReadFailures+r.PutFailures > 0 {
		fmt.Fprintf(w, "  failures         %d reads (%d lease expired), %d puts\n", r.ReadFailures, r.LeaseExpired, r.PutFailures)
	}
	fmt.Fprintf(w, "  elapsed          %.1f s\n", r.ElapsedS)
}
