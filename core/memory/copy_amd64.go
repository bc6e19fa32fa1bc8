package memory

import (
	"unsafe"

	"github.com/klauspost/cpuid/v2"
)

// hasNT reports AVX (32-byte loads and VMOVNTDQ streaming stores).
var hasNT = cpuid.CPU.Supports(cpuid.AVX)

// copyNTAsm streams n bytes (a multiple of 128) from src to the 32-byte
// aligned dst, then fences (copy_amd64.s).
//
//go:noescape
func copyNTAsm(dst, src unsafe.Pointer, n uintptr)

// copyNT copies len(d) (a multiple of 128; d 32-byte aligned) bytes of s
// into d with streaming stores.
func copyNT(d, s []byte) {
	if len(d) == 0 {
		return
	}
	// unsafe: passes the slices' data pointers to the assembly loop, which
	// touches exactly len(d) bytes of each.
	copyNTAsm(unsafe.Pointer(unsafe.SliceData(d)), unsafe.Pointer(unsafe.SliceData(s)), uintptr(len(d)))
}
