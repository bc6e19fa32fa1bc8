// Package cuda binds the few CUDA runtime calls the transfer engine needs
// for GPU memory: device count and selection, device allocation, memcpy in
// every direction, and CUDA IPC handles (how upstream's intra-node NVLink
// transport shares GPU buffers between processes).
//
// It is pure Go: Load dlopens libcudart at run time with
// github.com/ebitengine/purego, so the package builds with CGO_ENABLED=0 and
// on machines without CUDA, and a binary that imports it still starts
// there. Load tries $MC_CUDART_PATH when set, else "libcudart.so",
// "libcudart.so.12" and "libcudart.so.11.0"; when none loads it returns an
// error wrapping transfer.ErrUnsupported ("unsupported: no CUDA runtime
// ..."), which is how callers detect a host without CUDA. Note that
// purego's cgo-free dlopen links the binary dynamically against libc even
// under CGO_ENABLED=0.
//
// cudaSetDevice is per OS thread, so every call that depends on the
// current device (Malloc, IpcOpenMemHandle) locks the goroutine to its
// thread, selects the device, and restores the thread's previous device
// before unlocking. Copies rely on unified virtual addressing (every 64-bit
// Linux CUDA setup), where a device pointer identifies its device.
//
// Memory: device memory is owned by whoever called Malloc until Free; a
// handle opened with IpcOpenMemHandle must be closed with IpcCloseMemHandle
// before the exporting process frees the memory. Host slices passed to the
// Memcpy* methods are only read or written for the duration of the call.
// The library is never unloaded (libcudart registers exit handlers).
//
// # Transfer engine
//
// *Runtime implements transfer.DeviceRuntime, so it goes into
// transfer.Config.CUDA (package transfer cannot import this one, which
// uses its errors). Copies run on the owning device's thread-locked
// context; host-to-device and device-to-device copies end with
// cudaStreamSynchronize of the default stream, because cudaMemcpy may
// return before such a copy landed, and a COMPLETED WRITE must be visible.
// The methods of a nil *Runtime (what a failed Load returns) fail with
// "unsupported: no CUDA runtime".
//
// IPC tokens: a CUDA IPC handle names a whole allocation, so ExportIPC
// looks the allocation up with the driver's cuMemGetAddressRange_v2 (from
// the runtime library if it exports it, else libcuda.so.1; without it no
// token is exported and peers use the network) and publishes
// "<128 hex digits of cudaIpcMemHandle_t>[@<offset of the buffer in the
// allocation>]" in the descriptor field mc_cuda_ipc; OpenIPC maps the
// handle with cudaIpcMemLazyEnablePeerAccess on the device of the
// buffer's location and adds the offset. CUDA refuses handles exported by
// the opening process itself, so two engines in one process fall back to
// tcp.
//
// What is verified where: the no-runtime path, every binding's calling
// convention (including the 64-byte cudaIpcMemHandle_t passed by value)
// and the engine paths (two engines over tcp: host to device, device to
// host, device to device, the local segment, and IPC within a process and
// across two processes) against a stand-in library compiled from
// testdata/fakecudart.c when a C compiler is present — its cudaMemcpy
// rejects a kind that does not match the pointers, and its allocations
// are memfds another process can map — and, on a machine with a GPU, the
// same engine runs and the cross-process IPC run on real device memory,
// plus a 1 MiB H2D/D2D/D2H round trip on device 0 (TestGPUEngines,
// TestGPUIPCAcrossProcesses, TestGPURoundTrip; skipped under -short or
// without a device).
//
// Concurrency: a Runtime is safe for concurrent use; the CUDA runtime is
// thread-safe and the Runtime itself is immutable after Load.
package cuda
