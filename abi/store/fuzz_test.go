package store

import (
	"math"
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// Fuzzing the Go-side checks of store.h's arguments: the zero-copy range
// check (every mc_store_*_from / *_into pointer and size), keys given as
// bytes, and local_hostname.

// FuzzZeroCopyRange checks zeroCopy against a naive reference on real
// mapped memory with two registered buffers and a gap between them:
// [addr, addr+n) is accepted exactly when it passes CheckRange and lies
// inside one registered buffer, and then comes back as exactly those
// bytes. Fuzzed addresses are relative to the mapping (wrapping), so
// every address stays reachable.
func FuzzZeroCopyRange(f *testing.F) {
	const page = 4096
	f.Add(uint64(page), uint64(page))
	f.Add(uint64(page), uint64(page+1))
	f.Add(uint64(2*page-1), uint64(2))
	f.Add(uint64(3*page), uint64(page))
	f.Add(uint64(0), uint64(0))
	f.Add(uint64(math.MaxUint64), uint64(2))
	slab, err := memory.Map(5 * page)
	require.NoError(f, err)
	f.Cleanup(func() { slab.Close() })
	base := slab.Addr()
	s := &storeClient{}
	s.mu.bufs = []span{{addr: base + page, n: page}, {addr: base + 3*page, n: page}}
	f.Fuzz(func(t *testing.T, off, n uint64) {
		addr := base + off
		inside := false
		for _, b := range s.mu.bufs {
			if addr >= b.addr && addr-b.addr < b.n && n > 0 && n <= b.n-(addr-b.addr) {
				inside = true
			}
		}
		valid := cbridge.CheckRange("buf", uintptr(addr), uintptr(n)) == nil
		got, err := s.zeroCopy("buf", uintptr(addr), uintptr(n))
		switch {
		case !valid:
			require.ErrorIs(t, err, cbridge.ErrInvalidArgument)
		case !inside:
			require.ErrorIs(t, err, transfer.ErrAddressNotRegistered)
		default:
			require.NoError(t, err)
			require.Equal(t, addr, memory.AddrOf(got))
			require.Equal(t, n, uint64(len(got)))
		}
	})
}

// FuzzCheckKey: any non-empty key of at most MaxKeyLen bytes is accepted
// (NUL and non-UTF-8 included); the empty key is an invalid argument and
// a longer one INVALID_KEY.
func FuzzCheckKey(f *testing.F) {
	f.Add("mooncake/k")
	f.Add("\x00\xff")
	f.Add("")
	f.Fuzz(func(t *testing.T, key string) {
		err := checkKey(key)
		switch {
		case key == "":
			require.Equal(t, cbridge.InvalidArgument, cbridge.CodeOf(err))
		case len(key) > MaxKeyLen:
			require.Equal(t, cbridge.StoreInvalidKey, cbridge.CodeOf(err))
		default:
			require.NoError(t, err)
		}
	})
}

// FuzzListenAddr: local_hostname in any form either fails as an invalid
// argument or gives a port in range, a bind host, and a published host
// that is empty only for an unspecified IP and otherwise joins with the
// port into an address that splits back into it.
func FuzzListenAddr(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "127.0.0.1:17812", "node-1", "node-1:0", "::1", "[::1]:80", "0.0.0.0:5", "[::]", ":5", "a:b:c", "h:65536", "h:-1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, hostname string) {
		bind, port, publish, err := listenAddr(hostname)
		if err != nil {
			require.ErrorIs(t, err, cbridge.ErrInvalidArgument)
			return
		}
		require.True(t, port >= 0 && port <= 65535, "port %d", port)
		require.NotEmpty(t, bind)
		if publish == "" {
			ip := net.ParseIP(bind)
			require.True(t, ip == nil || ip.IsUnspecified() || bind != "", "nothing published for %q", hostname)
			return
		}
		h, p, err := net.SplitHostPort(net.JoinHostPort(publish, strconv.Itoa(port)))
		require.NoError(t, err)
		require.Equal(t, publish, h)
		require.Equal(t, strconv.Itoa(port), p)
	})
}
