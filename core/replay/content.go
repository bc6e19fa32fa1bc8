package replay

import "encoding/binary"

// Fill writes block id's content into b: the first len(b) bytes of a
// pseudo-random stream seeded by id (splitmix64 words, little-endian), so a
// block's bytes are a function of its hash id and length, and a shorter
// block is a prefix of a longer one.
func Fill(id uint64, b []byte) {
	s := seed(id)
	i := 0
	for ; i+8 <= len(b); i += 8 {
		s += 0x9E3779B97F4A7C15
		binary.LittleEndian.PutUint64(b[i:], mix(s))
	}
	if i < len(b) {
		s += 0x9E3779B97F4A7C15
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], mix(s))
		copy(b[i:], w[:])
	}
}

// Verify reports whether b is exactly Fill(id, b)'s content.
func Verify(id uint64, b []byte) bool {
	s := seed(id)
	i := 0
	for ; i+8 <= len(b); i += 8 {
		s += 0x9E3779B97F4A7C15
		if binary.LittleEndian.Uint64(b[i:]) != mix(s) {
			return false
		}
	}
	if i < len(b) {
		s += 0x9E3779B97F4A7C15
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], mix(s))
		for k := i; k < len(b); k++ {
			if b[k] != w[k-i] {
				return false
			}
		}
	}
	return true
}

// seed is the stream state of block id. It is mixed, not id*step+c: with
// a linear seed the stream of id+1 would be the stream of id shifted by one
// word, so a read landing 8 bytes into block id would verify as block id+1
// (adjacent ids are common in a trace).
func seed(id uint64) uint64 { return mix(id + 0x632BE59BD9B4E019) }

func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}
