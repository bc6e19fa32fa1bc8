package pd

import (
	"fmt"
	"sync"
	"testing"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// fakeGPU is a transfer.DeviceRuntime whose "device memory" is off-heap
// host memory at fake device addresses (far from any host mapping), so the
// engine's device paths (staging on the producer, device target on the
// consumer) run without a GPU.
type fakeGPU struct {
	mu     sync.Mutex
	allocs []fakeAlloc
}

type fakeAlloc struct {
	dev  int
	addr uint64
	mem  []byte
}

var _ transfer.DeviceRuntime = (*fakeGPU)(nil)

// alloc maps n bytes as device memory of dev at device address addr.
func (g *fakeGPU) alloc(t testing.TB, dev int, addr uint64, n int) []byte {
	t.Helper()
	r, err := memory.Map(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	g.mu.Lock()
	g.allocs = append(g.allocs, fakeAlloc{dev, addr, r.Bytes()})
	g.mu.Unlock()
	return r.Bytes()
}

func (g *fakeGPU) find(dev int, addr, n uint64) ([]byte, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range g.allocs {
		if a.dev == dev && addr >= a.addr && addr-a.addr+n <= uint64(len(a.mem)) {
			off := addr - a.addr
			return a.mem[off : off+n], nil
		}
	}
	return nil, fmt.Errorf("%w: fake gpu: [%#x,+%d) on cuda:%d not allocated", transfer.ErrInvalidArgument, addr, n, dev)
}

func (g *fakeGPU) CheckDevice(dev int) error {
	if dev < 0 || dev > 1 {
		return fmt.Errorf("%w: fake gpu: device %d", transfer.ErrInvalidArgument, dev)
	}
	return nil
}

func (g *fakeGPU) CopyHtoD(dev int, dst uint64, src []byte) error {
	b, err := g.find(dev, dst, uint64(len(src)))
	if err == nil {
		copy(b, src)
	}
	return err
}

func (g *fakeGPU) CopyDtoH(dev int, dst []byte, src uint64) error {
	b, err := g.find(dev, src, uint64(len(dst)))
	if err == nil {
		copy(dst, b)
	}
	return err
}

func (g *fakeGPU) CopyDtoD(dstDev int, dst uint64, srcDev int, src uint64, n uint64) error {
	d, err := g.find(dstDev, dst, n)
	if err != nil {
		return err
	}
	s, err := g.find(srcDev, src, n)
	if err == nil {
		copy(d, s)
	}
	return err
}

func (g *fakeGPU) ExportIPC(int, uint64, uint64) (string, error) {
	return "", fmt.Errorf("%w: fake gpu: no IPC", transfer.ErrUnsupported)
}

func (g *fakeGPU) OpenIPC(int, string) (uint64, func() error, error) {
	return 0, nil, fmt.Errorf("%w: fake gpu: no IPC", transfer.ErrUnsupported)
}

// TestDeviceRegions pushes blocks between regions given as device
// addresses (Config.CUDA, RegisterDeviceMemory) on both sides: the
// producer's engine stages them through host memory and the consumer's
// tcp target copies them into "device" memory.
func TestDeviceRegions(t *testing.T) {
	gp, gc := &fakeGPU{}, &fakeGPU{}
	devRegions := func(g *fakeGPU, dev int, seed int) []Region {
		var rs []Region
		for ri, s := range testShape {
			addr := uint64(0x7e00_0000_0000) + uint64(ri)<<32
			mem := g.alloc(t, dev, addr, int(s.blockBytes*s.numBlocks))
			for b := 0; b < int(s.numBlocks); b++ {
				for i := 0; i < int(s.blockBytes); i++ {
					mem[uint64(b)*s.blockBytes+uint64(i)] = pattern(seed, ri, b, i)
				}
			}
			rs = append(rs, Region{DeviceAddr: addr, Device: dev, BlockBytes: s.blockBytes, NumBlocks: s.numBlocks})
		}
		return rs
	}
	pr, cr := devRegions(gp, 0, producerSeed), devRegions(gc, 1, consumerSeed)
	pp := newPair(t, func(p, c *Config) {
		p.Regions, p.CUDA = pr, gp
		c.Regions, c.CUDA = cr, gc
	})
	src, dst := []int{2, 3, 4, 12}, []int{9, 10, 11, 1}
	if err := pp.p.Ready("dev", src); err != nil {
		t.Fatal(err)
	}
	if err := pp.c.Recv("dev", pp.p.BootstrapAddr(), "prefill-engine", dst); err != nil {
		t.Fatal(err)
	}
	if r := result(t, pp.c, "dev"); r.Err != nil {
		t.Fatal(r.Err)
	}
	sent(t, pp.p, "dev")
	// View the consumer's fake device memory as host regions to check it.
	view := make([]Region, len(cr))
	for i, r := range cr {
		mem, err := gc.find(1, r.DeviceAddr, r.size())
		if err != nil {
			t.Fatal(err)
		}
		view[i] = Region{Mem: mem, BlockBytes: r.BlockBytes, NumBlocks: r.NumBlocks}
	}
	if err := checkBlocksLanded(view, producerSeed, consumerSeed, src, dst); err != nil {
		t.Fatal(err)
	}
}
