package vllm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/connectors/runtime"
	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
)

// Worker test geometry: FlashAttention-like K and V regions of one layer
// plus an odd-sized third region, so values concatenate unequal parts.
const testBlocks = 16

var testBlockBytes = []uint64{512, 512, 300}

// storeWorker is a registered store-mode worker over cl with its KV
// cache filled with seed's pattern; both go when t ends.
func storeWorker(t *testing.T, cl *localcluster.Cluster, s Settings, seed int) (*Worker, *kvCache) {
	t.Helper()
	kc := newKVCache(t, seed, testBlocks, testBlockBytes...)
	w := newWorker(s, poolOpener(cl), nil)
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("close worker: %v", err)
		}
	})
	if err := w.RegisterKVCaches(testContext(t), kc.regions); err != nil {
		t.Fatalf("RegisterKVCaches: %v", err)
	}
	return w, kc
}

// save runs one step that saves blocks under hs and finishes req, and
// waits until w reports req in finished-sending.
func save(t *testing.T, w *Worker, req string, hs [][]byte, blocks []int) {
	t.Helper()
	if err := w.StartLoad(testContext(t), saveMeta(t, req, hs, blocks)); err != nil {
		t.Fatalf("StartLoad: %v", err)
	}
	if err := w.WaitForSave(); err != nil {
		t.Fatalf("WaitForSave: %v", err)
	}
	if f := collect(t, w, sendingHas(req)); len(f.FailedBlocks) != 0 {
		t.Fatalf("failed blocks while saving: %v", f.FailedBlocks)
	}
}

// load runs one step that loads hs into blocks (async or not) and
// returns the failed blocks reported by the time the load finished.
func load(t *testing.T, w *Worker, req string, hs [][]byte, blocks []int, async bool) []int {
	t.Helper()
	if err := w.StartLoad(testContext(t), loadMeta(t, req, hs, blocks, async)); err != nil {
		t.Fatalf("StartLoad: %v", err)
	}
	if !async {
		f, err := w.GetFinished()
		if err != nil {
			t.Fatal(err)
		}
		return f.FailedBlocks
	}
	return collect(t, w, recvingHas(req)).FailedBlocks
}

// checkBlock fails t unless dst's block d holds src's block s.
func checkBlock(t *testing.T, dst *kvCache, d int, src *kvCache, s int) {
	t.Helper()
	if got, want := dst.value(d), src.value(s); !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && got[i] == want[i] {
			i++
		}
		t.Errorf("block %d differs from the source's block %d at byte %d of %d", d, s, i, len(want))
	}
}

func TestWorkerStoreSaveLoadTP(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	hs := hashes("tp", 3)
	var srcs []*kvCache
	for rank := range 2 {
		s := mustSettings(t, KVBoth, nil, map[string]any{"tp_rank": rank, "tp_size": 2})
		w, kc := storeWorker(t, cl, s, 10+rank)
		save(t, w, "req", hs, []int{1, 2, 3})
		if st := w.TakeStats(); st.SavedBlocks != 3 || st.SavedBytes != 3*1324 || st.FailedBlocks != 0 {
			t.Errorf("rank %d save stats = %+v", rank, st)
		}
		srcs = append(srcs, kc)
	}
	// Each rank saved its own shard.
	c := newPoolClient(t, cl)
	for rank := range 2 {
		ns := mustSettings(t, KVBoth, nil, map[string]any{"tp_rank": rank, "tp_size": 2}).Namespace(rank, 0)
		found, err := c.BatchIsExist(testContext(t), ns.Keys(hs))
		if err != nil || slices.Contains(found, false) {
			t.Errorf("rank %d keys exist = %v, %v", rank, found, err)
		}
	}
	// Fresh ranks load their shard into other blocks.
	for rank, async := range []bool{true, false} {
		s := mustSettings(t, KVConsumer, nil, map[string]any{"tp_rank": rank, "tp_size": 2})
		w, kc := storeWorker(t, cl, s, 20+rank)
		if failed := load(t, w, "req2", hs, []int{7, 5, 9}, async); len(failed) != 0 {
			t.Fatalf("rank %d: failed blocks %v", rank, failed)
		}
		for i, d := range []int{7, 5, 9} {
			checkBlock(t, kc, d, srcs[rank], i+1)
		}
		// Blocks not loaded keep their bytes.
		fresh := newKVCache(t, 20+rank, testBlocks, testBlockBytes...)
		checkBlock(t, kc, 6, fresh, 6)
		if st := w.TakeStats(); st.LoadedBlocks != 3 || st.LoadedBytes != 3*1324 {
			t.Errorf("rank %d load stats = %+v", rank, st)
		}
	}
}

func TestWorkerStoreMLA(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	hs := hashes("mla", 2)
	over := func(rank int) map[string]any { return map[string]any{"tp_rank": rank, "tp_size": 2, "use_mla": true} }
	c := newPoolClient(t, cl)
	shared := mustSettings(t, KVBoth, nil, over(0)).Namespace(0, 0).Keys(hs)

	// Rank 1 writes nothing, but reports its saves done.
	w1, _ := storeWorker(t, cl, mustSettings(t, KVBoth, nil, over(1)), 31)
	save(t, w1, "req", hs, []int{1, 2})
	if found, err := c.BatchIsExist(testContext(t), shared); err != nil || slices.Contains(found, true) {
		t.Fatalf("after rank 1's save: keys exist = %v, %v; want none", found, err)
	}
	w0, src := storeWorker(t, cl, mustSettings(t, KVBoth, nil, over(0)), 30)
	save(t, w0, "req", hs, []int{1, 2})
	if found, err := c.BatchIsExist(testContext(t), shared); err != nil || slices.Contains(found, false) {
		t.Fatalf("after rank 0's save: keys exist = %v, %v", found, err)
	}
	// Every rank loads the shared copy.
	for rank := range 2 {
		w, kc := storeWorker(t, cl, mustSettings(t, KVConsumer, nil, over(rank)), 40+rank)
		if failed := load(t, w, "req2", hs, []int{3, 4}, true); len(failed) != 0 {
			t.Fatalf("rank %d: failed blocks %v", rank, failed)
		}
		checkBlock(t, kc, 3, src, 1)
		checkBlock(t, kc, 4, src, 2)
	}
}

func TestWorkerStoreBadBlocks(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	s := mustSettings(t, KVBoth, nil, nil)
	w, src := storeWorker(t, cl, s, 50)
	hs := hashes("bad", 4)
	save(t, w, "req", hs[:2], []int{1, 2})

	t.Run("save of block 0 and an out-of-range block", func(t *testing.T) {
		w.TakeStats()
		if err := w.StartLoad(testContext(t), saveMeta(t, "bad-save", hs[2:4], []int{0, testBlocks})); err != nil {
			t.Fatal(err)
		}
		collect(t, w, sendingHas("bad-save"))
		if st := w.TakeStats(); st.FailedBlocks != 2 || st.SavedBlocks != 0 {
			t.Errorf("stats = %+v, want 2 failed", st)
		}
		found, err := newPoolClient(t, cl).BatchIsExist(testContext(t), s.Namespace(0, 0).Keys(hs[2:4]))
		if err != nil || slices.Contains(found, true) {
			t.Errorf("keys of bad blocks exist = %v, %v", found, err)
		}
	})
	t.Run("load into block 0 and an out-of-range block", func(t *testing.T) {
		w2, dst := storeWorker(t, cl, mustSettings(t, KVConsumer, nil, nil), 51)
		failed := load(t, w2, "r", [][]byte{hs[0], hs[1], hs[0]}, []int{0, 4, testBlocks + 3}, true)
		slices.Sort(failed)
		if !slices.Equal(failed, []int{0, testBlocks + 3}) {
			t.Errorf("failed blocks = %v, want [0 %d]", failed, testBlocks+3)
		}
		checkBlock(t, dst, 4, src, 2)
	})
	t.Run("missing key", func(t *testing.T) {
		w2, _ := storeWorker(t, cl, mustSettings(t, KVConsumer, nil, nil), 52)
		failed := load(t, w2, "r", [][]byte{hs[0], []byte("absent")}, []int{3, 4}, false)
		if !slices.Equal(failed, []int{4}) {
			t.Errorf("failed blocks = %v, want [4]", failed)
		}
	})
	t.Run("value of another size", func(t *testing.T) {
		// Another layout (or a bug) wrote a shorter and a longer value
		// under keys this worker reads.
		c := newPoolClient(t, cl)
		m, err := memory.Map(4096)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		ctx := testContext(t)
		if err := c.RegisterBuffer(ctx, m.Bytes()); err != nil {
			t.Fatal(err)
		}
		short, long := []byte("short"), []byte("long")
		keys := s.Namespace(0, 0).Keys([][]byte{short, long})
		for i, err := range c.BatchPutFrom(ctx, keys, [][]byte{m.Bytes()[:1000], m.Bytes()[:2000]}, nil) {
			if err != nil {
				t.Fatalf("put %q: %v", keys[i], err)
			}
		}
		w2, _ := storeWorker(t, cl, mustSettings(t, KVConsumer, nil, nil), 53)
		failed := load(t, w2, "r", [][]byte{short, hs[0], long}, []int{3, 4, 5}, true)
		slices.Sort(failed)
		if !slices.Equal(failed, []int{3, 5}) {
			t.Errorf("failed blocks = %v, want [3 5]", failed)
		}
		if st := w2.TakeStats(); st.LoadedBlocks != 1 || st.FailedBlocks != 2 {
			t.Errorf("stats = %+v", st)
		}
	})
}

// TestWorkerSavesAfterForward checks that a step's saves start only once
// the forward ran (WaitForSave), or at GetFinished for a step without
// one: StartLoad runs before the forward wrote the blocks.
func TestWorkerSavesAfterForward(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	s := mustSettings(t, KVBoth, nil, nil)
	c := newPoolClient(t, cl)
	ns := s.Namespace(0, 0)
	for _, viaGetFinished := range []bool{false, true} {
		t.Run(fmt.Sprintf("viaGetFinished=%v", viaGetFinished), func(t *testing.T) {
			ctx := testContext(t)
			w, kc := storeWorker(t, cl, s, 60)
			hs := hashes(fmt.Sprintf("fwd-%v", viaGetFinished), 2)
			if err := w.StartLoad(ctx, saveMeta(t, "req", hs, []int{1, 2})); err != nil {
				t.Fatal(err)
			}
			found, err := c.BatchIsExist(ctx, ns.Keys(hs))
			if err != nil || slices.Contains(found, true) {
				t.Fatalf("after StartLoad: keys exist = %v, %v; want none", found, err)
			}
			if w.Tracked() != 0 {
				t.Errorf("Tracked = %d before the save started", w.Tracked())
			}
			// The forward writes the blocks now; the save must see it.
			copy(kc.block(0, 1), "written by the forward")
			if !viaGetFinished {
				if err := w.WaitForSave(); err != nil {
					t.Fatal(err)
				}
			}
			collect(t, w, sendingHas("req"))
			found, err = c.BatchIsExist(ctx, ns.Keys(hs))
			if err != nil || slices.Contains(found, false) {
				t.Fatalf("after the save: keys exist = %v, %v", found, err)
			}
			got, err := c.Get(ctx, ns.Key(hs[0]))
			if err != nil || !bytes.Equal(got, kc.value(1)) {
				t.Errorf("saved value = %.24q..., %v; want the block after the forward", got, err)
			}
		})
	}
}

func TestWorkerRegister(t *testing.T) {
	s := mustSettings(t, KVBoth, nil, nil)
	noPool := func(context.Context) (Pool, func() error, error) { return nil, nil, errors.New("no pool in this test") }
	kc := newKVCache(t, 1, 8, 256, 256)
	tests := []struct {
		name    string
		regions []Region
	}{
		{"none", nil},
		{"zero block bytes", []Region{{Buf: kc.regions[0].Buf, BlockBytes: 0, NumBlocks: 8}}},
		{"zero blocks", []Region{{Buf: kc.regions[0].Buf, BlockBytes: 256, NumBlocks: 0}}},
		{"different block counts", []Region{kc.regions[0], {Buf: kc.regions[1].Buf, BlockBytes: 128, NumBlocks: 16 + 1}}},
		{"buffer too small", []Region{{Buf: kc.regions[0].Buf[:256*8-1], BlockBytes: 256, NumBlocks: 8}}},
		{"partial overlap", []Region{kc.regions[0], {Buf: kc.mem.Bytes()[128 : 128+256*8], BlockBytes: 256, NumBlocks: 8}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorker(s, noPool, nil)
			defer w.Close()
			if err := w.RegisterKVCaches(testContext(t), tt.regions); !errors.Is(err, ErrBadInput) {
				t.Errorf("err = %v, want ErrBadInput", err)
			}
		})
	}
	t.Run("pool error", func(t *testing.T) {
		w := newWorker(s, noPool, nil)
		defer w.Close()
		if err := w.RegisterKVCaches(testContext(t), kc.regions); err == nil || !strings.Contains(err.Error(), "no pool") {
			t.Errorf("err = %v, want the pool's", err)
		}
	})
	t.Run("twice", func(t *testing.T) {
		fp := &fakeWorkerPool{}
		w := newWorker(s, fp.open, nil)
		defer w.Close()
		ctx := testContext(t)
		if err := w.RegisterKVCaches(ctx, kc.regions); err != nil {
			t.Fatal(err)
		}
		if err := w.RegisterKVCaches(ctx, kc.regions); !errors.Is(err, ErrBadInput) {
			t.Errorf("second call: err = %v, want ErrBadInput", err)
		}
		// K and V are adjacent: both registered, once each.
		if fp.registered != 2 {
			t.Errorf("%d buffers registered, want 2", fp.registered)
		}
	})
	t.Run("closed", func(t *testing.T) {
		w := newWorker(s, noPool, nil)
		w.Close()
		if err := w.RegisterKVCaches(testContext(t), kc.regions); !errors.Is(err, runtime.ErrClosed) {
			t.Errorf("err = %v, want ErrClosed", err)
		}
		if err := w.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

func TestSpans(t *testing.T) {
	m, err := memory.Map(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	mem := m.Bytes()
	reg := func(off, blockBytes, n int) Region {
		return Region{Buf: mem[off : off+blockBytes*n], BlockBytes: uint64(blockBytes), NumBlocks: uint64(n)}
	}
	type span struct{ off, n int }
	tests := []struct {
		name    string
		regions []Region
		want    []span
		wantErr bool
	}{
		{"one", []Region{reg(0, 64, 4)}, []span{{0, 256}}, false},
		{"sorted by address", []Region{reg(512, 64, 4), reg(0, 64, 4)}, []span{{0, 256}, {512, 256}}, false},
		{"adjacent kept apart", []Region{reg(0, 64, 4), reg(256, 64, 4)}, []span{{0, 256}, {256, 256}}, false},
		{"same storage twice", []Region{reg(0, 64, 4), reg(0, 64, 4)}, []span{{0, 256}}, false},
		{"inside another", []Region{reg(64, 32, 4), reg(0, 128, 4)}, []span{{0, 512}}, false},
		{"same start, shorter", []Region{reg(0, 32, 4), reg(0, 64, 4)}, []span{{0, 256}}, false},
		{"partial overlap", []Region{reg(0, 64, 4), reg(128, 64, 4)}, nil, true},
		{"only the block bytes count", []Region{{Buf: mem[0:1000], BlockBytes: 100, NumBlocks: 4}, reg(400, 100, 4)}, []span{{0, 400}, {400, 400}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := spans(tt.regions)
			if tt.wantErr {
				if !errors.Is(err, ErrBadInput) {
					t.Errorf("err = %v, want ErrBadInput", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var gs []span
			for _, b := range got {
				gs = append(gs, span{int(memory.AddrOf(b) - memory.AddrOf(mem)), len(b)})
			}
			if !slices.Equal(gs, tt.want) {
				t.Errorf("spans = %v, want %v", gs, tt.want)
			}
		})
	}
}

func TestWorkerNotRegistered(t *testing.T) {
	w := newWorker(mustSettings(t, KVBoth, nil, nil), (&fakeWorkerPool{}).open, nil)
	defer w.Close()
	ctx := testContext(t)
	if err := w.StartLoad(ctx, nil); err != nil {
		t.Errorf("StartLoad(nil) = %v", err)
	}
	if err := w.StartLoad(ctx, metaJSON(t, Meta{})); err != nil {
		t.Errorf("StartLoad(empty meta) = %v", err)
	}
	if err := w.StartLoad(ctx, loadMeta(t, "r", hashes("x", 1), []int{1}, true)); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("StartLoad(load) = %v, want ErrNotRegistered", err)
	}
	if err := w.StartLoad(ctx, []byte("{not json")); !errors.Is(err, ErrBadInput) {
		t.Errorf("StartLoad(garbage) = %v, want ErrBadInput", err)
	}
	if f, err := w.GetFinished(); err != nil || len(f.Sending)+len(f.Recving)+len(f.FailedBlocks) != 0 {
		t.Errorf("GetFinished = %+v, %v", f, err)
	}
	if err := w.HandlePreemptions(ctx, []string{"r"}); err != nil {
		t.Errorf("HandlePreemptions = %v", err)
	}
	w.Close()
	if err := w.StartLoad(ctx, nil); !errors.Is(err, runtime.ErrClosed) {
		t.Errorf("StartLoad after Close = %v, want ErrClosed", err)
	}
}

// fakeWorkerPool is a Pool whose loads block until released or
// cancelled, to hold a job in flight.
type fakeWorkerPool struct {
	registered int
	// entered receives once per BatchGetIntoParts call when non-nil.
	entered chan struct{}
	// release unblocks the loads when closed (nil: loads never block).
	release chan struct{}
}

func (f *fakeWorkerPool) open(context.Context) (Pool, func() error, error) { return f, nil, nil }

func (f *fakeWorkerPool) RegisterBuffer(context.Context, []byte) error {
	f.registered++
	return nil
}

func (f *fakeWorkerPool) BatchPutFromParts(_ context.Context, keys []string, _ [][][]byte, _ *client.PutOptions) []error {
	return make([]error, len(keys))
}

func (f *fakeWorkerPool) BatchGetIntoParts(ctx context.Context, keys []string, dsts [][][]byte) ([]int, []error) {
	n, errs := make([]int, len(keys)), make([]error, len(keys))
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.release != nil {
		select {
		case <-f.release:
		case <-ctx.Done():
			for i := range errs {
				errs[i] = ctx.Err()
			}
			return n, errs
		}
	}
	for i, d := range dsts {
		for _, p := range d {
			n[i] += len(p)
		}
	}
	return n, errs
}

func TestWorkerPreemptionFencing(t *testing.T) {
	ctx := testContext(t)
	kc := newKVCache(t, 70, testBlocks, testBlockBytes...)
	fp := &fakeWorkerPool{entered: make(chan struct{}, 4), release: make(chan struct{})}
	w := newWorker(mustSettings(t, KVBoth, nil, nil), fp.open, nil)
	defer w.Close()
	if err := w.RegisterKVCaches(ctx, kc.regions); err != nil {
		t.Fatal(err)
	}

	// A load in flight is cancelled and waited for by HandlePreemptions;
	// it is still reported finished, with its blocks failed.
	if err := w.StartLoad(ctx, loadMeta(t, "a", hashes("a", 2), []int{1, 2}, true)); err != nil {
		t.Fatal(err)
	}
	<-fp.entered
	if err := w.HandlePreemptions(ctx, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	f, err := w.GetFinished()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(f.FailedBlocks)
	if !slices.Equal(f.Recving, []string{"a"}) || !slices.Equal(f.FailedBlocks, []int{1, 2}) {
		t.Errorf("after fencing a: %+v, want a received with blocks 1 and 2 failed", f)
	}

	// The same through the metadata: a preempted request in the next
	// step's meta is fenced before that step's loads start.
	if err := w.StartLoad(ctx, loadMeta(t, "b", hashes("b", 1), []int{3}, true)); err != nil {
		t.Fatal(err)
	}
	<-fp.entered
	next := metaJSON(t, Meta{Preempted: []string{"b"}, Plan: runtime.Plan{Loads: []runtime.LoadSpec{{ReqID: "c", Hashes: hashes("c", 1), BlockIDs: []int{3}, Async: true}}}})
	if err := w.StartLoad(ctx, next); err != nil {
		t.Fatal(err)
	}
	// b's load was over before StartLoad returned; c's is in flight.
	f, err = w.GetFinished()
	if err != nil || !slices.Equal(f.Recving, []string{"b"}) || !slices.Equal(f.FailedBlocks, []int{3}) {
		t.Errorf("after the fencing step: %+v, %v; want b received with block 3 failed", f, err)
	}
	<-fp.entered
	close(fp.release)
	if f := collect(t, w, recvingHas("c")); len(f.FailedBlocks) != 0 || len(f.Recving) != 1 {
		t.Errorf("c: %+v, want received, nothing failed", f)
	}
	if w.Tracked() != 0 {
		t.Errorf("Tracked = %d, want 0", w.Tracked())
	}
}

// TestWorkerWaitIdle: an empty step's WaitIdle sleeps until the held
// request's save completes (then get_finished reports it), and returns at
// once with nothing in flight or with mc_idle_wait_ms 0.
func TestWorkerWaitIdle(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	s := mustSettings(t, KVBoth, map[string]any{"mc_idle_wait_ms": 1000}, nil)
	require.Equal(t, time.Second, s.IdleWait)
	w, _ := storeWorker(t, cl, s, 3)
	require.False(t, w.WaitIdle(), "nothing in flight")

	hs := hashes("idle", 3)
	require.NoError(t, w.StartLoad(testContext(t), saveMeta(t, "idle", hs, []int{1, 2, 3})))
	require.NoError(t, w.WaitForSave())
	var f Finished
	deadline := time.Now().Add(testTimeout)
	for !slices.Contains(f.Sending, "idle") {
		require.True(t, time.Now().Before(deadline), "save of idle never reported")
		w.WaitIdle() // bounded by 1 s; wakes when the save completes
		got, err := w.GetFinished()
		require.NoError(t, err)
		f.Sending = append(f.Sending, got.Sending...)
	}
	assert.False(t, w.WaitIdle(), "nothing left in flight")

	off := mustSettings(t, KVBoth, map[string]any{"mc_idle_wait_ms": 0}, nil)
	w0, _ := storeWorker(t, cl, off, 4)
	require.NoError(t, w0.StartLoad(testContext(t), saveMeta(t, "idle0", hashes("idle0", 2), []int{1, 2})))
	require.NoError(t, w0.WaitForSave())
	assert.False(t, w0.WaitIdle(), "mc_idle_wait_ms 0 never waits")
	collect(t, w0, sendingHas("idle0"))
}
