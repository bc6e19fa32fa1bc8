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
// What is verified where: the no-runtime path, every binding's calling
// convention (including the 64-byte cudaIpcMemHandle_t passed by value)
// against a stand-in library compiled from testdata/fakecudart.c when a C
// compiler is present, and — on a machine with a GPU — a 1 MiB
// H2D/D2D/D2H round trip on device 0 (TestGPURoundTrip, skipped under
// -short or without a device).
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
// Concurrency: a Runtime is safe for concurrent use; the CUDA runtime is
// thread-safe and the Runtime itself is immutable after Load.
package cuda
