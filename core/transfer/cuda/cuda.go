package cuda

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/ebitengine/purego"

	"github.com/mooncake-go/mooncake/core/transfer"
)

// DefaultLibraries returns the names Load tries, in order, when
// MC_CUDART_PATH is unset: the unversioned development link, then the CUDA
// 12 and CUDA 11 sonames. Each call returns a fresh slice.
func DefaultLibraries() []string {
	return []string{"libcudart.so", "libcudart.so.12", "libcudart.so.11.0"}
}

// EnvLibraryPath names the environment variable that overrides the library
// Load opens (a path or a name for the dynamic loader).
const EnvLibraryPath = "MC_CUDART_PATH"

// CUDA runtime error codes (cudaError_t) this package interprets.
const (
	errInsufficientDriver = 35  // cudaErrorInsufficientDriver
	errNoDevice           = 100 // cudaErrorNoDevice
)

// ipcMemLazyEnablePeerAccess is cudaIpcMemLazyEnablePeerAccess, the flag
// upstream passes to cudaIpcOpenMemHandle.
const ipcMemLazyEnablePeerAccess = 1

// MemcpyKind is cudaMemcpyKind.
type MemcpyKind int32

const (
	// HostToHost is cudaMemcpyHostToHost (0).
	HostToHost MemcpyKind = 0
	// HostToDevice is cudaMemcpyHostToDevice (1).
	HostToDevice MemcpyKind = 1
	// DeviceToHost is cudaMemcpyDeviceToHost (2).
	DeviceToHost MemcpyKind = 2
	// DeviceToDevice is cudaMemcpyDeviceToDevice (3).
	DeviceToDevice MemcpyKind = 3
	// Default is cudaMemcpyDefault (4): the direction is inferred from the
	// pointers (unified virtual addressing).
	Default MemcpyKind = 4
)

// DevicePtr is a device allocation: its device virtual address and the
// device it lives on.
type DevicePtr struct {
	// Addr is the device virtual address (a CUDA device pointer).
	Addr uintptr
	// Device is the CUDA device ordinal the memory belongs to.
	Device int
}

// IpcMemHandle is cudaIpcMemHandle_t: 64 opaque bytes that another process
// on the same node passes to IpcOpenMemHandle to map the allocation.
type IpcMemHandle struct {
	// Reserved is the handle's content, opaque and position-independent:
	// send these 64 bytes to the importing process as they are.
	Reserved [64]byte
}

// Error is a failed CUDA runtime call.
type Error struct {
	// Op is the CUDA function ("cudaMalloc").
	Op string
	// Code is the cudaError_t value.
	Code int
	// Msg is cudaGetErrorString(Code).
	Msg string
}

// Error formats the failure as "cuda: <op>: <message> (cudaError <code>)".
func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (cudaError %d)", e.Op, e.Msg, e.Code)
}

// Unwrap makes a missing device or driver (cudaErrorNoDevice,
// cudaErrorInsufficientDriver) match transfer.ErrUnsupported, so callers
// treat "runtime present, no usable GPU" like "no runtime".
func (e *Error) Unwrap() error {
	if e.Code == errNoDevice || e.Code == errInsufficientDriver {
		return transfer.ErrUnsupported
	}
	return nil
}

// Runtime is a loaded CUDA runtime library. Create with Load or LoadFrom.
type Runtime struct {
	path string

	getDeviceCount func(count *int32) int32
	getDevice      func(dev *int32) int32
	setDevice      func(dev int32) int32
	malloc         func(ptr *uintptr, size uint64) int32
	free           func(ptr uintptr) int32
	memcpy         func(dst, src uintptr, n uint64, kind MemcpyKind) int32
	memcpyToDev    func(dst uintptr, src *byte, n uint64, kind MemcpyKind) int32 // cudaMemcpy with a Go-memory source
	memcpyFromDev  func(dst *byte, src uintptr, n uint64, kind MemcpyKind) int32 // cudaMemcpy with a Go-memory destination
	ipcGet         func(h *IpcMemHandle, ptr uintptr) int32
	ipcOpen        func(ptr *uintptr, h IpcMemHandle, flags uint32) int32
	ipcClose       func(ptr uintptr) int32
	errorString    func(code int32) string
	streamSync     func(stream uintptr) int32
	hostRegister   func(ptr *byte, size uint64, flags uint32) int32
	hostUnregister func(ptr *byte) int32
	// addrRange is the driver's cuMemGetAddressRange_v2 (allocation base
	// and size of a device pointer); nil when no driver library exposes
	// it, and then ExportIPC is unsupported.
	addrRange func(base *uintptr, size *uint64, ptr uintptr) int32
}

// Load opens the CUDA runtime: the library named by $MC_CUDART_PATH when
// set (only that one), else the first of DefaultLibraries() that loads.
// Errors: transfer.ErrUnsupported, wrapped as "unsupported: no CUDA runtime
// (<name>: <dlerror>; ...)", when no library loads or one lacks a needed
// symbol.
func Load() (*Runtime, error) {
	if p := os.Getenv(EnvLibraryPath); p != "" {
		return LoadFrom(p)
	}
	return LoadFrom(DefaultLibraries()...)
}

// LoadFrom opens the first of names (paths or loader names) that dlopen
// accepts and binds the runtime functions. Errors as Load.
func LoadFrom(names ...string) (*Runtime, error) {
	var tried []string
	for _, name := range names {
		lib, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			msg := err.Error() // dlerror usually starts with the name already
			if !strings.HasPrefix(msg, name) {
				msg = name + ": " + msg
			}
			tried = append(tried, msg)
			continue
		}
		return bind(lib, name)
	}
	if len(tried) == 0 {
		tried = append(tried, "no library names given")
	}
	return nil, fmt.Errorf("%w: no CUDA runtime (%s)", transfer.ErrUnsupported, strings.Join(tried, "; "))
}

// bind resolves every symbol first, so a library missing one yields an
// error instead of purego's panic.
func bind(lib uintptr, path string) (*Runtime, error) {
	r := &Runtime{path: path}
	for _, b := range []struct {
		fn   any
		name string
	}{
		{&r.getDeviceCount, "cudaGetDeviceCount"},
		{&r.getDevice, "cudaGetDevice"},
		{&r.setDevice, "cudaSetDevice"},
		{&r.malloc, "cudaMalloc"},
		{&r.free, "cudaFree"},
		{&r.memcpy, "cudaMemcpy"},
		{&r.memcpyToDev, "cudaMemcpy"},
		{&r.memcpyFromDev, "cudaMemcpy"},
		{&r.ipcGet, "cudaIpcGetMemHandle"},
		{&r.ipcOpen, "cudaIpcOpenMemHandle"},
		{&r.ipcClose, "cudaIpcCloseMemHandle"},
		{&r.errorString, "cudaGetErrorString"},
		{&r.streamSync, "cudaStreamSynchronize"},
		{&r.hostRegister, "cudaHostRegister"},
		{&r.hostUnregister, "cudaHostUnregister"},
	} {
		sym, err := purego.Dlsym(lib, b.name)
		if err != nil {
			return nil, fmt.Errorf("%w: CUDA runtime %s lacks %s: %v", transfer.ErrUnsupported, path, b.name, err)
		}
		purego.RegisterFunc(b.fn, sym)
	}
	r.bindDriver(lib)
	return r, nil
}

// Path is the name or path the runtime was loaded from.
func (r *Runtime) Path() string { return r.path }

// ErrorString returns cudaGetErrorString(code).
func (r *Runtime) ErrorString(code int) string { return r.errorString(int32(code)) }

func (r *Runtime) check(op string, code int32) error {
	if code == 0 {
		return nil
	}
	return &Error{Op: op, Code: int(code), Msg: r.errorString(code)}
}

// DeviceCount returns cudaGetDeviceCount. Errors: *Error; for no device or
// no driver it also matches transfer.ErrUnsupported.
func (r *Runtime) DeviceCount() (int, error) {
	var n int32
	if err := r.check("cudaGetDeviceCount", r.getDeviceCount(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// onDevice runs f with dev as the current device of a locked OS thread and
// restores the thread's previous device afterwards.
func (r *Runtime) onDevice(dev int, f func() error) error {
	if dev < 0 {
		return fmt.Errorf("%w: cuda: device %d", transfer.ErrInvalidArgument, dev)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var prev int32
	if err := r.check("cudaGetDevice", r.getDevice(&prev)); err != nil {
		return err
	}
	if err := r.check("cudaSetDevice", r.setDevice(int32(dev))); err != nil {
		return err
	}
	err := f()
	if int(prev) != dev {
		r.setDevice(prev) // best effort: prev was valid a moment ago
	}
	return err
}

// Malloc allocates n bytes on device dev (cudaSetDevice + cudaMalloc).
// Errors: transfer.ErrInvalidArgument for n == 0 or dev < 0; *Error from
// CUDA (e.g. cudaErrorMemoryAllocation, cudaErrorInvalidDevice).
func (r *Runtime) Malloc(dev int, n uint64) (DevicePtr, error) {
	if n == 0 {
		return DevicePtr{}, fmt.Errorf("%w: cuda: malloc of 0 bytes", transfer.ErrInvalidArgument)
	}
	var p uintptr
	err := r.onDevice(dev, func() error {
		return r.check("cudaMalloc", r.malloc(&p, n))
	})
	if err != nil {
		return DevicePtr{}, fmt.Errorf("cuda: malloc %d bytes on device %d: %w", n, dev, err)
	}
	return DevicePtr{Addr: p, Device: dev}, nil
}

// Free releases memory from Malloc (cudaFree). Errors: *Error.
func (r *Runtime) Free(p DevicePtr) error {
	return r.check("cudaFree", r.free(p.Addr))
}

// MemcpyHtoD copies len(src) bytes from host memory to dst
// (cudaMemcpyHostToDevice); it returns once the copy is complete. An empty
// src is a no-op. Errors: *Error.
func (r *Runtime) MemcpyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return r.check("cudaMemcpy(HostToDevice)", r.memcpyToDev(dst.Addr, &src[0], uint64(len(src)), HostToDevice))
}

// MemcpyDtoH copies len(dst) bytes from src to host memory
// (cudaMemcpyDeviceToHost). An empty dst is a no-op. Errors: *Error.
func (r *Runtime) MemcpyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return r.check("cudaMemcpy(DeviceToHost)", r.memcpyFromDev(&dst[0], src.Addr, uint64(len(dst)), DeviceToHost))
}

// MemcpyDtoD copies n bytes between device allocations, possibly on
// different devices (cudaMemcpyDeviceToDevice). n == 0 is a no-op.
// Errors: *Error.
func (r *Runtime) MemcpyDtoD(dst, src DevicePtr, n uint64) error {
	if n == 0 {
		return nil
	}
	return r.check("cudaMemcpy(DeviceToDevice)", r.memcpy(dst.Addr, src.Addr, n, DeviceToDevice))
}

// Memcpy is cudaMemcpy on raw addresses with an explicit kind. Host
// addresses must stay valid and unmoved for the call: off-heap memory
// (core/memory regions) or pinned host memory, never Go-heap memory. n ==
// 0 is a no-op. Errors: *Error (e.g. cudaErrorInvalidMemcpyDirection).
func (r *Runtime) Memcpy(dst, src uintptr, n uint64, kind MemcpyKind) error {
	if n == 0 {
		return nil
	}
	return r.check("cudaMemcpy", r.memcpy(dst, src, n, kind))
}

// IpcGetMemHandle exports an allocation from Malloc for other processes
// (cudaIpcGetMemHandle). Errors: *Error.
func (r *Runtime) IpcGetMemHandle(p DevicePtr) (IpcMemHandle, error) {
	var h IpcMemHandle
	if err := r.check("cudaIpcGetMemHandle", r.ipcGet(&h, p.Addr)); err != nil {
		return IpcMemHandle{}, err
	}
	return h, nil
}

// IpcOpenMemHandle maps another process's allocation into this one on
// device dev (cudaIpcOpenMemHandle with cudaIpcMemLazyEnablePeerAccess, as
// upstream). A process cannot open its own handles (CUDA returns an
// error). Errors: transfer.ErrInvalidArgument for dev < 0; *Error.
func (r *Runtime) IpcOpenMemHandle(dev int, h IpcMemHandle) (DevicePtr, error) {
	var p uintptr
	err := r.onDevice(dev, func() error {
		return r.check("cudaIpcOpenMemHandle", r.ipcOpen(&p, h, ipcMemLazyEnablePeerAccess))
	})
	if err != nil {
		return DevicePtr{}, fmt.Errorf("cuda: open IPC handle on device %d: %w", dev, err)
	}
	return DevicePtr{Addr: p, Device: dev}, nil
}

// IpcCloseMemHandle unmaps memory from IpcOpenMemHandle
// (cudaIpcCloseMemHandle). Errors: *Error.
func (r *Runtime) IpcCloseMemHandle(p DevicePtr) error {
	return r.check("cudaIpcCloseMemHandle", r.ipcClose(p.Addr))
}
