package vllm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/connectors/poolclient"
	"github.com/mooncake-go/mooncake/connectors/runtime"
	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// Region is one KV cache region of a worker: NumBlocks blocks of
// BlockBytes bytes, block b at Buf[b*BlockBytes:]. A layer's tensor gives
// one region (blocks-first layouts: FlashInfer, MLA) or two (the K and V
// halves of FlashAttention's [2, num_blocks, ...] layout); the shim
// derives them from strides. A block's pool value is the concatenation,
// in region order, of its bytes in every region (layer-wise mode: one
// value per layer, of that layer's regions). A region in GPU memory has a
// nil Buf and gives DeviceAddr and Device instead (the worker needs a
// runtime: SetDeviceRuntime).
type Region struct {
	// Buf is the region's host memory; nil for device memory.
	Buf []byte
	// DeviceAddr is the device address of the region's first byte when
	// Buf is nil.
	DeviceAddr uint64
	// Device is the CUDA device ordinal of DeviceAddr.
	Device     int
	BlockBytes uint64
	NumBlocks  uint64
	// Layer is the attention layer the region belongs to (0-based); only
	// layer-wise mode reads it.
	Layer int
}

// Stats are a worker's counters since the previous TakeStats.
type Stats struct {
	SavedBlocks, LoadedBlocks, FailedBlocks uint64
	SavedBytes, LoadedBytes                 uint64
	// LoadBusy and SaveBusy are the wall time during which at least one
	// pool load (save) of this worker was in flight: overlapping jobs
	// count once, so LoadedBytes/LoadBusy is the connector's load
	// throughput (json: nanoseconds).
	LoadBusy, SaveBusy time.Duration
}

// busy measures the wall time during which at least one job of a kind
// runs; guarded by Worker.mu.
type busy struct {
	active int
	since  time.Time
	total  time.Duration
}

// busyStart marks a job of b's kind started; the returned func marks it
// ended. Safe for concurrent jobs.
func (w *Worker) busyStart(b *busy) func() {
	w.mu.Lock()
	if b.active == 0 {
		b.since = time.Now()
	}
	b.active++
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		b.active--
		if b.active == 0 {
			b.total += time.Since(b.since)
		}
		w.mu.Unlock()
	}
}

// takeBusyLocked returns b's total so far, counting a running job up to
// now, and restarts the count.
func takeBusyLocked(b *busy) time.Duration {
	t := b.total
	b.total = 0
	if b.active > 0 {
		now := time.Now()
		t += now.Sub(b.since)
		b.since = now
	}
	return t
}

// Finished is get_finished's answer plus the failed blocks
// (get_block_ids_with_load_errors) of the same step.
type Finished struct {
	Sending      []string `json:"sending"`
	Recving      []string `json:"recving"`
	FailedBlocks []int    `json:"failed_blocks"`
	// Errors say why P/D receives in Recving failed, one line each
	// ("request R (transfer T): reason"), for the engine's log.
	Errors []string `json:"errors,omitempty"`
}

// errorTaker is what a Consumer may add: why its failed transfers failed,
// by transfer id, since the previous call.
type errorTaker interface {
	TakeErrors() map[string]error
}

// Pool is what a store-mode worker needs of the pool: core/store/client's
// Client fits.
type Pool interface {
	BatchPutFromParts(ctx context.Context, keys []string, parts [][][]byte, opts *client.PutOptions) []error
	BatchGetIntoParts(ctx context.Context, keys []string, dsts [][][]byte) ([]int, []error)
	RegisterBuffer(ctx context.Context, buf []byte) error
}

// Producer and Consumer are the P/D transfer halves of a worker (package
// vllm/pd implements them).
type Producer interface {
	Ready(transferID string, blockIDs []int)
	Drop(transferID string)
	Finished() []string
	Close() error
}

// Consumer receives KV pushed by a Producer.
type Consumer interface {
	Recv(transferID, bootstrapAddr, engineID string, blockIDs []int)
	Finished() (done []string, failedBlocks map[string][]int)
	Close() error
}

// PDFactory starts the P/D half of a worker over its registered regions;
// set by the pd wiring (pdwire.go).
type PDFactory func(ctx context.Context, s Settings, regions []Region) (Producer, Consumer, error)

// Worker is the worker half of the connector (vLLM's
// KVConnectorRole.WORKER, one per TP/PP rank). Per engine step the shim
// calls StartLoad (start_load_kv, with the step's metadata), WaitForSave
// (wait_for_save, after the forward) and GetFinished (get_finished and
// get_block_ids_with_load_errors). It is safe for concurrent use.
type Worker struct {
	s      Settings
	open   func(ctx context.Context) (Pool, func() error, error)
	pdNew  PDFactory
	closer func() error

	mu      sync.Mutex
	pool    Pool
	rt      *runtime.Worker
	regions []Region
	prod    Producer
	cons    Consumer
	// pending holds this step's saves and finished requests, started after
	// the forward wrote the blocks (WaitForSave or GetFinished).
	pending runtime.Plan
	// byLayer lists, per layer, the indexes of its regions (layer-wise
	// mode); gate is the current step's (layerwise.go).
	byLayer [][]int
	// blockBytes is the size in bytes of one block's pool value and
	// layerBytes[l] of its layer l object (layer-wise); set with regions.
	blockBytes int
	layerBytes []int
	// allRegions is 0..len(regions)-1 (moveBlocks' region list).
	allRegions []int
	// cuda reaches device regions (SetDeviceRuntime); staging is the host
	// staging of a store-mode worker with device regions (device.go).
	cuda    transfer.DeviceRuntime
	staging *deviceStaging
	// stagingBytes is the staging size; DeviceStagingBytes (tests shrink it).
	stagingBytes int
	gate         *stepGate
	// sendReq and recvReq map a P/D transfer id to its request id.
	sendReq, recvReq map[string]string
	closed           bool
	stats            Stats
	loadBusy         busy
	saveBusy         busy
	notes            []string // pool config remarks until TakeNotes
	// failNotes are store-mode load/save failures since the last
	// GetFinished (at most maxFailNotes; failDropped counts the rest).
	failNotes   []string
	failDropped int
}

// NewWorker makes the worker half; nothing is opened until
// RegisterKVCaches. Store mode loads the pool settings (Settings.PoolConfig
// with env; nil means the process environment); pd mode needs pd.
// Errors: ErrBadConfig.
func NewWorker(s Settings, env map[string]string, pd PDFactory) (*Worker, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	var open func(ctx context.Context) (Pool, func() error, error)
	var notes []string
	switch s.Mode {
	case ModePD:
		if pd == nil {
			return nil, fmt.Errorf("%w: unsupported: pd mode is not built into this library", ErrBadConfig)
		}
	case ModeStore:
		pc, n, err := s.poolConfig(env)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
		notes = n
		open = func(ctx context.Context) (Pool, func() error, error) {
			p, err := poolclient.Open(ctx, pc, poolclient.Options{Host: s.Host, Env: env, Timeout: s.ConnectTimeout})
			if err != nil {
				err = poolUnavailable(pc, s.ConnectTimeout, err)
				if !degradable(s, err) {
					return nil, nil, err
				}
				return noPool{err}, nil, nil
			}
			return p.Client, p.Close, nil
		}
	}
	w := newWorker(s, open, pd)
	w.notes = notes
	return w, nil
}

// TakeNotes returns, once, the remarks on this worker's pool config (see
// Scheduler.TakeNotes).
func (w *Worker) TakeNotes() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.notes
	w.notes = nil
	return n
}

// newWorker makes a worker whose pool comes from open (tests pass one).
func newWorker(s Settings, open func(ctx context.Context) (Pool, func() error, error), pd PDFactory) *Worker {
	return &Worker{s: s, open: open, pdNew: pd, sendReq: map[string]string{}, recvReq: map[string]string{}, stagingBytes: DeviceStagingBytes}
}

// SetDeviceRuntime gives the worker the CUDA runtime that reaches its
// device regions; call it before RegisterKVCaches. Without one,
// RegisterKVCaches refuses device regions with "unsupported: no CUDA
// runtime".
func (w *Worker) SetDeviceRuntime(rt transfer.DeviceRuntime) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cuda = rt
}

// RegisterKVCaches registers the worker's KV cache regions
// (register_kv_caches), once, before any transfer: every region must have
// the same NumBlocks, BlockBytes > 0 and Buf of at least
// NumBlocks*BlockBytes bytes (device regions: Buf nil, DeviceAddr set).
// Store mode opens the pool client (mounting global_segment_size bytes)
// and registers the regions' host memory with it (overlapping or adjacent
// regions as one span); with device regions it also allocates and
// registers DeviceStagingBytes of host staging through which blocks are
// copied (device to host before a put, host to device after a get, each
// copy complete before the block counts as moved). pd mode starts the
// producer or consumer (device regions registered with its transfer
// engine). Errors: ErrBadInput, ErrWrongRole (a second call),
// transfer.ErrUnsupported ("unsupported: no CUDA runtime") for device
// regions without SetDeviceRuntime, the runtime's for a bad device, the
// pool's.
func (w *Worker) RegisterKVCaches(ctx context.Context, regions []Region) error {
	if len(regions) == 0 {
		return fmt.Errorf("%w: no KV cache regions", ErrBadInput)
	}
	for i, r := range regions {
		switch {
		case r.BlockBytes == 0 || r.NumBlocks == 0:
			return fmt.Errorf("%w: region %d: %d blocks of %d bytes", ErrBadInput, i, r.NumBlocks, r.BlockBytes)
		case r.NumBlocks != regions[0].NumBlocks:
			return fmt.Errorf("%w: region %d has %d blocks, region 0 %d: every KV cache tensor must have the same block count", ErrBadInput, i, r.NumBlocks, regions[0].NumBlocks)
		case r.Buf == nil && r.DeviceAddr == 0:
			return fmt.Errorf("%w: region %d has neither host memory nor a device address", ErrBadInput, i)
		case r.Buf != nil && r.BlockBytes > uint64(len(r.Buf))/r.NumBlocks:
			return fmt.Errorf("%w: region %d: %d blocks of %d bytes do not fit its %d bytes", ErrBadInput, i, r.NumBlocks, r.BlockBytes, len(r.Buf))
		case r.Buf == nil && r.BlockBytes > (^uint64(0)-r.DeviceAddr)/r.NumBlocks:
			return fmt.Errorf("%w: region %d: %d blocks of %d bytes overflow the address space from %#x", ErrBadInput, i, r.NumBlocks, r.BlockBytes, r.DeviceAddr)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return runtime.ErrClosed
	}
	onDevice := false
	for i, r := range regions {
		if r.Buf != nil {
			continue
		}
		onDevice = true
		if w.cuda == nil {
			return fmt.Errorf("%w: no CUDA runtime: KV cache region %d is on cuda:%d", transfer.ErrUnsupported, i, r.Device)
		}
		if err := w.cuda.CheckDevice(r.Device); err != nil {
			return fmt.Errorf("vllm: KV cache region %d on cuda:%d: %w", i, r.Device, err)
		}
	}
	if w.regions != nil {
		return fmt.Errorf("%w: register_kv_caches called twice", ErrBadInput)
	}
	regions = slices.Clone(regions)
	if w.s.Layerwise {
		byLayer, err := groupLayers(regions, w.s.NumLayers)
		if err != nil {
			return err
		}
		w.byLayer = byLayer
	}
	switch w.s.Mode {
	case ModeStore:
		sp, err := spans(regions)
		if err != nil {
			return err
		}
		pool, closer, err := w.open(ctx)
		if err != nil {
			return err
		}
		if onDevice {
			bb := 0
			for _, r := range regions {
				bb += int(r.BlockBytes)
			}
			st, err := newDeviceStaging(w.cuda, bb, w.stagingBytes)
			if err != nil {
				if closer != nil {
					closer()
				}
				return err
			}
			sp = append(sp, st.region.Bytes())
			closer = joinClose(closer, st.close)
			w.staging = st
		}
		for _, span := range sp {
			if err := pool.RegisterBuffer(ctx, span); err != nil {
				if closer != nil {
					closer()
				}
				w.staging = nil
				return fmt.Errorf("vllm: register KV cache memory [%#x, +%d): %w", memory.AddrOf(span), len(span), err)
			}
		}
		ns := w.s.Namespace(w.s.TPRank, w.s.PPRank)
		if w.s.UseMLA {
			ns = w.s.Namespace(0, w.s.PPRank)
		}
		rt, err := runtime.NewWorker(runtime.WorkerConfig{
			Namespace: ns, Loader: loader{w}, Saver: saver{w},
			LoadTimeout: w.s.LoadTimeout, SaveTimeout: w.s.SaveTimeout,
			SyncSave: !w.s.SaveAsync,
		})
		if err != nil {
			if closer != nil {
				closer()
			}
			w.staging = nil
			return fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
		w.pool, w.rt, w.closer = pool, rt, closer
	case ModePD:
		s := w.s
		s.CUDA = w.cuda
		prod, cons, err := w.pdNew(ctx, s, regions)
		if err != nil {
			return err
		}
		w.prod, w.cons = prod, cons
	}
	w.regions = regions
	for i, r := range regions {
		w.blockBytes += int(r.BlockBytes)
		w.allRegions = append(w.allRegions, i)
	}
	for _, idx := range w.byLayer {
		n := 0
		for _, ri := range idx {
			n += int(regions[ri].BlockBytes)
		}
		w.layerBytes = append(w.layerBytes, n)
	}
	return nil
}

// spans returns the regions' memory to register: each region's bytes,
// less the regions inside another one (vLLM hands the same storage to
// several layers when they share it). Partly overlapping regions are an
// error.
func spans(regions []Region) ([][]byte, error) {
	bufs := make([][]byte, 0, len(regions))
	for _, r := range regions {
		if r.Buf != nil { // device regions are staged (device.go)
			bufs = append(bufs, r.Buf[:r.BlockBytes*r.NumBlocks])
		}
	}
	sort.Slice(bufs, func(i, j int) bool {
		ai, aj := memory.AddrOf(bufs[i]), memory.AddrOf(bufs[j])
		return ai < aj || ai == aj && len(bufs[i]) > len(bufs[j])
	})
	var out [][]byte
	for _, b := range bufs {
		if k := len(out) - 1; k >= 0 {
			lo, hi := memory.AddrOf(out[k]), memory.AddrOf(out[k])+uint64(len(out[k]))
			a := memory.AddrOf(b)
			switch {
			case a+uint64(len(b)) <= hi:
				continue // inside the previous span
			case a < hi:
				return nil, fmt.Errorf("%w: KV cache regions [%#x, +%d) and [%#x, +%d) partly overlap", ErrBadInput, lo, hi-lo, a, len(b))
			}
		}
		out = append(out, b)
	}
	return out, nil
}

// checkBlock reports a block id outside the KV cache. Block 0 is vLLM's
// null block and never holds data. Errors: ErrBadInput.
func (w *Worker) checkBlock(b int) error {
	if b <= 0 || uint64(b) >= w.regions[0].NumBlocks {
		return fmt.Errorf("%w: block id %d outside [1, %d)", ErrBadInput, b, w.regions[0].NumBlocks)
	}
	return nil
}

// appendBlockParts appends block b's bytes in every region, in region
// order, to dst. Errors: ErrBadInput for a block id outside the KV cache.
func (w *Worker) appendBlockParts(dst [][]byte, b int) ([][]byte, error) {
	if err := w.checkBlock(b); err != nil {
		return dst, err
	}
	for _, r := range w.regions {
		off := uint64(b) * r.BlockBytes
		dst = append(dst, r.Buf[off:off+r.BlockBytes:off+r.BlockBytes])
	}
	return dst, nil
}

type loader struct{ w *Worker }

// Load reads keys[i] into block blockIDs[i]; a value of another size than
// a block (a layout mismatch) fails that block.
func (l loader) Load(ctx context.Context, keys []string, blockIDs []int) []error {
	w := l.w
	defer w.busyStart(&w.loadBusy)()
	if w.s.Layerwise {
		return w.loadLayers(ctx, keys, blockIDs)
	}
	errs := make([]error, len(keys))
	want := w.blockBytes
	w.moveBlocks(ctx, keys, blockIDs, errs, -1, true, func(ks []string, dsts [][][]byte) []error {
		n, gerrs := w.pool.BatchGetIntoParts(ctx, ks, dsts)
		for j := range ks {
			if gerrs[j] == nil && n[j] != want {
				gerrs[j] = fmt.Errorf("%w: key %q holds %d bytes, a block is %d: another KV layout wrote it", ErrBadInput, ks[j], n[j], want)
			}
		}
		return gerrs
	})
	w.countLoads(errs, uint64(want)*okCount(errs))
	return errs
}

// okCount is the number of nil errors.
func okCount(errs []error) uint64 {
	var n uint64
	for _, err := range errs {
		if err == nil {
			n++
		}
	}
	return n
}

// joinClose returns a closer running a (if set) then b.
func joinClose(a, b func() error) func() error {
	return func() error {
		var err error
		if a != nil {
			err = a()
		}
		return errors.Join(err, b())
	}
}

// countLoads adds a load job's outcome to the stats.
// maxFailNotes bounds the failure lines a worker keeps between two
// GetFinished calls (the rest are counted in the last line).
const maxFailNotes = 8

// noteFailuresLocked records one line for a load or save job in which
// some blocks failed, naming the first error (GetFinished hands the lines
// to the engine's log). w.mu must be held.
func (w *Worker) noteFailuresLocked(what string, errs []error, failed uint64) {
	if failed == 0 {
		return
	}
	var first error
	for _, err := range errs {
		if err != nil {
			first = err
			break
		}
	}
	if len(w.failNotes) >= maxFailNotes {
		w.failDropped++
		return
	}
	w.failNotes = append(w.failNotes, fmt.Sprintf("%s of %d of %d blocks failed: %v", what, failed, len(errs), first))
}

func (w *Worker) countLoads(errs []error, bytes uint64) {
	var ok uint64
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	w.mu.Lock()
	w.noteFailuresLocked("load", errs, uint64(len(errs))-ok)
	w.stats.LoadedBlocks += ok
	w.stats.LoadedBytes += bytes
	w.stats.FailedBlocks += uint64(len(errs)) - ok
	w.mu.Unlock()
}

// countSaves adds a save job's outcome to the stats.
func (w *Worker) countSaves(errs []error, bytes uint64) {
	var ok uint64
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	w.mu.Lock()
	w.noteFailuresLocked("save", errs, uint64(len(errs))-ok)
	w.stats.SavedBlocks += ok
	w.stats.SavedBytes += bytes
	w.stats.FailedBlocks += uint64(len(errs)) - ok
	w.mu.Unlock()
}

// groupLayers returns the region indexes of every layer, checking that
// layers are numbered 0..n-1 with at least one region each (and n equals
// numLayers when that is set).
func groupLayers(regions []Region, numLayers int) ([][]int, error) {
	n := 0
	for _, r := range regions {
		if r.Layer < 0 {
			return nil, fmt.Errorf("%w: region layer %d", ErrBadInput, r.Layer)
		}
		n = max(n, r.Layer+1)
	}
	if numLayers > 0 && n != numLayers {
		return nil, fmt.Errorf("%w: regions cover %d layers, settings say num_layers %d", ErrBadInput, n, numLayers)
	}
	out := make([][]int, n)
	for i, r := range regions {
		out[r.Layer] = append(out[r.Layer], i)
	}
	for l, idx := range out {
		if len(idx) == 0 {
			return nil, fmt.Errorf("%w: layer %d has no KV cache region (layer-wise mode needs each layer's own storage)", ErrBadInput, l)
		}
	}
	return out, nil
}

type saver struct{ w *Worker }

// Save writes block blockIDs[i] under keys[i] (a key already in the pool
// is kept and counts as saved). With MLA only TP rank 0 writes: every
// rank holds the same bytes.
func (s saver) Save(ctx context.Context, keys []string, blockIDs []int) []error {
	w := s.w
	defer w.busyStart(&w.saveBusy)()
	errs := make([]error, len(keys))
	if w.s.UseMLA && w.s.TPRank != 0 {
		return errs
	}
	if w.s.Layerwise {
		return w.saveLayers(ctx, keys, blockIDs)
	}
	w.moveBlocks(ctx, keys, blockIDs, errs, -1, false, func(ks []string, srcs [][][]byte) []error {
		return w.pool.BatchPutFromParts(ctx, ks, srcs, nil)
	})
	w.countSaves(errs, uint64(w.blockBytes)*okCount(errs))
	return errs
}

// StartLoad runs a step's metadata (bind_connector_metadata +
// start_load_kv): it fences preempted requests (handle_preemptions), then
// starts the pool loads (synchronous ones complete before it returns, so
// the forward reads landed blocks; a load that fails is reported in
// GetFinished's FailedBlocks) and the P/D sends and receives. Saves and
// finished requests wait for WaitForSave or GetFinished, after the
// forward wrote the blocks. Errors: ErrNotRegistered, ErrBadInput.
func (w *Worker) StartLoad(ctx context.Context, data []byte) error {
	m, err := DecodeMeta(data)
	if err != nil {
		return err
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return runtime.ErrClosed
	}
	if w.regions == nil {
		w.mu.Unlock()
		if m.Empty() {
			return nil
		}
		return ErrNotRegistered
	}
	rt, prod, cons := w.rt, w.prod, w.cons
	var gate *stepGate
	if w.s.Layerwise && rt != nil {
		nsync := 0
		for _, l := range m.Plan.Loads {
			if !l.Async {
				nsync++
			}
		}
		if w.gate != nil {
			w.gate.openAll() // a step that never reached wait_for_save
		}
		gate = newStepGate(len(w.byLayer), nsync)
		w.gate = gate
	} else {
		w.pending.Saves = append(w.pending.Saves, m.Plan.Saves...)
		w.pending.Finished = append(w.pending.Finished, m.Plan.Finished...)
	}
	for _, s := range m.Sends {
		w.sendReq[s.TransferID] = s.ReqID
	}
	for _, d := range m.Drops {
		w.sendReq[d.TransferID] = d.ReqID
	}
	for _, r := range m.Recvs {
		if !r.Release { // a release is never reported (see Recv.Release)
			w.recvReq[r.TransferID] = r.ReqID
		}
	}
	w.mu.Unlock()

	if rt != nil {
		if len(m.Preempted) > 0 {
			if err := rt.HandlePreemptions(ctx, m.Preempted); err != nil {
				return err
			}
		}
		if gate != nil {
			// Layer-wise: saves start now and wait for their layers; the
			// forward waits per layer for the synchronous loads.
			p := m.Plan
			p.Tag = gate
			if err := rt.Start(p); err != nil {
				return err
			}
		} else if err := rt.Start(runtime.Plan{Loads: m.Plan.Loads}); err != nil {
			return err
		}
		if gate == nil && slices.ContainsFunc(m.Plan.Loads, func(l runtime.LoadSpec) bool { return !l.Async }) {
			// Failures land in FailedBlocks; the forward recomputes them.
			_ = rt.WaitForLoad(ctx)
		}
	}
	if prod != nil {
		for _, s := range m.Sends {
			prod.Ready(s.TransferID, s.BlockIDs)
		}
		for _, d := range m.Drops {
			prod.Drop(d.TransferID)
		}
	}
	if cons != nil {
		for _, r := range m.Recvs {
			cons.Recv(r.TransferID, r.BootstrapAddr, r.EngineID, r.BlockIDs)
		}
	}
	return nil
}

// HandlePreemptions is handle_preemptions: it fences the requests'
// jobs (loads cancelled; it returns once none of them touches their
// blocks), bounded by ctx and the save timeout.
func (w *Worker) HandlePreemptions(ctx context.Context, reqIDs []string) error {
	w.mu.Lock()
	rt := w.rt
	w.mu.Unlock()
	if rt == nil || len(reqIDs) == 0 {
		return nil
	}
	return rt.HandlePreemptions(ctx, reqIDs)
}

// WaitForSave is wait_for_save: the forward has written this step's
// blocks, so the step's saves start now (in the background; the request's
// blocks stay held until it is in finished-sending). With mc_save_async
// false it returns once they are done (layer-wise: the saves started
// with the step), bounded by the save timeout; the error then names the
// timeout and the saves go on in the background.
func (w *Worker) WaitForSave() error {
	w.mu.Lock()
	p := w.pending
	w.pending = runtime.Plan{}
	rt := w.rt
	if w.gate != nil {
		w.gate.openAll() // layer-wise: every layer was written
	}
	w.mu.Unlock()
	if rt == nil {
		return nil
	}
	if len(p.Saves)+len(p.Finished) > 0 {
		if err := rt.Start(p); err != nil {
			return err
		}
	}
	if !w.s.SaveAsync {
		return rt.WaitForSave(context.Background())
	}
	return nil
}

// GetFinished is get_finished plus get_block_ids_with_load_errors: it
// starts saves still pending (a step without a forward), then returns,
// once each, the requests whose saves or P/D sends are done
// (finished-sending), those whose async loads or P/D receives completed,
// landed or not (finished-receiving), and the blocks whose loads failed.
func (w *Worker) GetFinished() (Finished, error) {
	err := w.WaitForSave()
	var f Finished
	w.mu.Lock()
	rt, prod, cons := w.rt, w.prod, w.cons
	layerwise := w.gate != nil
	w.mu.Unlock()
	w.mu.Lock()
	f.Errors, w.failNotes = w.failNotes, nil
	if w.failDropped > 0 {
		f.Errors = append(f.Errors, fmt.Sprintf("%d more load/save jobs failed", w.failDropped))
		w.failDropped = 0
	}
	w.mu.Unlock()
	if rt != nil {
		if layerwise {
			// A layer-wise synchronous load reports its last layer to
			// wait_for_layer_load before its job completes: wait for the
			// completion (at once after the forward; bounded by the load
			// timeout, past which its blocks count as failed) so that its
			// failed blocks are in this step's answer.
			_ = rt.WaitForLoad(context.Background())
		}
		f.Sending, f.Recving = rt.GetFinished()
		f.FailedBlocks = rt.FailedBlocks()
	}
	if prod != nil {
		for _, t := range prod.Finished() {
			w.mu.Lock()
			id, ok := w.sendReq[t]
			delete(w.sendReq, t)
			w.mu.Unlock()
			if ok {
				f.Sending = append(f.Sending, id)
			}
		}
	}
	if cons != nil {
		done, failed := cons.Finished()
		var errs map[string]error
		if et, ok := cons.(errorTaker); ok {
			errs = et.TakeErrors()
		}
		for _, t := range done {
			w.mu.Lock()
			id, ok := w.recvReq[t]
			delete(w.recvReq, t)
			w.mu.Unlock()
			if ok {
				f.Recving = append(f.Recving, id)
			}
			if e := errs[t]; e != nil && ok {
				f.Errors = append(f.Errors, fmt.Sprintf("request %s (transfer %s): %v", id, t, e))
			}
			if bs := failed[t]; len(bs) > 0 {
				f.FailedBlocks = append(f.FailedBlocks, bs...)
				w.mu.Lock()
				w.stats.FailedBlocks += uint64(len(bs))
				w.mu.Unlock()
			}
		}
	}
	return f, err
}

// WaitIdle is called by the shim in get_finished of a step that schedules
// no tokens (the scheduler marks its metadata idle): it waits, at most
// Settings.IdleWait, until one of the store-mode loads or saves in flight
// has something to report, or (pd mode) a P/D send or receive of this
// worker ends, so that vLLM's empty steps (it keeps stepping while
// finished requests' blocks are held for their saves or sends, or
// requests wait for async loads or pushed KV) sleep instead of taking the
// CPU the transfers need. It returns at once when nothing is in flight and
// after Close; it reports whether something is to report (in pd mode:
// whether a transfer ended).
func (w *Worker) WaitIdle() bool {
	w.mu.Lock()
	rt, prod, cons, closed := w.rt, w.prod, w.cons, w.closed
	pdBusy := len(w.sendReq)+len(w.recvReq) > 0
	w.mu.Unlock()
	if closed || w.s.IdleWait <= 0 {
		return false
	}
	if rt != nil {
		return rt.WaitReport(context.Background(), w.s.IdleWait)
	}
	if !pdBusy {
		return false
	}
	var pn, cn <-chan struct{}
	if n, ok := prod.(newsSource); ok {
		pn = n.News()
	}
	if n, ok := cons.(newsSource); ok {
		cn = n.News()
	}
	if pn == nil && cn == nil {
		return false
	}
	t := time.NewTimer(w.s.IdleWait)
	defer t.Stop()
	select {
	case <-pn:
	case <-cn:
	case <-t.C:
		return false
	}
	// The token was taken: Finished is drained by GetFinished right after,
	// and a later ending sends a new token.
	return true
}

// newsSource is what a P/D half may add: a channel that gets a token
// each time one of its transfers ends (vllm/pd's Producer and Consumer).
type newsSource interface {
	News() <-chan struct{}
}

// TakeStats returns the counters since the previous call and resets them.
func (w *Worker) TakeStats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	w.stats = Stats{}
	s.LoadBusy, s.SaveBusy = takeBusyLocked(&w.loadBusy), takeBusyLocked(&w.saveBusy)
	return s
}

// Tracked returns the requests with worker-side state.
func (w *Worker) Tracked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.sendReq) + len(w.recvReq)
	if w.rt != nil {
		n += w.rt.Tracked()
	}
	return n
}

// Close cancels running jobs, waits for them, and closes the pool client
// and the P/D halves (shutdown). Idempotent.
func (w *Worker) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	rt, prod, cons, closer := w.rt, w.prod, w.cons, w.closer
	w.mu.Unlock()
	var errs []error
	if rt != nil {
		rt.Close()
	}
	if prod != nil {
		errs = append(errs, prod.Close())
	}
	if cons != nil {
		errs = append(errs, cons.Close())
	}
	if closer != nil {
		errs = append(errs, closer())
	}
	return errors.Join(errs...)
}

var _ Pool = (*client.Client)(nil)
