#include "textflag.h"

// func streamAsm(dst, src unsafe.Pointer, n uintptr)
// n is a multiple of 128 and dst is 32-byte aligned. Loads are unaligned;
// stores are non-temporal and not fenced: the caller calls sfenceAsm
// before whatever must see them (such as acknowledging the transfer).
TEXT ·streamAsm(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $7, CX
	JZ   done

loop:
	VMOVDQU  0(SI), Y0
	VMOVDQU  32(SI), Y1
	VMOVDQU  64(SI), Y2
	VMOVDQU  96(SI), Y3
	VMOVNTDQ Y0, 0(DI)
	VMOVNTDQ Y1, 32(DI)
	VMOVNTDQ Y2, 64(DI)
	VMOVNTDQ Y3, 96(DI)
	ADDQ     $128, SI
	ADDQ     $128, DI
	DECQ     CX
	JNZ      loop
	VZEROUPPER

done:
	RET

// func sfenceAsm()
// SFENCE orders every earlier non-temporal store before later stores.
TEXT ·sfenceAsm(SB), NOSPLIT, $0-0
	SFENCE
	RET

// func streamPrefetchAsm(dst, src unsafe.Pointer, n uintptr, next unsafe.Pointer)
// As streamAsm, and prefetches the source gatherAhead (8 KiB) ahead of
// the loads; within the last 8 KiB of src it prefetches the start of next
// (the piece read after this one; nil: none) at the same distance, so
// that the prefetch stream runs on across a gather's pieces. Prefetches
// never fault, whatever the address.
TEXT ·streamPrefetchAsm(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ next+24(FP), R9
	LEAQ (SI)(CX*1), R8 // end of src
	SHRQ $7, CX
	JZ   pdone

ploop:
	LEAQ  8192(SI), AX // gatherAhead
	CMPQ  AX, R8
	JB    pfetch
	TESTQ R9, R9
	JZ    pcopy
	SUBQ  R8, AX
	ADDQ  R9, AX

pfetch:
	PREFETCHT0 (AX)
	PREFETCHT0 64(AX)

pcopy:
	VMOVDQU  0(SI), Y0
	VMOVDQU  32(SI), Y1
	VMOVDQU  64(SI), Y2
	VMOVDQU  96(SI), Y3
	VMOVNTDQ Y0, 0(DI)
	VMOVNTDQ Y1, 32(DI)
	VMOVNTDQ Y2, 64(DI)
	VMOVNTDQ Y3, 96(DI)
	ADDQ     $128, SI
	ADDQ     $128, DI
	DECQ     CX
	JNZ      ploop
	VZEROUPPER

pdone:
	RET
