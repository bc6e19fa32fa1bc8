package memory

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
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

// TestStreamUnfenced checks StreamUnfenced (then Fence) against the
// built-in copy for sizes around its 128-byte streaming minimum and
// Copy's, every destination alignment, and that it never writes outside
// the destination; unequal lengths copy the shorter and overlapping
// ranges copy as copy does.
func TestStreamUnfenced(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	src := make([]byte, 300<<10)
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	dst := make([]byte, len(src)+256)
	for _, n := range []int{0, 1, 31, 127, 128, 129, 159, 160, 255, 256, 1000, ntMin - 1, 64 << 10, 64<<10 + 77, 256 << 10} {
		for _, da := range []int{0, 1, 7, 31, 32, 33, 64} {
			for _, sa := range []int{0, 5} {
				for i := range dst {
					dst[i] = 0xEE
				}
				got := StreamUnfenced(dst[da:da+n], src[sa:sa+n])
				Fence()
				require.Equal(t, n, got, "n=%d da=%d sa=%d", n, da, sa)
				require.True(t, bytes.Equal(dst[da:da+n], src[sa:sa+n]), "n=%d da=%d sa=%d: bytes differ", n, da, sa)
				require.True(t, bytes.Equal(dst[:da], bytes.Repeat([]byte{0xEE}, da)) && dst[da+n] == 0xEE,
					"n=%d da=%d sa=%d: wrote outside the destination", n, da, sa)
			}
		}
	}
	require.Equal(t, 500, StreamUnfenced(dst[:1000], src[:500]))
	buf := append([]byte(nil), src[:20<<10]...)
	want := append([]byte(nil), buf...)
	copy(want[100:], want[:10<<10])
	StreamUnfenced(buf[100:], buf[:10<<10])
	Fence()
	require.Equal(t, want, buf, "overlapping StreamUnfenced differs from copy")
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

// TestGatherScatter checks Gather and Scatter against the built-in copy
// of each piece in turn, for pieces below and above the streaming
// threshold at odd alignments, with destinations shorter and longer than
// the pieces, and that nothing outside the copied bytes is written.
func TestGatherScatter(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	mem := make([]byte, 4<<20)
	for i := range mem {
		mem[i] = byte(r.Uint32())
	}
	// Pieces of a 2 MiB area, out of order, adjacent and apart.
	layout := [][2]int{{1000, 3}, {7, ntMin + 1}, {ntMin + 8, 32 << 10}, {600000, 100}, {300001, 64<<10 + 33}, {900000, ntMin - 1}, {1 << 20, 200000}}
	pieces := func(base []byte) [][]byte {
		out := make([][]byte, len(layout))
		for i, l := range layout {
			out[i] = base[l[0] : l[0]+l[1]]
		}
		return out
	}
	total := 0
	for _, l := range layout {
		total += l[1]
	}
	for _, tc := range []struct {
		name string
		dst  int // destination length
	}{{"exact", total}, {"short", total - 5000}, {"long", total + 64}} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.dst
			if want > total {
				want = total
			}
			// Gather the pieces of mem[:2 MiB] into mem[2 MiB+1:].
			area := append([]byte(nil), mem...)
			dst := area[2<<20+1 : 2<<20+1+tc.dst]
			var ref []byte
			for _, p := range pieces(area) {
				ref = append(ref, p...)
			}
			before := append([]byte(nil), area...)
			require.Equal(t, want, Gather(dst, pieces(area)))
			require.Equal(t, ref[:want], dst[:want])
			require.Equal(t, before[:2<<20+1], area[:2<<20+1], "Gather wrote outside dst")
			require.Equal(t, before[2<<20+1+want:], area[2<<20+1+want:], "Gather wrote outside dst")

			// Scatter mem[2 MiB+1:] back over the pieces.
			area = append([]byte(nil), mem...)
			src := area[2<<20+1 : 2<<20+1+tc.dst]
			expect := append([]byte(nil), area...)
			off := 0
			for _, l := range layout {
				k := min(l[1], want-off)
				copy(expect[l[0]:l[0]+k], src[off:off+k])
				off += k
			}
			require.Equal(t, want, Scatter(pieces(area), src))
			require.Equal(t, expect, area)
		})
	}
}

// BenchmarkPieces moves 32 values of 2 MiB between a contiguous area
// (a pool segment) and a FlashAttention KV cache, where a value is 64
// pieces of 32 KiB, one in each of 64 regions: contiguous is one Copy of
// 2 MiB per value (the raw figure), copy one Copy per piece, scatter and
// gather Scatter (segment to pieces: a load) and Gather (pieces to
// segment: a save) per value.
func BenchmarkPieces(b *testing.B) {
	const piece, regions, blocks, value = 32 << 10, 64, 33, 2 << 20
	kv, seg, raw := make([]byte, regions*blocks*piece), make([]byte, 32*value), make([]byte, 32*value)
	for i := range kv { // real pages, not the shared zero page
		kv[i] = byte(i)
	}
	for i := range seg {
		seg[i], raw[i] = byte(i>>8), byte(i>>4)
	}
	pieces := make([][][]byte, 32)
	for k := range pieces {
		for r := range regions {
			off := (r*blocks + k + 1) * piece
			pieces[k] = append(pieces[k], kv[off:off+piece])
		}
	}
	for _, mode := range []string{"contiguous", "copy", "scatter", "gather"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(int64(len(seg)))
			for range b.N {
				for k, ps := range pieces {
					v := seg[k*value : (k+1)*value]
					switch mode {
					case "contiguous":
						Copy(raw[k*value:(k+1)*value], v)
					case "copy":
						for r, p := range ps {
							Copy(p, v[r*piece:])
						}
					case "scatter":
						Scatter(ps, v)
					case "gather":
						Gather(v, ps)
					}
				}
			}
		})
	}
}
