package transfer_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/cuda"
	"github.com/mooncake-go/mooncake/core/transfer/shm"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// fakeGPU is an in-memory transfer.DeviceRuntime: "device memory" is
// off-heap memory (package memory, as host buffers) at synthetic addresses
// above the 48-bit user address space (so it can never be mistaken for
// host memory), and every copy checks that the device side really is
// device memory. IPC tokens name an allocation of
// the same fakeGPU, so two engines sharing one fakeGPU are "same host".
type fakeGPU struct {
	devices int

	mu struct {
		sync.Mutex
		allocs map[uint64]*memory.Region // by device base address
		next   uint64
	}
	htod, dtoh, dtod  atomic.Int64
	ipcOpen, ipcClose atomic.Int64
	failOpen          atomic.Bool
	failCopy          atomic.Bool // host<->device copies fail
	noIPC             bool        // ExportIPC unsupported
	// failAt makes the failAt-th host<->device copy from now fail (0: none).
	failAt atomic.Int64
	// onCopy, if set, runs before each host<->device copy ("htod" or
	// "dtoh", the device address and length); its error fails the copy.
	onCopy func(kind string, addr uint64, n int) error

	logMu sync.Mutex
	log   []copyRec // host<->device copies, in order
	// pinned are the host ranges PinHost page-locked and not unpinned.
	pinned map[uint64]int
}

// copyRec is one logged host<->device copy.
type copyRec struct {
	kind   string
	addr   uint64 // device address
	n      int
	pinned bool // the host side lies in a PinHost range
}

// PinHost implements transfer.HostPinner: it records the range.
func (g *fakeGPU) PinHost(b []byte) (func() error, error) {
	a := memory.AddrOf(b)
	g.logMu.Lock()
	if g.pinned == nil {
		g.pinned = map[uint64]int{}
	}
	g.pinned[a] = len(b)
	g.logMu.Unlock()
	return func() error {
		g.logMu.Lock()
		defer g.logMu.Unlock()
		if _, ok := g.pinned[a]; !ok {
			return errors.New("fakegpu: unpin of a range not pinned")
		}
		delete(g.pinned, a)
		return nil
	}, nil
}

// record logs a host<->device copy and reports whether it must fail.
func (g *fakeGPU) record(kind string, addr uint64, host []byte) error {
	if g.onCopy != nil {
		if err := g.onCopy(kind, addr, len(host)); err != nil {
			return err
		}
	}
	if g.failCopy.Load() {
		return errCopy
	}
	if g.failAt.Load() > 0 && g.failAt.Add(-1) == 0 {
		return errCopy
	}
	h := memory.AddrOf(host)
	g.logMu.Lock()
	defer g.logMu.Unlock()
	pinned := false
	for a, n := range g.pinned {
		if h >= a && h+uint64(len(host)) <= a+uint64(n) {
			pinned = true
		}
	}
	g.log = append(g.log, copyRec{kind: kind, addr: addr, n: len(host), pinned: pinned})
	return nil
}

// takeLog returns the copies logged since the previous call.
func (g *fakeGPU) takeLog() []copyRec {
	g.logMu.Lock()
	defer g.logMu.Unlock()
	l := g.log
	g.log = nil
	return l
}

// pinnedBytes is the total of the ranges pinned now.
func (g *fakeGPU) pinnedBytes() int {
	g.logMu.Lock()
	defer g.logMu.Unlock()
	n := 0
	for _, l := range g.pinned {
		n += l
	}
	return n
}

func newFakeGPU() *fakeGPU {
	g := &fakeGPU{devices: 2}
	g.mu.allocs = map[uint64]*memory.Region{}
	g.mu.next = 1 << 48
	return g
}

// malloc returns the device address of n fresh zero bytes, freed by t's
// cleanup.
func (g *fakeGPU) malloc(t *testing.T, n int) uint64 {
	r, err := memory.Map(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	g.mu.Lock()
	defer g.mu.Unlock()
	a := g.mu.next
	g.mu.allocs[a] = r
	g.mu.next += 1 << 36
	return a
}

// mem returns the device bytes [addr, addr+n), or an error when they are
// not inside one allocation.
func (g *fakeGPU) mem(addr, n uint64) ([]byte, uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for base, r := range g.mu.allocs {
		b := r.Bytes()
		if addr >= base && addr-base < uint64(len(b)) && n <= uint64(len(b))-(addr-base) {
			return b[addr-base : addr-base+n], base, nil
		}
	}
	return nil, 0, fmt.Errorf("fakegpu: [%#x,+%d) is not device memory", addr, n)
}

func (g *fakeGPU) CheckDevice(dev int) error {
	if dev < 0 || dev >= g.devices {
		return fmt.Errorf("%w: fakegpu: device %d", transfer.ErrInvalidArgument, dev)
	}
	return nil
}

var errCopy = errors.New("fakegpu: copy failed")

func (g *fakeGPU) CopyHtoD(dev int, dst uint64, src []byte) error {
	if err := g.record("htod", dst, src); err != nil {
		return err
	}
	d, _, err := g.mem(dst, uint64(len(src)))
	if err != nil {
		return err
	}
	g.htod.Add(1)
	copy(d, src)
	return nil
}

func (g *fakeGPU) CopyDtoH(dev int, dst []byte, src uint64) error {
	if err := g.record("dtoh", src, dst); err != nil {
		return err
	}
	s, _, err := g.mem(src, uint64(len(dst)))
	if err != nil {
		return err
	}
	g.dtoh.Add(1)
	copy(dst, s)
	return nil
}

func (g *fakeGPU) CopyDtoD(dstDev int, dst uint64, srcDev int, src uint64, n uint64) error {
	d, _, err := g.mem(dst, n)
	if err != nil {
		return err
	}
	s, _, err := g.mem(src, n)
	if err != nil {
		return err
	}
	g.dtod.Add(1)
	copy(d, s)
	return nil
}

func (g *fakeGPU) ExportIPC(dev int, addr, length uint64) (string, error) {
	if g.noIPC {
		return "", fmt.Errorf("%w: fakegpu: no IPC", transfer.ErrUnsupported)
	}
	_, base, err := g.mem(addr, length)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("fake:%d:%d", base, addr-base), nil
}

func (g *fakeGPU) OpenIPC(dev int, tok string) (uint64, func() error, error) {
	if g.failOpen.Load() {
		return 0, nil, errors.New("fakegpu: open refused")
	}
	f := strings.Split(tok, ":")
	if len(f) != 3 || f[0] != "fake" {
		return 0, nil, fmt.Errorf("fakegpu: bad token %q", tok)
	}
	base, _ := strconv.ParseUint(f[1], 10, 64)
	off, _ := strconv.ParseUint(f[2], 10, 64)
	g.ipcOpen.Add(1)
	var once sync.Once
	return base + off, func() error { once.Do(func() { g.ipcClose.Add(1) }); return nil }, nil
}

// countingTransport counts the requests its peers carry, so a test can
// tell the IPC path (no network request) from the network path.
type countingTransport struct {
	transfer.Transport
	calls atomic.Int64
}

func (c *countingTransport) Dial(ctx context.Context, d metadata.SegmentDesc, rpc metadata.RPCMeta) (transfer.Peer, error) {
	p, err := c.Transport.Dial(ctx, d, rpc)
	if err != nil {
		return nil, err
	}
	return &countingPeer{Peer: p, calls: &c.calls}, nil
}

type countingPeer struct {
	transfer.Peer
	calls *atomic.Int64
}

func (p *countingPeer) Do(ctx context.Context, op transfer.Opcode, local []byte, remote uint64) error {
	p.calls.Add(1)
	return p.Peer.Do(ctx, op, local, remote)
}

type node struct {
	e  *transfer.Engine
	tr *countingTransport
}

func newNode(t *testing.T, meta metadata.Store, name, host string, rt transfer.DeviceRuntime, tc tcp.Config) node {
	t.Helper()
	tr := &countingTransport{Transport: tcp.New(tc)}
	e, err := transfer.New(context.Background(), transfer.Config{Name: name, Metadata: meta, Transport: tr, HostID: host, CUDA: rt, RequestTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return node{e: e, tr: tr}
}

func hostRegion(t *testing.T, e *transfer.Engine, n int) *memory.Region {
	t.Helper()
	r, err := memory.Map(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := e.RegisterRegion(context.Background(), r, "cpu:0", true); err != nil {
		t.Fatal(err)
	}
	return r
}

func fillRand(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, r.Uint64())
		b = b[8:]
	}
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func xfer(t *testing.T, e *transfer.Engine, reqs ...transfer.Request) {
	t.Helper()
	if err := e.TransferSync(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
}

func TestRegisterDeviceMemoryNoRuntime(t *testing.T) {
	meta := memmeta.New()
	var failedLoad *cuda.Runtime // what a failed cuda.Load leaves
	for _, tc := range []struct {
		name string
		rt   transfer.DeviceRuntime
	}{
		{"nil", nil},
		{"nil *cuda.Runtime", failedLoad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, meta, "no-gpu-"+strings.ReplaceAll(tc.name, " ", "-"), "h", tc.rt, tcp.Config{})
			err := n.e.RegisterDeviceMemory(context.Background(), 1<<48, 4096, 0, true)
			if !errors.Is(err, transfer.ErrUnsupported) || !strings.Contains(err.Error(), "unsupported: no CUDA runtime") {
				t.Fatalf("RegisterDeviceMemory = %v, want unsupported: no CUDA runtime", err)
			}
			if got := len(n.e.Registry().Buffers()); got != 0 {
				t.Fatalf("%d buffers registered after the failure", got)
			}
		})
	}
}

func TestRegisterLocalMemoryRejectsDeviceLocation(t *testing.T) {
	n := newNode(t, memmeta.New(), "a", "h", newFakeGPU(), tcp.Config{})
	r, err := memory.Map(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	err = n.e.RegisterLocalMemory(context.Background(), r.Bytes(), "cuda:0", true)
	if !errors.Is(err, transfer.ErrInvalidArgument) || !strings.Contains(err.Error(), "RegisterDeviceMemory") {
		t.Fatalf("RegisterLocalMemory(cuda:0) = %v", err)
	}
	if err := n.e.RegisterRegion(context.Background(), r, "cuda:1", false); !errors.Is(err, transfer.ErrInvalidArgument) {
		t.Fatalf("RegisterRegion(cuda:1) = %v", err)
	}
	if err := n.e.RegisterDeviceMemory(context.Background(), 1<<48, 4096, 7, true); !errors.Is(err, transfer.ErrInvalidArgument) {
		t.Fatalf("RegisterDeviceMemory(device 7 of 2) = %v", err)
	}
}

// TestPeerDeviceBufferWithoutRuntime: a peer's descriptor lists a cuda:0
// buffer, but the target process has no CUDA runtime (the buffer is not in
// its registry): requests to it are refused by the target, cleanly, and the
// connection keeps serving host memory.
func TestPeerDeviceBufferWithoutRuntime(t *testing.T) {
	ctx := context.Background()
	meta := memmeta.New()
	a := newNode(t, meta, "a", "host-a", nil, tcp.Config{})
	b := newNode(t, meta, "b", "host-b", nil, tcp.Config{})
	ra, rb := hostRegion(t, a.e, 1<<16), hostRegion(t, b.e, 1<<16)
	desc, err := metadata.GetSegment(ctx, meta, "", "b")
	if err != nil {
		t.Fatal(err)
	}
	const devAddr = 1 << 48
	desc.Buffers = append(desc.Buffers, metadata.BufferDesc{Name: "cuda:0", Addr: devAddr, Length: 1 << 20})
	if err := metadata.PutSegment(ctx, meta, "", *desc); err != nil {
		t.Fatal(err)
	}
	id, err := a.e.OpenSegment(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []transfer.Opcode{transfer.Write, transfer.Read} {
		err := a.e.TransferSync(ctx, []transfer.Request{{Op: op, Source: ra.Addr(), Target: id, TargetOffset: devAddr + 4096, Length: 8192}})
		if !errors.Is(err, transfer.ErrRejected) {
			t.Errorf("%s to a cuda:0 buffer of a target without CUDA = %v, want ErrRejected", op, err)
		}
	}
	fillRand(ra.Bytes(), 1)
	xfer(t, a.e, transfer.Request{Op: transfer.Write, Source: ra.Addr(), Target: id, TargetOffset: rb.Addr(), Length: 1 << 16})
	if !bytes.Equal(ra.Bytes(), rb.Bytes()) {
		t.Fatal("host write after the refusals did not land")
	}
}

// TestDeviceTransfers moves bytes between host and device memory of two
// engines over tcp (different hosts), through CUDA IPC (same host), and
// within one engine, checking every byte through the fake device.
func TestDeviceTransfers(t *testing.T) {
	const size = 4<<20 + 12345 // > one bounce buffer, odd tail
	for _, tc := range []struct {
		name     string
		sameHost bool
		tcp      tcp.Config
		failOpen bool
		noIPC    bool
	}{
		{name: "tcp"},
		{name: "tcp big slices", tcp: tcp.Config{SliceSize: 3 << 20}}, // server bounces in chunks
		{name: "ipc", sameHost: true},
		{name: "ipc open fails", sameHost: true, failOpen: true},
		{name: "no ipc export", sameHost: true, noIPC: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			g := newFakeGPU()
			g.noIPC = tc.noIPC
			g.failOpen.Store(tc.failOpen)
			meta := memmeta.New()
			hostB := "host-b"
			if tc.sameHost {
				hostB = "host-a"
			}
			a := newNode(t, meta, "a", "host-a", g, tc.tcp)
			b := newNode(t, meta, "b", hostB, g, tc.tcp)
			ha, hb := hostRegion(t, a.e, size), hostRegion(t, b.e, size)
			da, db := g.malloc(t, size), g.malloc(t, size+8192)
			if err := a.e.RegisterDeviceMemory(ctx, da, size, 0, true); err != nil {
				t.Fatal(err)
			}
			// Part of an allocation: the IPC token must carry the offset.
			if err := b.e.RegisterDeviceMemory(ctx, db+4096, size, 1, true); err != nil {
				t.Fatal(err)
			}
			db += 4096
			desc, err := metadata.GetSegment(ctx, meta, "", "b")
			if err != nil {
				t.Fatal(err)
			}
			var pub *metadata.BufferDesc
			for i := range desc.Buffers {
				if desc.Buffers[i].Addr == db {
					pub = &desc.Buffers[i]
				}
			}
			if pub == nil || pub.Name != "cuda:1" || pub.Length != size || (pub.IPCHandle == "") != tc.noIPC {
				t.Fatalf("published device buffer = %+v", pub)
			}
			id, err := a.e.OpenSegment(ctx, "b")
			if err != nil {
				t.Fatal(err)
			}
			dev := func(addr uint64) []byte {
				m, _, err := g.mem(addr, size)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			check := func(what string, got, want []byte) {
				t.Helper()
				if !bytes.Equal(got, want) {
					t.Fatalf("%s: bytes differ", what)
				}
			}
			req := func(op transfer.Opcode, src, dst uint64) transfer.Request {
				return transfer.Request{Op: op, Source: src, Target: id, TargetOffset: dst, Length: size}
			}

			// Requests to db go through IPC when ipc, else over tcp;
			// those to hb always over tcp.
			ipc := tc.sameHost && !tc.failOpen && !tc.noIPC
			toDev := func(reqs ...transfer.Request) {
				t.Helper()
				before := a.tr.calls.Load()
				xfer(t, a.e, reqs...)
				if calls := a.tr.calls.Load() - before; (calls == 0) != ipc {
					t.Errorf("%d network requests for %d to the device buffer (IPC path: %t)", calls, len(reqs), ipc)
				}
			}

			fillRand(ha.Bytes(), 1)
			toDev(req(transfer.Write, ha.Addr(), db))
			check("host->device WRITE", dev(db), ha.Bytes())

			fillRand(hb.Bytes(), 2)
			xfer(t, a.e, req(transfer.Read, da, hb.Addr()))
			check("device<-host READ", dev(da), hb.Bytes())

			fillRand(dev(da), 3)
			toDev(req(transfer.Write, da, db))
			check("device->device WRITE", dev(db), dev(da))

			fillRand(dev(db), 4)
			toDev(req(transfer.Read, da, db))
			check("device<-device READ", dev(da), dev(db))

			fillRand(dev(db), 5)
			toDev(req(transfer.Read, ha.Addr(), db))
			check("host<-device READ", ha.Bytes(), dev(db))

			fillRand(dev(da), 6)
			xfer(t, a.e, req(transfer.Write, da, hb.Addr()))
			check("device->host WRITE", hb.Bytes(), dev(da))

			// Many small requests in one batch, both directions.
			const blk = 4096
			fillRand(ha.Bytes(), 7)
			var reqs []transfer.Request
			for i := 0; i < 64; i++ {
				off := uint64(i * 3 * blk)
				reqs = append(reqs,
					transfer.Request{Op: transfer.Write, Source: ha.Addr() + off, Target: id, TargetOffset: db + off, Length: blk},
					transfer.Request{Op: transfer.Read, Source: da + off + blk, Target: id, TargetOffset: db + off + 2*blk, Length: blk})
			}
			toDev(reqs...)
			for i := 0; i < 64; i++ {
				off := i * 3 * blk
				check("batched write", dev(db)[off:off+blk], ha.Bytes()[off:off+blk])
				check("batched read", dev(da)[off+blk:off+2*blk], dev(db)[off+2*blk:off+3*blk])
			}

			// Every host<->device copy on the network path, the
			// initiator's staging and the tcp server's bounce buffer
			// alike, ran from page-locked host memory.
			if !ipc {
				g.logMu.Lock()
				unpinned := 0
				for _, c := range g.log {
					if !c.pinned {
						unpinned++
					}
				}
				n := len(g.log)
				g.logMu.Unlock()
				if n == 0 || unpinned > 0 {
					t.Errorf("%d of %d host<->device copies from pageable memory", unpinned, n)
				}
			}

			// Out of the published buffer: refused before anything moves.
			err = a.e.TransferSync(ctx, []transfer.Request{{Op: transfer.Write, Source: da, Target: id, TargetOffset: db + size - 10, Length: 100}})
			if !errors.Is(err, transfer.ErrAddressNotRegistered) {
				t.Fatalf("out-of-range device write = %v", err)
			}

			if opens := g.ipcOpen.Load(); (opens > 0) != ipc || opens > 1 {
				t.Errorf("IPC opens = %d, want %d", opens, map[bool]int{true: 1}[ipc])
			}
			if err := a.e.CloseSegment(id); err != nil {
				t.Fatal(err)
			}
			if g.ipcClose.Load() != g.ipcOpen.Load() {
				t.Errorf("IPC mappings: %d opened, %d closed after CloseSegment", g.ipcOpen.Load(), g.ipcClose.Load())
			}
		})
	}
}

// TestDeviceLocalSegment copies within one engine between host and device
// buffers with the matching copy kinds.
func TestDeviceLocalSegment(t *testing.T) {
	const size = 1 << 20
	g := newFakeGPU()
	n := newNode(t, memmeta.New(), "a", "h", g, tcp.Config{})
	h := hostRegion(t, n.e, size)
	d1, d2 := g.malloc(t, size), g.malloc(t, size)
	ctx := context.Background()
	if err := n.e.RegisterDeviceMemory(ctx, d1, size, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := n.e.RegisterDeviceMemory(ctx, d2, size, 1, true); err != nil {
		t.Fatal(err)
	}
	m := func(a uint64) []byte { b, _, _ := g.mem(a, size); return b }
	loc := func(op transfer.Opcode, src, dst uint64) transfer.Request {
		return transfer.Request{Op: op, Source: src, Target: transfer.LocalSegment, TargetOffset: dst, Length: size}
	}
	fillRand(h.Bytes(), 1)
	xfer(t, n.e, loc(transfer.Write, h.Addr(), d2))
	if !bytes.Equal(m(d2), h.Bytes()) || g.htod.Load() != 1 {
		t.Fatalf("host->device: equal %t, HtoD copies %d", bytes.Equal(m(d2), h.Bytes()), g.htod.Load())
	}
	xfer(t, n.e, loc(transfer.Write, d1, d2)) // d1 is zero
	if !bytes.Equal(m(d2), make([]byte, size)) || g.dtod.Load() != 1 {
		t.Fatal("device->device")
	}
	fillRand(m(d2), 2)
	xfer(t, n.e, loc(transfer.Read, h.Addr(), d2))
	if !bytes.Equal(h.Bytes(), m(d2)) || g.dtoh.Load() != 1 {
		t.Fatal("host<-device")
	}
	xfer(t, n.e, loc(transfer.Read, d1, d2))
	if !bytes.Equal(m(d1), m(d2)) {
		t.Fatal("device<-device")
	}
	// d1 is local only: not a target, not published.
	err := n.e.TransferSync(ctx, []transfer.Request{loc(transfer.Write, h.Addr(), d1)})
	if !errors.Is(err, transfer.ErrAddressNotRegistered) && !errors.Is(err, transfer.ErrUnsupported) {
		t.Fatalf("write into a local-only device buffer = %v", err)
	}
	if err := n.e.UnregisterLocalMemory(ctx, d2); err != nil {
		t.Fatal(err)
	}
	if err := n.e.TransferSync(ctx, []transfer.Request{loc(transfer.Write, h.Addr(), d2)}); !errors.Is(err, transfer.ErrAddressNotRegistered) {
		t.Fatalf("write into an unregistered device buffer = %v", err)
	}
}

// TestIPCRefresh: after the peer re-registers its device buffer (new IPC
// token), a refresh unmaps the old mapping and the next request maps the
// new one; a buffer dropped from the descriptor is unmapped.
func TestIPCRefresh(t *testing.T) {
	const size = 1 << 16
	ctx := context.Background()
	g := newFakeGPU()
	meta := memmeta.New()
	a := newNode(t, meta, "a", "h", g, tcp.Config{})
	b := newNode(t, meta, "b", "h", g, tcp.Config{})
	ha := hostRegion(t, a.e, size)
	d := g.malloc(t, 2*size)
	if err := b.e.RegisterDeviceMemory(ctx, d, size, 0, true); err != nil {
		t.Fatal(err)
	}
	id, err := a.e.OpenSegment(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	w := transfer.Request{Op: transfer.Write, Source: ha.Addr(), Target: id, TargetOffset: d, Length: size}
	xfer(t, a.e, w)
	if err := b.e.UnregisterLocalMemory(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := b.e.RegisterDeviceMemory(ctx, d, 2*size, 0, true); err != nil { // same address, longer: same token here
		t.Fatal(err)
	}
	if err := a.e.RefreshSegment(ctx, id); err != nil {
		t.Fatal(err)
	}
	xfer(t, a.e, w)
	if g.ipcOpen.Load() != 1 || g.ipcClose.Load() != 0 {
		t.Fatalf("unchanged token: opens %d closes %d", g.ipcOpen.Load(), g.ipcClose.Load())
	}
	if err := b.e.UnregisterLocalMemory(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := b.e.RegisterDeviceMemory(ctx, d+size, size, 0, true); err != nil { // new token (offset)
		t.Fatal(err)
	}
	if err := a.e.RefreshSegment(ctx, id); err != nil {
		t.Fatal(err)
	}
	if g.ipcClose.Load() != 1 {
		t.Fatalf("buffer gone from the descriptor: closes %d, want 1", g.ipcClose.Load())
	}
	fillRand(ha.Bytes(), 9)
	w.TargetOffset = d + size
	xfer(t, a.e, w)
	if m, _, _ := g.mem(d+size, size); !bytes.Equal(m, ha.Bytes()) || g.ipcOpen.Load() != 2 {
		t.Fatalf("write after refresh: equal %t, opens %d", bytes.Equal(m, ha.Bytes()), g.ipcOpen.Load())
	}
	if err := a.e.Close(); err != nil {
		t.Fatal(err)
	}
	if g.ipcClose.Load() != 2 {
		t.Fatalf("after Close: closes %d, want 2", g.ipcClose.Load())
	}
}

// TestDeviceCopyFailureRejected: when the target's device copy fails, the
// tcp target refuses the request (WRITE after draining its payload), and
// the connection keeps serving.
func TestDeviceCopyFailureRejected(t *testing.T) {
	const size = 3 << 20
	ctx := context.Background()
	g := newFakeGPU()
	meta := memmeta.New()
	a := newNode(t, meta, "a", "host-a", nil, tcp.Config{SliceSize: 1 << 20})
	b := newNode(t, meta, "b", "host-b", g, tcp.Config{})
	ha := hostRegion(t, a.e, size)
	d := g.malloc(t, size)
	if err := b.e.RegisterDeviceMemory(ctx, d, size, 0, true); err != nil {
		t.Fatal(err)
	}
	id, err := a.e.OpenSegment(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	g.failCopy.Store(true)
	for _, op := range []transfer.Opcode{transfer.Write, transfer.Read} {
		err := a.e.TransferSync(ctx, []transfer.Request{{Op: op, Source: ha.Addr(), Target: id, TargetOffset: d, Length: size}})
		if !errors.Is(err, transfer.ErrRejected) {
			t.Errorf("%s with failing device copies = %v, want ErrRejected", op, err)
		}
	}
	g.failCopy.Store(false)
	fillRand(ha.Bytes(), 3)
	xfer(t, a.e, transfer.Request{Op: transfer.Write, Source: ha.Addr(), Target: id, TargetOffset: d, Length: size})
	if m, _, _ := g.mem(d, size); !bytes.Equal(m, ha.Bytes()) {
		t.Fatal("write after the refusals did not land")
	}
}

// TestDeviceBehindShm: same-host engines with the shm transport: shm cannot
// share device memory, so requests to a device buffer fall back to tcp,
// while host buffers keep using shm.
func TestDeviceBehindShm(t *testing.T) {
	const size = 1 << 20
	ctx := context.Background()
	g := newFakeGPU()
	meta := memmeta.New()
	mk := func(name string, rt transfer.DeviceRuntime) (*transfer.Engine, *countingTransport) {
		tr := &countingTransport{Transport: tcp.New(tcp.Config{})}
		e, err := transfer.New(ctx, transfer.Config{Name: name, Metadata: meta, Transport: tr, Local: shm.New(shm.Config{}), HostID: "h", CUDA: rt})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e, tr
	}
	a, tra := mk("a", nil) // no runtime: no IPC, host memory only
	b, _ := mk("b", g)
	ha := hostRegion(t, a, size)
	hb, err := memory.MapShared(size, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	if err := b.RegisterRegion(ctx, hb, "cpu:0", true); err != nil {
		t.Fatal(err)
	}
	d := g.malloc(t, size)
	if err := b.RegisterDeviceMemory(ctx, d, size, 0, true); err != nil {
		t.Fatal(err)
	}
	id, err := a.OpenSegment(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	fillRand(ha.Bytes(), 1)
	xfer(t, a, transfer.Request{Op: transfer.Write, Source: ha.Addr(), Target: id, TargetOffset: d, Length: size})
	if m, _, _ := g.mem(d, size); !bytes.Equal(m, ha.Bytes()) {
		t.Fatal("host->device WRITE behind shm: bytes differ")
	}
	if tra.calls.Load() == 0 {
		t.Fatal("device WRITE did not fall back to tcp")
	}
	before := tra.calls.Load()
	xfer(t, a, transfer.Request{Op: transfer.Write, Source: ha.Addr(), Target: id, TargetOffset: hb.Addr(), Length: size})
	if !bytes.Equal(hb.Bytes(), ha.Bytes()) || tra.calls.Load() != before {
		t.Fatalf("host WRITE behind shm: equal %t, tcp requests %d", bytes.Equal(hb.Bytes(), ha.Bytes()), tra.calls.Load()-before)
	}
}

// TestScatterGatherDevice: a scatter-gather request with device pieces
// (taken piece by piece through the device paths) lands every byte where
// it belongs, towards a peer's host buffer and towards a device buffer of
// the local segment.
func TestScatterGatherDevice(t *testing.T) {
	const size = 1 << 20
	ctx := context.Background()
	g := newFakeGPU()
	meta := memmeta.New()
	a := newNode(t, meta, "a", "host-a", g, tcp.Config{})
	b := newNode(t, meta, "b", "host-b", g, tcp.Config{})
	ha, hb := hostRegion(t, a.e, size), hostRegion(t, b.e, size)
	da, dl := g.malloc(t, size), g.malloc(t, size)
	require.NoError(t, a.e.RegisterDeviceMemory(ctx, da, size, 0, false))
	require.NoError(t, a.e.RegisterDeviceMemory(ctx, dl, size, 0, true))
	id, err := a.e.OpenSegment(ctx, "b")
	require.NoError(t, err)
	devA, _, err := g.mem(da, size)
	require.NoError(t, err)
	fillRand(ha.Bytes(), 3)
	fillRand(devA, 4)
	pieces := []transfer.Piece{{Addr: ha.Addr() + 10, Length: 100}, {Addr: da + 7, Length: 5000}, {Addr: ha.Addr() + 1000, Length: 70000}}
	want := append(append(append([]byte(nil), ha.Bytes()[10:110]...), devA[7:5007]...), ha.Bytes()[1000:71000]...)
	n := uint64(len(want))

	xfer(t, a.e, transfer.Request{Op: transfer.Write, Target: id, TargetOffset: hb.Addr() + 64, Length: n, Pieces: pieces})
	require.Equal(t, want, hb.Bytes()[64:64+n], "remote host target")

	xfer(t, a.e, transfer.Request{Op: transfer.Write, Target: transfer.LocalSegment, TargetOffset: dl + 3, Length: n, Pieces: pieces})
	devL, _, err := g.mem(dl, size)
	require.NoError(t, err)
	require.Equal(t, want, devL[3:3+n], "local device target")

	// Read the remote copy back, scattered over other host and device places.
	back := []transfer.Piece{{Addr: da + 200000, Length: 100}, {Addr: ha.Addr() + 300000, Length: 5000}, {Addr: da + 400000, Length: 70000}}
	xfer(t, a.e, transfer.Request{Op: transfer.Read, Target: id, TargetOffset: hb.Addr() + 64, Length: n, Pieces: back})
	got := append(append(append([]byte(nil), devA[200000:200100]...), ha.Bytes()[300000:305000]...), devA[400000:470000]...)
	require.Equal(t, want, got, "scattered read into host and device pieces")
}

// TestHostStagingErrors: a staging buffer needs a size and a runtime.
func TestHostStagingErrors(t *testing.T) {
	var d transfer.DeviceRange // no runtime
	if _, err := d.NewHostStaging(4096); !errors.Is(err, transfer.ErrUnsupported) {
		t.Errorf("NewHostStaging without a runtime = %v, want ErrUnsupported", err)
	}
	if _, err := d.NewHostStaging(0); !errors.Is(err, transfer.ErrInvalidArgument) {
		t.Errorf("NewHostStaging(0) = %v, want ErrInvalidArgument", err)
	}
	var h *transfer.HostStaging
	if err := h.Close(); err != nil {
		t.Errorf("nil Close = %v", err)
	}
}
