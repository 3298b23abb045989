package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The bf16 kernels. A bf16 operand is held as 32-bit words, each a pair
// of bf16 numbers adjacent in k (the even one in the low half), which
// VDPBF16PS multiplies and adds into one float32 lane.

// bf16Kernels generates the AVX512_BF16 kernels and the test hooks for
// the two instructions.
func bf16Kernels() {
	vdpbf16psHook()
	vcvtne2ps2bf16Hook()
	// Tiles of up to 14 rows by one 32-column strip of packed B: 28
	// accumulators, 2 vectors of B, 2 broadcasts of A.
	bf16Stream("tileBF16AVX512", 1, 14)
	// Up to 2 rows by 4 strips, for decoding: 16 accumulators and 8
	// vectors of B, so that each pair of A reads 512 bytes of B in four
	// sequential streams.
	bf16Stream("wideBF16AVX512", 4, 2)
	cvtBF16()
	interleaveBF16()
	peakLoops()
	amxBF16()
	amxLoop()
}

func vdpbf16psHook() {
	TEXT("vdpbf16psVec", NOSPLIT, "func(acc *float32, a, b *uint32)")
	Pragma("noescape")
	Doc("vdpbf16psVec sets acc[i] to one VDPBF16PS step of acc[i], a[i] and b[i] for",
		"i < 16, for tests of the instruction's arithmetic.")
	acc := Load(Param("acc"), RAX)
	a := Load(Param("a"), RCX)
	b := Load(Param("b"), RDX)
	VMOVUPS(Mem{Base: acc}, Z0)
	VMOVUPS(Mem{Base: a}, Z1)
	VMOVUPS(Mem{Base: b}, Z2)
	vdpbf16ps(Z0, Z1, Z2)
	VMOVUPS(Z0, Mem{Base: acc})
	VZEROUPPER()
	RET()
}

func vcvtne2ps2bf16Hook() {
	TEXT("vcvtne2ps2bf16Vec", NOSPLIT, "func(dst *uint32, lo, hi *float32)")
	Pragma("noescape")
	Doc("vcvtne2ps2bf16Vec sets the 32 bf16 halves of dst[:16] to lo[:16] then",
		"hi[:16] rounded by VCVTNE2PS2BF16, for tests of the instruction.")
	dst := Load(Param("dst"), RAX)
	lo := Load(Param("lo"), RCX)
	hi := Load(Param("hi"), RDX)
	VMOVUPS(Mem{Base: lo}, Z1)
	VMOVUPS(Mem{Base: hi}, Z2)
	vcvtne2ps2bf16(Z0, Z2, Z1)
	VMOVUPS(Z0, Mem{Base: dst})
	VZEROUPPER()
	RET()
}

// bf16Stream generates a kernel computing rows ≤ maxRows rows (a run-time
// argument, one code path per count) of nstrips strips of C:
//
//	C[i, 32t+j] = alpha·Σ_p dot(A(i, p), b[t·bs + 32p + j]) (+ beta·C)
//
// with A(i, p) = a[i·ars + p·aps], the pair p of row i, and b packed as
// PackedBF16's strips (bs words apart). Each sum runs over the pairs in
// order, one VDPBF16PS per pair, in one lane: the arithmetic of the
// portable dot2, whatever the kernel or the tile. The epilogue rounds
// alpha·sum and beta·C separately before adding them (no FMA), as
// package blas's finish does. mask selects the columns of the last strip
// (bit j for column j) that are stored.
func bf16Stream(name string, nstrips, maxRows int) {
	TEXT(name, NOSPLIT, "func(rows, kp int, a *uint32, ars, aps int, b *uint32, bs int, c *float32, ldc int, alpha, beta float32, accum int, mask uint32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes rows ≤ %d rows by %d columns of C from bf16 pairs", name, maxRows, 32*nstrips),
		"of A (with strides ars, aps) and packed strips of B (bs words apart),",
		"with AVX512_BF16; see package _asm.")
	rows := Load(Param("rows"), GP64())
	for r := 1; r <= maxRows; r++ {
		CMPQ(rows, U8(r))
		JEQ(LabelRef(fmt.Sprintf("%s_%d", name, r)))
	}
	RET()
	for r := 1; r <= maxRows; r++ {
		bf16StreamRows(name, nstrips, r)
	}
}

func bf16StreamRows(name string, nstrips, rows int) {
	nvec := 2 * nstrips
	nacc := rows * nvec
	if nacc+nvec+2 > 32 {
		panic(fmt.Sprintf("%s: %d rows do not fit", name, rows))
	}
	pre := fmt.Sprintf("%s_%d", name, rows)
	Label(pre)
	kp := Load(Param("kp"), GP64())
	bases, rs, rs3 := rowBases(Load(Param("a"), GP64()), "ars", rows)
	aps := Load(Param("aps"), GP64())
	SHLQ(U8(2), aps)
	b := Load(Param("b"), GP64())
	var bs, bs3 Register
	if nstrips > 1 {
		bs = Load(Param("bs"), GP64())
		SHLQ(U8(2), bs)
		bs3 = GP64()
		LEAQ(Mem{Base: bs, Index: bs, Scale: 2}, bs3)
	}
	strip := func(t int) Mem { return strided([]Register{b}, bs, bs3, t) }

	acc := make([]VecPhysical, nacc)
	for i := range acc {
		acc[i] = zmm[i]
		VXORPS(acc[i], acc[i], acc[i])
	}
	bv := zmm[nacc : nacc+nvec]
	bc := []VecPhysical{Z30, Z31}

	// Warm the C tile while the k loop runs: its rows, often far apart
	// and not in cache, would otherwise be waited for at the stores.
	{
		row := Load(Param("c"), GP64())
		ldc := Load(Param("ldc"), GP64())
		SHLQ(U8(2), ldc)
		for i := 0; i < rows; i++ {
			for l := 0; l < 2*nstrips; l++ {
				PREFETCHT0(Mem{Base: row, Disp: 64 * l})
			}
			if i < rows-1 {
				ADDQ(ldc, row)
			}
		}
	}

	TESTQ(kp, kp)
	JZ(LabelRef(pre + "_store"))
	Label(pre + "_loop")
	for v := range bv {
		VMOVUPS(strip(v/2).Offset(64*(v%2)), bv[v])
	}
	for i := 0; i < rows; i++ {
		x := bc[i%2]
		VPBROADCASTD(strided(bases, rs, rs3, i), x)
		for v := range bv {
			vdpbf16ps(acc[i*nvec+v], x, bv[v])
		}
	}
	for _, q := range bases {
		ADDQ(aps, q)
	}
	ADDQ(U8(128), b)
	DECQ(kp)
	JNZ(LabelRef(pre + "_loop"))

	// C = alpha·acc (+ beta·C), the last strip under the mask.
	Label(pre + "_store")
	mask := Load(Param("mask"), GP32())
	KMOVW(mask, K1)
	SHRL(U8(16), mask)
	KMOVW(mask, K2)
	c := Load(Param("c"), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(U8(2), ldc)
	alpha, beta, tmp := bv[0], bc[0], bv[1]
	VBROADCASTSS(addr("alpha"), alpha)
	for i := range acc {
		VMULPS(alpha, acc[i], acc[i])
	}
	at := func(v int) Mem { return Mem{Base: c, Disp: 64 * v} }
	last := func(v int) (Register, bool) {
		switch v {
		case nvec - 2:
			return K1, true
		case nvec - 1:
			return K2, true
		}
		return nil, false
	}
	accum := Load(Param("accum"), GP64())
	TESTQ(accum, accum)
	JZ(LabelRef(pre + "_overwrite"))
	VBROADCASTSS(addr("beta"), beta)
	for i := 0; i < rows; i++ {
		for v := 0; v < nvec; v++ {
			if k, ok := last(v); ok {
				VMOVUPS_Z(at(v), k, tmp)
			} else {
				VMOVUPS(at(v), tmp)
			}
			VMULPS(beta, tmp, tmp)
			VADDPS(tmp, acc[i*nvec+v], acc[i*nvec+v])
			if k, ok := last(v); ok {
				VMOVUPS(acc[i*nvec+v], k, at(v))
			} else {
				VMOVUPS(acc[i*nvec+v], at(v))
			}
		}
		if i < rows-1 {
			ADDQ(ldc, c)
		}
	}
	VZEROUPPER()
	RET()

	Label(pre + "_overwrite")
	for i := 0; i < rows; i++ {
		for v := 0; v < nvec; v++ {
			if k, ok := last(v); ok {
				VMOVUPS(acc[i*nvec+v], k, at(v))
			} else {
				VMOVUPS(acc[i*nvec+v], at(v))
			}
		}
		if i < rows-1 {
			ADDQ(ldc, c)
		}
	}
	VZEROUPPER()
	RET()
}

// cvtBF16 generates the conversion of a run of floats to bf16 pairs in
// order (a row of A as stored, or of B transposed: k is the contiguous
// index).
func cvtBF16() {
	TEXT("cvtBF16AVX512", NOSPLIT, "func(dst *uint32, src *float32, blocks int)")
	Pragma("noescape")
	Doc("cvtBF16AVX512 sets dst[i] to the bf16 pair (src[2i], src[2i+1]) rounded by",
		"VCVTNE2PS2BF16, for i < 16·blocks.")
	dst := Load(Param("dst"), RAX)
	src := Load(Param("src"), RCX)
	n := Load(Param("blocks"), RDX)
	TESTQ(n, n)
	JZ(LabelRef("cvt_done"))
	Label("cvt_loop")
	VMOVUPS(Mem{Base: src}, Z1)
	VMOVUPS(Mem{Base: src, Disp: 64}, Z2)
	vcvtne2ps2bf16(Z0, Z2, Z1)
	VMOVUPS(Z0, Mem{Base: dst})
	ADDQ(U8(128), src)
	ADDQ(U8(64), dst)
	DECQ(n)
	JNZ(LabelRef("cvt_loop"))
	Label("cvt_done")
	VZEROUPPER()
	RET()
}

// interleaveBF16 generates the packing of two rows into pairs (rows 2p
// and 2p+1 of B as stored, or of A transposed: the pairs' two elements
// lie a row apart).
func interleaveBF16() {
	// Word indices that interleave the low half (row 0) with the high.
	idx := GLOBL("bf16interleave", RODATA|NOPTR)
	for j := 0; j < 16; j++ {
		DATA(4*j, U16(j))
		DATA(4*j+2, U16(16+j))
	}

	TEXT("interleaveBF16AVX512", NOSPLIT, "func(dst *uint32, r0, r1 *float32, blocks int)")
	Pragma("noescape")
	Doc("interleaveBF16AVX512 sets dst[j] to the bf16 pair (r0[j], r1[j]) rounded by",
		"VCVTNE2PS2BF16, for j < 16·blocks.")
	dst := Load(Param("dst"), RAX)
	r0 := Load(Param("r0"), RCX)
	r1 := Load(Param("r1"), RDX)
	n := Load(Param("blocks"), RBX)
	VMOVUPS(idx, Z3)
	TESTQ(n, n)
	JZ(LabelRef("interleave_done"))
	Label("interleave_loop")
	VMOVUPS(Mem{Base: r0}, Z1)
	VMOVUPS(Mem{Base: r1}, Z2)
	vcvtne2ps2bf16(Z0, Z2, Z1)
	VPERMW(Z0, Z3, Z0)
	VMOVUPS(Z0, Mem{Base: dst})
	ADDQ(U8(64), r0)
	ADDQ(U8(64), r1)
	ADDQ(U8(64), dst)
	DECQ(n)
	JNZ(LabelRef("interleave_loop"))
	Label("interleave_done")
	VZEROUPPER()
	RET()
}

// peakLoops generates bare instruction loops, for benchmarks of what the
// units reach: 24 independent accumulators, so that latency hides.
func peakLoops() {
	TEXT("vdpbf16psLoop", NOSPLIT, "func(n int)")
	Doc("vdpbf16psLoop runs 24·n VDPBF16PS on registers (64 flops each).")
	n := Load(Param("n"), RCX)
	for i := 0; i < 24; i++ {
		VXORPS(zmm[i], zmm[i], zmm[i])
	}
	VXORPS(Z24, Z24, Z24)
	VXORPS(Z25, Z25, Z25)
	Label("vdp_loop")
	for i := 0; i < 24; i++ {
		vdpbf16ps(zmm[i], Z24, Z25)
	}
	DECQ(n)
	JNZ(LabelRef("vdp_loop"))
	VZEROUPPER()
	RET()

	TEXT("vfmaddLoop", NOSPLIT, "func(n int)")
	Doc("vfmaddLoop runs 24·n VFMADD231PS on zmm registers (32 flops each).")
	n = Load(Param("n"), RCX)
	for i := 0; i < 26; i++ {
		VXORPS(zmm[i], zmm[i], zmm[i])
	}
	Label("fma_loop")
	for i := 0; i < 24; i++ {
		VFMADD231PS(Z24, Z25, zmm[i])
	}
	DECQ(n)
	JNZ(LabelRef("fma_loop"))
	VZEROUPPER()
	RET()
}

// amxBF16 generates the AMX kernel: for a block of 32 rows of A (bf16
// pairs, rows lda bytes apart, padded with zero rows and pairs) and
// nstrips strips of packed B (bs bytes apart), it computes each 32×32
// tile of C in four tile registers, 16 pairs of k (32 bf16) per
// TDPBF16PS, stores it to tmp (32×32 floats) and writes alpha·tmp (+
// beta·C) into the first rows rows of C, the last strip's columns under
// mask. Tile state belongs to the OS thread, and Go moves goroutines
// between threads between calls: each call loads the configuration,
// computes, and releases the tiles.
//
// Tiles: 0–3 accumulate C (rows 0–15 and 16–31 by columns 0–15 and
// 16–31), 4–5 hold A's two 16-row halves, 6–7 B's two 16-column halves;
// all 16 rows of 64 bytes (the configuration cfg is built in Go).
func amxBF16() {
	TEXT("amxBF16", NOSPLIT, "func(cfg *byte, a *uint32, lda int, b *uint32, bs int, nstrips int, chunks int, tmp *float32, rows int, c *float32, ldc int, alpha, beta float32, accum int, mask uint32)")
	Pragma("noescape")
	Doc("amxBF16 computes rows ≤ 32 rows by 32·nstrips columns of C with AMX tiles",
		"(TDPBF16PS); see package _asm.")
	cfg := Load(Param("cfg"), RDI)
	ldtilecfg(cfg)
	a0, a16, lda := RAX, RBX, RDX
	Load(Param("a"), RSI)
	Load(Param("lda"), lda)
	strip, b16 := R8, R9
	Load(Param("b"), strip)
	MOVQ(U32(128), b16)
	nstr := R12
	Load(Param("nstrips"), nstr)
	c := R13
	Load(Param("c"), c)

	Label("amx_strip")
	for t := 0; t < 4; t++ {
		tilezero(t)
	}
	MOVQ(RSI, a0)
	LEAQ(Mem{Base: RSI, Index: lda, Scale: 8}, a16)
	LEAQ(Mem{Base: a16, Index: lda, Scale: 8}, a16) // row 16
	bp, bq := R10, R11
	MOVQ(strip, bp)
	LEAQ(Mem{Base: strip, Disp: 64}, bq)
	Load(Param("chunks"), RCX)
	Label("amx_chunk")
	tileloadd(4, a0, lda)
	tileloadd(5, a16, lda)
	tileloadd(6, bp, b16)
	tileloadd(7, bq, b16)
	tdpbf16ps(0, 4, 6)
	tdpbf16ps(1, 4, 7)
	tdpbf16ps(2, 5, 6)
	tdpbf16ps(3, 5, 7)
	ADDQ(U8(64), a0)
	ADDQ(U8(64), a16)
	ADDQ(U32(16*128), bp)
	ADDQ(U32(16*128), bq)
	DECQ(RCX)
	JNZ(LabelRef("amx_chunk"))

	// The tile to tmp, rows 128 bytes apart.
	Load(Param("tmp"), RDI)
	tilestored(RDI, b16, 0)
	LEAQ(Mem{Base: RDI, Disp: 64}, R10)
	tilestored(R10, b16, 1)
	LEAQ(Mem{Base: RDI, Disp: 16 * 128}, R10)
	tilestored(R10, b16, 2)
	LEAQ(Mem{Base: RDI, Disp: 16*128 + 64}, R10)
	tilestored(R10, b16, 3)

	// alpha·tmp (+ beta·C) into C, the columns under the mask on the
	// last strip.
	MOVL(U32(0xffffffff), R10L)
	CMPQ(nstr, U8(1))
	JNE(LabelRef("amx_mask"))
	Load(Param("mask"), R10L)
	Label("amx_mask")
	KMOVW(R10L, K1)
	SHRL(U8(16), R10L)
	KMOVW(R10L, K2)
	VBROADCASTSS(addr("alpha"), Z30)
	VBROADCASTSS(addr("beta"), Z31)
	Load(Param("rows"), RCX)
	Load(Param("ldc"), R11)
	SHLQ(U8(2), R11)
	MOVQ(c, R10)
	Load(Param("accum"), RBX)
	Label("amx_row")
	VMULPS(Mem{Base: RDI}, Z30, Z0)
	VMULPS(Mem{Base: RDI, Disp: 64}, Z30, Z1)
	TESTQ(RBX, RBX)
	JZ(LabelRef("amx_store"))
	VMOVUPS_Z(Mem{Base: R10}, K1, Z2)
	VMOVUPS_Z(Mem{Base: R10, Disp: 64}, K2, Z3)
	VMULPS(Z31, Z2, Z2)
	VMULPS(Z31, Z3, Z3)
	VADDPS(Z2, Z0, Z0)
	VADDPS(Z3, Z1, Z1)
	Label("amx_store")
	VMOVUPS(Z0, K1, Mem{Base: R10})
	VMOVUPS(Z1, K2, Mem{Base: R10, Disp: 64})
	ADDQ(U32(128), RDI)
	ADDQ(R11, R10)
	DECQ(RCX)
	JNZ(LabelRef("amx_row"))

	ADDQ(U32(128), c)
	Load(Param("bs"), RCX)
	ADDQ(RCX, strip)
	DECQ(nstr)
	JNZ(LabelRef("amx_strip"))
	tilerelease()
	VZEROUPPER()
	RET()
}

// amxLoop generates the bare TDPBF16PS loop.
func amxLoop() {
	TEXT("tdpbf16psLoop", NOSPLIT, "func(cfg *byte, n int)")
	Pragma("noescape")
	Doc("tdpbf16psLoop runs 4·n TDPBF16PS on tiles configured by cfg (16×64 bytes",
		"each: 16·16·32·2 flops per instruction), then releases the tiles.")
	cfg := Load(Param("cfg"), RDI)
	ldtilecfg(cfg)
	Load(Param("n"), RCX)
	for t := 0; t < 8; t++ {
		tilezero(t)
	}
	Label("tdp_loop")
	tdpbf16ps(0, 4, 6)
	tdpbf16ps(1, 4, 7)
	tdpbf16ps(2, 5, 6)
	tdpbf16ps(3, 5, 7)
	DECQ(RCX)
	JNZ(LabelRef("tdp_loop"))
	tilerelease()
	RET()
}
