package vllm

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pdWorker is a registered pd-mode worker of role over a KV cache filled
// with seed's pattern, through the PD factory the library ships; both go
// when t ends. The producer's bootstrap server listens on a port the
// system picks (BootstrapPort 0).
func pdWorker(t *testing.T, role, engine string, extra map[string]any, seed int) (*Worker, *kvCache) {
	t.Helper()
	if extra == nil {
		extra = map[string]any{}
	}
	extra["mc_mode"] = "pd"
	s := mustSettings(t, role, extra, map[string]any{"engine_id": engine, "host": "127.0.0.1"})
	s.BootstrapPort = 0
	w, err := NewWorker(s, map[string]string{}, PD)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("close %s worker: %v", role, err)
		}
	})
	kc := newKVCache(t, seed, testBlocks, testBlockBytes...)
	if err := w.RegisterKVCaches(testContext(t), kc.regions); err != nil {
		t.Fatalf("RegisterKVCaches: %v", err)
	}
	return w, kc
}

// bootstrapOf is the producer worker's bootstrap address as a consumer's
// kv_transfer_params carry it.
func bootstrapOf(t *testing.T, w *Worker) string {
	t.Helper()
	p, ok := w.prod.(*pdProducer)
	if !ok {
		t.Fatalf("worker has no pd producer: %T", w.prod)
	}
	return "http://" + p.p.BootstrapAddr()
}

func TestWorkerPD(t *testing.T) {
	prod, src := pdWorker(t, KVProducer, "prefill-0", nil, 80)
	cons, dst := pdWorker(t, KVConsumer, "decode-0", nil, 81)
	ctx := testContext(t)
	boot := bootstrapOf(t, prod)

	// The scheduler halves' metadata: the producer finished prefill of
	// req-p (blocks 1-3), the consumer allocated blocks 7, 4, 9 for req-c.
	if err := prod.StartLoad(ctx, metaJSON(t, Meta{Sends: []Send{{ReqID: "req-p", TransferID: "xfer", BlockIDs: []int{1, 2, 3}}}})); err != nil {
		t.Fatal(err)
	}
	if err := cons.StartLoad(ctx, metaJSON(t, Meta{Recvs: []Recv{{ReqID: "req-c", TransferID: "xfer", BootstrapAddr: boot, EngineID: "prefill-0", BlockIDs: []int{7, 4, 9}}}})); err != nil {
		t.Fatal(err)
	}
	f := collect(t, cons, recvingHas("req-c"))
	if len(f.FailedBlocks) != 0 || len(f.Recving) != 1 {
		t.Fatalf("consumer finished %+v, want req-c with nothing failed", f)
	}
	for i, d := range []int{7, 4, 9} {
		checkBlock(t, dst, d, src, i+1)
	}
	untouched := newKVCache(t, 81, testBlocks, testBlockBytes...)
	checkBlock(t, dst, 5, untouched, 5)
	if f := collect(t, prod, sendingHas("req-p")); len(f.Sending) != 1 {
		t.Errorf("producer finished %+v, want req-p once", f)
	}
	if n := prod.Tracked() + cons.Tracked(); n != 0 {
		t.Errorf("Tracked = %d after the transfer, want 0", n)
	}

	t.Run("dropped", func(t *testing.T) {
		if err := prod.StartLoad(ctx, metaJSON(t, Meta{Drops: []Drop{{ReqID: "req-d", TransferID: "xfer-d"}}})); err != nil {
			t.Fatal(err)
		}
		if err := cons.StartLoad(ctx, metaJSON(t, Meta{Recvs: []Recv{{ReqID: "req-d2", TransferID: "xfer-d", BootstrapAddr: boot, EngineID: "prefill-0", BlockIDs: []int{2}}}})); err != nil {
			t.Fatal(err)
		}
		f := collect(t, cons, recvingHas("req-d2"))
		if !slices.Equal(f.FailedBlocks, []int{2}) {
			t.Errorf("consumer finished %+v, want block 2 failed", f)
		}
	})
	t.Run("release only frees the producer", func(t *testing.T) {
		// The decode request finished before it was allocated: the
		// consumer tells the producer (which then frees req-r's blocks)
		// but never reports req-rel, which vLLM no longer tracks.
		if err := prod.StartLoad(ctx, metaJSON(t, Meta{Sends: []Send{{ReqID: "req-r", TransferID: "xfer-r", BlockIDs: []int{4, 5}}}})); err != nil {
			t.Fatal(err)
		}
		if err := cons.StartLoad(ctx, metaJSON(t, Meta{Recvs: []Recv{{ReqID: "req-rel", TransferID: "xfer-r", BootstrapAddr: boot, EngineID: "prefill-0", Release: true}}})); err != nil {
			t.Fatal(err)
		}
		collect(t, prod, sendingHas("req-r"))
		pc := cons.cons.(*pdConsumer).c
		require.Eventually(t, func() bool { return pc.Pending() == 0 }, testTimeout, time.Millisecond, "the release never ended")
		f, err := cons.GetFinished()
		require.NoError(t, err)
		assert.NotContains(t, f.Recving, "req-rel")
		assert.Empty(t, f.FailedBlocks)
	})
	t.Run("refused recv", func(t *testing.T) {
		// An empty transfer id is refused at once and reported finished,
		// every block failed.
		if err := cons.StartLoad(ctx, metaJSON(t, Meta{Recvs: []Recv{{ReqID: "req-e", BootstrapAddr: boot, EngineID: "prefill-0", BlockIDs: []int{3, 6}}}})); err != nil {
			t.Fatal(err)
		}
		f, err := cons.GetFinished()
		slices.Sort(f.FailedBlocks)
		if err != nil || !slices.Equal(f.Recving, []string{"req-e"}) || !slices.Equal(f.FailedBlocks, []int{3, 6}) {
			t.Errorf("GetFinished = %+v, %v", f, err)
		}
	})
	t.Run("store-mode calls are no-ops", func(t *testing.T) {
		if err := prod.HandlePreemptions(ctx, []string{"x"}); err != nil {
			t.Error(err)
		}
		if err := prod.WaitForSave(); err != nil {
			t.Error(err)
		}
	})
}

func TestWorkerPDUnknownTransfer(t *testing.T) {
	prod, _ := pdWorker(t, KVProducer, "prefill-1", nil, 90)
	cons, _ := pdWorker(t, KVConsumer, "decode-1", map[string]any{"mc_load_timeout_ms": 200}, 91)
	ctx := testContext(t)
	// The producer never hears of this transfer: the consumer gives up
	// after its load timeout and reports the blocks failed.
	if err := cons.StartLoad(ctx, metaJSON(t, Meta{Recvs: []Recv{{ReqID: "req-u", TransferID: "never-ready", BootstrapAddr: bootstrapOf(t, prod), EngineID: "prefill-1", BlockIDs: []int{5, 6}}}})); err != nil {
		t.Fatal(err)
	}
	f := collect(t, cons, recvingHas("req-u"))
	slices.Sort(f.FailedBlocks)
	if !slices.Equal(f.FailedBlocks, []int{5, 6}) {
		t.Errorf("consumer finished %+v, want blocks 5 and 6 failed", f)
	}
	require.Len(t, f.Errors, 1, "the failure's reason, for the engine's log")
	assert.Contains(t, f.Errors[0], "request req-u (transfer never-ready)")
	assert.Contains(t, f.Errors[0], "timed out")
	if st := cons.TakeStats(); st.FailedBlocks != 2 {
		t.Errorf("stats = %+v, want 2 failed", st)
	}
}

func TestNewWorkerPD(t *testing.T) {
	s := mustSettings(t, KVBoth, map[string]any{"mc_mode": "pd"}, nil)
	if _, err := NewWorker(s, nil, nil); !errors.Is(err, ErrBadConfig) {
		t.Errorf("pd mode without a factory: err = %v, want ErrBadConfig", err)
	}
	bad := s
	bad.KVRole = "kv_neither"
	if _, err := NewWorker(bad, nil, PD); !errors.Is(err, ErrBadConfig) {
		t.Errorf("bad settings: err = %v, want ErrBadConfig", err)
	}
}

// TestWorkerPDWaitIdle: an idle step of a P/D worker with a transfer in
// flight waits for it to end (the consumer's receive, the producer's
// send), and returns at once with nothing in flight.
func TestWorkerPDWaitIdle(t *testing.T) {
	extra := map[string]any{"mc_idle_wait_ms": 1000}
	prod, _ := pdWorker(t, KVProducer, "prefill-w", extra, 90)
	cons, _ := pdWorker(t, KVConsumer, "decode-w", map[string]any{"mc_idle_wait_ms": 1000}, 91)
	ctx := testContext(t)
	assert.False(t, prod.WaitIdle(), "producer: nothing in flight")
	assert.False(t, cons.WaitIdle(), "consumer: nothing in flight")

	require.NoError(t, prod.StartLoad(ctx, metaJSON(t, Meta{Sends: []Send{{ReqID: "req-p", TransferID: "xw", BlockIDs: []int{1, 2}}}})))
	require.NoError(t, cons.StartLoad(ctx, metaJSON(t, Meta{Recvs: []Recv{{ReqID: "req-c", TransferID: "xw", BootstrapAddr: bootstrapOf(t, prod), EngineID: "prefill-w", BlockIDs: []int{5, 6}}}})))
	for _, side := range []struct {
		w  *Worker
		id string
		in func(Finished) []string
	}{{cons, "req-c", func(f Finished) []string { return f.Recving }}, {prod, "req-p", func(f Finished) []string { return f.Sending }}} {
		var got []string
		woke := false
		deadline := time.Now().Add(testTimeout)
		for !slices.Contains(got, side.id) {
			require.True(t, time.Now().Before(deadline), "%s never reported", side.id)
			woke = side.w.WaitIdle() || woke // bounded by 1 s; wakes when the transfer ends
			f, err := side.w.GetFinished()
			require.NoError(t, err)
			require.Empty(t, f.FailedBlocks)
			got = append(got, side.in(f)...)
		}
		assert.True(t, woke, "%s: WaitIdle never saw the transfer end", side.id)
		assert.False(t, side.w.WaitIdle(), "%s: nothing left in flight", side.id)
	}
}
