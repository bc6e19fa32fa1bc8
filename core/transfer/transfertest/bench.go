package transfertest

import (
	"context"
	"testing"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// BenchWrite measures WRITE throughput of blocks of blockSize bytes in
// batches of batch requests between two engines of nt (b.SetBytes is the
// batch's payload). Regions are sized for one batch.
func BenchWrite(b *testing.B, nt NewTransport, op transfer.Opcode, blockSize, batch int) {
	ctx := context.Background()
	meta := memmeta.New()
	mk := func(name string, size int) (*transfer.Engine, *memory.Region) {
		e, err := transfer.New(ctx, transfer.Config{Name: name, Metadata: meta, Transport: nt(b)})
		if err != nil {
			b.Fatal(err)
		}
		r, err := memory.MapShared(size, name)
		if err != nil {
			b.Fatal(err)
		}
		if err := e.RegisterRegion(ctx, r, "cpu:0", true); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.Close(); r.Close() })
		return e, r
	}
	size := blockSize * batch
	a, ra := mk("bench-a", size)
	_, rb := mk("bench-b", size)
	seg, err := a.OpenSegment(ctx, "bench-b")
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]transfer.Request, batch)
	for i := range reqs {
		reqs[i] = transfer.Request{Op: op, Source: ra.Addr() + uint64(i*blockSize), Target: seg, TargetOffset: rb.Addr() + uint64(i*blockSize), Length: uint64(blockSize)}
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := a.TransferSync(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
}
