package cuda

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebitengine/purego"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// ipcPath says whether requests to a same-host peer's device buffer must
// (ipcYes) or must not (ipcNo) bypass the network; ipcAny asserts nothing
// (a real GPU refuses to open a handle exported by the same process, so
// two engines in one test process fall back to tcp).
type ipcPath int

const (
	ipcNo ipcPath = iota
	ipcYes
	ipcAny
)

// engineCase is one run of two engines, A and B, over tcp with device
// buffers on devA and devB.
type engineCase struct {
	name       string
	devA, devB int
	size       int
	sameHost   bool
	ipc        ipcPath
}

// countingTransport counts the requests its peers carry over the network.
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

func newEngine(t *testing.T, meta metadata.Store, name, host string, rt transfer.DeviceRuntime) (*transfer.Engine, *countingTransport) {
	t.Helper()
	tr := &countingTransport{Transport: tcp.New(tcp.Config{})}
	e, err := transfer.New(context.Background(), transfer.Config{Name: name, Metadata: meta, Transport: tr, HostID: host, CUDA: rt, RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, tr
}

func hostBuffer(t *testing.T, e *transfer.Engine, n int) *memory.Region {
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

func deviceBuffer(t *testing.T, rt *Runtime, dev, n int) DevicePtr {
	t.Helper()
	p, err := rt.Malloc(dev, uint64(n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Free(p) })
	return p
}

func seeded(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	i := 0
	for ; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for ; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// runEngines moves bytes host->device, device->host and device->device
// between two engines and checks every byte by copying the device memory
// back through rt. B's device buffer starts 4 KiB into its allocation, so
// the IPC token's offset is exercised.
func runEngines(t *testing.T, rt *Runtime, tc engineCase) {
	ctx := context.Background()
	meta := memmeta.New()
	hostB := "host-b"
	if tc.sameHost {
		hostB = "host-a"
	}
	a, ta := newEngine(t, meta, "a", "host-a", rt)
	b, _ := newEngine(t, meta, "b", hostB, rt)
	n := tc.size
	ha, hb := hostBuffer(t, a, n), hostBuffer(t, b, n)
	da := deviceBuffer(t, rt, tc.devA, n)
	dbAlloc := deviceBuffer(t, rt, tc.devB, n+4096)
	db := DevicePtr{Addr: dbAlloc.Addr + 4096, Device: tc.devB}
	if err := a.RegisterDeviceMemory(ctx, uint64(da.Addr), uint64(n), da.Device, true); err != nil {
		t.Fatal(err)
	}
	if err := b.RegisterDeviceMemory(ctx, uint64(db.Addr), uint64(n), db.Device, true); err != nil {
		t.Fatal(err)
	}
	id, err := a.OpenSegment(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	devBytes := func(p DevicePtr) []byte {
		t.Helper()
		out := make([]byte, n)
		if err := rt.MemcpyDtoH(out, p); err != nil {
			t.Fatal(err)
		}
		return out
	}
	setDev := func(p DevicePtr, seed uint64) []byte {
		t.Helper()
		v := seeded(n, seed)
		if err := rt.MemcpyHtoD(p, v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	check := func(what string, got, want []byte) {
		t.Helper()
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: bytes differ", what)
		}
	}
	run := func(op transfer.Opcode, src, dst uint64, toDeviceB bool) {
		t.Helper()
		before := ta.calls.Load()
		if err := a.TransferSync(ctx, []transfer.Request{{Op: op, Source: src, Target: id, TargetOffset: dst, Length: uint64(n)}}); err != nil {
			t.Fatal(err)
		}
		calls := ta.calls.Load() - before
		if toDeviceB && (tc.ipc == ipcYes && calls != 0 || tc.ipc == ipcNo && calls == 0) {
			t.Errorf("%s to B's device buffer: %d network requests (IPC %v)", op, calls, tc.ipc)
		}
	}

	copy(ha.Bytes(), seeded(n, 1))
	run(transfer.Write, ha.Addr(), uint64(db.Addr), true)
	check("host->device WRITE", devBytes(db), ha.Bytes())

	copy(hb.Bytes(), seeded(n, 2))
	run(transfer.Read, uint64(da.Addr), hb.Addr(), false)
	check("device<-host READ", devBytes(da), hb.Bytes())

	want := setDev(da, 3)
	run(transfer.Write, uint64(da.Addr), uint64(db.Addr), true)
	check("device->device WRITE", devBytes(db), want)

	want = setDev(db, 4)
	run(transfer.Read, uint64(da.Addr), uint64(db.Addr), true)
	check("device<-device READ", devBytes(da), want)

	want = setDev(db, 5)
	run(transfer.Read, ha.Addr(), uint64(db.Addr), true)
	check("host<-device READ", ha.Bytes(), want)

	want = setDev(da, 6)
	run(transfer.Write, uint64(da.Addr), hb.Addr(), false)
	check("device->host WRITE", hb.Bytes(), want)

	// The local segment: host <-> device and device <-> device in A.
	dc := deviceBuffer(t, rt, tc.devB, 4096)
	if err := a.RegisterDeviceMemory(ctx, uint64(dc.Addr), 4096, dc.Device, true); err != nil {
		t.Fatal(err)
	}
	local := func(op transfer.Opcode, src, dst uint64) {
		t.Helper()
		if err := a.TransferSync(ctx, []transfer.Request{{Op: op, Source: src, Target: transfer.LocalSegment, TargetOffset: dst, Length: 4096}}); err != nil {
			t.Fatal(err)
		}
	}
	copy(ha.Bytes()[:4096], seeded(4096, 7))
	local(transfer.Write, ha.Addr(), uint64(dc.Addr))
	local(transfer.Read, uint64(da.Addr), uint64(dc.Addr))
	check("local host->device->device", devBytes(da)[:4096], ha.Bytes()[:4096])
	setDev(da, 8)
	local(transfer.Read, ha.Addr()+4096, uint64(da.Addr))
	check("local device->host", ha.Bytes()[4096:8192], devBytes(da)[:4096])

	if err := a.CloseSegment(id); err != nil {
		t.Fatal(err)
	}
}

// fakeHooks are the stand-in library's test hooks.
type fakeHooks struct {
	count       func(c int32) int64 // 5 IPC opens, 6 IPC closes, 8 pinned copies, 9 host registrations
	failIpcOpen func(on int32)
}

func fakeWithHooks(t *testing.T) (*Runtime, fakeHooks) {
	rt, h := fakeRuntime(t)
	var f fakeHooks
	purego.RegisterLibFunc(&f.count, h, "fakecudartCount")
	purego.RegisterLibFunc(&f.failIpcOpen, h, "fakecudartFailIpcOpen")
	return rt, f
}

// TestFakeEngines runs two engines on the stand-in runtime: its "device"
// memory is host memory, but cudaMemcpy checks every copy's kind against
// its allocations, so a wrong kind fails the transfer.
func TestFakeEngines(t *testing.T) {
	rt, f := fakeWithHooks(t)
	for _, tc := range []engineCase{
		{name: "tcp", devA: 0, devB: 1, size: 4<<20 + 777},
		{name: "ipc", devA: 1, devB: 0, size: 4<<20 + 777, sameHost: true, ipc: ipcYes},
		{name: "ipc open fails", devA: 0, devB: 0, size: 1 << 20, sameHost: true, ipc: ipcNo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fail := tc.sameHost && tc.ipc == ipcNo
			if fail {
				f.failIpcOpen(1)
				defer f.failIpcOpen(0)
			}
			opens, closes, pinned := f.count(5), f.count(6), f.count(8)
			runEngines(t, rt, tc)
			dOpen, dClose := f.count(5)-opens, f.count(6)-closes
			// Over tcp the device side stages through the engine's pinned
			// slices: at least the 3 slices of one 4 MiB+ request.
			if dp := f.count(8) - pinned; tc.ipc == ipcNo && !tc.sameHost && dp < 3 {
				t.Errorf("%d host<->device copies from pinned memory, want >= 3", dp)
			}
			if wantOpen := map[bool]int64{true: 1}[tc.ipc == ipcYes]; dOpen != wantOpen || dClose != dOpen {
				t.Errorf("IPC handles: %d opened, %d closed; want %d each", dOpen, dClose, wantOpen)
			}
		})
	}
}

func TestIPCToken(t *testing.T) {
	var h IpcMemHandle
	for i := range h.Reserved {
		h.Reserved[i] = byte(i * 3)
	}
	hx := fmt.Sprintf("%x", h.Reserved[:])
	for _, tc := range []struct {
		tok string
		off uint64
		ok  bool
	}{
		{hx, 0, true},
		{hx + "@4096", 4096, true},
		{hx[:126], 0, false},
		{hx + "@x", 0, false},
		{strings.Repeat("zz", 64), 0, false},
		{"", 0, false},
	} {
		got, off, err := ParseIPCToken(tc.tok)
		if !tc.ok {
			if !errors.Is(err, transfer.ErrInvalidArgument) {
				t.Errorf("ParseIPCToken(%.20q) = %v, want ErrInvalidArgument", tc.tok, err)
			}
			continue
		}
		if err != nil || got != h || off != tc.off {
			t.Errorf("ParseIPCToken(%.20q...) = %x, %d, %v", tc.tok, got.Reserved[:4], off, err)
		}
	}
	var nilRT *Runtime
	if _, _, err := nilRT.OpenIPC(0, hx); !errors.Is(err, transfer.ErrUnsupported) {
		t.Errorf("nil runtime OpenIPC = %v", err)
	}
	if err := nilRT.CopyHtoD(0, 1, []byte{1}); !errors.Is(err, transfer.ErrUnsupported) || !strings.Contains(err.Error(), "unsupported: no CUDA runtime") {
		t.Errorf("nil runtime CopyHtoD = %v", err)
	}
}

// TestFakeExportIPC checks the allocation-base lookup behind ExportIPC.
func TestFakeExportIPC(t *testing.T) {
	rt, _ := fakeRuntime(t)
	p := deviceBuffer(t, rt, 0, 1<<16)
	tok, err := rt.ExportIPC(0, uint64(p.Addr)+100, 1000)
	if err != nil || !strings.HasSuffix(tok, "@100") {
		t.Fatalf("ExportIPC(+100) = %q, %v", tok, err)
	}
	got, unmap, err := rt.OpenIPC(1, tok)
	if err != nil || got != uint64(p.Addr)+100 {
		t.Fatalf("OpenIPC = %#x, %v; want %#x", got, err, p.Addr+100)
	}
	if err := unmap(); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.ExportIPC(0, uint64(p.Addr)+100, 1<<16); !errors.Is(err, transfer.ErrInvalidArgument) {
		t.Errorf("ExportIPC past the allocation = %v", err)
	}
	host := make([]byte, 64)
	if _, err := rt.ExportIPC(0, uint64(uintptr(memoryAddr(host))), 64); err == nil {
		t.Error("ExportIPC of host memory succeeded")
	}
	if err := rt.CheckDevice(2); !errors.Is(err, transfer.ErrInvalidArgument) {
		t.Errorf("CheckDevice(2) of 2 = %v", err)
	}
}

func memoryAddr(b []byte) uint64 { return memory.AddrOf(b) }

// gpuRuntime returns the real CUDA runtime, or skips.
func gpuRuntime(t *testing.T) (*Runtime, int) {
	t.Helper()
	if testing.Short() {
		t.Skip("GPU test skipped under -short")
	}
	rt, err := Load()
	if err != nil {
		t.Skip(err)
	}
	n, err := rt.DeviceCount()
	if err != nil || n == 0 {
		t.Skipf("no CUDA device: %d, %v", n, err)
	}
	return rt, n
}

// TestGPUEngines runs two engines in this process on real device memory,
// over tcp and with the same host id (CUDA refuses IPC handles exported by
// the same process, so that run exercises the fallback to tcp).
func TestGPUEngines(t *testing.T) {
	rt, n := gpuRuntime(t)
	other := min(1, n-1)
	for _, tc := range []engineCase{
		{name: "tcp", devA: 0, devB: other, size: 64<<20 + 777},
		{name: "same host", devA: other, devB: 0, size: 16<<20 + 777, sameHost: true, ipc: ipcAny},
	} {
		t.Run(tc.name, func(t *testing.T) { runEngines(t, rt, tc) })
	}
}

// envIPCHelper names the metadata URL handed to the helper process of
// ipcAcrossProcesses.
const envIPCHelper = "MC_TEST_CUDA_IPC_HELPER"

// TestGPUIPCAcrossProcesses runs ipcAcrossProcesses on a real GPU.
func TestGPUIPCAcrossProcesses(t *testing.T) {
	rt, _ := gpuRuntime(t)
	ipcAcrossProcesses(t, rt)
}

// TestFakeIPCAcrossProcesses runs ipcAcrossProcesses on the stand-in
// runtime, whose memfd-backed allocations can be mapped by another process;
// the helper inherits $MC_CUDART_PATH and loads it too.
func TestFakeIPCAcrossProcesses(t *testing.T) {
	rt, _ := fakeRuntime(t)
	ipcAcrossProcesses(t, rt)
}

// ipcAcrossProcesses: a second process (this test binary, running
// TestIPCHelper) registers device memory; this process reads and writes it
// through CUDA IPC (no network request) and the helper checks what landed.
func ipcAcrossProcesses(t *testing.T, rt *Runtime) {
	mux := http.NewServeMux()
	mux.Handle("/metadata", httpmeta.NewHandler(memmeta.New()))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	meta, err := httpmeta.NewClient(srv.URL + "/metadata")
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^TestIPCHelper$", "-test.v")
	cmd.Env = append(os.Environ(), envIPCHelper+"="+srv.URL+"/metadata")
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	lines := bufio.NewScanner(stdout)
	expect := func(prefix string) string {
		t.Helper()
		for lines.Scan() {
			if s, ok := strings.CutPrefix(lines.Text(), prefix); ok {
				return s
			}
		}
		t.Fatalf("helper exited before %q: %v", prefix, lines.Err())
		return ""
	}
	addr, err := strconv.ParseUint(expect("READY "), 0, 64)
	if err != nil {
		t.Fatal(err)
	}

	const n = ipcHelperSize
	e, tr := newEngine(t, meta, "ipc-parent", "", rt) // default host id: same machine
	ctx := context.Background()
	id, err := e.OpenSegment(ctx, "ipc-child")
	if err != nil {
		t.Fatal(err)
	}
	local := deviceBuffer(t, rt, 0, n)
	if err := e.RegisterDeviceMemory(ctx, uint64(local.Addr), n, 0, false); err != nil {
		t.Fatal(err)
	}
	h := hostBuffer(t, e, n)
	if err := e.TransferSync(ctx, []transfer.Request{{Op: transfer.Read, Source: uint64(local.Addr), Target: id, TargetOffset: addr, Length: n}}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := rt.MemcpyDtoH(got, local); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, seeded(n, 11)) {
		t.Fatal("device<-device READ through IPC: bytes differ")
	}
	copy(h.Bytes(), seeded(n, 12))
	if err := e.TransferSync(ctx, []transfer.Request{{Op: transfer.Write, Source: h.Addr(), Target: id, TargetOffset: addr, Length: n}}); err != nil {
		t.Fatal(err)
	}
	if c := tr.calls.Load(); c != 0 {
		t.Errorf("%d network requests: IPC path not taken", c)
	}
	if err := e.CloseSegment(id); err != nil { // unmap before the helper frees
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "CHECK")
	if res := expect("RESULT "); res != "OK" {
		t.Fatalf("helper: %s", res)
	}
}

const ipcHelperSize = 4<<20 + 4096

// TestIPCHelper is the second process of ipcAcrossProcesses; skipped
// unless started by it.
func TestIPCHelper(t *testing.T) {
	url := os.Getenv(envIPCHelper)
	if url == "" {
		t.Skip("helper process of the IPC-across-processes tests")
	}
	rt, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	meta, err := httpmeta.NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close()
	e, _ := newEngine(t, meta, "ipc-child", "", rt)
	const n = ipcHelperSize
	alloc := deviceBuffer(t, rt, 0, n+8192)
	p := DevicePtr{Addr: alloc.Addr + 8192, Device: 0} // token carries the offset
	if err := rt.MemcpyHtoD(p, seeded(n, 11)); err != nil {
		t.Fatal(err)
	}
	if err := e.RegisterDeviceMemory(context.Background(), uint64(p.Addr), n, 0, true); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("READY %#x\n", p.Addr)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() && in.Text() != "CHECK" {
	}
	got := make([]byte, n)
	res := "OK"
	if err := rt.MemcpyDtoH(got, p); err != nil {
		res = err.Error()
	} else if !bytes.Equal(got, seeded(n, 12)) {
		res = "bytes written through IPC differ"
	}
	fmt.Printf("RESULT %s\n", res)
}
