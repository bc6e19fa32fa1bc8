package replay

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
)

// contentIDs are the hash ids the content tests cover: small, adjacent,
// large and seeded-random ones.
func contentIDs() []uint64 {
	ids := []uint64{0, 1, 2, 3, 7, 8, 255, 256, 1 << 32, math.MaxUint64 - 1, math.MaxUint64}
	r := rand.New(rand.NewPCG(1, 2))
	for range 40 {
		ids = append(ids, r.Uint64())
	}
	return ids
}

func TestFillVerifyRoundTrip(t *testing.T) {
	for _, id := range contentIDs() {
		for n := 0; n <= 100; n++ {
			b := make([]byte, n)
			Fill(id, b)
			if !Verify(id, b) {
				t.Fatalf("Verify(%d, Fill(%d, %d bytes)) = false", id, id, n)
			}
		}
	}
}

func TestFillDeterministic(t *testing.T) {
	for _, id := range contentIDs() {
		a, b := make([]byte, 77), make([]byte, 77)
		for i := range b {
			b[i] = 0xA5 // Fill overwrites whatever was there
		}
		Fill(id, a)
		Fill(id, b)
		if !bytes.Equal(a, b) {
			t.Fatalf("id %d: two Fills differ", id)
		}
	}
}

func TestFillShorterIsPrefix(t *testing.T) {
	for _, id := range contentIDs() {
		long := make([]byte, 100)
		Fill(id, long)
		for n := 0; n <= len(long); n++ {
			short := make([]byte, n)
			Fill(id, short)
			if !bytes.Equal(short, long[:n]) {
				t.Fatalf("id %d: Fill of %d bytes is not a prefix of Fill of 100 bytes", id, n)
			}
			// So a prefix of a longer block verifies as a shorter block.
			if !Verify(id, long[:n]) {
				t.Fatalf("id %d: Verify of a %d-byte prefix failed", id, n)
			}
		}
	}
}

func TestVerifyDetectsFlippedByte(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, id := range contentIDs() {
		for n := 1; n <= 100; n++ {
			b := make([]byte, n)
			Fill(id, b)
			for i := 0; i < n; i++ {
				bit := byte(1) << r.IntN(8)
				b[i] ^= bit
				if Verify(id, b) {
					t.Fatalf("id %d, %d bytes: flipping bit %#x of byte %d still verifies", id, n, bit, i)
				}
				b[i] ^= bit
				// A whole-byte change too.
				b[i] ^= 0xFF
				if Verify(id, b) {
					t.Fatalf("id %d, %d bytes: inverting byte %d still verifies", id, n, i)
				}
				b[i] ^= 0xFF
			}
			if !Verify(id, b) {
				t.Fatalf("id %d, %d bytes: restored block no longer verifies", id, n)
			}
		}
	}
}

func TestDifferentIDsDiffer(t *testing.T) {
	ids := contentIDs()
	seen := make(map[string]uint64, len(ids))
	for _, id := range ids {
		b := make([]byte, 64)
		Fill(id, b)
		if prev, ok := seen[string(b)]; ok {
			t.Fatalf("ids %d and %d have the same 64-byte content", prev, id)
		}
		seen[string(b)] = id
		for _, other := range ids {
			if other != id && Verify(other, b) {
				t.Fatalf("block %d verifies as id %d", id, other)
			}
		}
	}
	// Adjacent ids, as hash ids in a trace are, differ in every 8-byte
	// word: the stream of id+1 is not the stream of id shifted by a word.
	a, b := make([]byte, 800), make([]byte, 800)
	for id := uint64(0); id < 1000; id++ {
		Fill(id, a)
		Fill(id+1, b)
		for w := 0; w+8 <= len(a); w += 8 {
			if bytes.Equal(a[w:w+8], b[w:w+8]) {
				t.Fatalf("ids %d and %d share the word at byte %d", id, id+1, w)
			}
		}
		if bytes.Equal(a[8:], b[:len(b)-8]) {
			t.Fatalf("id %d+1's stream is id %d's shifted by one word", id, id)
		}
	}
}

func TestVerifyEmpty(t *testing.T) {
	// An empty block carries no content, so it verifies under any id.
	for _, id := range contentIDs() {
		if !Verify(id, nil) || !Verify(id, []byte{}) {
			t.Fatalf("Verify(%d, empty) = false", id)
		}
	}
}

// TestVerifyRejectsShiftedBlock: bytes taken from block id at a word
// offset (a misdirected read) must not verify as a nearby block.
func TestVerifyRejectsShiftedBlock(t *testing.T) {
	src := make([]byte, 8*64)
	for id := uint64(0); id < 2000; id++ {
		Fill(id, src)
		for w := 1; w < 32; w++ {
			shifted := src[8*w : 8*w+64]
			for d := uint64(1); d <= 40; d++ {
				if Verify(id+d, shifted) {
					t.Fatalf("block %d read %d words late verifies as block %d", id, w, id+d)
				}
			}
		}
	}
}
