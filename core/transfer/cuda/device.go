package cuda

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/ebitengine/purego"

	"github.com/mooncake-go/mooncake/core/transfer"
)

// *Runtime is what transfer.Config.CUDA expects, and it pins the engine's
// staging buffers.
var (
	_ transfer.DeviceRuntime = (*Runtime)(nil)
	_ transfer.HostPinner    = (*Runtime)(nil)
)

// PinHost implements transfer.HostPinner: cudaHostRegister of b with
// cudaHostRegisterDefault (page-locked, usable by every device under
// unified addressing); unpin is cudaHostUnregister. b must be off the Go
// heap (package memory) and stay mapped until unpin. Errors: for a nil
// Runtime, ErrUnsupported; transfer.ErrInvalidArgument for an empty b;
// *Error (e.g. cudaErrorHostMemoryAlreadyRegistered).
func (r *Runtime) PinHost(b []byte) (func() error, error) {
	if r == nil {
		return nil, errNoRuntime()
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: cuda: pin of 0 bytes", transfer.ErrInvalidArgument)
	}
	p := &b[0]
	if err := r.check("cudaHostRegister", r.hostRegister(p, uint64(len(b)), 0)); err != nil {
		return nil, fmt.Errorf("cuda: pin %d bytes of host memory: %w", len(b), err)
	}
	return func() error { return r.check("cudaHostUnregister", r.hostUnregister(p)) }, nil
}

// driverLibrary is the CUDA driver library every CUDA installation has.
const driverLibrary = "libcuda.so.1"

// bindDriver binds cuMemGetAddressRange_v2 from the runtime library itself
// (a stand-in may export it) or else from the driver library; it stays
// unbound, and ExportIPC unsupported, when neither has it.
func (r *Runtime) bindDriver(lib uintptr) {
	const name = "cuMemGetAddressRange_v2"
	sym, err := purego.Dlsym(lib, name)
	if err != nil {
		drv, derr := purego.Dlopen(driverLibrary, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if derr != nil {
			return
		}
		if sym, err = purego.Dlsym(drv, name); err != nil {
			return
		}
	}
	purego.RegisterFunc(&r.addrRange, sym)
}

// errNoRuntime is what the transfer.DeviceRuntime methods of a nil
// *Runtime return (a failed Load stored in transfer.Config.CUDA).
func errNoRuntime() error {
	return fmt.Errorf("%w: no CUDA runtime (nil *cuda.Runtime)", transfer.ErrUnsupported)
}

// CheckDevice implements transfer.DeviceRuntime: nil when dev is a device
// ordinal below DeviceCount. Errors: transfer.ErrUnsupported for a nil
// Runtime and (via *Error) for no device or driver;
// transfer.ErrInvalidArgument for an ordinal out of range.
func (r *Runtime) CheckDevice(dev int) error {
	if r == nil {
		return errNoRuntime()
	}
	n, err := r.DeviceCount()
	if err != nil {
		return err
	}
	if dev < 0 || dev >= n {
		return fmt.Errorf("%w: cuda: device %d (%d present)", transfer.ErrInvalidArgument, dev, n)
	}
	return nil
}

// CopyHtoD implements transfer.DeviceRuntime: cudaMemcpy(HostToDevice)
// on device dev, then cudaStreamSynchronize of the default stream, so the
// bytes have landed when it returns (a copy from pageable memory may
// otherwise return once staged). An empty src is a no-op. Errors: *Error.
func (r *Runtime) CopyHtoD(dev int, dst uint64, src []byte) error {
	if r == nil {
		return errNoRuntime()
	}
	if len(src) == 0 {
		return nil
	}
	return r.onDevice(dev, func() error {
		if err := r.check("cudaMemcpy(HostToDevice)", r.memcpyToDev(uintptr(dst), &src[0], uint64(len(src)), HostToDevice)); err != nil {
			return err
		}
		return r.check("cudaStreamSynchronize", r.streamSync(0))
	})
}

// CopyDtoH implements transfer.DeviceRuntime: cudaMemcpy(DeviceToHost) on
// device dev (complete on return). An empty dst is a no-op. Errors: *Error.
func (r *Runtime) CopyDtoH(dev int, dst []byte, src uint64) error {
	if r == nil {
		return errNoRuntime()
	}
	if len(dst) == 0 {
		return nil
	}
	return r.onDevice(dev, func() error {
		return r.check("cudaMemcpy(DeviceToHost)", r.memcpyFromDev(&dst[0], uintptr(src), uint64(len(dst)), DeviceToHost))
	})
}

// CopyDtoD implements transfer.DeviceRuntime: cudaMemcpy(DeviceToDevice)
// issued on the source's device, then cudaStreamSynchronize (a
// device-to-device cudaMemcpy does not wait for the copy). n == 0 is a
// no-op. Errors: *Error.
func (r *Runtime) CopyDtoD(dstDev int, dst uint64, srcDev int, src uint64, n uint64) error {
	if r == nil {
		return errNoRuntime()
	}
	if n == 0 {
		return nil
	}
	return r.onDevice(srcDev, func() error {
		if err := r.check("cudaMemcpy(DeviceToDevice)", r.memcpy(uintptr(dst), uintptr(src), n, DeviceToDevice)); err != nil {
			return err
		}
		return r.check("cudaStreamSynchronize", r.streamSync(0))
	})
}

// ExportIPC implements transfer.DeviceRuntime. CUDA IPC handles name a
// whole allocation, so it finds the allocation holding [addr,
// addr+length) (cuMemGetAddressRange_v2), takes the allocation's handle
// (cudaIpcGetMemHandle) and returns the token "<128 hex digits of
// cudaIpcMemHandle_t>", followed by "@<offset>" (decimal) when addr is not
// the allocation's first byte. Errors: transfer.ErrUnsupported when the
// driver's address-range call is unavailable; transfer.ErrInvalidArgument
// when the range spans allocations; *Error.
func (r *Runtime) ExportIPC(dev int, addr, length uint64) (string, error) {
	if r == nil {
		return "", errNoRuntime()
	}
	if r.addrRange == nil {
		return "", fmt.Errorf("%w: cuda: no %s with cuMemGetAddressRange_v2 to find allocation bases", transfer.ErrUnsupported, driverLibrary)
	}
	var h IpcMemHandle
	var off uint64
	err := r.onDevice(dev, func() error {
		r.free(0) // cudaFree(NULL) initialises the device's context for the driver call
		var base uintptr
		var size uint64
		if code := r.addrRange(&base, &size, uintptr(addr)); code != 0 {
			return &Error{Op: "cuMemGetAddressRange_v2", Code: int(code), Msg: "CUresult " + strconv.Itoa(int(code))}
		}
		off = addr - uint64(base)
		if off > size || length > size-off {
			return fmt.Errorf("%w: cuda: [%#x,+%d) is not inside one allocation ([%#x,+%d))", transfer.ErrInvalidArgument, addr, length, base, size)
		}
		return r.check("cudaIpcGetMemHandle", r.ipcGet(&h, base))
	})
	if err != nil {
		return "", fmt.Errorf("cuda: export IPC handle of [%#x,+%d) on device %d: %w", addr, length, dev, err)
	}
	tok := hex.EncodeToString(h.Reserved[:])
	if off != 0 {
		tok += "@" + strconv.FormatUint(off, 10)
	}
	return tok, nil
}

// ParseIPCToken splits a token from ExportIPC into the IPC handle and the
// offset of the exported range in the allocation. Errors:
// transfer.ErrInvalidArgument for a malformed token.
func ParseIPCToken(tok string) (IpcMemHandle, uint64, error) {
	var h IpcMemHandle
	hx, offs, hasOff := strings.Cut(tok, "@")
	var off uint64
	if hasOff {
		var err error
		if off, err = strconv.ParseUint(offs, 10, 64); err != nil {
			return h, 0, fmt.Errorf("%w: cuda: IPC token offset %q", transfer.ErrInvalidArgument, offs)
		}
	}
	if len(hx) != 2*len(h.Reserved) {
		return h, 0, fmt.Errorf("%w: cuda: IPC token of %d hex digits, want %d", transfer.ErrInvalidArgument, len(hx), 2*len(h.Reserved))
	}
	if _, err := hex.Decode(h.Reserved[:], []byte(hx)); err != nil {
		return h, 0, fmt.Errorf("%w: cuda: IPC token: %v", transfer.ErrInvalidArgument, err)
	}
	return h, off, nil
}

// OpenIPC implements transfer.DeviceRuntime: IpcOpenMemHandle of the
// token's handle on device dev; the address returned is the mapping's base
// plus the token's offset, and unmap is IpcCloseMemHandle. CUDA refuses to
// open a handle exported by the same process. Errors:
// transfer.ErrInvalidArgument for a malformed token; *Error.
func (r *Runtime) OpenIPC(dev int, tok string) (uint64, func() error, error) {
	if r == nil {
		return 0, nil, errNoRuntime()
	}
	h, off, err := ParseIPCToken(tok)
	if err != nil {
		return 0, nil, err
	}
	p, err := r.IpcOpenMemHandle(dev, h)
	if err != nil {
		return 0, nil, err
	}
	return uint64(p.Addr) + off, func() error { return r.IpcCloseMemHandle(p) }, nil
}
