package storebench_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
	"github.com/mooncake-go/mooncake/core/store/storebench"
	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// pool starts a local pool (2 nodes of segment bytes) and n clients of it.
func pool(tb testing.TB, shm bool, segment uint64, n int) []*client.Client {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := localcluster.Start(ctx, localcluster.Options{Nodes: 2, SegmentSize: segment, Shm: shm})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	clients := make([]*client.Client, n)
	for i := range clients {
		if clients[i], err = cl.NewClient(ctx, client.Config{LocalHostname: fmt.Sprintf("bench-%d", i)}); err != nil {
			tb.Fatal(err)
		}
		c := clients[i]
		tb.Cleanup(func() { c.Close() })
	}
	return clients
}

func protoName(shm bool) string {
	if shm {
		return "shm"
	}
	return "tcp"
}

func TestRun(t *testing.T) {
	for _, shm := range []bool{false, true} {
		t.Run(protoName(shm), func(t *testing.T) {
			// 1 MiB of pool for 64 KiB values: the put phase (40 values per
			// worker after warmup) overflows it, so the master evicts and the
			// get phase reads what is left.
			clients := pool(t, shm, 512<<10, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := storebench.Run(ctx, clients, storebench.Config{ValueSize: 64 << 10, Ops: 120, Warmup: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if res.Put.Ops != 120 || res.Get.Ops != 120 || res.Concurrency != 3 {
				t.Fatalf("ops put %d get %d concurrency %d, want 120 120 3", res.Put.Ops, res.Get.Ops, res.Concurrency)
			}
			if res.Put.Bytes != 120<<16 || res.Put.GBps <= 0 || res.Get.GBps <= 0 || res.Put.P99Ms < res.Put.P50Ms || res.Get.P50Ms <= 0 || res.Put.CPUSPerGB <= 0 || res.Get.CPUSPerGB <= 0 {
				t.Fatalf("implausible result %+v", res)
			}
			// Half the 1 MiB pool over 3 workers of 64 KiB values: up to 2
			// keys each (a worker that finished early may have lost its
			// newest keys to the others' puts).
			if res.GetKeys < 1 || res.GetKeys > 6 {
				t.Fatalf("get phase read %d keys, want 1..6", res.GetKeys)
			}
			// Each node maps its segment; with shm the clients map them too.
			maps, err := os.ReadFile("/proc/self/maps")
			if err != nil {
				t.Fatal(err)
			}
			n := strings.Count(string(maps), "memfd:mooncake-segment")
			if shm && n <= 2 || !shm && n != 2 {
				t.Fatalf("%d mappings of node segments in this process, want %s", n, map[bool]string{true: "> 2", false: "2"}[shm])
			}
		})
	}
}

func TestRunDuration(t *testing.T) {
	clients := pool(t, true, 8<<20, 2)
	res, err := storebench.Run(context.Background(), clients, storebench.Config{ValueSize: 4096, Duration: 100 * time.Millisecond, Warmup: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Put.Ops == 0 || res.Get.Ops == 0 || res.Put.ElapsedS < 0.1 {
		t.Fatalf("result %+v", res)
	}
}

func TestRunConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		clients int
		cfg     storebench.Config
	}{
		{"tiny value", 1, storebench.Config{ValueSize: 8, Ops: 1}},
		{"no length", 1, storebench.Config{ValueSize: 64}},
		{"too few clients", 1, storebench.Config{ValueSize: 64, Ops: 4, Concurrency: 2}},
		{"fewer ops than workers", 2, storebench.Config{ValueSize: 64, Ops: 1}},
		{"no clients", 0, storebench.Config{ValueSize: 64, Ops: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := storebench.Run(context.Background(), make([]*client.Client, tc.clients), tc.cfg)
			if !errors.Is(err, storebench.ErrConfig) {
				t.Fatalf("Run = %v, want ErrConfig", err)
			}
		})
	}
}

// BenchmarkStore runs b.N puts, then b.N gets, with 4 workers, per
// transport and value size, after a warmup that fills the pool once (steady
// state); SetBytes counts one put and one get.
func BenchmarkStore(b *testing.B) {
	for _, shm := range []bool{true, false} {
		for _, size := range []int{1 << 20, 4 << 20} {
			b.Run(fmt.Sprintf("%s/%dMiB", protoName(shm), size>>20), func(b *testing.B) {
				clients := pool(b, shm, 256<<20, 4)
				if _, err := storebench.Run(context.Background(), clients, storebench.Config{ValueSize: size, Ops: 4, Warmup: 50 * time.Millisecond, WarmupFill: true}); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.SetBytes(2 * int64(size))
				b.ResetTimer()
				res, err := storebench.Run(context.Background(), clients, storebench.Config{ValueSize: size, Ops: max(b.N, 4), Warmup: -1})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(res.Put.GBps, "put-GB/s")
				b.ReportMetric(res.Get.GBps, "get-GB/s")
			})
		}
	}
}

// TestRunStages: with Config.Stages every phase reports its own steps
// (and only those), each with a positive mean, and the steps of an
// operation add up to no more than its latency.
func TestRunStages(t *testing.T) {
	clients := pool(t, false, 8<<20, 2)
	res, err := storebench.Run(context.Background(), clients, storebench.Config{ValueSize: 64 << 10, Ops: 40, Warmup: -1, Stages: true})
	require.NoError(t, err)
	for _, tc := range []struct {
		phase storebench.Phase
		want  []string
	}{
		{res.Put, []string{"put_start", "write", "put_end", "other"}},
		{res.Get, []string{"replica_list", "read", "other"}},
	} {
		require.Len(t, tc.phase.Stages, len(tc.want), "%+v", tc.phase.Stages)
		var sum float64
		for _, name := range tc.want {
			st, ok := tc.phase.Stages[name]
			require.True(t, ok, "stage %s missing from %+v", name, tc.phase.Stages)
			if name != "other" {
				assert.Positive(t, st.MeanMs, name)
			}
			assert.GreaterOrEqual(t, st.P99Ms, st.P50Ms, name)
			sum += st.MeanMs
		}
		mean := tc.phase.ElapsedS * 1e3 * float64(len(clients)) / float64(tc.phase.Ops)
		assert.LessOrEqual(t, sum, mean*1.01, "steps %+v add up to more than the mean latency %.3f ms", tc.phase.Stages, mean)
	}
}
