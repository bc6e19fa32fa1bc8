package vllm

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/transfer/cuda"
)

// TestGPUWorkerSaveLoad runs the store-mode worker on real GPU memory
// (device 0 of whatever libcudart loads: $MC_CUDART_PATH or the default
// names): a KV cache filled from the host is saved from the device, loaded
// into another device cache in other blocks, and read back byte for byte.
// Skipped under -short, without a CUDA runtime or without a device.
func TestGPUWorkerSaveLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("GPU test skipped under -short")
	}
	rt, err := cuda.Load()
	if err != nil {
		t.Skip(err)
	}
	if n, err := rt.DeviceCount(); err != nil || n == 0 {
		t.Skipf("no CUDA device: %d, %v", n, err)
	}
	cl := startPool(t, 64<<20, false)
	// A KV cache on the device: host pattern copied up, regions as newKVCache lays them out.
	devCache := func(seed int) (*kvCache, []Region, cuda.DevicePtr) {
		kc := newKVCache(t, seed, testBlocks, testBlockBytes...)
		p, err := rt.Malloc(0, uint64(len(kc.mem.Bytes())))
		require.NoError(t, err)
		t.Cleanup(func() { rt.Free(p) })
		require.NoError(t, rt.MemcpyHtoD(p, kc.mem.Bytes()))
		rs := make([]Region, len(kc.regions))
		off := uint64(0)
		for i, r := range kc.regions {
			rs[i] = Region{DeviceAddr: uint64(p.Addr) + off, Device: 0, BlockBytes: r.BlockBytes, NumBlocks: r.NumBlocks}
			off += r.BlockBytes * r.NumBlocks
		}
		return kc, rs, p
	}
	worker := func(role string, rs []Region) *Worker {
		w := newWorker(mustSettings(t, role, nil, nil), poolOpener(cl), nil)
		t.Cleanup(func() { require.NoError(t, w.Close()) })
		w.SetDeviceRuntime(rt)
		require.NoError(t, w.RegisterKVCaches(testContext(t), rs))
		return w
	}
	src, srs, _ := devCache(5)
	hs := hashes("gpu", 4)
	save(t, worker(KVBoth, srs), "req", hs, []int{1, 2, 3, 4})
	dst, drs, dp := devCache(6)
	require.Empty(t, load(t, worker(KVConsumer, drs), "l", hs, []int{9, 10, 11, 12}, false))
	require.NoError(t, rt.MemcpyDtoH(dst.mem.Bytes(), dp)) // the device bytes, back on the host
	for i := range 4 {
		checkBlock(t, dst, 9+i, src, 1+i)
	}
	fresh := newKVCache(t, 6, testBlocks, testBlockBytes...)
	checkBlock(t, dst, 5, fresh, 5)
}
