package cbridge

import (
	"fmt"
	"math"
	"unsafe"
)

// MinAddr is the lowest address accepted for foreign memory. Linux never maps
// the first pages (vm.mmap_min_addr is at least 4096), so anything below is
// NULL or a small integer passed by mistake. Rejecting it also keeps such
// values out of Go pointer variables, which the runtime would abort on.
const MinAddr = 4096

// CheckRange validates foreign memory [addr, addr+n) passed by C: addr not
// NULL (nor in the zero page), n > 0, the range not running past the end of
// the address space, n small enough for a Go slice. Errors wrap
// ErrInvalidArgument and name what.
func CheckRange(what string, addr, n uintptr) error {
	switch {
	case addr == 0:
		return Null(what)
	case addr < MinAddr:
		return fmt.Errorf("%w: %s %#x is not a valid address", ErrInvalidArgument, what, addr)
	case n == 0:
		return fmt.Errorf("%w: %s has zero length", ErrInvalidArgument, what)
	case n > math.MaxInt || uint64(n)-1 > math.MaxUint64-uint64(addr):
		return fmt.Errorf("%w: %s [%#x, +%d) runs past the end of the address space", ErrInvalidArgument, what, addr, uint64(n))
	}
	return nil
}

// Bytes returns the n bytes at ptr as a slice, without any check (use
// ForeignBytes for memory from C). The slice aliases foreign memory: it is
// valid only while the owner keeps that memory mapped, and the garbage
// collector neither scans nor frees it.
func Bytes(ptr unsafe.Pointer, n uintptr) []byte {
	// unsafe: builds a slice header over memory the Go runtime does not own;
	// the caller guarantees [ptr, ptr+n) is mapped for as long as the slice
	// is used.
	return unsafe.Slice((*byte)(ptr), n)
}

// ForeignBytes validates [addr, addr+n) with CheckRange and returns it as a
// slice (see Bytes for its lifetime). The memory is not touched here.
func ForeignBytes(what string, addr, n uintptr) ([]byte, error) {
	if err := CheckRange(what, addr, n); err != nil {
		return nil, err
	}
	// unsafe: turns a validated integer address from C into a pointer.
	// unsafe.Add from nil is the pointer arithmetic form vet accepts; the
	// result points outside the Go heap, so no GC invariant is involved.
	return Bytes(unsafe.Add(nil, addr), n), nil
}

// Slice returns the C array p[0..n) of T as a Go slice aliasing C memory,
// valid for the duration of the C call that passed p. Errors wrap
// ErrInvalidArgument: p NULL, n zero, or the array running past the end of
// the address space.
func Slice[T any](what string, p *T, n uintptr) ([]T, error) {
	var zero T
	size := unsafe.Sizeof(zero)
	if p == nil {
		return nil, Null(what)
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: %s has zero elements", ErrInvalidArgument, what)
	}
	if size > 0 && n > math.MaxInt/size {
		return nil, fmt.Errorf("%w: %s has %d elements of %d bytes, more than the address space", ErrInvalidArgument, what, uint64(n), size)
	}
	// unsafe: reads p's address to check the array does not wrap around.
	if err := CheckRange(what, uintptr(unsafe.Pointer(p)), max(n*size, 1)); err != nil {
		return nil, err
	}
	// unsafe: a slice header over a C array; C owns the memory and keeps it
	// valid for the call.
	return unsafe.Slice(p, n), nil
}
