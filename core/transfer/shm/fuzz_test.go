package shm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/testutil/sockpair"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// Fuzzing the descriptor wire: what a peer can send a target
// (FuzzShmServe) and what a target can answer a peer (FuzzShmReplies).
// Seeds are the packets a real peer and a real target exchanged through a
// recording proxy.

const (
	fzPage      = 4096
	fzCallLimit = 10 * time.Second
)

// packetTap is a recording proxy for a unixpacket socket: it forwards
// every packet, descriptors included, and keeps a copy of each packet's
// bytes, each way.
type packetTap struct {
	ln     *net.UnixListener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []*net.UnixConn
	up     [][]byte // peer -> target
	down   [][]byte // target -> peer
}

func startPacketTap(tb testing.TB, target string) *packetTap {
	var rnd [8]byte
	rand.Read(rnd[:])
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: "@mooncake-fuzz-tap-" + hex.EncodeToString(rnd[:]), Net: "unixpacket"})
	require.NoError(tb, err)
	p := &packetTap{ln: ln, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			s, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: target, Net: "unixpacket"})
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Add(2)
			go p.pipe(s, c, &p.up)
			go p.pipe(c, s, &p.down)
		}
	}()
	return p
}

func (p *packetTap) pipe(dst, src *net.UnixConn, log *[][]byte) {
	defer p.wg.Done()
	buf := make([]byte, 1024)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := src.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			dst.Close()
			return
		}
		fds := receivedFDs(oob[:oobn])
		var rights []byte
		if len(fds) > 0 {
			rights = unix.UnixRights(fds...)
		}
		p.mu.Lock()
		*log = append(*log, bytes.Clone(buf[:n]))
		p.mu.Unlock()
		_, _, err = dst.WriteMsgUnix(buf[:n], rights, nil)
		closeFDs(fds)
		if err != nil {
			return
		}
	}
}

// close stops the tap and returns the packets each way.
func (p *packetTap) close() (up, down [][]byte) {
	p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	p.wg.Wait()
	return p.up, p.down
}

// recordShm runs a real peer against a real target (a registry with one
// memfd-backed and one anonymous buffer) through a packetTap and returns
// the packets, with the addresses of requests made relative to the
// memfd buffer (see fzRegions).
func recordShm(tb testing.TB) (up, down [][]byte) {
	shared, err := memory.MapShared(2*fzPage, "fuzz")
	require.NoError(tb, err)
	defer shared.Close()
	anon, err := memory.Map(fzPage)
	require.NoError(tb, err)
	defer anon.Close()
	var reg transfer.Registry
	_, err = reg.AddRegion(shared, "cpu:0", true)
	require.NoError(tb, err)
	_, err = reg.AddRegion(anon, "cpu:0", true)
	require.NoError(tb, err)
	tr := New(Config{})
	require.NoError(tb, tr.Listen("fuzz", &reg))
	defer tr.Close()
	tap := startPacketTap(tb, tr.Addr())
	p, err := tr.Dial(context.Background(), metadata.SegmentDesc{Name: "fuzz", Protocol: Protocol},
		metadata.RPCMeta{IPOrHostName: AddrPrefix + tap.ln.Addr().String()})
	require.NoError(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), fzCallLimit)
	defer cancel()
	buf := make([]byte, fzPage)
	require.NoError(tb, p.Do(ctx, transfer.Write, buf, shared.Addr()+8))
	require.ErrorIs(tb, p.Do(ctx, transfer.Read, buf, anon.Addr()), transfer.ErrRejected)
	require.ErrorIs(tb, p.Do(ctx, transfer.Read, buf, 4096), transfer.ErrRejected)
	require.NoError(tb, p.Close())
	up, down = tap.close()
	require.Len(tb, up, 3)
	for _, pkt := range up {
		if req, err := decodeRequest(pkt); err == nil && req.addr >= shared.Addr() && req.addr < shared.Addr()+2*fzPage {
			binary.LittleEndian.PutUint64(pkt[16:], fzSelector<<56|(req.addr-shared.Addr()))
		}
	}
	return up, down
}

// fzSelector marks a fuzzed request address as relative: an address whose
// top byte is fzSelector+i stands for region i's first byte plus its low
// 56 bits. Any other address is used as it is.
const fzSelector = 0xF0

// fzRegions is the target a fuzzed connection is served against, by
// selector index: what each region is and the status a request inside it
// must get.
type fzRegion struct {
	base, size uint64
	status     uint32
}

// liar is an FDSource in front of the registry that answers for one
// extra buffer with a descriptor the target must refuse to hand out (a
// file larger than the buffer, or one without seals).
type liar struct {
	*transfer.Registry
	base     uint64
	size     uint64
	big      *memory.Region // 2*size bytes, sealed
	unsealed int            // size bytes, no seals
}

func (l *liar) FDFor(addr, n uint64) (int, uint64, uint64, error) {
	switch {
	case covers(l.base, l.size, addr, n):
		fd, err := l.big.DupFD()
		return fd, l.base, l.size, err
	case covers(l.base+l.size, l.size, addr, n):
		fd, err := unix.FcntlInt(uintptr(l.unsealed), unix.F_DUPFD_CLOEXEC, 0)
		return fd, l.base + l.size, l.size, err
	}
	return l.Registry.FDFor(addr, n)
}

// memfd returns a memory file of size bytes carrying seals (0: none).
func memfd(tb testing.TB, size int, seals int) int {
	fd, err := unix.MemfdCreate("fuzz", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	require.NoError(tb, err)
	require.NoError(tb, unix.Ftruncate(fd, int64(size)))
	if seals != 0 {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals)
		require.NoError(tb, err)
	}
	return fd
}

// fzServeTarget builds the regions: 0 a memfd buffer (handed out), 1 an
// anonymous one and 2 one registered as bytes (not shareable), 3 a
// memfd buffer that is not remote-accessible, 4 and 5 the liar's (refused).
func fzServeTarget(tb testing.TB) (FDSource, []fzRegion) {
	var regions []fzRegion
	reg := &transfer.Registry{}
	mk := func(shared bool) *memory.Region {
		var r *memory.Region
		var err error
		if shared {
			r, err = memory.MapShared(2*fzPage, "fuzz")
		} else {
			r, err = memory.Map(2 * fzPage)
		}
		require.NoError(tb, err)
		tb.Cleanup(func() { r.Close() })
		return r
	}
	a := mk(true)
	_, err := reg.AddRegion(a, "cpu:0", true)
	require.NoError(tb, err)
	regions = append(regions, fzRegion{a.Addr(), 2 * fzPage, statusOK})
	b := mk(false)
	_, err = reg.AddRegion(b, "cpu:0", true)
	require.NoError(tb, err)
	regions = append(regions, fzRegion{b.Addr(), 2 * fzPage, statusNotShared})
	c := mk(true)
	_, err = reg.Add(c.Bytes()[:fzPage], "cpu:0", true)
	require.NoError(tb, err)
	regions = append(regions, fzRegion{c.Addr(), fzPage, statusNotShared})
	d := mk(true)
	_, err = reg.AddRegion(d, "cpu:0", false)
	require.NoError(tb, err)
	regions = append(regions, fzRegion{d.Addr(), 2 * fzPage, statusNotRegistered})
	big, err := memory.MapShared(2*fzPage, "fuzz-big")
	require.NoError(tb, err)
	tb.Cleanup(func() { big.Close() })
	unsealed := memfd(tb, fzPage, 0)
	tb.Cleanup(func() { unix.Close(unsealed) })
	l := &liar{Registry: reg, base: 1 << 46, size: fzPage, big: big, unsealed: unsealed}
	regions = append(regions, fzRegion{l.base, fzPage, statusRefused}, fzRegion{l.base + fzPage, fzPage, statusRefused})
	return l, regions
}

// resolveAddr turns a fuzzed address into an absolute one (see
// fzSelector).
func resolveAddr(addr uint64, regions []fzRegion) uint64 {
	if i := int(addr>>56) - fzSelector; i >= 0 && i < len(regions) {
		return regions[i].base + addr&(1<<56-1)
	}
	return addr
}

// splitPackets cuts fuzz input into packets: a length byte, then that many
// bytes (the last packet may be shorter).
func splitPackets(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		n := min(int(data[0]), len(data)-1)
		out = append(out, data[1:1+n])
		data = data[1+n:]
	}
	return out
}

func joinPackets(pkts [][]byte) []byte {
	var out []byte
	for _, p := range pkts {
		out = append(out, byte(len(p)))
		out = append(out, p...)
	}
	return out
}

// FuzzShmServe sends a target's control connection arbitrary packets and
// checks every reply against the reference: one reply per well-formed
// request, in order, until the first malformed packet ends the
// connection; the status the request's region calls for; a descriptor
// only with status OK, and then one that is exactly the region's sealed
// memory file; and the connection served to its end within fzCallLimit.
func FuzzShmServe(f *testing.F) {
	up, _ := recordShm(f)
	f.Add(joinPackets(up))
	req := func(id, addr, n uint64) []byte {
		var b [msgLen]byte
		request{id: id, addr: addr, length: n}.encode(&b)
		return b[:]
	}
	for i := range 6 {
		f.Add(joinPackets([][]byte{req(uint64(i+1), uint64(fzSelector+i)<<56|8, 16)}))
	}
	f.Add(joinPackets([][]byte{req(1, fzSelector<<56, 0), req(2, fzSelector<<56|(2*fzPage-1), 2), append(req(3, 0, 1), 0)}))
	f.Add(joinPackets([][]byte{req(1, fzSelector<<56, 1)[:31]}))
	f.Add(append(joinPackets([][]byte{req(9, fzSelector<<56, 1)}), 0))

	src, regions := fzServeTarget(f)
	tr := New(Config{})
	f.Fuzz(func(t *testing.T, data []byte) {
		pkts := splitPackets(data)
		var reqs []request // the well-formed requests before the first malformed packet
		for _, p := range pkts {
			if len(p) != msgLen {
				break
			}
			p = bytes.Clone(p)
			binary.LittleEndian.PutUint64(p[16:], resolveAddr(binary.LittleEndian.Uint64(p[16:]), regions))
			r, err := decodeRequest(p)
			if err != nil {
				break
			}
			reqs = append(reqs, r)
		}
		cli, srv := sockpair.NewPacket(t)
		defer cli.Close()
		go func() {
			for _, p := range pkts {
				if len(p) == msgLen {
					p = bytes.Clone(p)
					binary.LittleEndian.PutUint64(p[16:], resolveAddr(binary.LittleEndian.Uint64(p[16:]), regions))
				}
				if _, _, err := cli.WriteMsgUnix(p, nil, nil); err != nil {
					return
				}
			}
			cli.CloseWrite()
		}()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer srv.Close()
			tr.serve(srv, src)
		}()
		var in [msgLen + 1]byte
		oob := make([]byte, unix.CmsgSpace(4*4))
		for k := 0; ; k++ {
			n, oobn, _, _, err := cli.ReadMsgUnix(in[:], oob)
			fds := receivedFDs(oob[:oobn])
			if err != nil || n == 0 {
				require.Empty(t, fds)
				if errors.Is(err, unix.ECONNRESET) {
					// The target dropped the connection with packets
					// unread: the kernel resets it, and replies not yet
					// read are lost.
					require.LessOrEqual(t, k, len(reqs), "replies")
				} else {
					require.Equal(t, len(reqs), k, "replies")
				}
				break
			}
			require.Less(t, k, len(reqs), "a reply with no request")
			resp, err := decodeResponse(in[:n])
			require.NoError(t, err)
			r := reqs[k]
			require.Equal(t, r.id, resp.id)
			want := uint32(statusNotRegistered)
			var hit fzRegion
			for _, g := range regions {
				if covers(g.base, g.size, r.addr, r.length) {
					want, hit = g.status, g
				}
			}
			require.Equal(t, want, resp.status, "request %+v", r)
			if resp.status != statusOK {
				require.Empty(t, fds, "descriptors with status %d", resp.status)
				continue
			}
			require.Len(t, fds, 1)
			require.Equal(t, hit.base, resp.base)
			require.Equal(t, hit.size, resp.size)
			require.NoError(t, sealedFile(fds[0], hit.size, targetSeals))
			closeFDs(fds)
		}
		select {
		case <-done:
		case <-time.After(fzCallLimit):
			t.Fatalf("serve did not return within %v", fzCallLimit)
		}
	})
}

// fzFakeTarget answers every descriptor request on its socket with one
// fuzzed reply: the reply packet (id, status, base, size from the fuzz
// input), optionally a descriptor of a memory file whose size and seals
// are fuzzed too, and optionally a second, spurious reply.
type fzFakeTarget struct {
	ln   *net.UnixListener
	wg   sync.WaitGroup
	mu   sync.Mutex
	plan fzPlan
}

type fzPlan struct {
	status     uint32
	idDelta    uint64
	base, size uint64
	pkt        []byte // sent instead of the encoded reply when non-empty
	fds        []int  // attached descriptors (the plan owns them)
	twice      bool   // send the reply a second time
}

func startFakeTarget(tb testing.TB) *fzFakeTarget {
	var rnd [8]byte
	rand.Read(rnd[:])
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: "@mooncake-fuzz-target-" + hex.EncodeToString(rnd[:]), Net: "unixpacket"})
	require.NoError(tb, err)
	ft := &fzFakeTarget{ln: ln}
	ft.wg.Add(1)
	go func() {
		defer ft.wg.Done()
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			ft.wg.Add(1)
			go func() {
				defer ft.wg.Done()
				defer c.Close()
				var in [msgLen]byte
				for {
					n, _, _, _, err := c.ReadMsgUnix(in[:], nil)
					if err != nil || n == 0 {
						return
					}
					req, err := decodeRequest(in[:n])
					if err != nil {
						return
					}
					ft.mu.Lock()
					p := ft.plan
					ft.mu.Unlock()
					var out [msgLen]byte
					response{status: p.status, id: req.id + p.idDelta, base: p.base, size: p.size}.encode(&out)
					pkt := out[:]
					if len(p.pkt) > 0 {
						pkt = p.pkt
					}
					var oob []byte
					if len(p.fds) > 0 {
						oob = unix.UnixRights(p.fds...)
					}
					for range 1 + btoi(p.twice) {
						if _, _, err := c.WriteMsgUnix(pkt, oob, nil); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	tb.Cleanup(func() { ln.Close(); ft.wg.Wait() })
	return ft
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// FuzzShmReplies answers a peer's descriptor request with arbitrary
// replies (status, id, bounds, a memory file of fuzzed size and seals, a
// malformed packet, a duplicate) and checks that the request ends within
// fzCallLimit without a panic or a fault, and that a successful READ or
// WRITE moved exactly the bytes of the file at the request's offset: a
// peer never maps what does not cover the request, nor a file the target
// could shrink under it.
func FuzzShmReplies(f *testing.F) {
	_, down := recordShm(f)
	for _, pkt := range down {
		if resp, err := decodeResponse(pkt); err == nil {
			f.Add(resp.status, uint64(0), uint64(8), resp.size, uint32(2*fzPage), uint8(0b011), uint16(64), []byte(nil))
		}
	}
	f.Add(uint32(statusOK), uint64(0), uint64(0), uint64(fzPage), uint32(fzPage), uint8(0b001), uint16(fzPage), []byte(nil))
	f.Add(uint32(statusOK), uint64(0), uint64(0), uint64(2*fzPage), uint32(fzPage), uint8(0b011), uint16(100), []byte(nil))
	f.Add(uint32(statusOK), uint64(0), uint64(1<<63), uint64(1<<63), uint32(fzPage), uint8(0b011), uint16(1), []byte(nil))
	f.Add(uint32(statusOK), uint64(1), uint64(0), uint64(fzPage), uint32(fzPage), uint8(0b011), uint16(1), []byte(nil))
	f.Add(uint32(7), uint64(0), uint64(0), uint64(fzPage), uint32(fzPage), uint8(0b10011), uint16(1), []byte(nil))
	f.Add(uint32(statusOK), uint64(0), uint64(0), uint64(fzPage), uint32(fzPage), uint8(0b1011), uint16(1), []byte("MCSH"))

	ft := startFakeTarget(f)
	tr := New(Config{DialTimeout: fzCallLimit})
	const fileAddr = 1 << 40 // where the fake target claims its buffer lives
	f.Fuzz(func(t *testing.T, status uint32, idDelta, baseBack, size uint64, fileSize uint32, mode uint8, n uint16, pkt []byte) {
		// mode bits: 0 attach a descriptor, 1 seal it against shrinking,
		// 2 against growing, 3 send pkt instead of the reply, 4 send the
		// reply twice, 5 attach a second descriptor, 6 READ (else WRITE).
		fsize := int(fileSize%(4*fzPage)) + 1
		var fds []int
		var file *memory.Region
		if mode&1 != 0 {
			seals := 0
			if mode&2 != 0 {
				seals |= unix.F_SEAL_SHRINK
			}
			if mode&4 != 0 {
				seals |= unix.F_SEAL_GROW
			}
			fd := memfd(t, fsize, seals)
			// The fake target's own view of the file, to check what moved.
			dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
			require.NoError(t, err)
			file, err = memory.MapFD(dup, fsize)
			require.NoError(t, err)
			defer file.Close()
			for i := range file.Bytes() {
				file.Bytes()[i] = byte(i*5 + 1)
			}
			fds = append(fds, fd)
			if mode&32 != 0 {
				fds = append(fds, memfd(t, fzPage, unix.F_SEAL_SHRINK))
			}
		}
		defer closeFDs(fds)
		addr := uint64(fileAddr)
		plan := fzPlan{status: status, idDelta: idDelta, base: addr - baseBack, size: size, fds: fds, twice: mode&16 != 0}
		if mode&8 != 0 {
			plan.pkt = pkt
			if len(plan.pkt) == 0 {
				plan.pkt = []byte{0}
			}
		}
		ft.mu.Lock()
		ft.plan = plan
		ft.mu.Unlock()

		p, err := tr.Dial(context.Background(), metadata.SegmentDesc{Name: "fuzz", Protocol: Protocol},
			metadata.RPCMeta{IPOrHostName: AddrPrefix + ft.ln.Addr().String()})
		require.NoError(t, err)
		defer p.Close()
		local := make([]byte, int(n)%(2*fzPage)+1)
		for i := range local {
			local[i] = byte(i*3 + 2)
		}
		want := bytes.Clone(local)
		op := transfer.Write
		if mode&64 != 0 {
			op = transfer.Read
		}
		ctx, cancel := context.WithTimeout(context.Background(), fzCallLimit)
		defer cancel()
		err = p.Do(ctx, op, local, addr)
		require.False(t, errors.Is(err, context.DeadlineExceeded), "request did not end within %v: %v", fzCallLimit, err)
		if err != nil {
			if op == transfer.Read {
				require.Equal(t, want, local, "a failed READ changed the caller's buffer")
			}
			return
		}
		// Success: the reply covered the request with a file of exactly
		// its size that cannot shrink, and the bytes moved at the
		// request's offset in that file.
		require.NotNil(t, file, "success without a descriptor")
		require.True(t, covers(plan.base, plan.size, addr, uint64(len(local))), "success with a reply [%#x,+%d) that does not cover the request", plan.base, plan.size)
		require.Equal(t, uint64(fsize), plan.size, "success mapping a file of %d bytes as %d", fsize, plan.size)
		require.NotZero(t, mode&2, "success with a file that can shrink")
		off := addr - plan.base
		if op == transfer.Read {
			require.Equal(t, file.Bytes()[off:off+uint64(len(local))], local)
		} else {
			require.Equal(t, want, file.Bytes()[off:off+uint64(len(local))])
		}
		require.NoError(t, p.Close())
	})
}
