package storebench

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/transfer/transferbench"
)

// ErrConfig reports an unusable Config or client list.
var ErrConfig = errors.New("storebench: bad config")

// ErrCorrupt reports a value read back that differs from what was written.
var ErrCorrupt = errors.New("storebench: value mismatch")

// headerSize is the per-value header: uint64 sequence number, uint64
// worker id (little-endian). Values must be at least this long.
const headerSize = 16

// MinValueSize is the smallest Config.ValueSize, in bytes: the per-value
// header.
const MinValueSize = headerSize

// maxGetKeys bounds the keys one worker's get phase cycles over.
const maxGetKeys = 4096

// Config is one run. Ops or Duration selects how long each phase runs.
type Config struct {
	// ValueSize is the bytes of every value; at least 16 (the header).
	ValueSize int
	// Ops is the operations per phase over all workers; 0 = run each phase
	// for Duration.
	Ops int
	// Duration is each phase's measured time when Ops is 0.
	Duration time.Duration
	// Concurrency is the number of workers, each using its own client;
	// default len(clients).
	Concurrency int
	// Warmup is how long workers put, unmeasured, before the put phase
	// (opens the connections, faults in pages); 0 or negative = none
	// (`mooncake bench store` defaults to 500 ms).
	Warmup time.Duration
	// WarmupFill extends the warmup, in steps of Warmup, until Capacity
	// bytes have been written: the pool is then full and every measured put
	// reuses memory freed by eviction, the steady state of a cache (as
	// redis-benchmark's SET, which overwrites one key). Without it the put
	// phase also pays the first touch of the pool's pages.
	WarmupFill bool
	// Measure, when set, is called once after the warmup, just before the
	// put phase (e.g. to start a CPU profile of the measured phases only);
	// its error ends Run with it.
	Measure func() error
	// KeyPrefix prefixes every key; default "storebench-<random>/".
	KeyPrefix string
	// Capacity is the pool's size in bytes, used to size the get phase's
	// working set; 0 = ask the master (client Stats).
	Capacity uint64
	// Stages times every step of each operation (client.WithStages) and
	// reports them in Phase.Stages.
	Stages bool
}

// StageStat is one step's time per operation over a phase, in ms.
type StageStat struct {
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
}

// Phase is the outcome of one phase. GBps counts value bytes (1e9 bytes).
type Phase struct {
	Ops       int64   `json:"ops"`
	Bytes     int64   `json:"bytes"`
	ElapsedS  float64 `json:"elapsed_s"`
	OpsPerSec float64 `json:"ops_per_s"`
	GBps      float64 `json:"gbps"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	// CPUSPerGB is this process's CPU time (user + system, all threads)
	// in seconds per 1e9 bytes of values moved in the phase: the clients,
	// and the master and nodes too when the pool runs in this process
	// (`mooncake bench store` without --master). Comparable with
	// transferbench.Result.CPUSPerGB. Ours.
	CPUSPerGB float64 `json:"cpu_s_per_gb"`
	// Stages, with Config.Stages, is the time per operation of each step
	// the client took (client.Stage names) and "other" (the rest: client
	// code between steps, scheduling), keyed by name.
	Stages map[string]StageStat `json:"stages,omitempty"`
}

// Result is a run's outcome. Protocol is left for the caller to fill in.
type Result struct {
	Protocol    string `json:"protocol,omitempty"`
	ValueSize   int    `json:"value_size"`
	Concurrency int    `json:"concurrency"`
	// GetKeys is the number of distinct keys the get phase read.
	GetKeys int   `json:"get_keys"`
	Put     Phase `json:"put"`
	Get     Phase `json:"get"`
}

// stored is a key the get phase reads and what its header must say.
type stored struct {
	key         string
	seq, writer uint64
}

// worker is one goroutine's state; only that goroutine touches it during a
// phase.
type worker struct {
	id       uint64
	c        *client.Client
	src, dst *memory.Region // value buffers, registered with c's engine
	prefix   string
	key      []byte   // key scratch
	puts     uint64   // keys written: sequence numbers 0..puts-1
	workers  int      // how many workers share gets
	gets     []stored // the get phase's keys, shared by all workers (read-only then)
	verified bool     // a value was compared byte for byte
	lat      []time.Duration
	stages   *client.Stages                        // with Config.Stages: this op's steps
	stageLat [client.NumStages + 1][]time.Duration // per step (and other), per op
}

// Run measures put then get of cfg.ValueSize-byte values with
// cfg.Concurrency workers, worker i using clients[i]. Errors: ErrConfig for
// a bad config; ErrCorrupt for a wrong value read back; the first failed
// operation otherwise (any failure ends the run, as redis-benchmark).
func Run(ctx context.Context, clients []*client.Client, cfg Config) (Result, error) {
	if cfg.Concurrency == 0 {
		cfg.Concurrency = len(clients)
	}
	switch {
	case cfg.ValueSize < headerSize:
		return Result{}, fmt.Errorf("%w: value size %d < %d", ErrConfig, cfg.ValueSize, headerSize)
	case cfg.Ops < 0 || (cfg.Ops == 0 && cfg.Duration <= 0):
		return Result{}, fmt.Errorf("%w: want ops > 0 or a duration > 0 (ops %d, duration %v)", ErrConfig, cfg.Ops, cfg.Duration)
	case cfg.Concurrency <= 0 || len(clients) < cfg.Concurrency || (cfg.Ops > 0 && cfg.Ops < cfg.Concurrency):
		return Result{}, fmt.Errorf("%w: concurrency %d with %d clients and %d ops (one client per worker, at least one op each)", ErrConfig, cfg.Concurrency, len(clients), cfg.Ops)
	}
	if cfg.KeyPrefix == "" {
		var b [6]byte
		crand.Read(b[:])
		cfg.KeyPrefix = "storebench-" + hex.EncodeToString(b[:]) + "/"
	}
	if cfg.Capacity == 0 {
		st, err := clients[0].Stats(ctx)
		if err != nil {
			return Result{}, err
		}
		cfg.Capacity = st.Capacity
	}
	res := Result{ValueSize: cfg.ValueSize, Concurrency: cfg.Concurrency}
	ws := make([]*worker, cfg.Concurrency)
	defer func() {
		for _, w := range ws {
			if w != nil {
				w.close()
			}
		}
	}()
	for i := range ws {
		w, err := newWorker(ctx, uint64(i), clients[i], cfg)
		if err != nil {
			return res, err
		}
		ws[i] = w
	}
	if cfg.Warmup > 0 {
		wcfg := cfg
		wcfg.Ops, wcfg.Duration = 0, cfg.Warmup
		for written := uint64(0); ; {
			p, err := phase(ctx, ws, wcfg, (*worker).put)
			if err != nil {
				return res, err
			}
			written += uint64(p.Bytes)
			if !cfg.WarmupFill || written >= cfg.Capacity {
				break
			}
		}
	}
	if cfg.Measure != nil {
		if err := cfg.Measure(); err != nil {
			return res, err
		}
	}
	var err error
	if res.Put, err = phase(ctx, ws, cfg, (*worker).put); err != nil {
		return res, err
	}
	perWorker := cfg.Capacity / 2 / uint64(cfg.ValueSize) / uint64(len(ws))
	perWorker = min(max(perWorker, 1), maxGetKeys)
	var gets []stored
	for _, w := range ws {
		found, err := w.newestStored(ctx, int(perWorker))
		if err != nil {
			return res, err
		}
		gets = append(gets, found...)
	}
	if len(gets) == 0 {
		return res, fmt.Errorf("storebench: none of the newest keys written is left in the pool")
	}
	for _, w := range ws {
		w.gets, w.workers = gets, len(ws)
	}
	res.GetKeys = len(gets)
	// Every worker compares the first value it reads byte for byte.
	res.Get, err = phase(ctx, ws, cfg, (*worker).get)
	return res, err
}

func newWorker(ctx context.Context, id uint64, c *client.Client, cfg Config) (*worker, error) {
	w := &worker{id: id, c: c, prefix: cfg.KeyPrefix + "w" + strconv.FormatUint(id, 10) + "/"}
	if cfg.Stages {
		w.stages = &client.Stages{}
	}
	var err error
	if w.src, err = register(ctx, c, cfg.ValueSize); err != nil {
		return nil, err
	}
	if w.dst, err = register(ctx, c, cfg.ValueSize); err != nil {
		w.close()
		return nil, err
	}
	// The body after the header is the same for every value (any worker
	// can check any value).
	rand.NewChaCha8([32]byte{'s', 't', 'o', 'r', 'e', 'b', 'e', 'n', 'c', 'h'}).Read(w.src.Bytes()[headerSize:])
	return w, nil
}

// register maps a memfd-backed buffer and registers it with c's engine.
func register(ctx context.Context, c *client.Client, n int) (*memory.Region, error) {
	r, err := memory.MapShared(n, "storebench")
	if err != nil {
		return nil, err
	}
	// Warm, as any application buffer in use is: the first get into a
	// fresh buffer would otherwise pay a page fault per 4 KiB.
	if err := r.Prefault(); err != nil && !errors.Is(err, memory.ErrPrefaultUnsupported) {
		r.Close()
		return nil, err
	}
	if err := c.Engine().RegisterRegion(ctx, r, "cpu:0", false); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (w *worker) close() {
	for _, r := range []*memory.Region{w.src, w.dst} {
		if r != nil {
			_ = w.c.UnregisterBuffer(context.Background(), r.Bytes())
			r.Close()
		}
	}
	w.src, w.dst = nil, nil
}

func (w *worker) keyOf(seq uint64) string {
	w.key = strconv.AppendUint(append(w.key[:0], w.prefix...), seq, 10)
	return string(w.key)
}

// put writes the next key (op is unused: keys are per worker).
func (w *worker) put(ctx context.Context, _ int64) error {
	seq := w.puts
	src := w.src.Bytes()
	binary.LittleEndian.PutUint64(src[0:], seq)
	binary.LittleEndian.PutUint64(src[8:], w.id)
	key := w.keyOf(seq)
	if err := w.c.PutFrom(ctx, key, src, nil); err != nil {
		return fmt.Errorf("storebench: put %q: %w", key, err)
	}
	w.puts++
	return nil
}

// get reads the op-th key of this worker's share of the get set, round
// robin (workers start at different keys), and checks it.
func (w *worker) get(ctx context.Context, op int64) error {
	g := &w.gets[int((op*int64(w.workers)+int64(w.id))%int64(len(w.gets)))]
	dst := w.dst.Bytes()
	n, err := w.c.GetInto(ctx, g.key, dst)
	if err != nil {
		return fmt.Errorf("storebench: get %q: %w", g.key, err)
	}
	if n != len(dst) {
		return fmt.Errorf("%w: %q: %d bytes, want %d", ErrCorrupt, g.key, n, len(dst))
	}
	if seq, id := binary.LittleEndian.Uint64(dst[0:]), binary.LittleEndian.Uint64(dst[8:]); seq != g.seq || id != g.writer {
		return fmt.Errorf("%w: %q holds sequence %d of worker %d, want %d of %d", ErrCorrupt, g.key, seq, id, g.seq, g.writer)
	}
	if !w.verified {
		if !bytes.Equal(dst[headerSize:], w.src.Bytes()[headerSize:]) {
			return fmt.Errorf("%w: %q: body differs from what was written", ErrCorrupt, g.key)
		}
		w.verified = true
	}
	return nil
}

// newestStored returns up to n of the worker's newest keys that the pool
// still holds, checking existence newest first in chunks of n, at most 4n
// keys back (checking grants the keys a lease, so they are not evicted
// while the get phase reads them; checking about n keys leases no more
// than needed). A worker that finished long before the others may have
// none left: theirs evicted its keys.
func (w *worker) newestStored(ctx context.Context, n int) ([]stored, error) {
	var out []stored
	hi := w.puts // check [lo, hi) next
	for chunk := 0; chunk < 4 && hi > 0 && len(out) < n; chunk++ {
		lo := hi - min(hi, uint64(n))
		var keys []string
		for s := lo; s < hi; s++ {
			keys = append(keys, w.keyOf(s))
		}
		ok, err := w.c.BatchIsExist(ctx, keys)
		if err != nil {
			return nil, fmt.Errorf("storebench: worker %d: exist: %w", w.id, err)
		}
		for i := len(keys) - 1; i >= 0 && len(out) < n; i-- {
			if ok[i] {
				out = append(out, stored{key: keys[i], seq: lo + uint64(i), writer: w.id})
			}
		}
		hi = lo
	}
	return out, nil
}

// phase runs op on every worker, cfg.Ops operations in all or for
// cfg.Duration, and measures it. The first error cancels the others.
func phase(ctx context.Context, ws []*worker, cfg Config, op func(*worker, context.Context, int64) error) (Phase, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	start, cpu0 := time.Now(), transferbench.ProcessCPU()
	end := start.Add(cfg.Duration)
	for i, w := range ws {
		quota := int64(-1) // until end
		if cfg.Ops > 0 {
			quota = int64(cfg.Ops / len(ws))
			if i < cfg.Ops%len(ws) {
				quota++
			}
		}
		w.lat = w.lat[:0]
		for k := range w.stageLat {
			w.stageLat[k] = w.stageLat[k][:0]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			octx := ctx
			if w.stages != nil {
				octx = client.WithStages(ctx, w.stages)
			}
			for n := int64(0); quota < 0 || n < quota; n++ {
				t0 := time.Now()
				if ctx.Err() != nil || (quota < 0 && !t0.Before(end)) {
					return
				}
				if w.stages != nil {
					w.stages.Reset()
				}
				if err := op(w, octx, n); err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
					cancel()
					return
				}
				d := time.Since(t0)
				w.lat = append(w.lat, d)
				if w.stages != nil {
					w.recordStages(d)
				}
			}
		}()
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), transferbench.ProcessCPU()-cpu0
	if first != nil {
		return Phase{}, first
	}
	if err := ctx.Err(); err != nil {
		return Phase{}, err
	}
	var lat []time.Duration
	for _, w := range ws {
		lat = append(lat, w.lat...)
	}
	p := Phase{Ops: int64(len(lat)), ElapsedS: elapsed.Seconds()}
	p.Bytes = p.Ops * int64(cfg.ValueSize)
	p.OpsPerSec = float64(p.Ops) / elapsed.Seconds()
	p.GBps = float64(p.Bytes) / elapsed.Seconds() / 1e9
	p.CPUSPerGB = transferbench.CPUPerGB(cpu, p.Bytes)
	slices.Sort(lat)
	p.P50Ms, p.P99Ms = pct(lat, 0.50), pct(lat, 0.99)
	if ws[0].stages != nil {
		p.Stages = map[string]StageStat{}
		for k := range ws[0].stageLat {
			var ds []time.Duration
			var sum time.Duration
			for _, w := range ws {
				ds = append(ds, w.stageLat[k]...)
			}
			for _, d := range ds {
				sum += d
			}
			if sum == 0 {
				continue // a step this phase does not take
			}
			slices.Sort(ds)
			name := "other"
			if k < int(client.NumStages) {
				name = client.Stage(k).String()
			}
			p.Stages[name] = StageStat{MeanMs: float64(sum) / float64(len(ds)) / float64(time.Millisecond), P50Ms: pct(ds, 0.50), P99Ms: pct(ds, 0.99)}
		}
	}
	return p, nil
}

// recordStages appends this op's step times, and the rest of total, to
// w.stageLat.
func (w *worker) recordStages(total time.Duration) {
	rest := total
	for k, d := range w.stages.D {
		w.stageLat[k] = append(w.stageLat[k], d)
		rest -= d
	}
	w.stageLat[client.NumStages] = append(w.stageLat[client.NumStages], rest)
}

// pct is the p-quantile (nearest rank) of sorted ds, in milliseconds.
func pct(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	i := min(max(int(math.Ceil(p*float64(len(ds))))-1, 0), len(ds)-1)
	return float64(ds[i]) / float64(time.Millisecond)
}
