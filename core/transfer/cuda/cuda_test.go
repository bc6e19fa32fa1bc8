package cuda

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ebitengine/purego"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/transfer"
)

func TestLoadNoRuntime(t *testing.T) {
	_, err := LoadFrom(filepath.Join(t.TempDir(), "libcudart.so"), "libcudart-does-not-exist.so.99")
	if !errors.Is(err, transfer.ErrUnsupported) {
		t.Fatalf("err = %v, want ErrUnsupported", err)
	}
	if !strings.HasPrefix(err.Error(), "unsupported: no CUDA runtime (") || !strings.Contains(err.Error(), "libcudart-does-not-exist.so.99: ") {
		t.Errorf("message = %q", err)
	}
	if _, err := LoadFrom(); !errors.Is(err, transfer.ErrUnsupported) {
		t.Errorf("LoadFrom() = %v", err)
	}

	t.Setenv(EnvLibraryPath, "/nonexistent/libcudart.so.12")
	_, err = Load()
	if !errors.Is(err, transfer.ErrUnsupported) || !strings.Contains(err.Error(), "/nonexistent/libcudart.so.12") {
		t.Errorf("Load with %s set = %v", EnvLibraryPath, err)
	}
}

// TestLoadDefault runs Load on this machine: without a CUDA runtime it must
// fail with the unsupported error, never panic.
func TestLoadDefault(t *testing.T) {
	rt, err := Load()
	if err == nil {
		t.Skipf("CUDA runtime present (%s); no-runtime path not testable here", rt.Path())
	}
	if !errors.Is(err, transfer.ErrUnsupported) || !strings.HasPrefix(err.Error(), "unsupported: no CUDA runtime") {
		t.Fatalf("err = %v", err)
	}
	t.Log(err)
}

func TestLoadMissingSymbol(t *testing.T) {
	libc := "libc.so.6"
	if _, err := purego.Dlopen(libc, purego.RTLD_NOW); err != nil {
		t.Skip("no", libc, err)
	}
	_, err := LoadFrom(libc)
	if !errors.Is(err, transfer.ErrUnsupported) || !strings.Contains(err.Error(), "lacks cudaGetDeviceCount") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseLocation(t *testing.T) {
	for _, tc := range []struct {
		in   string
		kind string
		idx  int
		ok   bool
	}{
		{"cuda:0", "cuda", 0, true},
		{"cuda:7", "cuda", 7, true},
		{"cpu:1", "cpu", 1, true},
		{"*", "*", -1, true},
		{"cuda", "", 0, false},
		{"cuda:", "", 0, false},
		{"cuda:-1", "", 0, false},
		{"cuda:01", "", 0, false},
		{"cuda:1x", "", 0, false},
		{"cuda:+1", "", 0, false},
		{"npu:0", "", 0, false},
		{"", "", 0, false},
		{"CUDA:0", "", 0, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			kind, idx, err := ParseLocation(tc.in)
			if !tc.ok {
				if !errors.Is(err, transfer.ErrInvalidArgument) {
					t.Errorf("err = %v, want ErrInvalidArgument", err)
				}
				return
			}
			if err != nil || kind != tc.kind || idx != tc.idx {
				t.Errorf("= %q, %d, %v; want %q, %d", kind, idx, err, tc.kind, tc.idx)
			}
		})
	}
}

func TestErrorUnwrap(t *testing.T) {
	for code, unsupported := range map[int]bool{100: true, 35: true, 2: false, 101: false} {
		e := &Error{Op: "cudaGetDeviceCount", Code: code, Msg: "m"}
		if errors.Is(e, transfer.ErrUnsupported) != unsupported {
			t.Errorf("code %d: errors.Is(ErrUnsupported) = %t", code, !unsupported)
		}
	}
	if got := (&Error{Op: "cudaMalloc", Code: 2, Msg: "out of memory"}).Error(); got != "cuda: cudaMalloc: out of memory (cudaError 2)" {
		t.Errorf("Error() = %q", got)
	}
}

// fakeRuntime compiles testdata/fakecudart.c into a shared library and
// loads it; skipped without a C compiler. It proves the bindings' calling
// conventions without a GPU.
func fakeRuntime(t *testing.T) (*Runtime, uintptr) {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the stand-in libcudart:", err)
	}
	lib := filepath.Join(t.TempDir(), "libfakecudart.so")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", lib, "testdata/fakecudart.c").CombinedOutput(); err != nil {
		t.Skipf("cannot build stand-in libcudart: %v\n%s", err, out)
	}
	t.Setenv(EnvLibraryPath, lib)
	rt, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if rt.Path() != lib {
		t.Errorf("Path() = %q, want %q", rt.Path(), lib)
	}
	h, err := purego.Dlopen(lib, purego.RTLD_NOW)
	if err != nil {
		t.Fatal(err)
	}
	return rt, h
}

func TestFakeRuntime(t *testing.T) {
	rt, h := fakeRuntime(t)
	var lastMallocDevice func() int32
	purego.RegisterLibFunc(&lastMallocDevice, h, "fakecudartLastMallocDevice")
	var getDevice func(*int32) int32
	purego.RegisterLibFunc(&getDevice, h, "cudaGetDevice")

	n, err := rt.DeviceCount()
	if err != nil || n != 2 {
		t.Fatalf("DeviceCount = %d, %v", n, err)
	}

	runtime.LockOSThread() // so getDevice below sees the thread Malloc used
	a, err := rt.Malloc(1, 1<<20)
	var cur int32 = -1
	getDevice(&cur)
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	if a.Device != 1 || a.Addr == 0 || lastMallocDevice() != 1 {
		t.Errorf("Malloc(1) = %+v, allocated on device %d", a, lastMallocDevice())
	}
	if cur != 0 {
		t.Errorf("current device after Malloc(1) = %d, want 0 restored", cur)
	}
	defer rt.Free(a)
	b, err := rt.Malloc(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Free(b)

	src := pattern(1 << 20)
	dst := make([]byte, len(src))
	if err := rt.MemcpyHtoD(a, src); err != nil {
		t.Fatal(err)
	}
	if err := rt.MemcpyDtoD(b, a, uint64(len(src))); err != nil {
		t.Fatal(err)
	}
	if err := rt.MemcpyDtoH(dst, b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("round trip mismatch")
	}
	if err := rt.MemcpyHtoD(a, nil); err != nil {
		t.Errorf("empty HtoD = %v", err)
	}

	hdl, err := rt.IpcGetMemHandle(a)
	if err != nil || string(hdl.Reserved[:6]) != "MCFAKE" {
		t.Fatalf("IpcGetMemHandle = %x, %v", hdl.Reserved[:8], err)
	}
	p, err := rt.IpcOpenMemHandle(0, hdl) // the 64-byte struct goes by value
	if err != nil || p.Addr != a.Addr || p.Device != 0 {
		t.Fatalf("IpcOpenMemHandle = %+v, %v; want addr %#x", p, err, a.Addr)
	}
	if err := rt.IpcCloseMemHandle(p); err != nil {
		t.Fatal(err)
	}
	bad := hdl
	bad.Reserved[40] = 0
	if _, err := rt.IpcOpenMemHandle(0, bad); !isCUDA(err, 400) {
		t.Errorf("IpcOpenMemHandle(corrupt) = %v, want cudaError 400", err)
	}

	for _, tc := range []struct {
		name string
		err  error
		want func(error) bool
	}{
		{"bad device", second(rt.Malloc(5, 10)), func(e error) bool { return isCUDA(e, 101) && strings.Contains(e.Error(), "invalid device ordinal") }},
		{"negative device", second(rt.Malloc(-1, 10)), func(e error) bool { return errors.Is(e, transfer.ErrInvalidArgument) }},
		{"zero bytes", second(rt.Malloc(0, 0)), func(e error) bool { return errors.Is(e, transfer.ErrInvalidArgument) }},
		{"out of memory", second(rt.Malloc(0, 1<<41)), func(e error) bool { return isCUDA(e, 2) && !errors.Is(e, transfer.ErrUnsupported) }},
		{"bad kind", rt.Memcpy(b.Addr, a.Addr, 8, MemcpyKind(9)), func(e error) bool { return isCUDA(e, 21) }},
		{"default kind", rt.Memcpy(b.Addr, a.Addr, 8, Default), func(e error) bool { return e == nil }},
	} {
		if !tc.want(tc.err) {
			t.Errorf("%s: err = %v", tc.name, tc.err)
		}
	}
	// Pinning: cudaHostRegister of off-heap memory, twice refused, and
	// unpinned once.
	reg, err := memory.Map(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	unpin, err := rt.PinHost(reg.Bytes())
	if err != nil {
		t.Fatalf("PinHost = %v", err)
	}
	if _, err := rt.PinHost(reg.Bytes()[4096:]); !isCUDA(err, 712) {
		t.Errorf("PinHost of a pinned range = %v, want cudaError 712", err)
	}
	if _, err := rt.PinHost(nil); !errors.Is(err, transfer.ErrInvalidArgument) {
		t.Errorf("PinHost(nil) = %v", err)
	}
	if err := unpin(); err != nil {
		t.Errorf("unpin = %v", err)
	}
	if err := unpin(); !isCUDA(err, 713) {
		t.Errorf("second unpin = %v, want cudaError 713", err)
	}
	if _, err := (*Runtime)(nil).PinHost(reg.Bytes()); !errors.Is(err, transfer.ErrUnsupported) {
		t.Errorf("nil Runtime PinHost = %v", err)
	}

	if got := rt.ErrorString(100); got != "no CUDA-capable device is detected" {
		t.Errorf("ErrorString(100) = %q", got)
	}

	t.Setenv("FAKECUDART_NO_DEVICE", "1")
	if _, err := rt.DeviceCount(); !errors.Is(err, transfer.ErrUnsupported) || !isCUDA(err, 100) {
		t.Errorf("DeviceCount without devices = %v", err)
	}
}

func second(_ DevicePtr, err error) error { return err }

func isCUDA(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

func pattern(n int) []byte {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// TestGPURoundTrip needs a real GPU: 1 MiB on device 0, host -> device ->
// device -> host, compared byte for byte. Skipped under -short, without a
// CUDA runtime, or without a device.
func TestGPURoundTrip(t *testing.T) {
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
	const size = 1 << 20
	a, err := rt.Malloc(0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rt.Free(a); err != nil {
			t.Error(err)
		}
	}()
	b, err := rt.Malloc(0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rt.Free(b); err != nil {
			t.Error(err)
		}
	}()
	src := pattern(size)
	dst := make([]byte, size)
	if err := rt.MemcpyHtoD(a, src); err != nil {
		t.Fatal(err)
	}
	if err := rt.MemcpyDtoD(b, a, size); err != nil {
		t.Fatal(err)
	}
	if err := rt.MemcpyDtoH(dst, b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, dst) {
		for i := range src {
			if src[i] != dst[i] {
				t.Fatalf("byte %d: got %#x, want %#x", i, dst[i], src[i])
			}
		}
	}
	if _, err := rt.IpcGetMemHandle(a); err != nil {
		t.Errorf("IpcGetMemHandle: %v", err)
	}
	t.Logf("%s: %d device(s), 1 MiB H2D/D2D/D2H round trip ok", rt.Path(), n)
}
