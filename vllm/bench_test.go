package vllm

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store/client"
)

// Geometry of issue 6's bar: a 32-layer model in FlashAttention's layout
// (per layer one [2, num_blocks, 16, 8, 128] bfloat16 tensor, so a K and a
// V region), 16-token blocks of 8 KV heads of dimension 128: 32 KiB per
// region and block, 64 regions, 2 MiB per block.
const (
	benchLayers      = 32
	benchRegionBytes = 16 * 8 * 128 * 2
	benchBlockBytes  = 2 * benchLayers * benchRegionBytes
	// benchBlocks are the blocks saved and loaded per iteration (one
	// request of 512 tokens).
	benchBlocks = 32
)

// benchResult holds the four measured figures in GB/s (1e9 bytes per
// second).
type benchResult struct {
	ConnSave, ConnLoad, RawPut, RawGet float64
}

// benchConnectorVsRaw saves and loads benchBlocks blocks through a
// store-mode Worker (StartLoad with the scheduler's metadata, WaitForSave,
// the finished-sending report; a synchronous load) and moves the same
// bytes with the store client's BatchPutFrom/BatchGetInto of one
// contiguous 2 MiB buffer per block (the transfer engine's raw figure),
// over one in-process pool and one client; shm adds the same-host shm
// transport (the default between processes of one host). It reports both
// as GB/s and their ratios.
func benchConnectorVsRaw(b *testing.B, shm bool) benchResult {
	ctx := context.Background()
	cl := startPool(b, 2*benchBlocks*benchBlockBytes, shm)
	c, err := cl.NewClient(testContext(b), client.Config{LocalHostname: fmt.Sprintf("vllm-bench-%d", clientSeq.Add(1))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })

	s := mustSettings(b, KVBoth, nil, map[string]any{"block_size": 16, "layout": "vllm-fa-nhd"})
	s.LoadTimeout, s.SaveTimeout = time.Minute, time.Minute
	sizes := make([]uint64, 2*benchLayers)
	for i := range sizes {
		sizes[i] = benchRegionBytes
	}
	kc := newKVCache(b, 1, benchBlocks+1, sizes...) // block 0 is vLLM's null block
	w := newWorker(s, func(context.Context) (Pool, func() error, error) { return c, nil, nil }, nil)
	b.Cleanup(func() { w.Close() })
	if err := w.RegisterKVCaches(ctx, kc.regions); err != nil {
		b.Fatal(err)
	}
	raw, err := memory.Map(benchBlocks * benchBlockBytes)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { raw.Close() })
	copy(raw.Bytes(), kc.mem.Bytes())
	if err := c.RegisterBuffer(ctx, raw.Bytes()); err != nil {
		b.Fatal(err)
	}
	rawBufs := make([][]byte, benchBlocks)
	for i := range rawBufs {
		rawBufs[i] = raw.Bytes()[i*benchBlockBytes : (i+1)*benchBlockBytes]
	}
	blocks := make([]int, benchBlocks)
	for i := range blocks {
		blocks[i] = i + 1
	}
	ns := s.Namespace(0, 0)

	var connSave, connLoad, rawPut, rawGet time.Duration
	b.SetBytes(4 * benchBlocks * benchBlockBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		req := fmt.Sprintf("req-%d", i)
		hs := hashes(req, benchBlocks)
		saveM, loadM := saveMeta(b, req, hs, blocks), loadMeta(b, req+"-load", hs, blocks, false)
		rawKeys := ns.Keys(hashes(req+"-raw", benchBlocks))

		t0 := time.Now()
		if err := w.StartLoad(ctx, saveM); err != nil {
			b.Fatal(err)
		}
		if err := w.WaitForSave(); err != nil {
			b.Fatal(err)
		}
		// Fencing waits for the request's save job without polling.
		if err := w.HandlePreemptions(ctx, []string{req}); err != nil {
			b.Fatal(err)
		}
		f, err := w.GetFinished()
		if err != nil || !slices.Equal(f.Sending, []string{req}) {
			b.Fatalf("after the save: %+v, %v", f, err)
		}
		t1 := time.Now()
		if err := w.StartLoad(ctx, loadM); err != nil {
			b.Fatal(err)
		}
		if f, err := w.GetFinished(); err != nil || len(f.FailedBlocks) != 0 {
			b.Fatalf("after the load: %+v, %v", f, err)
		}
		t2 := time.Now()
		for j, err := range c.BatchPutFrom(ctx, rawKeys, rawBufs, nil) {
			if err != nil {
				b.Fatalf("raw put %d: %v", j, err)
			}
		}
		t3 := time.Now()
		n, errs := c.BatchGetInto(ctx, rawKeys, rawBufs)
		for j, err := range errs {
			if err != nil || n[j] != benchBlockBytes {
				b.Fatalf("raw get %d: %d bytes, %v", j, n[j], err)
			}
		}
		t4 := time.Now()
		connSave += t1.Sub(t0)
		connLoad += t2.Sub(t1)
		rawPut += t3.Sub(t2)
		rawGet += t4.Sub(t3)

		b.StopTimer()
		if st := w.TakeStats(); st.SavedBlocks != benchBlocks || st.LoadedBlocks != benchBlocks || st.FailedBlocks != 0 {
			b.Fatalf("stats = %+v", st)
		}
		for j, err := range c.BatchRemove(ctx, append(ns.Keys(hs), rawKeys...), true) {
			if err != nil {
				b.Fatalf("remove %d: %v", j, err)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	gbps := func(d time.Duration) float64 {
		return float64(b.N) * benchBlocks * benchBlockBytes / d.Seconds() / 1e9
	}
	r := benchResult{ConnSave: gbps(connSave), ConnLoad: gbps(connLoad), RawPut: gbps(rawPut), RawGet: gbps(rawGet)}
	b.ReportMetric(r.ConnSave, "conn_save_GB/s")
	b.ReportMetric(r.ConnLoad, "conn_load_GB/s")
	b.ReportMetric(r.RawPut, "raw_put_GB/s")
	b.ReportMetric(r.RawGet, "raw_get_GB/s")
	b.ReportMetric(r.ConnSave/r.RawPut, "save_ratio")
	b.ReportMetric(r.ConnLoad/r.RawGet, "load_ratio")
	b.ReportMetric((rawPut+rawGet).Seconds()/(connSave+connLoad).Seconds(), "ratio")
	return r
}

// BenchmarkConnectorVsRaw measures issue 6's bar: saving and loading
// 32-layer blocks through the connector against the store client's raw
// put/get of the same bytes, over tcp and over shm. Run it with
// `make bench-vllm`.
func BenchmarkConnectorVsRaw(b *testing.B) {
	b.Run("tcp", func(b *testing.B) { benchConnectorVsRaw(b, false) })
	b.Run("shm", func(b *testing.B) { benchConnectorVsRaw(b, true) })
}

// TestConnectorVsRawRatio prints BenchmarkConnectorVsRaw's figures as a
// table; it runs only with MC_BENCH=1 (make bench-vllm).
func TestConnectorVsRawRatio(t *testing.T) {
	if os.Getenv("MC_BENCH") != "1" {
		t.Skip("set MC_BENCH=1 to run (make bench-vllm)")
	}
	t.Logf("%d blocks of %d layers x K,V x %d KiB = %d MiB per block; GB/s = 1e9 B/s", benchBlocks, benchLayers, benchRegionBytes>>10, benchBlockBytes>>20)
	t.Logf("%-4s %10s %10s %7s %10s %10s %7s %7s", "", "conn save", "raw put", "ratio", "conn load", "raw get", "ratio", "total")
	for _, shm := range []bool{false, true} {
		var r benchResult
		res := testing.Benchmark(func(b *testing.B) { r = benchConnectorVsRaw(b, shm) })
		name := "tcp"
		if shm {
			name = "shm"
		}
		total := res.Extra["ratio"]
		t.Logf("%-4s %10.2f %10.2f %7.2f %10.2f %10.2f %7.2f %7.2f (%d iterations)", name,
			r.ConnSave, r.RawPut, r.ConnSave/r.RawPut, r.ConnLoad, r.RawGet, r.ConnLoad/r.RawGet, total, res.N)
		verdict := "meets"
		if total < 0.5 {
			verdict = "is BELOW"
		}
		t.Logf("%-4s connector at %.2f x the raw figure: %s issue 6's bar (>= 0.5)", name, total, verdict)
	}
}
