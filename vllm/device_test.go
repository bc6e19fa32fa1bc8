package vllm

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// fakeGPU is an in-memory transfer.DeviceRuntime for the worker: a
// "device allocation" is an existing off-heap mapping given a synthetic
// address above the 48-bit user space, so a test reads the device bytes
// through the mapping while the worker reaches them only through copies.
type fakeGPU struct {
	mu     sync.Mutex
	allocs map[uint64][]byte // by device base address
	next   uint64
	pinned map[uint64]int // PinHost ranges

	htod, dtoh   atomic.Int64
	pinnedCopies atomic.Int64 // copies whose host side is pinned
	failHtoD     atomic.Bool
	failDtoH     atomic.Bool
}

func newFakeGPU() *fakeGPU {
	return &fakeGPU{allocs: map[uint64][]byte{}, next: 1 << 48, pinned: map[uint64]int{}}
}

// adopt makes b device memory on the fake and returns its device address.
func (g *fakeGPU) adopt(b []byte) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	a := g.next
	g.allocs[a] = b
	g.next += 1 << 36
	return a
}

func (g *fakeGPU) mem(addr uint64, n int) ([]byte, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for base, b := range g.allocs {
		if addr >= base && addr-base+uint64(n) <= uint64(len(b)) {
			return b[addr-base : addr-base+uint64(n)], nil
		}
	}
	return nil, fmt.Errorf("fakegpu: [%#x,+%d) is not device memory", addr, n)
}

func (g *fakeGPU) isPinned(h []byte) bool {
	a := memory.AddrOf(h)
	g.mu.Lock()
	defer g.mu.Unlock()
	for p, n := range g.pinned {
		if a >= p && a+uint64(len(h)) <= p+uint64(n) {
			return true
		}
	}
	return false
}

var errFakeCopy = errors.New("fakegpu: copy failed")

func (g *fakeGPU) CheckDevice(dev int) error {
	if dev < 0 || dev > 1 {
		return fmt.Errorf("%w: fakegpu: device %d", transfer.ErrInvalidArgument, dev)
	}
	return nil
}

func (g *fakeGPU) CopyHtoD(dev int, dst uint64, src []byte) error {
	if g.failHtoD.Load() {
		return errFakeCopy
	}
	d, err := g.mem(dst, len(src))
	if err != nil {
		return err
	}
	if g.isPinned(src) {
		g.pinnedCopies.Add(1)
	}
	g.htod.Add(1)
	copy(d, src)
	return nil
}

func (g *fakeGPU) CopyDtoH(dev int, dst []byte, src uint64) error {
	if g.failDtoH.Load() {
		return errFakeCopy
	}
	s, err := g.mem(src, len(dst))
	if err != nil {
		return err
	}
	if g.isPinned(dst) {
		g.pinnedCopies.Add(1)
	}
	g.dtoh.Add(1)
	copy(dst, s)
	return nil
}

func (g *fakeGPU) CopyDtoD(int, uint64, int, uint64, uint64) error {
	return errors.New("fakegpu: the worker never copies device to device")
}

func (g *fakeGPU) ExportIPC(int, uint64, uint64) (string, error) {
	return "", fmt.Errorf("%w: fakegpu: no IPC", transfer.ErrUnsupported)
}

func (g *fakeGPU) OpenIPC(int, string) (uint64, func() error, error) {
	return 0, nil, errors.New("fakegpu: no IPC")
}

func (g *fakeGPU) PinHost(b []byte) (func() error, error) {
	a := memory.AddrOf(b)
	g.mu.Lock()
	g.pinned[a] = len(b)
	g.mu.Unlock()
	return func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		delete(g.pinned, a)
		return nil
	}, nil
}

// onDevice returns kc's regions as device memory of g on device dev: the
// same bytes (so kc.block and kc.value still read them), reached by the
// worker only through copies.
func onDevice(g *fakeGPU, kc *kvCache, dev int) []Region {
	base := g.adopt(kc.mem.Bytes())
	out := make([]Region, len(kc.regions))
	for i, r := range kc.regions {
		out[i] = r
		out[i].Buf = nil
		out[i].DeviceAddr = base + (memory.AddrOf(r.Buf) - kc.mem.Addr())
		out[i].Device = dev
	}
	return out
}

// deviceWorker is a registered store-mode worker whose KV cache (filled
// with seed's pattern, laid out as newKVCache) lives on g's device 1,
// with staging of 4 slots of 2 blocks, so that jobs go in chunks.
func deviceWorker(t *testing.T, g *fakeGPU, pool func() (*Worker, error), seed int, layers bool) (*Worker, *kvCache) {
	t.Helper()
	kc := newKVCache(t, seed, testBlocks, testBlockBytes...)
	regions := onDevice(g, kc, 1)
	if layers {
		for i := range regions {
			regions[i].Layer = i
		}
	}
	w, err := pool()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.Close()) })
	w.SetDeviceRuntime(g)
	bb := 0
	for _, b := range testBlockBytes {
		bb += int(b)
	}
	w.stagingBytes = 4 * 2 * bb
	require.NoError(t, w.RegisterKVCaches(testContext(t), regions))
	require.NotNil(t, w.staging)
	require.Equal(t, 2, w.staging.slotBlocks)
	return w, kc
}

// TestWorkerDeviceSaveLoad: a worker whose KV cache is GPU memory saves
// blocks (device to host staging, then the pool), a host-memory worker
// loads the same values (the pool bytes do not depend on where the cache
// lives), and a second GPU worker loads them into other blocks, in sync
// and async mode, through pinned staging in chunks of 2 blocks, for TP
// ranks 0 and 1.
func TestWorkerDeviceSaveLoad(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	g := newFakeGPU()
	blocks := []int{1, 2, 3, 4, 5}
	for rank := range 2 {
		t.Run(fmt.Sprintf("rank%d", rank), func(t *testing.T) {
			over := map[string]any{"tp_rank": rank, "tp_size": 2}
			hs := hashes(fmt.Sprintf("dev-%d", rank), len(blocks))
			mk := func(role string) func() (*Worker, error) {
				return func() (*Worker, error) { return newWorker(mustSettings(t, role, nil, over), poolOpener(cl), nil), nil }
			}
			src, skc := deviceWorker(t, g, mk(KVBoth), 50+rank, false)
			d0 := g.dtoh.Load()
			save(t, src, "req", hs, blocks)
			require.Equal(t, int64(len(blocks)*len(testBlockBytes)), g.dtoh.Load()-d0, "one device copy per block and region")
			st := src.TakeStats()
			require.Equal(t, uint64(len(blocks)), st.SavedBlocks)
			require.Equal(t, uint64(len(blocks)*1324), st.SavedBytes)

			// A host worker reads what the GPU worker wrote.
			hw, hkc := storeWorker(t, cl, mustSettings(t, KVConsumer, nil, over), 60+rank)
			require.Empty(t, load(t, hw, "h", hs, []int{9, 10, 11, 12, 13}, false))
			for i, b := range blocks {
				checkBlock(t, hkc, 9+i, skc, b)
			}

			for _, async := range []bool{false, true} {
				dst, dkc := deviceWorker(t, g, mk(KVConsumer), 70+rank, false)
				p0, h0 := g.pinnedCopies.Load(), g.htod.Load()
				dstBlocks := []int{15, 7, 6, 8, 14}
				require.Empty(t, load(t, dst, "l", hs, dstBlocks, async))
				for i, b := range blocks {
					checkBlock(t, dkc, dstBlocks[i], skc, b)
				}
				fresh := newKVCache(t, 70+rank, testBlocks, testBlockBytes...)
				checkBlock(t, dkc, 9, fresh, 9) // not loaded: untouched
				n := g.htod.Load() - h0
				require.Equal(t, int64(len(blocks)*len(testBlockBytes)), n)
				require.Equal(t, n, g.pinnedCopies.Load()-p0, "every copy from pinned staging")
				st := dst.TakeStats()
				require.Equal(t, uint64(len(blocks)), st.LoadedBlocks)
				require.Equal(t, uint64(len(blocks)*1324), st.LoadedBytes)
			}
		})
	}
}

// TestWorkerDeviceLayerwise: layer-wise mode on GPU memory: each layer's
// object is staged on its own; a synchronous load has layer l on the
// device when WaitLayerLoad(l) returns.
func TestWorkerDeviceLayerwise(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	g := newFakeGPU()
	s := layerwiseSettings(t)
	mk := func() (*Worker, error) { return newWorker(s, poolOpener(cl), nil), nil }
	src, skc := deviceWorker(t, g, mk, 80, true)
	hs := hashes("dlw", 3)
	ctx := testContext(t)
	require.NoError(t, src.StartLoad(ctx, saveMeta(t, "req", hs, []int{3, 4, 5})))
	for l := range 3 {
		src.SaveLayer(l)
	}
	require.NoError(t, src.WaitForSave())
	collect(t, src, sendingHas("req"))

	dst, dkc := deviceWorker(t, g, mk, 81, true)
	require.NoError(t, dst.StartLoad(ctx, loadMeta(t, "r2", hs, []int{10, 11, 12}, false)))
	for l := range 3 {
		require.NoError(t, dst.WaitLayerLoad(ctx, l))
		for i, b := range []int{3, 4, 5} {
			require.Equal(t, skc.block(l, b), dkc.block(l, 10+i), "layer %d of block %d after WaitLayerLoad", l, 10+i)
		}
	}
	f, err := dst.GetFinished()
	require.NoError(t, err)
	require.Empty(t, f.FailedBlocks)
}

// TestWorkerDeviceMLA: with MLA only TP rank 0 writes; every rank loads
// the shared copy into its GPU cache.
func TestWorkerDeviceMLA(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	g := newFakeGPU()
	hs := hashes("dmla", 2)
	mk := func(role string, rank int) func() (*Worker, error) {
		return func() (*Worker, error) {
			return newWorker(mustSettings(t, role, nil, map[string]any{"tp_rank": rank, "tp_size": 2, "use_mla": true}), poolOpener(cl), nil), nil
		}
	}
	w1, _ := deviceWorker(t, g, mk(KVBoth, 1), 90, false)
	d0 := g.dtoh.Load()
	save(t, w1, "req", hs, []int{1, 2})
	require.Equal(t, d0, g.dtoh.Load(), "rank 1 copies nothing off the device")
	w0, src := deviceWorker(t, g, mk(KVBoth, 0), 91, false)
	save(t, w0, "req", hs, []int{1, 2})
	for rank := range 2 {
		w, kc := deviceWorker(t, g, mk(KVConsumer, rank), 92+rank, false)
		require.Empty(t, load(t, w, "r", hs, []int{3, 4}, false))
		checkBlock(t, kc, 3, src, 1)
		checkBlock(t, kc, 4, src, 2)
	}
}

// TestWorkerDeviceFailures: without a runtime device regions are refused
// as unsupported; a failing device copy fails exactly the blocks it
// touched (loads are reported in FailedBlocks, saves in the stats).
func TestWorkerDeviceFailures(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	g := newFakeGPU()
	kc := newKVCache(t, 1, testBlocks, testBlockBytes...)
	w := newWorker(mustSettings(t, KVBoth, nil, nil), poolOpener(cl), nil)
	defer w.Close()
	err := w.RegisterKVCaches(testContext(t), onDevice(g, kc, 0))
	require.ErrorIs(t, err, transfer.ErrUnsupported)
	require.Contains(t, err.Error(), "unsupported: no CUDA runtime")
	w.SetDeviceRuntime(g)
	err = w.RegisterKVCaches(testContext(t), onDevice(g, kc, 7))
	require.ErrorIs(t, err, transfer.ErrInvalidArgument, "device 7 does not exist")

	mk := func() (*Worker, error) { return newWorker(mustSettings(t, KVBoth, nil, nil), poolOpener(cl), nil), nil }
	src, _ := deviceWorker(t, g, mk, 2, false)
	hs := hashes("fail", 3)
	g.failDtoH.Store(true)
	require.NoError(t, src.StartLoad(testContext(t), saveMeta(t, "req", hs, []int{1, 2, 3})))
	require.NoError(t, src.WaitForSave())
	f := collect(t, src, sendingHas("req"))
	require.NotEmpty(t, f.Errors)
	require.Contains(t, f.Errors[0], "fakegpu: copy failed")
	st := src.TakeStats()
	require.Equal(t, uint64(0), st.SavedBlocks)
	require.Equal(t, uint64(3), st.FailedBlocks)
	g.failDtoH.Store(false)
	save(t, src, "req2", hs, []int{1, 2, 3})

	dst, _ := deviceWorker(t, g, mk, 3, false)
	g.failHtoD.Store(true)
	failed := load(t, dst, "l", hs, []int{4, 5, 6}, false)
	g.failHtoD.Store(false)
	require.ElementsMatch(t, []int{4, 5, 6}, failed)
}
