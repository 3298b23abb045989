//go:build !purego

#include "textflag.h"

// NEON (ASIMD) kernels for arm64; see kernel_asm_arm64.go for what each
// computes and why the 8×12 tile.
//
// Go's assembler has vector FMLA but not its by-element form, nor vector
// FMUL or FADDP, so those are encoded here as WORDs (register numbers, not
// names, as arguments). The encodings follow the Arm ARM (A64, "Advanced
// SIMD vector x indexed element" and "three same"), 128-bit, single
// precision:
//
//	FMLAE(d, n, m, i): FMLA  Vd.4S, Vn.4S, Vm.S[i]  (Vd += Vn·Vm[i])
//	FMULE(d, n, m, i): FMUL  Vd.4S, Vn.4S, Vm.S[i]  (Vd = Vn·Vm[i])
//	FADDP4(d, n, m):   FADDP Vd.4S, Vn.4S, Vm.4S    (pairwise sums: n0+n1,
//	                                                 n2+n3, m0+m1, m2+m3)
//
// The index i goes to bits H:L (11, 21); m, all five bits, to M:Rm (20:16).
#define FMLAE(d, n, m, i) WORD $(0x4f801000 | ((m)<<16) | (((i)&1)<<21) | (((i)>>1)<<11) | ((n)<<5) | (d))
#define FMULE(d, n, m, i) WORD $(0x4f809000 | ((m)<<16) | (((i)&1)<<21) | (((i)>>1)<<11) | ((n)<<5) | (d))
#define FADDP4(d, n, m) WORD $(0x6e20d400 | ((m)<<16) | ((n)<<5) | (d))

// Storing a tile, shared by kernelNEON and streamNEON: row r of the tile
// is in accumulators Vc, Vc+1, Vc+2 (12 floats), alpha is broadcast in V0
// and beta in V1, R3 points at the row of C and R4 holds ldc in bytes.
// Each macro stores one row and moves R3 to the next; V2-V4 hold the
// result, V5-V7 the old row of C.
//
// STORE_ROW: C = alpha·acc, not reading C (it may hold NaNs).
#define STORE_ROW(c) \
	FMULE(2, c, 0, 0); \
	FMULE(3, (c)+1, 0, 0); \
	FMULE(4, (c)+2, 0, 0); \
	VST1.P [V2.S4, V3.S4, V4.S4], (R3)(R4)

// ACCUM_ROW: C = alpha·acc + beta·C, the second product fused.
#define ACCUM_ROW(c) \
	VLD1 (R3), [V5.S4, V6.S4, V7.S4]; \
	FMULE(2, c, 0, 0); \
	FMULE(3, (c)+1, 0, 0); \
	FMULE(4, (c)+2, 0, 0); \
	VFMLA V5.S4, V1.S4, V2.S4; \
	VFMLA V6.S4, V1.S4, V3.S4; \
	VFMLA V7.S4, V1.S4, V4.S4; \
	VST1.P [V2.S4, V3.S4, V4.S4], (R3)(R4)

#define ZERO(v) VEOR v.B16, v.B16, v.B16

// ZERO_TILE clears the 24 accumulators V8-V31.
#define ZERO_TILE \
	ZERO(V8); ZERO(V9); ZERO(V10); ZERO(V11); ZERO(V12); ZERO(V13); \
	ZERO(V14); ZERO(V15); ZERO(V16); ZERO(V17); ZERO(V18); ZERO(V19); \
	ZERO(V20); ZERO(V21); ZERO(V22); ZERO(V23); ZERO(V24); ZERO(V25); \
	ZERO(V26); ZERO(V27); ZERO(V28); ZERO(V29); ZERO(V30); ZERO(V31)

// kernelNEON register allocation:
//
//	R0 k (counts down), R1 packed A, R2 packed B, R3 C, R4 ldc in bytes
//	V0, V1    one k step of the A strip: rows 0-3 and 4-7
//	V2-V4     one k step of the B strip: columns 0-3, 4-7, 8-11
//	V8-V31    the 8×12 tile of C: row r, columns 4v..4v+3 in V(8+3r+v)
//	V5-V7     unused in the loop (the store's scratch)
//
// KROW(c, m, i) multiplies row r of the tile, whose A element is lane i
// of Vm, by the B step: three FMLAs by element.
#define KROW(c, m, i) \
	FMLAE(c, 2, m, i); \
	FMLAE((c)+1, 3, m, i); \
	FMLAE((c)+2, 4, m, i)

// KSTEP is one k step: 2 loads (5 vectors) and 24 FMLAs.
#define KSTEP \
	VLD1.P 32(R1), [V0.S4, V1.S4]; \
	VLD1.P 48(R2), [V2.S4, V3.S4, V4.S4]; \
	KROW(8, 0, 0); \
	KROW(11, 0, 1); \
	KROW(14, 0, 2); \
	KROW(17, 0, 3); \
	KROW(20, 1, 0); \
	KROW(23, 1, 1); \
	KROW(26, 1, 2); \
	KROW(29, 1, 3)

// func kernelNEON(k int, a, b, c *float32, ldc int, alpha, beta float32, accum int)
TEXT ·kernelNEON(SB), NOSPLIT, $0-56
	MOVD k+0(FP), R0
	MOVD a+8(FP), R1
	MOVD b+16(FP), R2
	MOVD c+24(FP), R3
	MOVD ldc+32(FP), R4
	LSL  $2, R4

	// Warm the C tile while the k loop runs: a row's 48 bytes lie in the
	// lines of its bytes 0 and 48.
	MOVD R3, R5
	PRFM (R5), PLDL1KEEP
	PRFM 48(R5), PLDL1KEEP
	ADD  R4, R5
	PRFM (R5), PLDL1KEEP
	PRFM 48(R5), PLDL1KEEP
	ADD  R4, R5
	PRFM (R5), PLDL1KEEP
	PRFM 48(R5), PLDL1KEEP
	ADD  R4, R5
	PRFM (R5), PLDL1KEEP
	PRFM 48(R5), PLDL1KEEP
	ADD  R4, R5
	PRFM (R5), PLDL1KEEP
	PRFM 48(R5), PLDL1KEEP
	ADD  R4, R5
	PRFM (R5), PLDL1KEEP
	PRFM 48(R5), PLDL1KEEP
	ADD  R4, R5
	PRFM (R5), PLDL1KEEP
	PRFM 48(R5), PLDL1KEEP
	ADD  R4, R5
	PRFM (R5), PLDL1KEEP
	PRFM 48(R5), PLDL1KEEP

	ZERO_TILE

	// Four k steps per iteration, then one at a time.
kloop4:
	CMP $4, R0
	BLT ktail
	KSTEP
	KSTEP
	KSTEP
	KSTEP
	SUB $4, R0
	B   kloop4

ktail:
	CBZ R0, kstore
	KSTEP
	SUB $1, R0
	B   ktail

kstore:
	FMOVS alpha+40(FP), F0
	VDUP  V0.S[0], V0.S4
	MOVD  accum+48(FP), R5
	CBZ   R5, koverwrite
	FMOVS beta+44(FP), F1
	VDUP  V1.S[0], V1.S4
	ACCUM_ROW(8)
	ACCUM_ROW(11)
	ACCUM_ROW(14)
	ACCUM_ROW(17)
	ACCUM_ROW(20)
	ACCUM_ROW(23)
	ACCUM_ROW(26)
	ACCUM_ROW(29)
	RET

koverwrite:
	STORE_ROW(8)
	STORE_ROW(11)
	STORE_ROW(14)
	STORE_ROW(17)
	STORE_ROW(20)
	STORE_ROW(23)
	STORE_ROW(26)
	STORE_ROW(29)
	RET

// streamNEON register allocation (the tile as in kernelNEON, so that the
// store macros serve both):
//
//	R0 rows, R1 k (counts down), R2 B's row, R3 ldb in bytes,
//	R5 aps in bytes, R6 ars in bytes, R7 B's row streamAhead steps on
//	R8-R15    A(r, p) for rows r = 0..7, each advanced by aps per step
//	V0, V1    A(r, p) broadcast, alternating between rows
//	V2-V4     row p of B's 12 columns
//	V8-V31    the tile, rows = 1..8 of it in use
//
// SROW multiplies one row of the tile: broadcast its A element (moving
// its pointer on), then three vector FMLAs.
#define SROW(p, x, c0, c1, c2) \
	VLD1R.P (p)(R5), [x.S4]; \
	VFMLA V2.S4, x.S4, c0.S4; \
	VFMLA V3.S4, x.S4, c1.S4; \
	VFMLA V4.S4, x.S4, c2.S4

#define SROW0 SROW(R8, V0, V8, V9, V10)
#define SROW1 SROW(R9, V1, V11, V12, V13)
#define SROW2 SROW(R10, V0, V14, V15, V16)
#define SROW3 SROW(R11, V1, V17, V18, V19)
#define SROW4 SROW(R12, V0, V20, V21, V22)
#define SROW5 SROW(R13, V1, V23, V24, V25)
#define SROW6 SROW(R14, V0, V26, V27, V28)
#define SROW7 SROW(R15, V1, V29, V30, V31)

// SLOAD loads row p of B and moves on to the next. B's rows lie far
// apart, out of the hardware prefetchers' reach on some cores: fetch the
// row 16 steps ahead (both lines a 48-byte row may touch; prefetches
// past the end of B do not fault).
#define SLOAD \
	VLD1.P (R2)(R3), [V2.S4, V3.S4, V4.S4]; \
	PRFM (R7), PLDL1KEEP; \
	PRFM 48(R7), PLDL1KEEP; \
	ADD R3, R7

// func streamNEON(rows int, k int, a *float32, ars int, aps int, b *float32, ldb int, c *float32, ldc int, alpha float32, beta float32, accum int)
TEXT ·streamNEON(SB), NOSPLIT, $0-88
	MOVD rows+0(FP), R0
	CMP  $1, R0
	BLT  sdone
	CMP  $8, R0
	BGT  sdone
	MOVD k+8(FP), R1
	MOVD a+16(FP), R8
	MOVD ars+24(FP), R6
	LSL  $2, R6
	MOVD aps+32(FP), R5
	LSL  $2, R5
	MOVD b+40(FP), R2
	MOVD ldb+48(FP), R3
	LSL  $2, R3
	LSL  $4, R3, R7
	ADD  R2, R7

	// Rows past rows get pointers too, never dereferenced.
	ADD R6, R8, R9
	ADD R6, R9, R10
	ADD R6, R10, R11
	ADD R6, R11, R12
	ADD R6, R12, R13
	ADD R6, R13, R14
	ADD R6, R14, R15

	ZERO_TILE
	CBZ R1, sstore

	// One loop per row count.
	CMP $1, R0
	BEQ s1
	CMP $2, R0
	BEQ s2
	CMP $3, R0
	BEQ s3
	CMP $4, R0
	BEQ s4
	CMP $5, R0
	BEQ s5
	CMP $6, R0
	BEQ s6
	CMP $7, R0
	BEQ s7

s8:
	SLOAD
	SROW0
	SROW1
	SROW2
	SROW3
	SROW4
	SROW5
	SROW6
	SROW7
	SUBS $1, R1
	BNE  s8
	B    sstore

s7:
	SLOAD
	SROW0
	SROW1
	SROW2
	SROW3
	SROW4
	SROW5
	SROW6
	SUBS $1, R1
	BNE  s7
	B    sstore

s6:
	SLOAD
	SROW0
	SROW1
	SROW2
	SROW3
	SROW4
	SROW5
	SUBS $1, R1
	BNE  s6
	B    sstore

s5:
	SLOAD
	SROW0
	SROW1
	SROW2
	SROW3
	SROW4
	SUBS $1, R1
	BNE  s5
	B    sstore

s4:
	SLOAD
	SROW0
	SROW1
	SROW2
	SROW3
	SUBS $1, R1
	BNE  s4
	B    sstore

s3:
	SLOAD
	SROW0
	SROW1
	SROW2
	SUBS $1, R1
	BNE  s3
	B    sstore

s2:
	SLOAD
	SROW0
	SROW1
	SUBS $1, R1
	BNE  s2
	B    sstore

s1:
	SLOAD
	SROW0
	SUBS $1, R1
	BNE  s1

	// Store rows rows of the tile, R0 counting them down.
sstore:
	MOVD  c+56(FP), R3
	MOVD  ldc+64(FP), R4
	LSL   $2, R4
	FMOVS alpha+72(FP), F0
	VDUP  V0.S[0], V0.S4
	MOVD  accum+80(FP), R5
	CBZ   R5, soverwrite
	FMOVS beta+76(FP), F1
	VDUP  V1.S[0], V1.S4
	ACCUM_ROW(8)
	SUBS  $1, R0
	BEQ   sdone
	ACCUM_ROW(11)
	SUBS  $1, R0
	BEQ   sdone
	ACCUM_ROW(14)
	SUBS  $1, R0
	BEQ   sdone
	ACCUM_ROW(17)
	SUBS  $1, R0
	BEQ   sdone
	ACCUM_ROW(20)
	SUBS  $1, R0
	BEQ   sdone
	ACCUM_ROW(23)
	SUBS  $1, R0
	BEQ   sdone
	ACCUM_ROW(26)
	SUBS  $1, R0
	BEQ   sdone
	ACCUM_ROW(29)
	RET

soverwrite:
	STORE_ROW(8)
	SUBS $1, R0
	BEQ  sdone
	STORE_ROW(11)
	SUBS $1, R0
	BEQ  sdone
	STORE_ROW(14)
	SUBS $1, R0
	BEQ  sdone
	STORE_ROW(17)
	SUBS $1, R0
	BEQ  sdone
	STORE_ROW(20)
	SUBS $1, R0
	BEQ  sdone
	STORE_ROW(23)
	SUBS $1, R0
	BEQ  sdone
	STORE_ROW(26)
	SUBS $1, R0
	BEQ  sdone
	STORE_ROW(29)

sdone:
	RET

// dotsNEON register allocation:
//
//	R0 rows, R1 k%4 (then counts down), R2 k/4 (counts down)
//	R8-R11    rows 0-3 of a, R12-R15 rows 0-3 of b, moving along k
//	V0-V15    the sums: row i, column j in V(4i+j), one partial sum per
//	          lane (lane l holds the terms p ≡ l mod 4; the k%4 tail ones
//	          go to lane 0)
//	V16-V19   4 elements of rows 0-3 of a
//	V20-V23   4 elements of rows 0-3 of b
//
// DFMA multiplies one row of a (in x) by the four rows of b.
#define DFMA(x, c0, c1, c2, c3) \
	VFMLA V20.S4, x.S4, c0.S4; \
	VFMLA V21.S4, x.S4, c1.S4; \
	VFMLA V22.S4, x.S4, c2.S4; \
	VFMLA V23.S4, x.S4, c3.S4

// DLOADB loads 4 elements of each row of b; DROWi loads 4 of row i of a
// and multiplies it.
#define DLOADB \
	VLD1.P 16(R12), [V20.S4]; \
	VLD1.P 16(R13), [V21.S4]; \
	VLD1.P 16(R14), [V22.S4]; \
	VLD1.P 16(R15), [V23.S4]

#define DROW0 VLD1.P 16(R8), [V16.S4]; DFMA(V16, V0, V1, V2, V3)
#define DROW1 VLD1.P 16(R9), [V17.S4]; DFMA(V17, V4, V5, V6, V7)
#define DROW2 VLD1.P 16(R10), [V18.S4]; DFMA(V18, V8, V9, V10, V11)
#define DROW3 VLD1.P 16(R11), [V19.S4]; DFMA(V19, V12, V13, V14, V15)

// The tail, one element at a time, into lane 0 of V16-V23, whose other
// lanes were cleared, so that they add zeros.
#define DTLOADB \
	VLD1.P 4(R12), V20.S[0]; \
	VLD1.P 4(R13), V21.S[0]; \
	VLD1.P 4(R14), V22.S[0]; \
	VLD1.P 4(R15), V23.S[0]

#define DTROW0 VLD1.P 4(R8), V16.S[0]; DFMA(V16, V0, V1, V2, V3)
#define DTROW1 VLD1.P 4(R9), V17.S[0]; DFMA(V17, V4, V5, V6, V7)
#define DTROW2 VLD1.P 4(R10), V18.S[0]; DFMA(V18, V8, V9, V10, V11)
#define DTROW3 VLD1.P 4(R11), V19.S[0]; DFMA(V19, V12, V13, V14, V15)

#define DZERO_IN \
	ZERO(V16); ZERO(V17); ZERO(V18); ZERO(V19); \
	ZERO(V20); ZERO(V21); ZERO(V22); ZERO(V23)

// DREDUCE(c) sums the lanes of row i's four accumulators V(c)..V(c+3)
// into one vector, column j in lane j, and stores it at R3, moving on.
#define DREDUCE(c) \
	FADDP4(16, c, (c)+1); \
	FADDP4(17, (c)+2, (c)+3); \
	FADDP4(16, 16, 17); \
	VST1.P [V16.S4], 16(R3)

// func dotsNEON(rows int, k int, a *float32, lda int, b *float32, ldb int, out *float32)
TEXT ·dotsNEON(SB), NOSPLIT, $0-56
	MOVD rows+0(FP), R0
	CMP  $1, R0
	BLT  ddone
	CMP  $4, R0
	BGT  ddone
	MOVD k+8(FP), R1
	LSR  $2, R1, R2
	AND  $3, R1
	MOVD a+16(FP), R8
	MOVD lda+24(FP), R6
	LSL  $2, R6
	ADD  R6, R8, R9
	ADD  R6, R9, R10
	ADD  R6, R10, R11
	MOVD b+32(FP), R12
	MOVD ldb+40(FP), R7
	LSL  $2, R7
	ADD  R7, R12, R13
	ADD  R7, R13, R14
	ADD  R7, R14, R15

	ZERO(V0); ZERO(V1); ZERO(V2); ZERO(V3)
	ZERO(V4); ZERO(V5); ZERO(V6); ZERO(V7)
	ZERO(V8); ZERO(V9); ZERO(V10); ZERO(V11)
	ZERO(V12); ZERO(V13); ZERO(V14); ZERO(V15)

	// One loop (and tail loop) per row count.
	CMP $1, R0
	BEQ d1
	CMP $2, R0
	BEQ d2
	CMP $3, R0
	BEQ d3

d4:
	CBZ R2, d4tail
d4loop:
	DLOADB
	DROW0
	DROW1
	DROW2
	DROW3
	SUBS $1, R2
	BNE  d4loop
d4tail:
	CBZ R1, dreduce
	DZERO_IN
d4tloop:
	DTLOADB
	DTROW0
	DTROW1
	DTROW2
	DTROW3
	SUBS $1, R1
	BNE  d4tloop
	B    dreduce

d3:
	CBZ R2, d3tail
d3loop:
	DLOADB
	DROW0
	DROW1
	DROW2
	SUBS $1, R2
	BNE  d3loop
d3tail:
	CBZ R1, dreduce
	DZERO_IN
d3tloop:
	DTLOADB
	DTROW0
	DTROW1
	DTROW2
	SUBS $1, R1
	BNE  d3tloop
	B    dreduce

d2:
	CBZ R2, d2tail
d2loop:
	DLOADB
	DROW0
	DROW1
	SUBS $1, R2
	BNE  d2loop
d2tail:
	CBZ R1, dreduce
	DZERO_IN
d2tloop:
	DTLOADB
	DTROW0
	DTROW1
	SUBS $1, R1
	BNE  d2tloop
	B    dreduce

d1:
	CBZ R2, d1tail
d1loop:
	DLOADB
	DROW0
	SUBS $1, R2
	BNE  d1loop
d1tail:
	CBZ R1, dreduce
	DZERO_IN
d1tloop:
	DTLOADB
	DTROW0
	SUBS $1, R1
	BNE  d1tloop

	// Store rows rows of sums, R0 counting them down.
dreduce:
	MOVD out+48(FP), R3
	DREDUCE(0)
	SUBS $1, R0
	BEQ  ddone
	DREDUCE(4)
	SUBS $1, R0
	BEQ  ddone
	DREDUCE(8)
	SUBS $1, R0
	BEQ  ddone
	DREDUCE(12)

ddone:
	RET

// TRANSPOSE4 sets o0-o3 to the columns of the 4×4 block whose rows are
// r0-r3, through t0-t3: pairs of lanes first (TRN1/TRN2 on .S4), then
// pairs of halves (on .D2).
#define TRANSPOSE4(r0, r1, r2, r3, t0, t1, t2, t3, o0, o1, o2, o3) \
	VTRN1 r1.S4, r0.S4, t0.S4; \
	VTRN2 r1.S4, r0.S4, t1.S4; \
	VTRN1 r3.S4, r2.S4, t2.S4; \
	VTRN2 r3.S4, r2.S4, t3.S4; \
	VTRN1 t2.D2, t0.D2, o0.D2; \
	VTRN1 t3.D2, t1.D2, o1.D2; \
	VTRN2 t2.D2, t0.D2, o2.D2; \
	VTRN2 t3.D2, t1.D2, o3.D2

// transpose8NEON: R0 dst row (8b), R1 dstride in bytes, R2 src at column
// 8b, R3 sstride in bytes, R4 blocks left, R5 the src row being loaded.
// Row i of the 8×8 block is in V(2i) (columns 0-3) and V(2i+1) (4-7);
// output row p is built in V(20+2q), V(21+2q), q = p mod 4, four at a
// time.
//
// func transpose8NEON(dst *float32, dstride int, src *float32, sstride int, blocks int)
TEXT ·transpose8NEON(SB), NOSPLIT, $0-40
	MOVD dst+0(FP), R0
	MOVD dstride+8(FP), R1
	LSL  $2, R1
	MOVD src+16(FP), R2
	MOVD sstride+24(FP), R3
	LSL  $2, R3
	MOVD blocks+32(FP), R4
	CBZ  R4, t8done

t8loop:
	MOVD   R2, R5
	VLD1.P (R5)(R3), [V0.S4, V1.S4]
	VLD1.P (R5)(R3), [V2.S4, V3.S4]
	VLD1.P (R5)(R3), [V4.S4, V5.S4]
	VLD1.P (R5)(R3), [V6.S4, V7.S4]
	VLD1.P (R5)(R3), [V8.S4, V9.S4]
	VLD1.P (R5)(R3), [V10.S4, V11.S4]
	VLD1.P (R5)(R3), [V12.S4, V13.S4]
	VLD1   (R5), [V14.S4, V15.S4]

	// Output rows 0-3: columns 0-3 of rows 0-3, then of rows 4-7.
	TRANSPOSE4(V0, V2, V4, V6, V16, V17, V18, V19, V20, V22, V24, V26)
	TRANSPOSE4(V8, V10, V12, V14, V16, V17, V18, V19, V21, V23, V25, V27)
	VST1.P [V20.S4, V21.S4], (R0)(R1)
	VST1.P [V22.S4, V23.S4], (R0)(R1)
	VST1.P [V24.S4, V25.S4], (R0)(R1)
	VST1.P [V26.S4, V27.S4], (R0)(R1)

	// Output rows 4-7: columns 4-7.
	TRANSPOSE4(V1, V3, V5, V7, V16, V17, V18, V19, V20, V22, V24, V26)
	TRANSPOSE4(V9, V11, V13, V15, V16, V17, V18, V19, V21, V23, V25, V27)
	VST1.P [V20.S4, V21.S4], (R0)(R1)
	VST1.P [V22.S4, V23.S4], (R0)(R1)
	VST1.P [V24.S4, V25.S4], (R0)(R1)
	VST1.P [V26.S4, V27.S4], (R0)(R1)

	ADD  $32, R2
	SUBS $1, R4
	BNE  t8loop

t8done:
	RET

// transpose4NEON: as transpose8NEON with 4 rows: row i in V(2i), V(2i+1);
// output rows 0-3 in V20-V23, 4-7 in V24-V27.
//
// func transpose4NEON(dst *float32, dstride int, src *float32, sstride int, blocks int)
TEXT ·transpose4NEON(SB), NOSPLIT, $0-40
	MOVD dst+0(FP), R0
	MOVD dstride+8(FP), R1
	LSL  $2, R1
	MOVD src+16(FP), R2
	MOVD sstride+24(FP), R3
	LSL  $2, R3
	MOVD blocks+32(FP), R4
	CBZ  R4, t4done

t4loop:
	MOVD   R2, R5
	VLD1.P (R5)(R3), [V0.S4, V1.S4]
	VLD1.P (R5)(R3), [V2.S4, V3.S4]
	VLD1.P (R5)(R3), [V4.S4, V5.S4]
	VLD1   (R5), [V6.S4, V7.S4]

	TRANSPOSE4(V0, V2, V4, V6, V16, V17, V18, V19, V20, V21, V22, V23)
	TRANSPOSE4(V1, V3, V5, V7, V16, V17, V18, V19, V24, V25, V26, V27)
	VST1.P [V20.S4], (R0)(R1)
	VST1.P [V21.S4], (R0)(R1)
	VST1.P [V22.S4], (R0)(R1)
	VST1.P [V23.S4], (R0)(R1)
	VST1.P [V24.S4], (R0)(R1)
	VST1.P [V25.S4], (R0)(R1)
	VST1.P [V26.S4], (R0)(R1)
	VST1.P [V27.S4], (R0)(R1)

	ADD  $32, R2
	SUBS $1, R4
	BNE  t4loop

t4done:
	RET
