package vllm

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/connectors/runtime"
	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

// TestMain runs the tests with a goroutine leak check.
func TestMain(m *testing.M) { leakcheck.Main(m) }

// testTimeout bounds every blocking call and every poll of a test.
const testTimeout = 30 * time.Second

// testContext is a context bounded by testTimeout, cancelled when t ends.
func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// settingsJSON renders mc_vllm_create's settings: a small valid engine
// with kv_role role, overridden by the top-level keys in over, and extra
// as kv_connector_extra_config (nil for none).
func settingsJSON(t testing.TB, role string, extra map[string]any, over map[string]any) []byte {
	t.Helper()
	m := map[string]any{
		"kv_role": role, "engine_id": "engine-" + role, "model": "org/tiny-llama/",
		"kv_dtype": "bfloat16", "layout": "vllm-fa-nhd", "block_size": 4,
	}
	for k, v := range over {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	if extra != nil {
		m["kv_connector_extra_config"] = extra
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mustSettings parses settingsJSON's output with an empty environment.
func mustSettings(t testing.TB, role string, extra map[string]any, over map[string]any) Settings {
	t.Helper()
	s, err := ParseSettings(settingsJSON(t, role, extra, over), map[string]string{})
	if err != nil {
		t.Fatalf("ParseSettings: %v", err)
	}
	return s
}

// startPool starts an in-process pool of two nodes of segment bytes each
// (with the shm transport too when shm is set), closed when t ends.
func startPool(t testing.TB, segment uint64, shm bool) *localcluster.Cluster {
	t.Helper()
	cl, err := localcluster.Start(testContext(t), localcluster.Options{Nodes: 2, SegmentSize: segment, Shm: shm})
	if err != nil {
		t.Fatalf("start pool: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// clientSeq numbers the pool clients the tests start (segment names must
// be unique in a pool).
var clientSeq atomic.Int64

// newPoolClient starts a pure client of cl (no segment, a 1 MiB scratch
// buffer for Get), closed when t ends.
func newPoolClient(t testing.TB, cl *localcluster.Cluster) *client.Client {
	t.Helper()
	c, err := cl.NewClient(testContext(t), client.Config{LocalHostname: fmt.Sprintf("vllm-test-%d", clientSeq.Add(1)), LocalBufferSize: 1 << 20})
	if err != nil {
		t.Fatalf("pool client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// poolOpener returns a Worker's open func that starts a client of cl; the
// worker closes it.
func poolOpener(cl *localcluster.Cluster) func(ctx context.Context) (Pool, func() error, error) {
	return func(ctx context.Context) (Pool, func() error, error) {
		c, err := cl.NewClient(ctx, client.Config{LocalHostname: fmt.Sprintf("vllm-worker-%d", clientSeq.Add(1))})
		if err != nil {
			return nil, nil, err
		}
		return c, c.Close, nil
	}
}

// kvCache is a worker's KV cache: one mapping (off the Go heap) cut into
// regions.
type kvCache struct {
	mem     *memory.Region
	regions []Region
}

// newKVCache maps len(blockBytes) regions of numBlocks blocks each, laid
// out back to back in one mapping as FlashAttention's [2, num_blocks, ...]
// K and V halves are, and fills block b of region r with pattern(seed, r,
// b, i). It is unmapped when t ends (after the workers registered later
// are closed).
func newKVCache(t testing.TB, seed int, numBlocks uint64, blockBytes ...uint64) *kvCache {
	t.Helper()
	total := uint64(0)
	for _, bb := range blockBytes {
		total += bb * numBlocks
	}
	m, err := memory.Map(int(total))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	kc := &kvCache{mem: m}
	buf := m.Bytes()
	off := uint64(0)
	for _, bb := range blockBytes {
		n := bb * numBlocks
		kc.regions = append(kc.regions, Region{Buf: buf[off : off+n : off+n], BlockBytes: bb, NumBlocks: numBlocks})
		off += n
	}
	kc.fill(seed)
	return kc
}

// fill writes seed's pattern into every block of every region.
func (kc *kvCache) fill(seed int) {
	for r, reg := range kc.regions {
		for b := range int(reg.NumBlocks) {
			blk := kc.block(r, b)
			for i := range blk {
				blk[i] = pattern(seed, r, b, i)
			}
		}
	}
}

// block returns block b of region r.
func (kc *kvCache) block(r, b int) []byte {
	bb := kc.regions[r].BlockBytes
	return kc.regions[r].Buf[uint64(b)*bb : uint64(b+1)*bb]
}

// value is block b's pool value: its bytes in every region, in order.
func (kc *kvCache) value(b int) []byte {
	var out []byte
	for r := range kc.regions {
		out = append(out, kc.block(r, b)...)
	}
	return out
}

// pattern is the deterministic byte at offset i of block b in region r
// for seed.
func pattern(seed, r, b, i int) byte {
	return byte(seed*131 + r*71 + b*29 + i*7 + i>>8)
}

// hashes returns n distinct block hashes tagged by tag.
func hashes(tag string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, "%s-%d", tag, i)
	}
	return out
}

// metaJSON encodes m as a scheduler would ship it.
func metaJSON(t testing.TB, m Meta) []byte {
	t.Helper()
	b, err := json.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// collect polls w.GetFinished until done reports the accumulated answer
// complete or testTimeout passes (then the test fails), and returns what
// it accumulated. Each poll waits for the next tick, not for a state.
func collect(t testing.TB, w *Worker, done func(Finished) bool) Finished {
	t.Helper()
	var acc Finished
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(testTimeout)
	for {
		f, err := w.GetFinished()
		if err != nil {
			t.Fatalf("GetFinished: %v", err)
		}
		acc.Sending = append(acc.Sending, f.Sending...)
		acc.Recving = append(acc.Recving, f.Recving...)
		acc.FailedBlocks = append(acc.FailedBlocks, f.FailedBlocks...)
		acc.Errors = append(acc.Errors, f.Errors...)
		if done(acc) {
			return acc
		}
		if time.Now().After(deadline) {
			t.Fatalf("GetFinished: still %+v after %v", acc, testTimeout)
		}
		<-tick.C
	}
}

// sendingHas and recvingHas are collect conditions.
func sendingHas(id string) func(Finished) bool {
	return func(f Finished) bool { return slices.Contains(f.Sending, id) }
}

func recvingHas(id string) func(Finished) bool {
	return func(f Finished) bool { return slices.Contains(f.Recving, id) }
}

// saveMeta is the metadata of one step that saves blocks under hashes and
// finishes the request, as the scheduler builds it.
func saveMeta(t testing.TB, req string, hs [][]byte, blocks []int) []byte {
	return metaJSON(t, Meta{Plan: runtime.Plan{
		Saves:    []runtime.SaveSpec{{ReqID: req, Hashes: hs, BlockIDs: blocks}},
		Finished: []string{req},
	}})
}

// loadMeta is the metadata of one step that loads hashes into blocks.
func loadMeta(t testing.TB, req string, hs [][]byte, blocks []int, async bool) []byte {
	return metaJSON(t, Meta{Plan: runtime.Plan{
		Loads: []runtime.LoadSpec{{ReqID: req, Hashes: hs, BlockIDs: blocks, Async: async}},
	}})
}
