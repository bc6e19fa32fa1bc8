package memory

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"unsafe"
)

// ErrInvalidSize is returned by Map for a size that is zero, negative or too
// large for the address space.
var ErrInvalidSize = errors.New("memory: invalid size")

// ErrClosed is returned by Region.Close when the region was already closed.
var ErrClosed = errors.New("memory: region closed")

// Region is a read-write mmap of Len bytes (anonymous and private from Map,
// a sealed shared memory file from MapShared or MapFD) that lives
// outside the Go heap, so the garbage collector never moves or scans it and a
// remote peer can address it by virtual address.
type Region struct {
	mu struct {
		sync.Mutex
		buf []byte // nil once closed
		// fd is the memory file behind a shared mapping (MapShared, MapFD),
		// valid while shared is true; Close closes it. Map leaves both zero.
		fd     int
		shared bool
	}
	addr   uint64
	length int
}

// Map maps size bytes of zeroed anonymous memory. Errors: ErrInvalidSize for
// size <= 0; the mmap errno (wrapped, naming the size) otherwise. Mirrors the
// way upstream Mooncake allocates a client's global segment (plain mmap, not
// hugepages, unless MC_STORE_USE_HUGEPAGE is set upstream).
func Map(size int) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: %d bytes", ErrInvalidSize, size)
	}
	buf, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("memory: mmap %d bytes: %w", size, err)
	}
	r := &Region{addr: AddrOf(buf), length: size}
	r.mu.buf = buf
	return r, nil
}

// Bytes returns the whole mapping as a slice (length Len). The slice aliases
// the mapping and is valid until Close; it is nil after Close.
func (r *Region) Bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.buf
}

// Addr is the virtual address of the first byte of the mapping; it stays the
// same for the region's life.
func (r *Region) Addr() uint64 { return r.addr }

// Len is the size of the mapping in bytes.
func (r *Region) Len() int { return r.length }

// Close unmaps the region. Errors: ErrClosed on a second call; the munmap
// errno otherwise. Callers must unregister the region from every engine first.
func (r *Region) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.buf == nil {
		return ErrClosed
	}
	err := syscall.Munmap(r.mu.buf)
	r.mu.buf = nil
	if r.mu.shared {
		r.mu.shared = false
		if cerr := syscall.Close(r.mu.fd); cerr != nil && err == nil {
			return fmt.Errorf("memory: close memory file %d of region at %#x: %w", r.mu.fd, r.addr, cerr)
		}
	}
	if err != nil {
		return fmt.Errorf("memory: munmap %d bytes at %#x: %w", r.length, r.addr, err)
	}
	return nil
}

// AddrOf returns the virtual address of b's first byte, or 0 for an empty
// slice. The address is only meaningful while b's memory stays where it is:
// use it for off-heap memory (Region) or memory owned by a foreign caller,
// never for Go-heap slices that a peer will address later.
func AddrOf(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	// unsafe: reading the address of a slice's backing array; no pointer is
	// created from an integer here.
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}
