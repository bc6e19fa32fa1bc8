package memory

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestCopy checks Copy against the built-in copy for sizes around every
// threshold and every destination and source alignment, and that it never
// writes outside the destination.
func TestCopy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 2<<20)
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	dst := make([]byte, len(src)+256)
	sizes := []int{0, 1, 127, 128, ntMin - 1, ntMin, ntMin + 1, ntMin + 127, 32 << 10, 64<<10 + 33, 1 << 20, 2<<20 - 64}
	for _, n := range sizes {
		for _, da := range []int{0, 1, 7, 31, 32, 33, 64} {
			for _, sa := range []int{0, 3, 32} {
				if sa+n > len(src) || da+n+64 > len(dst) {
					continue
				}
				for i := range dst {
					dst[i] = 0xEE
				}
				if got := Copy(dst[da:da+n], src[sa:sa+n]); got != n {
					t.Fatalf("n=%d da=%d sa=%d: Copy = %d", n, da, sa, got)
				}
				if !bytes.Equal(dst[da:da+n], src[sa:sa+n]) {
					t.Fatalf("n=%d da=%d sa=%d: bytes differ", n, da, sa)
				}
				if !bytes.Equal(dst[:da], bytes.Repeat([]byte{0xEE}, da)) || dst[da+n] != 0xEE {
					t.Fatalf("n=%d da=%d sa=%d: wrote outside the destination", n, da, sa)
				}
			}
		}
	}
	// Unequal lengths copy the shorter, as copy does.
	if got := Copy(dst[:100<<10], src[:50<<10]); got != 50<<10 {
		t.Fatalf("Copy of a shorter source = %d", got)
	}
	// Overlapping ranges fall back to copy's memmove semantics.
	buf := append([]byte(nil), src[:200<<10]...)
	want := append([]byte(nil), buf...)
	copy(want[1000:], want[:100<<10])
	Copy(buf[1000:], buf[:100<<10])
	if !bytes.Equal(buf, want) {
		t.Fatal("overlapping Copy differs from copy")
	}
}

func BenchmarkCopy(b *testing.B) {
	for _, chunk := range []int{32 << 10, 256 << 10, 2 << 20} {
		b.Run(fmt.Sprintf("nt/%dKiB", chunk>>10), func(b *testing.B) { benchCopy(b, chunk, Copy) })
		b.Run(fmt.Sprintf("builtin/%dKiB", chunk>>10), func(b *testing.B) {
			benchCopy(b, chunk, func(d, s []byte) int { return copy(d, s) })
		})
	}
}

func benchCopy(b *testing.B, chunk int, f func(d, s []byte) int) {
	src, dst := make([]byte, 64<<20), make([]byte, 64<<20)
	for i := range src { // real pages, not the shared zero page
		src[i], dst[i] = byte(i), byte(i>>8)
	}
	b.SetBytes(int64(len(src)))
	b.ResetTimer()
	for range b.N {
		for off := 0; off < len(src); off += chunk {
			f(dst[off:off+chunk], src[off:off+chunk])
		}
	}
}
