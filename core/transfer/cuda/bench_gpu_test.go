package cuda

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// BenchmarkGPUTransfers measures, on device 0 of a real GPU (or whatever
// $MC_CUDART_PATH loads), the engine's transfers at 1 MiB and 64 MiB:
// h2d and d2h copy between a registered host buffer and device memory of
// one engine (its local segment); dev-to-remote-host and
// remote-host-to-dev move device memory of engine A to and from host
// memory of engine B over tcp loopback (pinned staging slices); and
// host-to-remote-dev and remote-dev-to-host move host memory of engine A
// to and from device memory of engine B (B's tcp server copies through its
// pinned bounce buffer, a WRITE's copies overlapping its reads); and
// host-to-remote-host is the same tcp path between two host buffers, the
// baseline the device<->remote-host figures compare with. Throughput is
// the MB/s column (SetBytes). Skipped without a device.
func BenchmarkGPUTransfers(b *testing.B) {
	rt, err := Load()
	if err != nil {
		b.Skip(err)
	}
	if n, err := rt.DeviceCount(); err != nil || n == 0 {
		b.Skipf("no CUDA device: %d, %v", n, err)
	}
	const max = 64 << 20
	ctx := context.Background()
	meta := memmeta.New()
	a, err := transfer.New(ctx, transfer.Config{Name: "bench-a", Metadata: meta, Transport: tcp.New(tcp.Config{}), HostID: "host-a", CUDA: rt, RequestTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	bb, err := transfer.New(ctx, transfer.Config{Name: "bench-b", Metadata: meta, Transport: tcp.New(tcp.Config{}), HostID: "host-b", CUDA: rt, RequestTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer bb.Close()
	ha, err := memory.Map(max)
	if err != nil {
		b.Fatal(err)
	}
	defer ha.Close()
	hb, err := memory.Map(max)
	if err != nil {
		b.Fatal(err)
	}
	defer hb.Close()
	if err := a.RegisterRegion(ctx, ha, "cpu:0", true); err != nil {
		b.Fatal(err)
	}
	if err := bb.RegisterRegion(ctx, hb, "cpu:0", true); err != nil {
		b.Fatal(err)
	}
	// devBuf registers max bytes of device 0 with e and returns their
	// address (freed after the engines closed).
	devBuf := func(e *transfer.Engine) uint64 {
		d, err := rt.Malloc(0, max)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { rt.Free(d) })
		if err := e.RegisterDeviceMemory(ctx, uint64(d.Addr), max, 0, true); err != nil {
			b.Fatal(err)
		}
		return uint64(d.Addr)
	}
	dev, devB := devBuf(a), devBuf(bb)
	seg, err := a.OpenSegment(ctx, "bench-b")
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{1 << 20, 64 << 20} {
		n := uint64(size)
		for _, c := range []struct {
			name string
			req  transfer.Request
		}{
			{"h2d", transfer.Request{Op: transfer.Write, Source: ha.Addr(), Target: transfer.LocalSegment, TargetOffset: dev, Length: n}},
			{"d2h", transfer.Request{Op: transfer.Read, Source: ha.Addr(), Target: transfer.LocalSegment, TargetOffset: dev, Length: n}},
			{"dev-to-remote-host", transfer.Request{Op: transfer.Write, Source: dev, Target: seg, TargetOffset: hb.Addr(), Length: n}},
			{"remote-host-to-dev", transfer.Request{Op: transfer.Read, Source: dev, Target: seg, TargetOffset: hb.Addr(), Length: n}},
			{"host-to-remote-dev", transfer.Request{Op: transfer.Write, Source: ha.Addr(), Target: seg, TargetOffset: devB, Length: n}},
			{"remote-dev-to-host", transfer.Request{Op: transfer.Read, Source: ha.Addr(), Target: seg, TargetOffset: devB, Length: n}},
			{"host-to-remote-host", transfer.Request{Op: transfer.Write, Source: ha.Addr(), Target: seg, TargetOffset: hb.Addr(), Length: n}},
		} {
			b.Run(fmt.Sprintf("%s/%dMiB", c.name, size>>20), func(b *testing.B) {
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if err := a.TransferSync(ctx, []transfer.Request{c.req}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
