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
