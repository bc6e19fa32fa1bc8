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

// sfenceAsm is a store fence (copy_amd64.s).
func sfenceAsm()

// stream copies len(d) (a multiple of 128; d 32-byte aligned) bytes of s
// into d with streaming stores, unfenced: fence must follow before the
// bytes are published.
func stream(d, s []byte) {
	if len(d) == 0 {
		return
	}
	// unsafe: passes the slices' data pointers to the assembly loop, which
	// touches exactly len(d) bytes of each.
	streamAsm(unsafe.Pointer(unsafe.SliceData(d)), unsafe.Pointer(unsafe.SliceData(s)), uintptr(len(d)))
}

// fence orders the streaming stores before it before every later store.
func fence() { sfenceAsm() }
