package vllm

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/mooncake-go/mooncake/connectors/runtime"
	"github.com/mooncake-go/mooncake/core/kvpool"
)

// Layer-wise mode (kv_connector_extra_config "mc_layerwise": true, store
// mode). Each block is stored as one object per layer, key
// "<block key>/l<layer>" (kvpool.Namespace.LayerKey), so that
//
//   - saves of a step start when the step begins and put layer l as soon
//     as the forward has written it (save_kv_layer, Worker.SaveLayer),
//     overlapping the transfer with the computation of later layers;
//   - synchronous loads fetch layer by layer and the forward waits only
//     for the layer it is about to read (wait_for_layer_load,
//     Worker.WaitLayerLoad), overlapping loads of later layers with the
//     attention of earlier ones.
//
// A block counts as a hit when its first and last layers are in the pool
// (on every shard); a missing middle layer fails the block's load, which
// is reported like any failed load. Instances only share blocks when they
// agree on mc_layerwise.

// layerKey is key's object for layer l (kvpool.Namespace.LayerKey).
func layerKey(key string, l int) string { return key + "/l" + strconv.Itoa(l) }

// stepGate orders one engine step's layer-wise jobs against its forward:
// save layer l waits until the forward wrote it, and the forward's read
// of layer l waits until every synchronous load of the step has it.
type stepGate struct {
	saveOpen []chan struct{} // closed when layer l may be saved
	mu       sync.Mutex      // guards closing saveOpen and loadDone, and loadLeft
	loadLeft []int           // synchronous jobs still to finish layer l
	loadDone []chan struct{} // closed when loadLeft[l] drops to 0
}

func newStepGate(layers, syncJobs int) *stepGate {
	g := &stepGate{
		saveOpen: make([]chan struct{}, layers),
		loadLeft: make([]int, layers), loadDone: make([]chan struct{}, layers),
	}
	for l := range layers {
		g.saveOpen[l] = make(chan struct{})
		g.loadDone[l] = make(chan struct{})
		g.loadLeft[l] = syncJobs
		if syncJobs == 0 {
			close(g.loadDone[l])
		}
	}
	return g
}

// openSave lets layer l's saves run (save_kv_layer); out of range is a no-op.
func (g *stepGate) openSave(l int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l < 0 || l >= len(g.saveOpen) {
		return
	}
	select {
	case <-g.saveOpen[l]: // already open
	default:
		close(g.saveOpen[l])
	}
}

// openAll opens every layer (the forward is over, or there was none).
func (g *stepGate) openAll() {
	for l := range g.saveOpen {
		g.openSave(l)
	}
}

func (g *stepGate) waitSave(ctx context.Context, l int) error {
	select {
	case <-g.saveOpen[l]:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("vllm: layer %d of this step was never written: %w", l, context.Cause(ctx))
	}
}

// loaded records that one synchronous job finished layer l (landed or not).
func (g *stepGate) loaded(l int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.loadLeft[l] > 0 {
		g.loadLeft[l]--
		if g.loadLeft[l] == 0 {
			close(g.loadDone[l])
		}
	}
}

func (g *stepGate) waitLoad(ctx context.Context, l int) error {
	select {
	case <-g.loadDone[l]:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// layerExister answers lookups for layer-wise objects: a block is present
// when its first and last layers are.
type layerExister struct {
	inner  kvpool.Exister
	layers int
}

func (e layerExister) BatchIsExist(ctx context.Context, keys []string) ([]bool, error) {
	probe := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		probe = append(probe, layerKey(k, 0), layerKey(k, e.layers-1))
	}
	found, err := e.inner.BatchIsExist(ctx, probe)
	if err != nil {
		return nil, err
	}
	if len(found) != len(probe) {
		return nil, fmt.Errorf("vllm: existence check of %d keys answered %d", len(probe), len(found))
	}
	out := make([]bool, len(keys))
	for i := range keys {
		out[i] = found[2*i] && found[2*i+1]
	}
	return out, nil
}

// gateOf is the step gate a layer-wise job belongs to (nil outside
// layer-wise mode).
func gateOf(ctx context.Context) (*stepGate, runtime.JobInfo) {
	info, _ := runtime.JobOf(ctx)
	g, _ := info.Tag.(*stepGate)
	return g, info
}

// appendLayerParts appends block b's bytes in the regions of layer l to
// dst. Errors: ErrBadInput for a block id outside the KV cache.
func (w *Worker) appendLayerParts(dst [][]byte, b, l int) ([][]byte, error) {
	if err := w.checkBlock(b); err != nil {
		return dst, err
	}
	for _, ri := range w.byLayer[l] {
		r := w.regions[ri]
		off := uint64(b) * r.BlockBytes
		dst = append(dst, r.Buf[off:off+r.BlockBytes:off+r.BlockBytes])
	}
	return dst, nil
}

// gather returns, for every block not yet failed in errs, its index, its
// key and its bytes: of layer l (key with the layer suffix), or of the
// whole block when l < 0. A bad block id fails that block in errs. Every
// block's part list is a window of one allocation.
func (w *Worker) gather(keys []string, blockIDs []int, errs []error, l int) (idx []int, ks []string, parts [][][]byte) {
	per := len(w.regions)
	if l >= 0 {
		per = len(w.byLayer[l])
	}
	// Sized for every block, so appends never move the windows handed out.
	flat := make([][]byte, 0, per*len(blockIDs))
	idx, ks, parts = make([]int, 0, len(blockIDs)), make([]string, 0, len(blockIDs)), make([][][]byte, 0, len(blockIDs))
	for i, b := range blockIDs {
		if errs[i] != nil {
			continue
		}
		var err error
		key, start := keys[i], len(flat)
		if l < 0 {
			flat, err = w.appendBlockParts(flat, b)
		} else {
			flat, err = w.appendLayerParts(flat, b, l)
			key = layerKey(key, l)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		idx, ks, parts = append(idx, i), append(ks, key), append(parts, flat[start:len(flat):len(flat)])
	}
	return idx, ks, parts
}

// loadLayers is Load in layer-wise mode: layer by layer, each layer of
// every block in one batch; a synchronous job reports each layer to its
// step gate as it completes (also when it fails or gives up, so the
// forward never waits for a layer that will not come).
func (w *Worker) loadLayers(ctx context.Context, keys []string, blockIDs []int) []error {
	g, info := gateOf(ctx)
	next := 0
	if g != nil && !info.Async {
		defer func() {
			for ; next < len(w.byLayer); next++ {
				g.loaded(next)
			}
		}()
	}
	errs := make([]error, len(keys))
	var okBytes uint64
	for l := range w.byLayer {
		want := w.layerBytes[l]
		w.moveBlocks(ctx, keys, blockIDs, errs, l, true, func(ks []string, dsts [][][]byte) []error {
			n, gerrs := w.pool.BatchGetIntoParts(ctx, ks, dsts)
			for j := range ks {
				if gerrs[j] == nil && n[j] != want {
					gerrs[j] = fmt.Errorf("%w: key %q holds %d bytes, layer %d of a block is %d: another KV layout wrote it", ErrBadInput, ks[j], n[j], l, want)
				}
			}
			return gerrs
		})
		okBytes += uint64(want) * okCount(errs) // errs only ever turn non-nil: these landed layer l
		if g != nil && !info.Async {
			g.loaded(l)
			next = l + 1
		}
	}
	w.countLoads(errs, okBytes)
	return errs
}

// saveLayers is Save in layer-wise mode: layer l of every block is put
// once the step's forward wrote it.
func (w *Worker) saveLayers(ctx context.Context, keys []string, blockIDs []int) []error {
	g, _ := gateOf(ctx)
	errs := make([]error, len(keys))
	var okBytes uint64
	for l := range w.byLayer {
		if g != nil {
			if err := g.waitSave(ctx, l); err != nil {
				for i := range errs {
					if errs[i] == nil {
						errs[i] = err
					}
				}
				break
			}
		}
		w.moveBlocks(ctx, keys, blockIDs, errs, l, false, func(ks []string, srcs [][][]byte) []error {
			return w.pool.BatchPutFromParts(ctx, ks, srcs, nil)
		})
		okBytes += uint64(w.layerBytes[l]) * okCount(errs)
	}
	w.countSaves(errs, okBytes)
	return errs
}

// SaveLayer is save_kv_layer in layer-wise mode: the forward wrote layer
// l of this step's blocks, so their saves of that layer may run. A no-op
// otherwise.
func (w *Worker) SaveLayer(l int) {
	w.mu.Lock()
	g := w.gate
	w.mu.Unlock()
	if g != nil {
		g.openSave(l)
	}
}

// WaitLayerLoad is wait_for_layer_load in layer-wise mode: it returns once
// every synchronous load of this step has layer l in place (or failed),
// bounded by ctx and the load timeout; past that, the loads still running
// are cancelled and their blocks reported failed (the engine recomputes
// them). A no-op otherwise.
func (w *Worker) WaitLayerLoad(ctx context.Context, l int) error {
	w.mu.Lock()
	g, rt := w.gate, w.rt
	w.mu.Unlock()
	if g == nil || l < 0 || l >= len(g.loadDone) {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, w.s.LoadTimeout)
	defer cancel()
	if err := g.waitLoad(wctx, l); err != nil {
		done, stop := context.WithCancel(ctx)
		stop()
		_ = rt.WaitForLoad(done) // reports the unfinished loads' blocks failed now
		return fmt.Errorf("vllm: layer %d not loaded: %w", l, err)
	}
	return nil
}
