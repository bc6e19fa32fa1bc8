package memory

import (
	"unsafe"

	"github.com/klauspost/cpuid/v2"
)

// hasNT reports AVX (32-byte loads and VMOVNTDQ streaming stores).
var hasNT = cpuid.CPU.Supports(cpuid.AVX)

// streamAsm streams n bytes (a multiple of 128) from src to the 32-byte
// aligned dst, without a fence (copy_amd64.s).
//
//go:noescape
func streamAsm(dst, src unsafe.Pointer, n uintptr)

// streamPrefetchAsm is streamAsm with software prefetches of the source
// gatherAhead bytes ahead, running on into next (copy_amd64.s).
//
//go:noescape
func streamPrefetchAsm(dst, src unsafe.Pointer, n uintptr, next unsafe.Pointer)

// sfenceAsm is a store fence (copy_amd64.s).
func sfenceAsm()

// stream copies len(d) (a multiple of 128; d 32-byte aligned) bytes of s
// into d with streaming stores, unfenced: fence must follow before the
// bytes are published. With prefetch it also prefetches s ahead of the
// loads, running on into next (the source read after s; may be empty).
func stream(d, s []byte, prefetch bool, next []byte) {
	if len(d) == 0 {
		return
	}
	// unsafe: passes the slices' data pointers to the assembly loops, which
	// load and store exactly len(d) bytes of each; the prefetches touch no
	// memory architecturally (they never fault, and write nothing).
	dp, sp := unsafe.Pointer(unsafe.SliceData(d)), unsafe.Pointer(unsafe.SliceData(s))
	if !prefetch {
		streamAsm(dp, sp, uintptr(len(d)))
		return
	}
	var np unsafe.Pointer
	if len(next) > 0 {
		np = unsafe.Pointer(unsafe.SliceData(next))
	}
	streamPrefetchAsm(dp, sp, uintptr(len(d)), np)
}

// fence orders the streaming stores before it before every later store.
func fence() { sfenceAsm() }
