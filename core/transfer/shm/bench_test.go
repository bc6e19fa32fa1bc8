package shm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/shm"
)

var benchSizes = []int{64 << 10, 1 << 20}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// BenchmarkShmWrite: one WRITE of n bytes from an off-heap local buffer into
// a mapped memfd buffer of another transport in this process, through the
// Peer (mapping already cached). Compare with BenchmarkMemcpy of the same
// size: the ratio is the transport's per-request overhead.
func BenchmarkShmWrite(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			a, t := newSide(b, "bench-a", shm.Config{}), newSide(b, "bench-b", shm.Config{})
			dst := t.shared(b, n)
			src := anon(b, n)
			fill(src.Bytes(), 1)
			p := a.dial(b, t)
			ctx := context.Background()
			if err := p.Do(ctx, transfer.Write, src.Bytes(), dst.Addr()); err != nil { // maps
				b.Fatal(err)
			}
			b.SetBytes(int64(n))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := p.Do(ctx, transfer.Write, src.Bytes(), dst.Addr()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkShmWriteParallel: as BenchmarkShmWrite, from GOMAXPROCS
// goroutines into disjoint ranges of one buffer (the read lock is shared).
func BenchmarkShmWriteParallel(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			const slots = 64
			a, t := newSide(b, "bench-a", shm.Config{}), newSide(b, "bench-b", shm.Config{})
			dst := t.shared(b, n*slots)
			p := a.dial(b, t)
			if err := p.Do(context.Background(), transfer.Write, make([]byte, 1), dst.Addr()); err != nil {
				b.Fatal(err)
			}
			type slot struct {
				at  uint64
				src []byte
			}
			next := make(chan slot, slots)
			for i := range slots {
				src := anon(b, n).Bytes()
				fill(src, uint64(i)) // real pages: unwritten ones all alias the zero page
				next <- slot{at: dst.Addr() + uint64(i*n), src: src}
			}
			b.SetBytes(int64(n))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				s := <-next
				ctx := context.Background()
				for pb.Next() {
					if err := p.Do(ctx, transfer.Write, s.src, s.at); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkMemcpy is the baseline: copy() of n bytes between two off-heap
// buffers, the second a MAP_SHARED memfd mapping like the peer's.
func BenchmarkMemcpy(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			dst, err := memory.MapShared(n, "bench-memcpy")
			if err != nil {
				b.Fatal(err)
			}
			defer dst.Close()
			src := anon(b, n)
			fill(src.Bytes(), 1)
			d, s := dst.Bytes(), src.Bytes()
			copy(d, s) // fault the pages in, as the peer's first write does
			b.SetBytes(int64(n))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				copy(d, s)
			}
		})
	}
}
