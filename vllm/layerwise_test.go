package vllm

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// layerwiseSettings is a store-mode kv_both worker in layer-wise mode
// whose three test regions are layers 0, 1 and 2.
func layerwiseSettings(t *testing.T) Settings {
	return mustSettings(t, KVBoth, map[string]any{"mc_layerwise": true}, map[string]any{"num_layers": 3})
}

func layerwiseWorker(t *testing.T, s Settings, seed int, pool func(context.Context) (Pool, func() error, error)) (*Worker, *kvCache) {
	t.Helper()
	kc := newKVCache(t, seed, testBlocks, testBlockBytes...)
	for i := range kc.regions {
		kc.regions[i].Layer = i
	}
	w := newWorker(s, pool, nil)
	t.Cleanup(func() { w.Close() })
	if err := w.RegisterKVCaches(testContext(t), kc.regions); err != nil {
		t.Fatalf("RegisterKVCaches: %v", err)
	}
	return w, kc
}

// TestLayerwiseSaveFollowsTheForward: a step's saves put layer l only once
// the forward offered it (SaveLayer), one object per block and layer; a
// second worker loads them synchronously layer by layer (WaitLayerLoad)
// and every layer's bytes match.
func TestLayerwiseSaveFollowsTheForward(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	c := newPoolClient(t, cl)
	s := layerwiseSettings(t)
	ns := s.Namespace(0, 0)
	ctx := testContext(t)
	w, src := layerwiseWorker(t, s, 70, poolOpener(cl))
	hs := hashes("lw", 2)
	if err := w.StartLoad(ctx, saveMeta(t, "req", hs, []int{3, 4})); err != nil {
		t.Fatal(err)
	}
	exists := func(l int) bool {
		found, err := c.BatchIsExist(ctx, []string{layerKey(ns.Key(hs[0]), l), layerKey(ns.Key(hs[1]), l)})
		if err != nil {
			t.Fatal(err)
		}
		return found[0] && found[1]
	}
	// The forward wrote layer 0 (and changed it after StartLoad).
	copy(src.block(0, 3), "layer 0 after start")
	w.SaveLayer(0)
	deadline := time.Now().Add(10 * time.Second)
	for !exists(0) {
		if time.Now().After(deadline) {
			t.Fatal("layer 0 not saved 10 s after SaveLayer(0)")
		}
		time.Sleep(5 * time.Millisecond) // polling the pool, not waiting for a state
	}
	if exists(1) || exists(2) {
		t.Fatal("layers 1 or 2 saved before the forward offered them")
	}
	copy(src.block(2, 4), "layer 2 before its save")
	if err := w.WaitForSave(); err != nil { // the forward is over: every layer may go
		t.Fatal(err)
	}
	collect(t, w, sendingHas("req"))
	if !exists(1) || !exists(2) {
		t.Fatal("layers 1 and 2 not saved after WaitForSave")
	}
	if found, _ := c.BatchIsExist(ctx, ns.Keys(hs)); found[0] || found[1] {
		t.Error("layer-wise mode wrote whole-block objects")
	}

	// Load into another worker, layer by layer.
	dst, kc := layerwiseWorker(t, s, 71, poolOpener(cl))
	if err := dst.StartLoad(ctx, loadMeta(t, "r2", hs, []int{5, 6}, false)); err != nil {
		t.Fatal(err)
	}
	for l := range 3 {
		if err := dst.WaitLayerLoad(ctx, l); err != nil {
			t.Fatalf("WaitLayerLoad(%d): %v", l, err)
		}
		for i, b := range []int{3, 4} {
			if !bytes.Equal(kc.block(l, 5+i), src.block(l, b)) {
				t.Errorf("layer %d of block %d differs after WaitLayerLoad", l, 5+i)
			}
		}
	}
	f, err := dst.GetFinished()
	if err != nil || len(f.FailedBlocks) != 0 {
		t.Fatalf("GetFinished = %+v, %v", f, err)
	}

	// The scheduler finds both blocks (first and last layer present), not a third.
	sc, err := newStoreScheduler(s, nil, c)
	if err != nil {
		t.Fatal(err)
	}
	bt := s.BlockSize
	n, async, err := sc.Lookup(ctx, LookupArgs{ReqID: "q", Hashes: append(hs, []byte("absent")), NumTokens: 3*bt + 1})
	if err != nil || n != 2*bt || !async {
		t.Errorf("Lookup = %d, %v, %v; want %d tokens async", n, async, err, 2*bt)
	}
}

// TestLayerwiseMissingLayerFails: a block whose middle layer is gone is
// reported failed, and WaitLayerLoad of every layer still returns.
func TestLayerwiseMissingLayerFails(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	c := newPoolClient(t, cl)
	s := layerwiseSettings(t)
	ns := s.Namespace(0, 0)
	ctx := testContext(t)
	w, _ := layerwiseWorker(t, s, 80, poolOpener(cl))
	hs := hashes("lw-miss", 2)
	if err := w.StartLoad(ctx, saveMeta(t, "req", hs, []int{1, 2})); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitForSave(); err != nil {
		t.Fatal(err)
	}
	collect(t, w, sendingHas("req"))
	if err := c.Remove(ctx, layerKey(ns.Key(hs[1]), 1), true); err != nil {
		t.Fatal(err)
	}
	dst, _ := layerwiseWorker(t, s, 81, poolOpener(cl))
	if err := dst.StartLoad(ctx, loadMeta(t, "r2", hs, []int{7, 8}, false)); err != nil {
		t.Fatal(err)
	}
	for l := range 3 {
		if err := dst.WaitLayerLoad(ctx, l); err != nil {
			t.Fatalf("WaitLayerLoad(%d): %v", l, err)
		}
	}
	f, err := dst.GetFinished()
	if err != nil || len(f.FailedBlocks) != 1 || f.FailedBlocks[0] != 8 {
		t.Fatalf("GetFinished = %+v, %v; want block 8 failed", f, err)
	}
}

func TestLayerwiseConfig(t *testing.T) {
	if _, err := ParseSettings(settingsJSON(t, KVBoth, map[string]any{"mc_layerwise": true}, nil), map[string]string{}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("mc_layerwise without num_layers: %v", err)
	}
	if _, err := ParseSettings(settingsJSON(t, KVBoth, map[string]any{"mc_layerwise": true, "mc_mode": "pd"}, map[string]any{"num_layers": 2, "engine_id": "e"}), map[string]string{}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("mc_layerwise in pd mode: %v", err)
	}
	// Regions must cover layers 0..num_layers-1, each with its own storage.
	kc := newKVCache(t, 1, 8, 256, 256)
	noPool := func(context.Context) (Pool, func() error, error) { return nil, nil, errors.New("no pool") }
	for _, layers := range [][]int{{0, 2}, {1, 1}, {0, 0}} {
		w := newWorker(layerwiseSettings(t), noPool, nil)
		rs := append([]Region(nil), kc.regions...)
		rs[0].Layer, rs[1].Layer = layers[0], layers[1]
		if err := w.RegisterKVCaches(testContext(t), rs); !errors.Is(err, ErrBadInput) {
			t.Errorf("layers %v: err = %v, want ErrBadInput", layers, err)
		}
		w.Close()
	}
}
