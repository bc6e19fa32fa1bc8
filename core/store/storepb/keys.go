package storepb

// Object keys travel as proto bytes fields (any byte, not only UTF-8, as
// upstream's std::string keys); Go code holds them as strings, which carry
// any bytes too. These convert at the wire boundary; each copies.

// Keys converts keys to the wire form of a repeated bytes field: one []byte
// per key, in order (nil for nil).
func Keys(keys []string) [][]byte {
	if keys == nil {
		return nil
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = []byte(k)
	}
	return out
}

// KeyStrings converts a repeated bytes field back to keys, byte for byte,
// in order (nil for nil).
func KeyStrings(keys [][]byte) []string {
	if keys == nil {
		return nil
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = string(k)
	}
	return out
}
