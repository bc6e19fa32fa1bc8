package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/testutil/sockpair"
	"github.com/mooncake-go/mooncake/core/testutil/wiretap"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// Fuzzing what a peer can send a target (FuzzServe) and what a target can
// answer an initiator (FuzzPeerReplies). Seeds are frames a real peer and
// a real server exchanged through a wiretap proxy.

// fzPage is the size of every region of the fuzzed target and of the
// guard pages around them.
const fzPage = 4096

// fzCallLimit bounds one fuzzed exchange: a malformed stream must end in
// an error, never a hang.
const fzCallLimit = 10 * time.Second

// The fuzzed target's memory, one slab of pages:
//
//	page 0 guard | 1 A (remote) | 2 guard | 3 B (local only) | 4 guard |
//	5.. R (remote, read-only) | guard | L (remote) | guard
//
// plus D, a page of fake device memory registered at the address of page
// 4 (device addresses are their own space; a bug that took D for host
// memory would write into the guard). R and L are a page each for
// FuzzServe, and fzLarge bytes for FuzzServeLarge, enough for a WRITE's
// payload to take the server's streaming path (readStreamed: at least
// streamMin bytes beyond the read-ahead buffer). R must refuse every
// WRITE and serve READs. Fuzzed addresses are relative to A's first byte
// (see rebase).
const (
	fzAOff  = 1 * fzPage
	fzBOff  = 3 * fzPage
	fzDOff  = 4 * fzPage
	fzROff  = 5 * fzPage
	fzLarge = ((streamMin+serverReadBuffer)/fzPage + 8) * fzPage
)

// fzRuntime is a transfer.DeviceRuntime over one page of host memory at
// device address base; a copy outside it is recorded as a violation.
type fzRuntime struct {
	base uint64
	mem  []byte
	mu   sync.Mutex
	bad  []string
}

func (r *fzRuntime) violation(format string, args ...any) error {
	r.mu.Lock()
	r.bad = append(r.bad, fmt.Sprintf(format, args...))
	r.mu.Unlock()
	return fmt.Errorf("fzRuntime: "+format, args...)
}

func (r *fzRuntime) span(addr uint64, n int) ([]byte, error) {
	off := addr - r.base
	if addr < r.base || off >= uint64(len(r.mem)) || uint64(n) > uint64(len(r.mem))-off {
		return nil, r.violation("device copy [%#x,+%d) outside [%#x,+%d)", addr, n, r.base, len(r.mem))
	}
	return r.mem[off : off+uint64(n)], nil
}

func (r *fzRuntime) CheckDevice(dev int) error { return nil }

func (r *fzRuntime) CopyHtoD(dev int, dst uint64, src []byte) error {
	b, err := r.span(dst, len(src))
	if err == nil {
		copy(b, src)
	}
	return err
}

func (r *fzRuntime) CopyDtoH(dev int, dst []byte, src uint64) error {
	b, err := r.span(src, len(dst))
	if err == nil {
		copy(dst, b)
	}
	return err
}

func (r *fzRuntime) CopyDtoD(int, uint64, int, uint64, uint64) error {
	return r.violation("CopyDtoD on a tcp target")
}

func (r *fzRuntime) ExportIPC(int, uint64, uint64) (string, error) {
	return "", transfer.ErrUnsupported
}

func (r *fzRuntime) OpenIPC(int, string) (uint64, func() error, error) {
	return 0, nil, transfer.ErrUnsupported
}

// fzTarget is the registry a fuzzed connection is served against, wrapped
// so that every range the registry hands out is checked against a naive
// reference of what is registered.
type fzTarget struct {
	reg   transfer.Registry
	slab  *memory.Region
	base  uint64 // address of A's first byte
	dev   *fzRuntime
	size  int    // bytes of R and of L
	lOff  int    // offset of L in the slab (R's is fzROff)
	ro    uint64 // address of R's first byte
	large uint64 // address of L's first byte
	init  []byte // the slab's initial bytes (fill)
	mu    sync.Mutex
	bad   []string
}

// newFzTarget maps and registers the fuzzed target's slab, with R and L
// of size bytes (a multiple of fzPage) each.
func newFzTarget(tb testing.TB, size int) *fzTarget {
	lOff := fzROff + size + fzPage
	slab, err := memory.Map(lOff + size + fzPage)
	require.NoError(tb, err)
	tb.Cleanup(func() { slab.Close() })
	ft := &fzTarget{slab: slab, base: slab.Addr() + fzAOff, size: size, lOff: lOff, ro: slab.Addr() + fzROff, large: slab.Addr() + uint64(lOff)}
	ft.dev = &fzRuntime{base: slab.Addr() + fzDOff, mem: make([]byte, fzPage)}
	b := slab.Bytes()
	_, err = ft.reg.Add(b[fzAOff:fzAOff+fzPage], "cpu:0", true)
	require.NoError(tb, err)
	_, err = ft.reg.Add(b[fzBOff:fzBOff+fzPage], "cpu:0", false)
	require.NoError(tb, err)
	_, err = ft.reg.AddReadOnly(b[fzROff:fzROff+size], "cpu:0")
	require.NoError(tb, err)
	_, err = ft.reg.Add(b[lOff:lOff+size], "cpu:0", true)
	require.NoError(tb, err)
	_, err = ft.reg.AddDevice(ft.dev, ft.dev.base, fzPage, 0, true, "")
	require.NoError(tb, err)
	return ft
}

// fill gives the slab and the device page their initial bytes: a pattern
// that differs per page, so a byte out of place shows.
func (ft *fzTarget) fill() {
	if ft.init == nil {
		ft.init = make([]byte, len(ft.slab.Bytes()))
		for i := range ft.init {
			ft.init[i] = byte(i*7 + i/fzPage)
		}
	}
	copy(ft.slab.Bytes(), ft.init)
	for i := range ft.dev.mem {
		ft.dev.mem[i] = byte(i*13 + 5)
	}
	ft.bad, ft.dev.bad = nil, nil
}

// inside reports whether [addr, addr+n) lies inside [lo, lo+size), the
// reference the registry's check is held to.
func inside(addr, n, lo, size uint64) bool {
	return n > 0 && addr >= lo && addr-lo < size && n <= size-(addr-lo)
}

func (ft *fzTarget) note(format string, args ...any) {
	ft.mu.Lock()
	ft.bad = append(ft.bad, fmt.Sprintf(format, args...))
	ft.mu.Unlock()
}

// Resolve implements transfer.Target: the registry's answer, checked.
func (ft *fzTarget) Resolve(addr, n uint64) ([]byte, error) {
	b, err := ft.reg.Resolve(addr, n)
	ft.checkHost("Resolve", addr, n, b, err, true)
	return b, err
}

// ResolveWrite implements transfer.Target: the registry's answer, checked
// as Resolve's except that R (read-only) must be refused.
func (ft *fzTarget) ResolveWrite(addr, n uint64) ([]byte, error) {
	b, err := ft.reg.ResolveWrite(addr, n)
	ft.checkHost("ResolveWrite", addr, n, b, err, false)
	return b, err
}

// writable reports whether [addr, addr+n) lies inside A or L, the
// regions a peer may write; readable adds R.
func (ft *fzTarget) writable(addr, n uint64) bool {
	return inside(addr, n, ft.base, fzPage) || inside(addr, n, ft.large, uint64(ft.size))
}

func (ft *fzTarget) readable(addr, n uint64) bool {
	return ft.writable(addr, n) || inside(addr, n, ft.ro, uint64(ft.size))
}

// checkHost holds the registry's answer (b, err) to call(addr, n)
// against the reference: exactly the range asked for, inside a region
// the call may reach (A or L; R too when read), and every such range
// accepted.
func (ft *fzTarget) checkHost(call string, addr, n uint64, b []byte, err error, read bool) {
	in := ft.writable(addr, n)
	if read {
		in = ft.readable(addr, n)
	}
	switch {
	case err == nil && !in:
		ft.note("%s(%#x, %d) accepted a range outside the regions it may reach", call, addr, n)
	case err == nil && (memory.AddrOf(b) != addr || uint64(len(b)) != n || uint64(cap(b)) != n):
		ft.note("%s(%#x, %d) returned [%#x,+%d) cap %d", call, addr, n, memory.AddrOf(b), len(b), cap(b))
	case err != nil && in:
		ft.note("%s(%#x, %d) refused a range it may reach: %v", call, addr, n, err)
	}
}

// ResolveDevice implements transfer.DeviceTarget: the registry's answer,
// checked.
func (ft *fzTarget) ResolveDevice(addr, n uint64) (transfer.DeviceRange, error) {
	d, err := ft.reg.ResolveDevice(addr, n)
	in := inside(addr, n, ft.dev.base, fzPage)
	switch {
	case err == nil && !in:
		ft.note("ResolveDevice(%#x, %d) accepted a range outside D", addr, n)
	case err == nil && (d.Addr != addr || d.Length != n):
		ft.note("ResolveDevice(%#x, %d) returned [%#x,+%d)", addr, n, d.Addr, d.Length)
	case err != nil && in:
		ft.note("ResolveDevice(%#x, %d) refused a range inside D: %v", addr, n, err)
	}
	return d, err
}

// rebase adds delta to the address of every request header of stream, as
// the server would cut it into frames (a WRITE's payload skipped), and
// returns the new stream. Fuzzed streams carry addresses relative to the
// target's region, so that seeds recorded against one process stay
// meaningful in another; the mapping is a bijection of uint64, so every
// address stays reachable.
func rebase(stream []byte, delta uint64) []byte {
	out := bytes.Clone(stream)
	for pos := 0; len(out)-pos >= headerLen; {
		h := out[pos : pos+headerLen]
		size := binary.LittleEndian.Uint64(h[0:])
		binary.LittleEndian.PutUint64(h[8:], binary.LittleEndian.Uint64(h[8:])+delta)
		pos += headerLen
		if transfer.Opcode(h[16]&^protoV2) == transfer.Write {
			if size > uint64(len(out)-pos) {
				break
			}
			pos += int(size)
		}
	}
	return out
}

// fzRef is one region of the reference server's memory: its address,
// its bytes (updated in place), and whether it is device memory or
// read-only to peers.
type fzRef struct {
	base             uint64
	mem              []byte
	device, readOnly bool
}

// expectServe is the reference server: the bytes serve must answer to
// stream (absolute addresses) and the memory it leaves, given the initial
// contents of the remote-accessible regions refs (updated in place).
func expectServe(stream []byte, refs []fzRef) []byte {
	var out []byte
	status := func(code uint64) { out = binary.LittleEndian.AppendUint64(out, statusMagic|code) }
	for pos := 0; len(stream)-pos >= headerLen; {
		h := stream[pos : pos+headerLen]
		size := binary.LittleEndian.Uint64(h[0:])
		addr := binary.LittleEndian.Uint64(h[8:])
		v2 := h[16]&protoV2 != 0
		op := transfer.Opcode(h[16] &^ protoV2)
		pos += headerLen
		var mem []byte // the registered bytes of the request, nil if refused
		device := false
		for _, r := range refs {
			if inside(addr, size, r.base, uint64(len(r.mem))) && !(r.readOnly && op == transfer.Write) {
				mem, device = r.mem[addr-r.base:addr-r.base+size], r.device
				break
			}
		}
		rest := uint64(len(stream) - pos)
		switch op {
		case transfer.Write:
			if size > rest {
				if mem != nil && !device {
					copy(mem, stream[pos:]) // partial payload lands, then EOF
				}
				return out
			}
			payload := stream[pos : pos+int(size)]
			pos += int(size)
			switch {
			case mem == nil && !v2:
				return out // v1 cannot refuse a write: drop
			case mem == nil:
				status(statusRej)
			default:
				copy(mem, payload)
				if v2 {
					status(statusOK)
				}
			}
		case transfer.Read:
			switch {
			case mem == nil && !v2:
				return out // v1 cannot refuse a read: drop
			case mem == nil:
				status(statusRej)
			default:
				if v2 {
					status(statusOK)
				}
				out = append(out, mem...)
			}
		default:
			return out // unknown opcode: drop
		}
	}
	return out
}

// serveStream runs serve on a socket fed stream and returns everything it
// answered. It fails tb if serve does not return within fzCallLimit.
func serveStream(tb testing.TB, target transfer.Target, stream []byte) []byte {
	cli, srv := sockpair.New(tb)
	defer cli.Close()
	go func() {
		cli.Write(stream) // fails once serve dropped the connection
		cli.CloseWrite()
	}()
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(cli)
		got <- b
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer srv.Close()
		serve(srv, target)
	}()
	select {
	case <-done:
	case <-time.After(fzCallLimit):
		tb.Fatalf("serve did not return within %v on a %d-byte stream", fzCallLimit, len(stream))
	}
	return <-got
}

// recordTCP runs real exchanges through a wiretap between a peer and a
// target serving one fzPage region at base, and returns each connection's
// recording with its addresses made relative to base.
func recordTCP(tb testing.TB) []wiretap.Recording {
	r, err := memory.Map(fzPage)
	require.NoError(tb, err)
	defer r.Close()
	var reg transfer.Registry
	_, err = reg.Add(r.Bytes(), "cpu:0", true)
	require.NoError(tb, err)
	srv := New(Config{})
	require.NoError(tb, srv.Listen("fuzz-target", &reg))
	defer srv.Close()
	tap, err := wiretap.Start(srv.Addr().String())
	require.NoError(tb, err)

	cli := New(Config{SliceSize: 1024, Stripe: 1, MaxConnsPerPeer: 1, RetryCount: 1})
	p, err := cli.Dial(context.Background(),
		metadata.SegmentDesc{Name: "fuzz-target", Protocol: "tcp", TCPDataPort: tap.Port(), TCPProtoVersion: 2},
		metadata.RPCMeta{IPOrHostName: "127.0.0.1"})
	require.NoError(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), fzCallLimit)
	defer cancel()
	base := r.Addr()
	buf := make([]byte, fzPage)
	for i := range buf {
		buf[i] = byte(i)
	}
	require.NoError(tb, p.Do(ctx, transfer.Write, buf[:100], base+8))
	require.NoError(tb, p.Do(ctx, transfer.Write, buf, base))         // four slices
	require.NoError(tb, p.Do(ctx, transfer.Read, buf[:3000], base+7)) // three slices
	require.NoError(tb, p.(transfer.VectorPeer).DoV(ctx, transfer.Write, [][]byte{buf[:10], buf[10:1500]}, base+100))
	require.ErrorIs(tb, p.Do(ctx, transfer.Write, buf[:64], base+fzPage-32), transfer.ErrRejected)
	require.ErrorIs(tb, p.Do(ctx, transfer.Read, buf[:64], base-1), transfer.ErrRejected)
	require.NoError(tb, p.Do(ctx, transfer.Read, buf[:1], base+fzPage-1))
	require.NoError(tb, p.Close())
	recs := tap.Close()
	require.NotEmpty(tb, recs)
	for i := range recs {
		recs[i].Up = rebase(recs[i].Up, -base)
	}
	return recs
}

// FuzzServe feeds the target side of a connection arbitrary request
// streams and checks it against the reference server: the same answer
// bytes, the same memory afterwards, no byte touched outside the
// remote-accessible regions (guard pages, the local-only region and the
// device page's bounds are checked), every range the registry resolves
// inside a registered region, and serve returning within fzCallLimit.
func FuzzServe(f *testing.F) {
	ft := newFzTarget(f, fzPage)
	lRel := uint64(ft.lOff - fzAOff) // L's first byte, as seeds address it
	for _, r := range recordTCP(f) {
		f.Add(r.Up)
	}
	hdr := fzHeader
	w, r := byte(transfer.Write)|protoV2, byte(transfer.Read)|protoV2
	f.Add(hdr(8, fzDOff-fzAOff, w))                                                                             // device page
	f.Add(append(append(hdr(16, fzDOff-fzAOff+0x30, w), fzPattern[:16]...), hdr(64, fzDOff-fzAOff+0x20, r)...)) // device page: write, read back
	f.Add(hdr(96, fzDOff-fzAOff+fzPage-64, byte(transfer.Read)))                                                // v1 read past the device page: dropped
	f.Add(append(hdr(16, fzBOff-fzAOff, w), make([]byte, 16)...))                                               // local-only region
	f.Add(hdr(math.MaxUint64, 0, w))                                                                            // a payload no peer can send
	f.Add(append(hdr(1<<63, math.MaxUint64, w), hdr(4, 0, r)...))                                               // rejected, unsendable
	f.Add(append(hdr(4, 0, byte(transfer.Write)), 1, 2, 3, 4, 0, 0, 0))                                         // v1, short trailer
	f.Add(hdr(4, 0, 0x7f))                                                                                      // unknown opcode
	f.Add(hdr(0, 0, r))                                                                                         // empty read
	f.Add(append(append(hdr(4, fzROff-fzAOff+8, w), 1, 2, 3, 4), hdr(16, fzROff-fzAOff, r)...))                 // read-only R: refused, then read
	f.Add(append(hdr(4, fzROff-fzAOff, byte(transfer.Write)), 1, 2, 3, 4))                                      // v1 into R: dropped
	f.Add(append(append(hdr(8, lRel+fzPage-8, w), 1, 2, 3, 4, 5, 6, 7, 8), hdr(8, lRel+fzPage-4, r)...))        // L's end

	f.Fuzz(func(t *testing.T, rel []byte) { ft.check(t, rebase(rel, ft.base)) })
}

// fzPattern is the payload FuzzServeLarge's large WRITEs carry (a prefix
// of it): random bytes, so that a chunk copied to the wrong place, even a
// multiple of 256 bytes away, shows.
var fzPattern = func() []byte {
	r := rand.New(rand.NewPCG(7, 11))
	b := make([]byte, fzLarge+2*fzPage)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

// fzHeader is a request header of size bytes at off (relative to A's
// first byte, as rebase takes it) with opcode byte op.
func fzHeader(size, off uint64, op byte) []byte {
	h := make([]byte, headerLen)
	binary.LittleEndian.PutUint64(h[0:], size)
	binary.LittleEndian.PutUint64(h[8:], off)
	h[16] = op
	return h
}

// FuzzServeLarge is FuzzServe with one large request in the middle of the
// stream, so that a WRITE's payload reaches the server's streaming path
// (readStreamed, on L) without fuzzed inputs of 64 KiB and more (the
// fuzzer's minimizing of such an input stalls it for a minute): before
// and after are frames as FuzzServe takes them; the middle request has
// opcode op, size bytes (at most L's size + 2 pages) at off (counted
// from R's first byte to a page past L's end), and a WRITE carries a
// patterned payload cut to cut bytes (the stream then ends) when
// cut < size.
func FuzzServeLarge(f *testing.F) {
	ft := newFzTarget(f, fzLarge)
	lRel := uint64(ft.lOff - fzAOff) // L's first byte, as seeds address it
	w, r := byte(transfer.Write)|protoV2, byte(transfer.Read)|protoV2
	size := uint32(fzLarge - 4)
	l := uint32(ft.lOff - fzROff)                                                                                                 // off of L's first byte
	f.Add([]byte{}, l+3, size, w, size, fzHeader(uint64(size), lRel+3, r))                                                        // fill L, read it back
	f.Add([]byte{}, l+3, size, w, uint32(streamMin+serverReadBuffer+100), []byte{})                                               // cut short in the second chunk
	f.Add([]byte{}, l+fzLarge-100, size, w, size, fzHeader(fzPage, lRel, r))                                                      // past L's end: refused, drained
	f.Add(append(fzHeader(8, 0, w), 1, 2, 3, 4, 5, 6, 7, 8), l, uint32(fzLarge), byte(transfer.Write), uint32(fzLarge), []byte{}) // v1, all of L
	f.Add([]byte{}, uint32(0), size, byte(transfer.Write), size, fzHeader(4, 0, r))                                               // v1 into R: drained, dropped
	f.Add([]byte{}, uint32(0), size, w, size, fzHeader(fzPage, fzROff-fzAOff, r))                                                 // into R, read-only: refused, drained
	f.Add([]byte{}, l+1, size, byte(transfer.Read), uint32(0), fzHeader(4, 0, w))                                                 // v1 READ of L
	f.Fuzz(func(t *testing.T, before []byte, off, size uint32, op byte, cut uint32, after []byte) {
		size %= fzLarge + 2*fzPage + 1
		// off counts from R's first byte to a page past L's end, so
		// that R (read-only) and the guards around L are addressed too.
		addr := ft.ro + uint64(off%uint32(ft.lOff-fzROff+fzLarge+fzPage))
		stream := rebase(before, ft.base)
		h := fzHeader(uint64(size), addr, op)
		stream = append(stream, h...)
		if transfer.Opcode(op&^protoV2) == transfer.Write {
			payload := fzPattern[:size]
			if cut < size {
				ft.check(t, append(stream, payload[:cut]...))
				return
			}
			stream = append(stream, payload...)
		}
		ft.check(t, append(stream, rebase(after, ft.base)...))
	})
}

// check serves stream (absolute addresses) on ft and holds the answer
// and every region's bytes to the reference server's (expectServe).
func (ft *fzTarget) check(t *testing.T, stream []byte) {
	ft.fill()
	slab := ft.slab.Bytes()
	a := bytes.Clone(slab[fzAOff : fzAOff+fzPage])
	ro := bytes.Clone(slab[fzROff : fzROff+ft.size])
	lo, hi := ft.lOff, ft.lOff+ft.size
	large := bytes.Clone(slab[lo:hi])
	d := bytes.Clone(ft.dev.mem)
	want := expectServe(stream, []fzRef{
		{base: ft.base, mem: a},
		{base: ft.ro, mem: ro, readOnly: true},
		{base: ft.large, mem: large},
		{base: ft.dev.base, mem: d, device: true},
	})
	got := serveStream(t, ft, stream)
	require.Empty(t, ft.bad, "registry checks")
	require.Empty(t, ft.dev.bad, "device copies")
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("answer differs from the reference at byte %d: got %d bytes, want %d", i, len(got), len(want))
	}
	before := ft.init
	require.True(t, bytes.Equal(a, slab[fzAOff:fzAOff+fzPage]), "region A differs from the reference")
	require.True(t, bytes.Equal(large, slab[lo:hi]), "region L differs from the reference")
	require.True(t, bytes.Equal(before[:fzAOff], slab[:fzAOff]), "guard page 0 was written")
	require.True(t, bytes.Equal(before[fzAOff+fzPage:lo], slab[fzAOff+fzPage:lo]),
		"pages between A and L (guards, local-only B, read-only R) were written")
	require.True(t, bytes.Equal(before[hi:], slab[hi:]), "the guard after L was written")
	require.True(t, bytes.Equal(d, ft.dev.mem), "device page differs from the reference")
}

// fzReplier is a fake target: every connection it accepts is answered
// with one fuzzed byte string (whatever was asked), then closed, while
// what the peer sends is read and discarded.
type fzReplier struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	reply []byte
}

func startReplier(tb testing.TB) *fzReplier {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	s := &fzReplier{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			reply := s.reply
			s.mu.Unlock()
			s.wg.Add(2)
			go func() {
				defer s.wg.Done()
				io.Copy(io.Discard, c)
			}()
			go func() {
				defer s.wg.Done()
				c.Write(reply)
				c.Close()
			}()
		}
	}()
	tb.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

// FuzzPeerReplies answers an initiator's request with arbitrary bytes and
// checks that the request ends (error or success) within fzCallLimit
// without a panic, that a READ lands only in the caller's buffer, and
// that success needs a reply starting with a well-formed OK status. The seeds are the answers a real target gave.
func FuzzPeerReplies(f *testing.F) {
	for _, r := range recordTCP(f) {
		f.Add(r.Down, uint16(64), false)
		f.Add(r.Down, uint16(3000), true)
	}
	ok := binary.LittleEndian.AppendUint64(nil, statusMagic|statusOK)
	f.Add(ok, uint16(8), false)
	f.Add(append(bytes.Clone(ok), 1, 2, 3, 4, 5, 6, 7, 8), uint16(8), true)
	f.Add(binary.LittleEndian.AppendUint64(nil, statusMagic|statusRej), uint16(8), true)
	f.Add(binary.LittleEndian.AppendUint64(nil, 0x1234), uint16(8), false)

	srv := startReplier(f)
	port := srv.ln.Addr().(*net.TCPAddr).Port
	tr := New(Config{SliceSize: 1024, Stripe: 2, MaxConnsPerPeer: 2, RetryCount: 2, Window: 4})
	f.Fuzz(func(t *testing.T, reply []byte, n uint16, read bool) {
		size := int(n)%(2*fzPage) + 1
		srv.mu.Lock()
		srv.reply = reply
		srv.mu.Unlock()
		p, err := tr.Dial(context.Background(),
			metadata.SegmentDesc{Name: "fuzz", Protocol: "tcp", TCPDataPort: port, TCPProtoVersion: 2},
			metadata.RPCMeta{IPOrHostName: "127.0.0.1"})
		require.NoError(t, err)
		defer p.Close()
		// The caller's buffer with a guard on each side.
		all := make([]byte, size+2*fzPage)
		for i := range all {
			all[i] = byte(i * 3)
		}
		before := bytes.Clone(all)
		local := all[fzPage : fzPage+size]
		op := transfer.Write
		if read {
			op = transfer.Read
		}
		ctx, cancel := context.WithTimeout(context.Background(), fzCallLimit)
		defer cancel()
		err = p.Do(ctx, op, local, 1<<40)
		require.False(t, errors.Is(err, context.DeadlineExceeded), "request did not end within %v: %v", fzCallLimit, err)
		require.True(t, bytes.Equal(before[:fzPage], all[:fzPage]), "bytes before the caller's buffer were written")
		require.True(t, bytes.Equal(before[fzPage+size:], all[fzPage+size:]), "bytes after the caller's buffer were written")
		if !read {
			require.True(t, bytes.Equal(before, all), "a WRITE changed the caller's buffer")
		}
		if err == nil {
			// Every connection's first answer is reply's first frame.
			require.GreaterOrEqual(t, len(reply), statusLen, "success on a reply without a status frame")
			require.Equal(t, statusMagic|statusOK, binary.LittleEndian.Uint64(reply), "success on a reply whose first frame is not OK")
		}
	})
}
