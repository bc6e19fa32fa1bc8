package cbridge

import (
	"errors"
	"math"
	"math/big"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/memory"
)

// Fuzzing the checks every C argument goes through before Go touches it:
// foreign ranges (CheckRange, ForeignBytes), strings given as pointer and
// length (GoStringN), arrays (Slice) and handles (the Table). Each is held
// to a naive reference.

// FuzzCheckRange checks CheckRange against arbitrary-precision arithmetic:
// it accepts [addr, addr+n) exactly when addr is at least MinAddr, n is
// positive and fits an int, and the range ends inside the 64-bit address
// space; every refusal wraps ErrInvalidArgument.
func FuzzCheckRange(f *testing.F) {
	f.Add(uint64(0), uint64(1))
	f.Add(uint64(MinAddr-1), uint64(1))
	f.Add(uint64(MinAddr), uint64(0))
	f.Add(uint64(math.MaxUint64), uint64(1))
	f.Add(uint64(math.MaxUint64-9), uint64(10))
	f.Add(uint64(math.MaxUint64-9), uint64(11))
	f.Add(uint64(1<<47), uint64(math.MaxInt64+1))
	f.Fuzz(func(t *testing.T, addr, n uint64) {
		end := new(big.Int).Add(new(big.Int).SetUint64(addr), new(big.Int).SetUint64(n))
		limit := new(big.Int).Lsh(big.NewInt(1), 64)
		want := addr >= MinAddr && n > 0 && n <= math.MaxInt && end.Cmp(limit) <= 0
		err := CheckRange("buf", uintptr(addr), uintptr(n))
		require.Equal(t, want, err == nil, "CheckRange(%#x, %d) = %v", addr, n, err)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidArgument)
			require.Contains(t, err.Error(), "buf")
		}
	})
}

// FuzzForeignBytes checks, on real mapped memory, that ForeignBytes
// returns exactly the range it was asked for whenever it accepts one
// (fuzzed addresses are relative to the mapping, so accepted ranges
// stay inside it or are refused by CheckRange's reference).
func FuzzForeignBytes(f *testing.F) {
	f.Add(uint64(0), uint64(1))
	f.Add(uint64(4095), uint64(1))
	f.Add(uint64(1), uint64(4095))
	r, err := memory.Map(4096)
	require.NoError(f, err)
	f.Cleanup(func() { r.Close() })
	base := r.Addr()
	f.Fuzz(func(t *testing.T, off, n uint64) {
		off, n = off%4096, n%4097
		if off+n > 4096 {
			n = 4096 - off
		}
		b, err := ForeignBytes("buf", uintptr(base+off), uintptr(n))
		if n == 0 {
			require.ErrorIs(t, err, ErrInvalidArgument)
			return
		}
		require.NoError(t, err)
		require.Equal(t, base+off, memory.AddrOf(b))
		require.Equal(t, int(n), len(b))
		require.Equal(t, r.Bytes()[off:off+n], b)
	})
}

// FuzzGoStringN checks that a key given as pointer and length crosses as
// exactly its bytes (NUL and non-UTF-8 included), and that a zero length
// is refused.
func FuzzGoStringN(f *testing.F) {
	f.Add([]byte("mooncake/key"), uint16(12))
	f.Add([]byte("a\x00b\xff"), uint16(4))
	f.Add([]byte("x"), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, n uint16) {
		if len(data) == 0 {
			_, err := GoStringN[byte]("key", nil, uintptr(n))
			require.ErrorIs(t, err, ErrInvalidArgument)
			return
		}
		k := int(n) % (len(data) + 1)
		s, err := GoStringN("key", &data[0], uintptr(k))
		if k == 0 {
			require.ErrorIs(t, err, ErrInvalidArgument)
			return
		}
		require.NoError(t, err)
		require.Equal(t, string(data[:k]), s)
	})
}

// FuzzSlice checks Slice on a real array: any count up to its length
// gives exactly those elements; a count whose byte size overflows the
// address space is refused, never turned into a short slice.
func FuzzSlice(f *testing.F) {
	f.Add(uint64(3))
	f.Add(uint64(0))
	f.Add(uint64(math.MaxUint64 / 8))
	f.Add(uint64(math.MaxUint64/8 + 1))
	f.Add(uint64(math.MaxInt64/8 + 1))
	var arr [16]uint64
	for i := range arr {
		arr[i] = uint64(i * 7)
	}
	f.Fuzz(func(t *testing.T, n uint64) {
		if n > uint64(len(arr)) && n <= math.MaxInt/8 {
			n %= uint64(len(arr)) + 1 // a count past the array but representable is the caller's promise, not checkable
		}
		s, err := Slice("arr", &arr[0], uintptr(n))
		switch {
		case n == 0 || n > math.MaxInt/8:
			require.ErrorIs(t, err, ErrInvalidArgument)
		default:
			require.NoError(t, err)
			require.Equal(t, arr[:n], s)
		}
	})
}

// FuzzHandles runs an operation sequence on a Table (add an int or a
// string, look up or take a handle as an int, of one added or an
// arbitrary one) against a map: every lookup finds exactly what the map
// holds, a wrong type is refused and left in place, 0 is NULL, and a
// handle never comes back after Take.
func FuzzHandles(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 0, 5, 6})
	f.Add([]byte{1, 1, 4, 0, 4, 0, 2, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		tab := NewTable()
		model := map[Handle]any{}
		var issued []Handle
		var last Handle
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%6, ops[i+1]
			h := Handle(arg)
			if len(issued) > 0 && arg%2 == 0 {
				h = issued[int(arg/2)%len(issued)]
			}
			switch op {
			case 0, 1:
				var v any = int(arg)
				if op == 1 {
					v = string(rune('a' + arg%26))
				}
				h := tab.Add(v)
				require.Greater(t, h, last, "handles are never reused")
				last = h
				model[h] = v
				issued = append(issued, h)
			case 2, 3:
				var got int
				var err error
				if op == 2 {
					got, err = Lookup[int](tab, h, "h")
				} else {
					got, err = Take[int](tab, h, "h")
				}
				want, ok := model[h]
				switch {
				case h == 0:
					require.ErrorIs(t, err, ErrInvalidArgument)
				case !ok:
					require.ErrorIs(t, err, ErrInvalidHandle)
				default:
					if w, isInt := want.(int); isInt {
						require.NoError(t, err)
						require.Equal(t, w, got)
						if op == 3 {
							delete(model, h)
						}
					} else {
						require.ErrorIs(t, err, ErrInvalidHandle)
					}
				}
			case 4:
				_, err := Lookup[string](tab, h, "h")
				w, ok := model[h].(string)
				if ok {
					require.NoError(t, err, w)
				} else {
					require.Error(t, err)
					require.True(t, errors.Is(err, ErrInvalidHandle) || errors.Is(err, ErrInvalidArgument))
				}
			case 5:
				require.Equal(t, len(model), tab.Len())
			}
		}
		require.Equal(t, len(model), tab.Len())
	})
}
