package vllm

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/mooncake-go/mooncake/connectors/poolclient"
	"github.com/mooncake-go/mooncake/connectors/runtime"
	"github.com/mooncake-go/mooncake/core/memory"
)

// fakePool is an in-memory kvpool.Exister: a set of keys.
type fakePool struct {
	mu   sync.Mutex
	keys map[string]bool
}

func (f *fakePool) BatchIsExist(_ context.Context, keys []string) ([]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]bool, len(keys))
	for i, k := range keys {
		out[i] = f.keys[k]
	}
	return out, nil
}

// add marks every shard's key of hs present.
func (f *fakePool) add(s Settings, hs [][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys == nil {
		f.keys = map[string]bool{}
	}
	for _, ns := range s.shards() {
		for _, k := range ns.Keys(hs) {
			f.keys[k] = true
		}
	}
}

// newFakeScheduler is a store-mode scheduler over a fake pool.
func newFakeScheduler(t *testing.T, s Settings) (*Scheduler, *fakePool) {
	t.Helper()
	fp := &fakePool{}
	sc, err := newStoreScheduler(s, nil, fp)
	if err != nil {
		t.Fatal(err)
	}
	return sc, fp
}

// buildMeta runs BuildMeta and decodes the result as a worker would.
func buildMeta(t *testing.T, sc *Scheduler) Meta {
	t.Helper()
	b, err := sc.BuildMeta()
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSchedulerStoreLookup(t *testing.T) {
	ctx := testContext(t)
	const bs = 4 // block_size of settingsJSON
	hs := hashes("lookup", 5)
	tests := []struct {
		name          string
		role          string
		extra         map[string]any
		present       int // leading blocks in the pool
		tokens, local int
		wantTokens    int
		wantAsync     bool
	}{
		{"hit past local", KVBoth, nil, 3, 20, 4, 8, true},
		{"no hit", KVBoth, nil, 0, 20, 0, 0, false},
		{"local covers hit", KVBoth, nil, 2, 20, 8, 0, false},
		{"mid-block tail", KVConsumer, nil, 5, 18, 0, 16, true}, // 4 full blocks of 18 tokens
		{"full prompt async", KVBoth, nil, 5, 20, 0, 20, true},
		{"full prompt sync leaves one token", KVBoth, map[string]any{"load_async": false}, 5, 20, 0, 16, false},
		{"producer never loads", KVProducer, nil, 5, 20, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustSettings(t, tt.role, tt.extra, map[string]any{"tp_size": 2})
			sc, fp := newFakeScheduler(t, s)
			fp.add(s, hs[:tt.present])
			n, async, err := sc.Lookup(ctx, LookupArgs{ReqID: "r", Hashes: hs[:tt.tokens/bs], NumTokens: tt.tokens, NumComputedTokens: tt.local})
			if err != nil {
				t.Fatal(err)
			}
			if n != tt.wantTokens || async != tt.wantAsync {
				t.Errorf("Lookup = %d tokens, async %v; want %d, %v", n, async, tt.wantTokens, tt.wantAsync)
			}
			if n%bs != 0 {
				t.Errorf("Lookup = %d tokens: not whole blocks", n)
			}
		})
	}
	t.Run("one shard missing is a miss", func(t *testing.T) {
		s := mustSettings(t, KVBoth, nil, map[string]any{"tp_size": 2})
		sc, fp := newFakeScheduler(t, s)
		fp.add(s, hs[:1])
		fp.keys[s.Namespace(0, 0).Key(hs[1])] = true // block 1 on shard 0 only
		n, _, err := sc.Lookup(ctx, LookupArgs{ReqID: "r", Hashes: hs, NumTokens: 20})
		if err != nil || n != bs {
			t.Errorf("Lookup = %d, %v; want %d", n, err, bs)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		sc, _ := newFakeScheduler(t, mustSettings(t, KVBoth, nil, nil))
		_, _, err := sc.Lookup(ctx, LookupArgs{ReqID: "r", NumTokens: 4, NumComputedTokens: 8})
		if !errors.Is(err, ErrBadInput) {
			t.Errorf("err = %v, want ErrBadInput", err)
		}
	})
}

func TestSchedulerStorePlans(t *testing.T) {
	ctx := testContext(t)
	hs := hashes("plan", 6)

	t.Run("load and save round trip", func(t *testing.T) {
		s := mustSettings(t, KVBoth, nil, nil)
		sc, fp := newFakeScheduler(t, s)
		fp.add(s, hs[:3])
		n, async, err := sc.Lookup(ctx, LookupArgs{ReqID: "a", Hashes: hs[:5], NumTokens: 22, NumComputedTokens: 4})
		if err != nil || n != 8 || !async {
			t.Fatalf("Lookup = %d, %v, %v", n, async, err)
		}
		blocks := []int{11, 12, 13, 14, 15, 16}
		if err := sc.UpdateAfterAlloc(AllocArgs{ReqID: "a", BlockIDs: blocks, NumExternalTokens: n}); err != nil {
			t.Fatal(err)
		}
		// Blocks 0-2 are in the pool (or local), so only 3 and 4 are saved.
		got, err := sc.PlanSave(SaveArgs{ReqID: "a", Hashes: hs[:5], BlockIDs: blocks, NumComputedTokens: 22, NumPromptTokens: 22})
		if err != nil || got != 2 {
			t.Fatalf("PlanSave = %d, %v; want 2", got, err)
		}
		sc.Preempted([]string{"b"})
		fin, err := sc.RequestFinished(FinishArgs{ReqID: "a", BlockIDs: blocks})
		if err != nil || !fin.Hold || fin.Params != nil {
			t.Errorf("RequestFinished = %+v, %v; want hold, no params", fin, err)
		}
		m := buildMeta(t, sc)
		want := Meta{
			Plan: runtime.Plan{
				Loads:    []runtime.LoadSpec{{ReqID: "a", Hashes: hs[1:3], BlockIDs: []int{12, 13}, Async: true}},
				Saves:    []runtime.SaveSpec{{ReqID: "a", Hashes: hs[3:5], BlockIDs: []int{14, 15}}},
				Finished: []string{"a"},
			},
			Preempted: []string{"b"},
		}
		if !metaEqual(m, want) {
			t.Errorf("meta = %+v\nwant   %+v", m, want)
		}
		if m := buildMeta(t, sc); !m.Empty() {
			t.Errorf("second BuildMeta = %+v, want empty", m)
		}
		if n := sc.Tracked(); n != 0 {
			t.Errorf("Tracked = %d after finish, want 0", n)
		}
	})
	t.Run("consumer never saves", func(t *testing.T) {
		sc, _ := newFakeScheduler(t, mustSettings(t, KVConsumer, nil, nil))
		n, err := sc.PlanSave(SaveArgs{ReqID: "c", Hashes: hs[:2], BlockIDs: []int{1, 2}, NumComputedTokens: 8})
		if err != nil || n != 0 {
			t.Errorf("PlanSave = %d, %v; want 0", n, err)
		}
		if fin, _ := sc.RequestFinished(FinishArgs{ReqID: "c"}); fin.Hold {
			t.Error("consumer holds blocks at finish")
		}
		if m := buildMeta(t, sc); len(m.Plan.Saves) != 0 {
			t.Errorf("saves planned: %+v", m.Plan.Saves)
		}
	})
	t.Run("producer saves without loading", func(t *testing.T) {
		s := mustSettings(t, KVProducer, nil, nil)
		sc, fp := newFakeScheduler(t, s)
		fp.add(s, hs)
		if n, _, _ := sc.Lookup(ctx, LookupArgs{ReqID: "p", Hashes: hs[:2], NumTokens: 8}); n != 0 {
			t.Errorf("producer Lookup = %d", n)
		}
		if err := sc.UpdateAfterAlloc(AllocArgs{ReqID: "p", BlockIDs: []int{1, 2}}); err != nil {
			t.Fatal(err)
		}
		if n, err := sc.PlanSave(SaveArgs{ReqID: "p", Hashes: hs[:2], BlockIDs: []int{1, 2}, NumComputedTokens: 8}); err != nil || n != 2 {
			t.Errorf("PlanSave = %d, %v; want 2", n, err)
		}
		if m := buildMeta(t, sc); len(m.Plan.Loads) != 0 || len(m.Plan.Saves) != 1 {
			t.Errorf("meta = %+v", m)
		}
	})
	t.Run("save_decode_cache cap", func(t *testing.T) {
		for _, decode := range []bool{false, true} {
			sc, _ := newFakeScheduler(t, mustSettings(t, KVBoth, map[string]any{"save_decode_cache": decode}, nil))
			// 10 prompt tokens, 24 computed: the prompt holds 2 full blocks.
			n, err := sc.PlanSave(SaveArgs{ReqID: "d", Hashes: hs, BlockIDs: []int{1, 2, 3, 4, 5, 6}, NumComputedTokens: 24, NumPromptTokens: 10})
			want := 2
			if decode {
				want = 6
			}
			if err != nil || n != want {
				t.Errorf("save_decode_cache %v: PlanSave = %d, %v; want %d", decode, n, err, want)
			}
		}
	})
}

// metaEqual compares metas through their JSON (nil and empty slices
// alike).
func metaEqual(a, b Meta) bool {
	ja, _ := json.Marshal(&a)
	jb, _ := json.Marshal(&b)
	return string(ja) == string(jb)
}

func TestDecodeMeta(t *testing.T) {
	m, err := DecodeMeta(nil)
	if err != nil || !m.Empty() {
		t.Errorf("DecodeMeta(nil) = %+v, %v", m, err)
	}
	if _, err := DecodeMeta([]byte("{")); !errors.Is(err, ErrBadInput) {
		t.Errorf("DecodeMeta(garbage) err = %v, want ErrBadInput", err)
	}
	in := Meta{
		Plan:  runtime.Plan{Loads: []runtime.LoadSpec{{ReqID: "x", Hashes: [][]byte{{0, 1, 0xff}}, BlockIDs: []int{3}}}},
		Sends: []Send{{ReqID: "s", TransferID: "t", BlockIDs: []int{1}}},
		Drops: []Drop{{ReqID: "d", TransferID: "u"}},
		Recvs: []Recv{{ReqID: "r", TransferID: "v", BootstrapAddr: "http://h:1", EngineID: "e", BlockIDs: []int{2}}},
	}
	out, err := DecodeMeta(metaJSON(t, in))
	if err != nil || !metaEqual(in, out) || out.Empty() {
		t.Errorf("round trip = %+v, %v", out, err)
	}
}

func TestSchedulerStoreReset(t *testing.T) {
	ctx := testContext(t)
	cl := startPool(t, 8<<20, false)
	c := newPoolClient(t, cl)
	buf, err := memory.Map(64)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Close()
	if err := c.RegisterBuffer(ctx, buf.Bytes()); err != nil {
		t.Fatal(err)
	}

	s := mustSettings(t, KVBoth, nil, map[string]any{"tp_size": 2})
	other := mustSettings(t, KVBoth, map[string]any{"cache_prefix": "tenant-b"}, map[string]any{"tp_size": 2})
	otherModel := mustSettings(t, KVBoth, nil, map[string]any{"tp_size": 2, "model": "org/tiny-llama-2"})
	hs := hashes("reset", 3)
	var mine, theirs []string
	for _, ns := range s.shards() {
		mine = append(mine, ns.Keys(hs)...)
	}
	mine = append(mine, s.Namespace(1, 0).LayerKey(hs[0], 7)) // layer-wise keys go too
	for _, o := range []Settings{other, otherModel} {
		for _, ns := range o.shards() {
			theirs = append(theirs, ns.Keys(hs)...)
		}
	}
	all := append(slices.Clone(mine), theirs...)
	srcs := make([][]byte, len(all))
	for i := range srcs {
		srcs[i] = buf.Bytes()
	}
	for i, err := range c.BatchPutFrom(ctx, all, srcs, nil) {
		if err != nil {
			t.Fatalf("put %q: %v", all[i], err)
		}
	}

	sc, err := newStoreScheduler(s, &poolclient.Pool{Client: c}, c)
	if err != nil {
		t.Fatal(err)
	}
	n, _, err := sc.Lookup(ctx, LookupArgs{ReqID: "r", Hashes: hs, NumTokens: 12})
	if err != nil || n != 12 {
		t.Fatalf("Lookup before reset = %d, %v; want 12", n, err)
	}
	removed, err := sc.Reset(ctx)
	if err != nil || removed != len(mine) {
		t.Fatalf("Reset = %d, %v; want %d", removed, err, len(mine))
	}
	found, err := c.BatchIsExist(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range all {
		if want := i >= len(mine); found[i] != want {
			t.Errorf("after Reset %q exists = %v, want %v", k, found[i], want)
		}
	}
	if n, _, _ := sc.Lookup(ctx, LookupArgs{ReqID: "r", Hashes: hs, NumTokens: 12}); n != 0 {
		t.Errorf("Lookup after reset = %d, want 0", n)
	}
	// Pd-mode schedulers have no pool: Reset is a no-op.
	pd, err := NewScheduler(ctx, mustSettings(t, KVBoth, map[string]any{"mc_mode": "pd"}, nil), map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := pd.Reset(ctx); n != 0 || err != nil {
		t.Errorf("pd Reset = %d, %v", n, err)
	}
	if err := pd.Close(); err != nil {
		t.Error(err)
	}
}
