package shm_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/shm"
)

func fill(b []byte, seed uint64) {
	r := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// waitClosed fails the test if ch does not close in time: a guard against
// hangs, not a timing assumption.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still waiting after 10s", what)
	}
}

// TestRoundtrip: two targets in one process, each writing into and reading
// from the other's memfd buffers over real unix sockets.
func TestRoundtrip(t *testing.T) {
	for _, dir := range []string{"", "dir"} {
		t.Run("socket="+map[string]string{"": "abstract", "dir": "path"}[dir], func(t *testing.T) {
			cfg := shm.Config{}
			if dir != "" {
				cfg.SocketDir = t.TempDir()
			}
			a, b := newSide(t, "seg-a", cfg), newSide(t, "seg-b", cfg)
			ra, rb := a.shared(t, 1<<20), b.shared(t, 1<<20)
			ab, ba := a.dial(t, b), b.dial(t, a)
			ctx := t.Context()
			cases := []struct {
				name     string
				off, len int
			}{
				{"first byte", 0, 1},
				{"64KiB inside", 4096, 65536},
				{"last byte", 1<<20 - 1, 1},
				{"whole buffer", 0, 1 << 20},
			}
			for i, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					src := make([]byte, c.len)
					fill(src, uint64(i+1))
					if err := ab.Do(ctx, transfer.Write, src, rb.Addr()+uint64(c.off)); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(rb.Bytes()[c.off:c.off+c.len], src) {
						t.Fatal("completed WRITE: target bytes differ")
					}
					got := make([]byte, c.len)
					if err := ab.Do(ctx, transfer.Read, got, rb.Addr()+uint64(c.off)); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, src) {
						t.Fatal("READ after WRITE: bytes differ")
					}
					// The other direction, into a's buffer.
					fill(src, uint64(i+100))
					if err := ba.Do(ctx, transfer.Write, src, ra.Addr()+uint64(c.off)); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(ra.Bytes()[c.off:c.off+c.len], src) {
						t.Fatal("b -> a WRITE: target bytes differ")
					}
				})
			}
			if s := b.tr.Stats(); s.Accepted != 1 || s.FDRequests != 1 || s.FDsSent != 1 {
				t.Fatalf("b served %+v, want one connection and one descriptor", s)
			}
		})
	}
}

// TestPublishDial checks the published address format and Dial's checks.
func TestPublishDial(t *testing.T) {
	s := newSide(t, "seg/with:odd chars", shm.Config{})
	if s.desc.Protocol != "shm" || s.desc.TCPDataPort != 0 || s.rpc.RPCPort != 0 {
		t.Fatalf("published %+v %+v", s.desc, s.rpc)
	}
	if !strings.HasPrefix(s.rpc.IPOrHostName, "unix:@mooncake-shm-seg_with_odd_chars-") || s.rpc.IPOrHostName != "unix:"+s.tr.Addr() {
		t.Fatalf("ip_or_host_name %q, addr %q", s.rpc.IPOrHostName, s.tr.Addr())
	}
	other := newSide(t, "seg/with:odd chars", shm.Config{})
	if other.tr.Addr() == s.tr.Addr() {
		t.Fatal("two transports of the same segment name share a socket address")
	}

	tr := shm.New(shm.Config{})
	defer tr.Close()
	var d metadata.SegmentDesc
	var rpc metadata.RPCMeta
	tr.Publish(&d, &rpc) // before Listen: nothing to dial
	for _, c := range []struct {
		name string
		d    metadata.SegmentDesc
		rpc  metadata.RPCMeta
		want error
	}{
		{"unlistened", d, rpc, transfer.ErrInvalidArgument},
		{"tcp address", metadata.SegmentDesc{Name: "x", Protocol: "shm"}, metadata.RPCMeta{IPOrHostName: "127.0.0.1", RPCPort: 1}, transfer.ErrInvalidArgument},
		{"empty unix address", metadata.SegmentDesc{Name: "x", Protocol: "shm"}, metadata.RPCMeta{IPOrHostName: "unix:"}, transfer.ErrInvalidArgument},
		{"other protocol", metadata.SegmentDesc{Name: "x", Protocol: "tcp"}, s.rpc, transfer.ErrUnsupported},
	} {
		if _, err := tr.Dial(t.Context(), c.d, c.rpc); !errors.Is(err, c.want) {
			t.Errorf("%s: Dial = %v, want %v", c.name, err, c.want)
		}
	}
}

type resolveOnly struct{}

func (resolveOnly) Resolve(addr, length uint64) ([]byte, error) {
	return nil, transfer.ErrAddressNotRegistered
}

func (resolveOnly) ResolveWrite(addr, length uint64) ([]byte, error) {
	return nil, transfer.ErrAddressNotRegistered
}

func TestListenErrors(t *testing.T) {
	tr := shm.New(shm.Config{})
	if err := tr.Listen("x", resolveOnly{}); !errors.Is(err, transfer.ErrUnsupported) {
		t.Fatalf("Listen with a target lacking FDFor = %v, want ErrUnsupported", err)
	}
	if err := tr.Listen("x", &testTarget{}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Listen("x", &testTarget{}); !errors.Is(err, transfer.ErrInvalidArgument) {
		t.Fatalf("second Listen = %v, want ErrInvalidArgument", err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); !errors.Is(err, transfer.ErrClosed) {
		t.Fatalf("second Close = %v, want ErrClosed", err)
	}
	if err := tr.Listen("x", &testTarget{}); !errors.Is(err, transfer.ErrClosed) {
		t.Fatalf("Listen after Close = %v, want ErrClosed", err)
	}
	long := shm.New(shm.Config{SocketDir: "/" + strings.Repeat("d", 100)})
	if err := long.Listen("x", &testTarget{}); !errors.Is(err, transfer.ErrInvalidArgument) {
		t.Fatalf("Listen with a too-long path = %v, want ErrInvalidArgument", err)
	}
}

// TestSocketFile: a path socket is private to this user and removed by
// Close.
func TestSocketFile(t *testing.T) {
	dir := t.TempDir()
	s := newSide(t, "seg-file", shm.Config{SocketDir: dir})
	path := s.tr.Addr()
	if filepath.Dir(path) != dir || s.rpc.IPOrHostName != "unix:"+path {
		t.Fatalf("socket %q (published %q) not under %q", path, s.rpc.IPOrHostName, dir)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want a socket with 0600", st.Mode())
	}
	if err := s.tr.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file after Close: %v", err)
	}
}

// TestOutOfRangeRejected: requests outside the target's buffer fail with
// ErrRejected and change neither side's memory, both before the buffer is
// mapped (the target refuses) and after (the peer's own bounds check).
func TestOutOfRangeRejected(t *testing.T) {
	a, b := newSide(t, "seg-a", shm.Config{}), newSide(t, "seg-b", shm.Config{})
	rb := b.shared(t, 1<<20)
	fill(rb.Bytes(), 4)
	before := append([]byte(nil), rb.Bytes()...)
	base, size := rb.Addr(), uint64(rb.Len())
	local := make([]byte, 300)
	fill(local, 5)
	localBefore := append([]byte(nil), local...)
	cases := []struct {
		name string
		op   transfer.Opcode
		addr uint64
		n    int
	}{
		{"write straddling end", transfer.Write, base + size - 100, 200},
		{"write before start", transfer.Write, base - 100, 200},
		{"write just past end", transfer.Write, base + size, 1},
		{"write far away", transfer.Write, 0x1000, 300},
		{"read straddling end", transfer.Read, base + size - 1, 2},
		{"read before start", transfer.Read, base - 1, 1},
		{"read wrapping the address space", transfer.Read, math.MaxUint64 - 5, 200},
		{"write wrapping the address space", transfer.Write, math.MaxUint64 - 5, 200},
	}
	for _, warm := range []bool{false, true} {
		t.Run(fmt.Sprintf("mapped=%v", warm), func(t *testing.T) {
			p := a.dial(t, b)
			if warm {
				probe := make([]byte, 1)
				if err := p.Do(t.Context(), transfer.Read, probe, base); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range cases {
				err := p.Do(t.Context(), c.op, local[:c.n], c.addr)
				if !errors.Is(err, transfer.ErrRejected) {
					t.Errorf("%s: err = %v, want ErrRejected", c.name, err)
				}
			}
			if !bytes.Equal(rb.Bytes(), before) {
				t.Fatal("a rejected request changed the target's memory")
			}
			if !bytes.Equal(local, localBefore) {
				t.Fatal("a rejected request changed the local memory")
			}
			// The peer keeps working after refusals.
			if err := p.Do(t.Context(), transfer.Read, local[:10], base+10); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(local[:10], before[10:20]) {
				t.Fatal("read after refusals returned wrong bytes")
			}
			copy(local, localBefore)
		})
	}
}

// TestNotShareableRejected: buffers the target cannot or must not hand out
// are refused, and nothing is written.
func TestNotShareableRejected(t *testing.T) {
	a, b := newSide(t, "seg-a", shm.Config{}), newSide(t, "seg-b", shm.Config{})

	// Anonymous memory: no memory file at all.
	anonReg := anon(t, 1<<16)
	b.tg.add(anonReg.Bytes(), anonReg)

	// Part of a memfd region: the file is larger than the buffer, so its
	// descriptor would expose bytes outside the registered range.
	whole, err := memory.MapShared(1<<16, "partial")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { whole.Close() })
	part := whole.Bytes()[4096 : 4096+8192]
	b.tg.add(part, whole)

	// An unsealed memory file (as a plain /dev/shm file would be): the peer
	// could shrink it under the target's mapping.
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, 1<<16); err != nil {
		t.Fatal(err)
	}
	unsealed, err := memory.MapFD(fd, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unsealed.Close() })
	b.tg.add(unsealed.Bytes(), unsealed)

	p := a.dial(t, b)
	for _, c := range []struct {
		name string
		r    []byte
	}{
		{"anonymous", anonReg.Bytes()},
		{"part of a region", part},
		{"unsealed file", unsealed.Bytes()},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := append([]byte(nil), c.r...)
			src := bytes.Repeat([]byte{0xAB}, 64)
			err := p.Do(t.Context(), transfer.Write, src, memory.AddrOf(c.r))
			if !errors.Is(err, transfer.ErrRejected) {
				t.Fatalf("err = %v, want ErrRejected", err)
			}
			if !bytes.Equal(c.r, before) {
				t.Fatal("a refused write changed the buffer")
			}
		})
	}
	if s := b.tr.Stats(); s.FDsSent != 0 || s.FDRequests != 3 {
		t.Fatalf("stats %+v: want 3 requests, no descriptor sent", s)
	}
	if got := shm.PeerRegions(p); len(got) != 0 {
		t.Fatalf("peer mapped %d buffers after refusals", len(got))
	}
}

// TestMappingCached: the descriptor is requested once per buffer, on one
// connection, however many requests and goroutines use the buffer.
func TestMappingCached(t *testing.T) {
	a, b := newSide(t, "seg-a", shm.Config{}), newSide(t, "seg-b", shm.Config{})
	r1, r2 := b.shared(t, 1<<20), b.shared(t, 1<<16)
	p := a.dial(t, b)
	ctx := t.Context()

	const workers = 16
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := bytes.Repeat([]byte{byte(i + 1)}, 4096)
			errs <- p.Do(ctx, transfer.Write, src, r1.Addr()+uint64(i*4096))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range workers {
		if r1.Bytes()[i*4096] != byte(i+1) || r1.Bytes()[i*4096+4095] != byte(i+1) {
			t.Fatalf("block %d not written", i)
		}
	}
	if s := b.tr.Stats(); s.Accepted != 1 || s.FDRequests != 1 {
		t.Fatalf("after %d concurrent requests on one buffer: %+v, want 1 connection, 1 request", workers, s)
	}
	buf := make([]byte, 100)
	for range 3 {
		if err := p.Do(ctx, transfer.Read, buf, r1.Addr()+500); err != nil {
			t.Fatal(err)
		}
	}
	if s := b.tr.Stats(); s.FDRequests != 1 {
		t.Fatalf("repeated requests: %+v, want 1 descriptor request", s)
	}
	// A second buffer costs one more request, on the same connection.
	if err := p.Do(ctx, transfer.Write, buf, r2.Addr()); err != nil {
		t.Fatal(err)
	}
	if s := b.tr.Stats(); s.Accepted != 1 || s.FDRequests != 2 || s.FDsSent != 2 {
		t.Fatalf("second buffer: %+v, want 1 connection, 2 requests", s)
	}
	if got := shm.PeerRegions(p); len(got) != 2 {
		t.Fatalf("peer holds %d mappings, want 2", len(got))
	}
}

// TestReregisteredBufferReplacesStale: when the target unregisters a buffer
// and registers another over overlapping addresses, a request outside the
// cached mapping picks up the new buffer and the stale mapping is dropped,
// so later requests reach the new buffer only. (The test target publishes
// buffers at chosen addresses; the peer never dereferences target
// addresses, it only uses them to find its mapping.)
func TestReregisteredBufferReplacesStale(t *testing.T) {
	a, b := newSide(t, "seg-a", shm.Config{}), newSide(t, "seg-b", shm.Config{})
	const halfAt, bigAt = 0x10000000, 0x0FF80000 // big ends where half ends
	half, err := memory.MapShared(1<<19, "half")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { half.Close() })
	big, err := memory.MapShared(1<<20, "big")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { big.Close() })

	b.tg.addAt(halfAt, half.Bytes(), half)
	p := a.dial(t, b)
	if err := p.Do(t.Context(), transfer.Write, []byte{1}, halfAt); err != nil {
		t.Fatal(err)
	}
	if half.Bytes()[0] != 1 {
		t.Fatal("write did not reach the first buffer")
	}
	b.tg.remove(halfAt)
	b.tg.addAt(bigAt, big.Bytes(), big)
	if err := p.Do(t.Context(), transfer.Write, []byte{2}, bigAt+100); err != nil {
		t.Fatal(err)
	}
	if err := p.Do(t.Context(), transfer.Write, []byte{3}, halfAt); err != nil {
		t.Fatal(err)
	}
	if big.Bytes()[100] != 2 || big.Bytes()[halfAt-bigAt] != 3 || half.Bytes()[0] != 1 {
		t.Fatalf("writes landed wrong: big[100]=%d big[%#x]=%d half[0]=%d", big.Bytes()[100], halfAt-bigAt, big.Bytes()[halfAt-bigAt], half.Bytes()[0])
	}
	if regs := shm.PeerRegions(p); len(regs) != 1 || regs[0].Len() != 1<<20 {
		t.Fatalf("peer holds %d mappings, want only the new buffer's", len(regs))
	}
}

// TestPeerCloseUnmaps: Close unmaps every buffer, closes the descriptors
// and makes later requests fail with ErrClosed.
func TestPeerCloseUnmaps(t *testing.T) {
	a, b := newSide(t, "seg-a", shm.Config{}), newSide(t, "seg-b", shm.Config{})
	r1, r2 := b.shared(t, 1<<16), b.shared(t, 1<<16)
	p := a.dial(t, b)
	buf := make([]byte, 16)
	for _, r := range []*memory.Region{r1, r2} {
		if err := p.Do(t.Context(), transfer.Write, buf, r.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	regs := shm.PeerRegions(p)
	if len(regs) != 2 {
		t.Fatalf("%d mappings, want 2", len(regs))
	}
	var addrs []uint64
	var fds []int
	for _, r := range regs {
		addrs = append(addrs, r.Addr())
		fds = append(fds, r.FD())
		if !mapped(t, r.Addr()) {
			t.Fatalf("mapping at %#x not in /proc/self/maps", r.Addr())
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for i, r := range regs {
		if r.Bytes() != nil || r.FD() != -1 {
			t.Fatalf("region %d still open after peer Close", i)
		}
		if mapped(t, addrs[i]) {
			t.Fatalf("mapping at %#x survived peer Close", addrs[i])
		}
		if _, err := unix.FcntlInt(uintptr(fds[i]), unix.F_GETFD, 0); err == nil {
			// The number may have been reused by this process meanwhile;
			// it must at least not be our memfd any more.
			if target, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fds[i])); strings.Contains(target, "memfd:seg-b") {
				t.Fatalf("descriptor %d still names %s", fds[i], target)
			}
		}
	}
	if err := p.Do(t.Context(), transfer.Write, buf, r1.Addr()); !errors.Is(err, transfer.ErrClosed) {
		t.Fatalf("Do after Close = %v, want ErrClosed", err)
	}
	if err := p.Close(); !errors.Is(err, transfer.ErrClosed) {
		t.Fatalf("second Close = %v, want ErrClosed", err)
	}
	// The target's memory is untouched by the peer's unmapping.
	r1.Bytes()[0] = 1
}

// mapped reports whether a mapping starts at addr in /proc/self/maps.
func mapped(t *testing.T, addr uint64) bool {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("%x-", addr)
	for _, line := range strings.Split(string(maps), "\n") {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

// TestConcurrentDoAndClose: Close waits for running copies; every request
// either completes or fails with ErrClosed (the race detector and the
// absence of a fault are the real checks).
func TestConcurrentDoAndClose(t *testing.T) {
	a, b := newSide(t, "seg-a", shm.Config{}), newSide(t, "seg-b", shm.Config{})
	r := b.shared(t, 1<<20)
	p := a.dial(t, b)
	if err := p.Do(t.Context(), transfer.Write, make([]byte, 1), r.Addr()); err != nil {
		t.Fatal(err)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			<-start
			for {
				op := transfer.Opcode(i % 2)
				if err := p.Do(context.Background(), op, buf, r.Addr()+uint64(i)*(64<<10)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	close(start)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, transfer.ErrClosed) {
			t.Fatalf("request racing Close: %v, want ErrClosed", err)
		}
	}
}

// TestServerGone: a peer whose target is gone fails promptly, whether it
// never connected or already mapped the buffer.
func TestServerGone(t *testing.T) {
	t.Run("before first request", func(t *testing.T) {
		a, b := newSide(t, "seg-a", shm.Config{}), newSide(t, "seg-b", shm.Config{})
		r := b.shared(t, 4096)
		p := a.dial(t, b)
		if err := b.tr.Close(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		err := p.Do(ctx, transfer.Write, make([]byte, 8), r.Addr())
		if err == nil || ctx.Err() != nil {
			t.Fatalf("Do to a closed target = %v (ctx %v), want a prompt error", err, ctx.Err())
		}
		if !strings.Contains(err.Error(), "dial") {
			t.Fatalf("error %q does not say the dial failed", err)
		}
	})
	t.Run("path socket removed", func(t *testing.T) {
		cfg := shm.Config{SocketDir: t.TempDir()}
		a, b := newSide(t, "seg-a", cfg), newSide(t, "seg-b", cfg)
		r := b.shared(t, 4096)
		p := a.dial(t, b)
		b.tr.Close()
		if err := p.Do(t.Context(), transfer.Read, make([]byte, 8), r.Addr()); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Do after the socket file went = %v, want ENOENT", err)
		}
	})
	t.Run("after mapping", func(t *testing.T) {
		a, b := newSide(t, "seg-a", shm.Config{}), newSide(t, "seg-b", shm.Config{})
		r := b.shared(t, 4096)
		r2 := b.shared(t, 4096)
		p := a.dial(t, b)
		if err := p.Do(t.Context(), transfer.Write, make([]byte, 8), r.Addr()); err != nil {
			t.Fatal(err)
		}
		if err := b.tr.Close(); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, shm.PeerDone(p), "peer noticing the target closed")
		for _, addr := range []uint64{r.Addr(), r2.Addr()} { // mapped, and not yet mapped
			if err := p.Do(t.Context(), transfer.Write, make([]byte, 8), addr); !errors.Is(err, shm.ErrPeerGone) {
				t.Fatalf("Do at %#x after the target closed = %v, want ErrPeerGone", addr, err)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("unresponsive target honours ctx", func(t *testing.T) {
		addr := "@mooncake-shm-test-mute-" + randHex(t)
		ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: addr, Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan *net.UnixConn, 1)
		go func() {
			c, err := ln.AcceptUnix()
			if err == nil {
				accepted <- c // held open, never answered
			}
			close(accepted)
		}()
		p, err := shm.New(shm.Config{}).Dial(t.Context(), metadata.SegmentDesc{Name: "mute", Protocol: "shm"}, metadata.RPCMeta{IPOrHostName: "unix:" + addr})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- p.Do(ctx, transfer.Write, make([]byte, 8), 0x1000) }()
		c, ok := <-accepted
		if !ok {
			t.Fatal("accept failed")
		}
		defer c.Close()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Do against a mute target = %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Do ignored ctx cancellation")
		}
	})
}

func randHex(t *testing.T) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// TestOtherUserRefused: the target drops connections from other users.
func TestOtherUserRefused(t *testing.T) {
	a := newSide(t, "seg-a", shm.Config{})
	b := &side{name: "seg-b", tr: shm.New(shm.Config{}), tg: &testTarget{}}
	shm.SetServedUID(b.tr, os.Geteuid()+1) // before Listen: the accept loop reads it
	if err := b.tr.Listen(b.name, b.tg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.tr.Close() })
	b.desc.Name = b.name
	b.tr.Publish(&b.desc, &b.rpc)
	r := b.shared(t, 4096)
	p := a.dial(t, b)
	err := p.Do(t.Context(), transfer.Write, make([]byte, 8), r.Addr())
	if !errors.Is(err, shm.ErrPeerGone) {
		t.Fatalf("Do from another user = %v, want ErrPeerGone", err)
	}
	if s := b.tr.Stats(); s.Refused != 1 || s.Accepted != 0 || s.FDRequests != 0 {
		t.Fatalf("stats %+v: want one refused connection and no request", s)
	}
}

func TestInvalidArguments(t *testing.T) {
	a, b := newSide(t, "seg-a", shm.Config{}), newSide(t, "seg-b", shm.Config{})
	r := b.shared(t, 4096)
	p := a.dial(t, b)
	if err := p.Do(t.Context(), transfer.Write, nil, r.Addr()); !errors.Is(err, transfer.ErrInvalidArgument) {
		t.Errorf("empty request = %v", err)
	}
	if err := p.Do(t.Context(), 7, make([]byte, 1), r.Addr()); !errors.Is(err, transfer.ErrInvalidArgument) {
		t.Errorf("bad opcode = %v", err)
	}
	if s := b.tr.Stats(); s.Accepted != 0 {
		t.Errorf("invalid requests reached the target: %+v", s)
	}
}

// rawClient speaks the wire protocol directly, bypassing the peer's checks.
type rawClient struct {
	t *testing.T
	c *net.UnixConn
}

func dialRaw(t *testing.T, addr string) *rawClient {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: addr, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawClient{t: t, c: c}
}

func (rc *rawClient) send(pkt []byte) {
	if _, err := rc.c.Write(pkt); err != nil {
		rc.t.Fatal(err)
	}
}

func request(id, addr, length uint64) []byte {
	b := make([]byte, 32)
	binary.LittleEndian.PutUint32(b[0:], 0x4D435348)
	b[4], b[5] = 1, 1
	binary.LittleEndian.PutUint64(b[8:], id)
	binary.LittleEndian.PutUint64(b[16:], addr)
	binary.LittleEndian.PutUint64(b[24:], length)
	return b
}

// recv returns (status, id, base, size, fds) of one reply, or ok false at
// EOF.
func (rc *rawClient) recv() (status uint32, id, base, size uint64, fds []int, ok bool) {
	in := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := rc.c.ReadMsgUnix(in, oob)
	if err != nil || n == 0 {
		return 0, 0, 0, 0, nil, false
	}
	if n != 32 || binary.LittleEndian.Uint32(in) != 0x4D435348 {
		rc.t.Fatalf("reply of %d bytes, magic %#x", n, binary.LittleEndian.Uint32(in))
	}
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			rc.t.Fatal(err)
		}
		for i := range msgs {
			got, err := unix.ParseUnixRights(&msgs[i])
			if err != nil {
				rc.t.Fatal(err)
			}
			fds = append(fds, got...)
		}
	}
	return binary.LittleEndian.Uint32(in[4:]), binary.LittleEndian.Uint64(in[8:]),
		binary.LittleEndian.Uint64(in[16:]), binary.LittleEndian.Uint64(in[24:]), fds, true
}

// TestWireProtocol: the target answers with exactly the buffer and its
// file, refuses bad ranges without a descriptor, and drops connections that
// send garbage while serving others.
func TestWireProtocol(t *testing.T) {
	b := newSide(t, "seg-b", shm.Config{})
	r := b.shared(t, 1<<16)
	rc := dialRaw(t, b.tr.Addr())

	rc.send(request(42, r.Addr()+100, 50))
	st, id, base, size, fds, ok := rc.recv()
	if !ok || st != 0 || id != 42 || base != r.Addr() || size != 1<<16 || len(fds) != 1 {
		t.Fatalf("reply ok %v status %d id %d base %#x size %d fds %v", ok, st, id, base, size, fds)
	}
	m, err := memory.MapFD(fds[0], int(size))
	if err != nil {
		t.Fatal(err)
	}
	m.Bytes()[100] = 0x5A
	if r.Bytes()[100] != 0x5A {
		t.Fatal("received descriptor does not map the buffer")
	}
	m.Close()

	for _, c := range []struct {
		name       string
		addr, n    uint64
		wantStatus uint32
	}{
		{"straddling end", r.Addr() + 1<<16 - 10, 20, 1},
		{"before start", r.Addr() - 1, 1, 1},
		{"wrapping", r.Addr() + 8, math.MaxUint64 - 4, 1},
		{"zero length", r.Addr(), 0, 1},
	} {
		rc.send(request(7, c.addr, c.n))
		st, id, _, _, fds, ok := rc.recv()
		if !ok || st != c.wantStatus || id != 7 || len(fds) != 0 {
			closeAll(fds)
			t.Errorf("%s: ok %v status %d id %d fds %d, want status %d and no descriptor", c.name, ok, st, id, len(fds), c.wantStatus)
		}
	}

	for _, c := range []struct {
		name string
		pkt  []byte
	}{
		{"short", request(1, r.Addr(), 1)[:31]},
		{"long", append(request(1, r.Addr(), 1), 0)},
		{"bad magic", append([]byte{0, 0, 0, 0}, request(1, r.Addr(), 1)[4:]...)},
		{"bad op", func() []byte { p := request(1, r.Addr(), 1); p[5] = 9; return p }()},
	} {
		bad := dialRaw(t, b.tr.Addr())
		bad.send(c.pkt)
		if _, _, _, _, fds, ok := bad.recv(); ok {
			closeAll(fds)
			t.Errorf("%s: target answered a malformed request", c.name)
		}
	}
	// The first connection is still served.
	rc.send(request(43, r.Addr(), 1))
	if st, id, _, _, fds, ok := rc.recv(); !ok || st != 0 || id != 43 || len(fds) != 1 {
		t.Fatalf("after malformed clients: ok %v status %d id %d fds %d", ok, st, id, len(fds))
	} else {
		closeAll(fds)
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// TestNoDescriptorLeak: a full cycle (listen, map, refuse, close) leaves
// this process with the descriptors it started with.
func TestNoDescriptorLeak(t *testing.T) {
	cycle := func() {
		a, b := shm.New(shm.Config{}), shm.New(shm.Config{})
		ta, tb := &testTarget{}, &testTarget{}
		if err := a.Listen("a", ta); err != nil {
			t.Fatal(err)
		}
		if err := b.Listen("b", tb); err != nil {
			t.Fatal(err)
		}
		r, err := memory.MapShared(1<<16, "leak")
		if err != nil {
			t.Fatal(err)
		}
		tb.add(r.Bytes(), r)
		var d metadata.SegmentDesc
		var rpc metadata.RPCMeta
		b.Publish(&d, &rpc)
		p, err := a.Dial(context.Background(), d, rpc)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if err := p.Do(context.Background(), transfer.Write, buf, r.Addr()); err != nil {
			t.Fatal(err)
		}
		if err := p.Do(context.Background(), transfer.Write, buf, r.Addr()-64); !errors.Is(err, transfer.ErrRejected) {
			t.Fatal(err)
		}
		p.Close()
		b.Close()
		a.Close()
		tb.remove(r.Addr())
		r.Close()
	}
	cycle() // warm up: the runtime's poller opens its own descriptors once
	before := openFDs(t)
	for range 3 {
		cycle()
	}
	if after := openFDs(t); after != before {
		t.Fatalf("%d open descriptors after the cycles, %d before", after, before)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
