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
	bf16Stream("tileBF16AVX512", 1, 14, false)
	// Up to 2 rows by 4 strips, for decoding: 16 accumulators and 8
	// vectors of B, so that each pair of A reads 512 bytes of B in four
	// sequential streams.
	bf16Stream("wideBF16AVX512", 4, 2, false)
	// The tiles with float32 FMAs: 26 accumulators, 4 halves of B and the
	// broadcasts of a row's pair (broadcast into registers, not from memory
	// by each FMA: half the loads, and faster here).
	// (For decoding, bound by reading B, VDPBF16PS's wide tiles are as
	// fast or faster on Intel too, and read A's pairs as they are.)
	hiMask = GLOBL("bf16hi", RODATA|NOPTR)
	DATA(0, U32(0xffff0000))
	cpuVendor()
	fmaStepHook()
	bf16Stream("tileFMAAVX512", 1, 13, true)
	expandPairs()
	cvtBF16()
	roundBF16()
	interleaveBF16()
	peakLoops()
	amxBF16()
	amxHalf()
	amxWide("amxWideAVX512", 4)
	amxWide("amxTileAVX512", 1)
	amxPack()
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

// cpuVendor generates CPUID leaf 0, whose registers spell the vendor.
func cpuVendor() {
	TEXT("cpuVendor", NOSPLIT, "func() (ebx, ecx, edx uint32)")
	Doc("cpuVendor returns EBX, ECX and EDX of CPUID leaf 0: the vendor's name in", "EBX, EDX, ECX order.")
	XORL(EAX, EAX)
	XORL(ECX, ECX)
	CPUID()
	Store(EBX, ReturnIndex(0))
	Store(ECX, ReturnIndex(1))
	Store(EDX, ReturnIndex(2))
	RET()
}

func fmaStepHook() {
	TEXT("fmaStepVec", 0, "func(acc *float32, a, b *uint32)")
	Pragma("noescape")
	Doc("fmaStepVec sets acc[i] to one step of the FMA kernels on acc[i], the pair",
		"a[i] and the pair b[i] for i < 16 (the high halves' product added, then the",
		"low halves'), for tests of their arithmetic against dot2's.")
	mxcsr := AllocLocal(8)
	acc := Load(Param("acc"), RAX)
	a := Load(Param("a"), RCX)
	b := Load(Param("b"), RDX)
	STMXCSR(mxcsr)
	MOVL(mxcsr, R8L)
	ORL(U32(0x8040), R8L)
	MOVL(R8L, mxcsr.Offset(4))
	LDMXCSR(mxcsr.Offset(4))
	VMOVUPS(Mem{Base: acc}, Z0)
	VMOVUPS(Mem{Base: a}, Z1)
	VMOVUPS(Mem{Base: b}, Z2)
	VPANDD_BCST(hiMask, Z1, Z3)
	VPSLLD(U8(16), Z1, Z1)
	VPANDD_BCST(hiMask, Z2, Z4)
	VPSLLD(U8(16), Z2, Z2)
	VFMADD231PS(Z3, Z4, Z0)
	VFMADD231PS(Z1, Z2, Z0)
	LDMXCSR(mxcsr)
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
// order in one lane, the high product of a pair, then the low, each
// added with one rounding and results below 2⁻¹²⁶ flushed to zero: the
// arithmetic of the portable dot2, whatever the kernel or the tile. With
// fma false a pair is one VDPBF16PS; with fma true (for Intel cores,
// where VDPBF16PS has one port and float32 FMAs two) two VFMADD231PS on
// the pair's halves as float32, the A pair expanded in memory to two
// floats (high, low) and broadcast from there, B's pairs split into
// halves in registers; MXCSR's flush-to-zero and denormals-are-zero are
// set for the k loop (and restored after it), which makes the FMAs round
// and flush as VDPBF16PS does. The epilogue rounds alpha·sum and beta·C
// separately before adding them (no FMA), as package blas's finish does.
// mask selects the columns of the last strip (bit j for column j) that
// are stored.
func bf16Stream(name string, nstrips, maxRows int, fma bool) {
	TEXT(name, NOSPLIT, "func(rows, kp int, a *uint32, ars, aps int, b *uint32, bs int, c *float32, ldc int, alpha, beta float32, accum int, mask uint32)")
	Pragma("noescape")
	what := "bf16 pairs"
	with := "with AVX512_BF16; see package _asm."
	if fma {
		what = "bf16 pairs expanded to float32"
		with = "with float32 FMAs; see package _asm."
	}
	Doc(fmt.Sprintf("%s computes rows ≤ %d rows by %d columns of C from %s", name, maxRows, 32*nstrips, what),
		"of A (with strides ars, aps) and packed strips of B (bs words apart),", with)
	var mxcsr Mem
	if fma {
		mxcsr = AllocLocal(8)
	}
	rows := Load(Param("rows"), GP64())
	for r := 1; r <= maxRows; r++ {
		CMPQ(rows, U8(r))
		JEQ(LabelRef(fmt.Sprintf("%s_%d", name, r)))
	}
	RET()
	for r := 1; r <= maxRows; r++ {
		bf16StreamRows(name, nstrips, r, fma, mxcsr)
	}
}

// stripAddr returns the address of strip t of packed B from b, the
// strips bs words apart (bs loaded where there is more than one strip).
func stripAddr(b Register, nstrips int) func(t int) Mem {
	var bs, bs3 Register
	if nstrips > 1 {
		bs = Load(Param("bs"), GP64())
		SHLQ(U8(2), bs)
		bs3 = GP64()
		LEAQ(Mem{Base: bs, Index: bs, Scale: 2}, bs3)
	}
	return func(t int) Mem { return strided([]Register{b}, bs, bs3, t) }
}

// flushToZero keeps MXCSR in mxcsr, for LDMXCSR(mxcsr) to restore, and
// sets its flush-to-zero (bit 15) and denormals-are-zero (bit 6) through
// tmp: float32 FMAs and additions then round and flush as the bf16
// instructions do.
func flushToZero(mxcsr Mem, tmp Register) {
	STMXCSR(mxcsr)
	MOVL(mxcsr, tmp)
	ORL(U32(0x8040), tmp)
	MOVL(tmp, mxcsr.Offset(4))
	LDMXCSR(mxcsr.Offset(4))
}

// stripMask loads the mask argument, the columns of the last strip that
// are stored, into K1 (columns 0–15) and K2 (16–31), and returns the mask
// register of vector v of nvec: K1 and K2 for the last strip's two.
func stripMask(nvec int) func(v int) (Register, bool) {
	m := Load(Param("mask"), GP32())
	KMOVW(m, K1)
	SHRL(U8(16), m)
	KMOVW(m, K2)
	return func(v int) (Register, bool) {
		switch v {
		case nvec - 2:
			return K1, true
		case nvec - 1:
			return K2, true
		}
		return nil, false
	}
}

// hiMask keeps the high bf16 of a pair: the float32 it is the top of.
// (Set before the FMA kernels are generated.)
var hiMask Mem

func bf16StreamRows(name string, nstrips, rows int, fma bool, mxcsr Mem) {
	nvec := 2 * nstrips
	nacc := rows * nvec
	nb := nvec
	if fma {
		nb = 2 * nvec
	}
	if nacc+nb+2 > 32 {
		panic(fmt.Sprintf("%s: %d rows do not fit", name, rows))
	}
	pre := fmt.Sprintf("%s_%d", name, rows)
	Label(pre)
	kp := Load(Param("kp"), GP64())
	bases, rs, rs3 := rowBases(Load(Param("a"), GP64()), "ars", rows)
	aps := Load(Param("aps"), GP64())
	SHLQ(U8(2), aps)
	b := Load(Param("b"), GP64())
	strip := stripAddr(b, nstrips)

	acc := make([]VecPhysical, nacc)
	for i := range acc {
		acc[i] = zmm[i]
		VXORPS(acc[i], acc[i], acc[i])
	}
	bv := zmm[nacc : nacc+nvec]
	bc := []VecPhysical{Z30, Z31}
	bhi := zmm[nacc+nvec : nacc+2*nvec] // fma: B's high halves; bv the low
	if fma {
		flushToZero(mxcsr, R8L)
	}

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
		if fma {
			VPANDD_BCST(hiMask, bv[v], bhi[v])
			VPSLLD(U8(16), bv[v], bv[v])
		}
	}
	for i := 0; i < rows; i++ {
		if fma {
			row := strided(bases, rs, rs3, i)
			VBROADCASTSS(row, bc[0])
			VBROADCASTSS(row.Offset(4), bc[1])
			for v := range bv {
				VFMADD231PS(bc[0], bhi[v], acc[i*nvec+v])
			}
			for v := range bv {
				VFMADD231PS(bc[1], bv[v], acc[i*nvec+v])
			}
			continue
		}
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

	// C = alpha·acc (+ beta·C), the last strip under the mask, with MXCSR
	// as it was.
	Label(pre + "_store")
	if fma {
		LDMXCSR(mxcsr)
	}
	last := stripMask(nvec)
	c := Load(Param("c"), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(U8(2), ldc)
	alpha, beta, tmp := bv[0], bc[0], bv[1]
	VBROADCASTSS(addr("alpha"), alpha)
	for i := range acc {
		VMULPS(alpha, acc[i], acc[i])
	}
	at := func(v int) Mem { return Mem{Base: c, Disp: 64 * v} }
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

// roundBF16 generates the rounding of float32 values to the bf16 values
// nearest them, kept as float32 (toBF16, for the sgemm kernel's
// operands), with AVX-512F integer operations alone, so that CPUs without
// bf16 instructions run it too.
func roundBF16() {
	consts := GLOBL("bf16round", RODATA|NOPTR)
	for i, v := range []uint32{1, 0x7fff, 0x7fffffff, 0x7f800000, 0x400000, 0x80000000} {
		DATA(4*i, U32(v))
	}
	one, half, abs, exp, quiet, sign := consts, consts.Offset(4), consts.Offset(8), consts.Offset(12), consts.Offset(16), consts.Offset(20)
	TEXT("roundBF16AVX512", NOSPLIT, "func(dst, src *float32, blocks int)")
	Pragma("noescape")
	Doc("roundBF16AVX512 sets dst[i] to src[i] rounded to bf16 as toBF16 does, as a",
		"float32, for i < 16·blocks; dst may be src.")
	dst := Load(Param("dst"), RAX)
	src := Load(Param("src"), RCX)
	n := Load(Param("blocks"), RDX)
	TESTQ(n, n)
	JZ(LabelRef("round_done"))
	Label("round_loop")
	VMOVDQU32(Mem{Base: src}, Z0)
	// To nearest even: add 0x7fff and the lowest kept bit, drop the rest.
	VPSRLD(U8(16), Z0, Z1)
	VPANDD_BCST(one, Z1, Z1)
	VPADDD_BCST(half, Z1, Z1)
	VPADDD(Z0, Z1, Z1)
	VPANDD_BCST(hiMask, Z1, Z1)
	// NaNs (|u| > Inf's bits) keep their top bits, made quiet.
	VPANDD_BCST(abs, Z0, Z2)
	VPCMPUD_BCST(U8(6), exp, Z2, K1)
	VPORD_BCST(quiet, Z0, Z3)
	VPANDD_BCST(hiMask, Z3, Z3)
	VMOVDQA32(Z3, K1, Z1)
	// Zeros and denormals (exponent 0) become zeros of their sign.
	VPTESTNMD_BCST(exp, Z0, K2)
	VPANDD_BCST(sign, Z0, Z4)
	VMOVDQA32(Z4, K2, Z1)
	VMOVDQU32(Z1, Mem{Base: dst})
	ADDQ(U8(64), src)
	ADDQ(U8(64), dst)
	DECQ(n)
	JNZ(LabelRef("round_loop"))
	Label("round_done")
	VZEROUPPER()
	RET()

	// The same with AVX2 alone, eight lanes at a time: for the CPUs
	// without AVX-512 (AMD's before Zen 4, Intel's client cores), whose
	// sgemm kernel rounds every operand it packs.
	TEXT("roundBF16AVX2", NOSPLIT, "func(dst, src *float32, blocks int)")
	Pragma("noescape")
	Doc("roundBF16AVX2 is roundBF16AVX512 with AVX2 alone.")
	dst = Load(Param("dst"), RAX)
	src = Load(Param("src"), RCX)
	n = Load(Param("blocks"), RDX)
	TESTQ(n, n)
	JZ(LabelRef("round2_done"))
	yOne, yHalf, yAbs, yExp, yQuiet, ySign, yHi, yZero := Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15
	for _, c := range []struct {
		y Op
		m Mem
	}{{yOne, one}, {yHalf, half}, {yAbs, abs}, {yExp, exp}, {yQuiet, quiet}, {ySign, sign}, {yHi, hiMask}} {
		VPBROADCASTD(c.m, c.y)
	}
	VPXOR(yZero, yZero, yZero)
	Label("round2_loop")
	for h := 0; h < 2; h++ {
		VMOVDQU(Mem{Base: src, Disp: 32 * h}, Y0)
		VPSRLD(U8(16), Y0, Y1)
		VPAND(yOne, Y1, Y1)
		VPADDD(yHalf, Y1, Y1)
		VPADDD(Y0, Y1, Y1)
		VPAND(yHi, Y1, Y1)
		// NaNs: |u| > Inf's bits, compared as signed, which |u| is not.
		VPAND(yAbs, Y0, Y2)
		VPCMPGTD(yExp, Y2, Y2)
		VPOR(yQuiet, Y0, Y3)
		VPAND(yHi, Y3, Y3)
		VPBLENDVB(Y2, Y3, Y1, Y1)
		// Zeros and denormals.
		VPAND(yExp, Y0, Y4)
		VPCMPEQD(yZero, Y4, Y4)
		VPAND(ySign, Y0, Y5)
		VPBLENDVB(Y4, Y5, Y1, Y1)
		VMOVDQU(Y1, Mem{Base: dst, Disp: 32 * h})
	}
	ADDQ(U8(64), src)
	ADDQ(U8(64), dst)
	DECQ(n)
	JNZ(LabelRef("round2_loop"))
	Label("round2_done")
	VZEROUPPER()
	RET()

	TEXT("roundBF16CVT", NOSPLIT, "func(dst, src *float32, blocks int)")
	Pragma("noescape")
	Doc("roundBF16CVT is roundBF16AVX512 by VCVTNEPS2BF16 (AVX512_BF16), which rounds",
		"as toBF16 does in a third of the instructions.")
	dst = Load(Param("dst"), RAX)
	src = Load(Param("src"), RCX)
	n = Load(Param("blocks"), RDX)
	TESTQ(n, n)
	JZ(LabelRef("cvt16_done"))
	Label("cvt16_loop")
	VMOVUPS(Mem{Base: src}, Z0)
	vcvtneps2bf16(Y1, Z0)
	VPMOVZXWD(Y1, Z1)
	VPSLLD(U8(16), Z1, Z1)
	VMOVUPS(Z1, Mem{Base: dst})
	ADDQ(U8(64), src)
	ADDQ(U8(64), dst)
	DECQ(n)
	JNZ(LabelRef("cvt16_loop"))
	Label("cvt16_done")
	VZEROUPPER()
	RET()
}

// expandPairs generates the expansion of A's bf16 pairs to float32 pairs
// (high, low) for the FMA kernels.
func expandPairs() {
	// Dword indices into (hi, lo) that interleave them: hi0 lo0 hi1 lo1 …
	idx := GLOBL("bf16expand", RODATA|NOPTR)
	for j := 0; j < 32; j++ {
		DATA(4*j, U32(j/2+16*(j%2)))
	}
	TEXT("expandPairsAVX512", NOSPLIT, "func(dst *uint32, src *uint32, blocks int)")
	Pragma("noescape")
	Doc("expandPairsAVX512 sets dst[2i] and dst[2i+1] to the float32 bits of the high",
		"and the low bf16 of src[i], for i < 16·blocks.")
	dst := Load(Param("dst"), RAX)
	src := Load(Param("src"), RCX)
	n := Load(Param("blocks"), RDX)
	VMOVUPS(idx, Z4)
	VMOVUPS(idx.Offset(64), Z5)
	TESTQ(n, n)
	JZ(LabelRef("expand_done"))
	Label("expand_loop")
	VMOVUPS(Mem{Base: src}, Z0)
	VPANDD_BCST(hiMask, Z0, Z1)
	VPSLLD(U8(16), Z0, Z0)
	VMOVDQA32(Z4, Z2)
	VPERMI2D(Z0, Z1, Z2) // Z2 = (Z1 ∪ Z0)[Z4]: hi0 lo0 … hi7 lo7
	VMOVDQA32(Z5, Z3)
	VPERMI2D(Z0, Z1, Z3)
	VMOVUPS(Z2, Mem{Base: dst})
	VMOVUPS(Z3, Mem{Base: dst, Disp: 64})
	ADDQ(U8(64), src)
	ADDQ(U32(128), dst)
	DECQ(n)
	JNZ(LabelRef("expand_loop"))
	Label("expand_done")
	VZEROUPPER()
	RET()
}

// pairRows generates the packing of B's row pairs (2p and 2p+1) into the
// pair rows p of every strip: what interleaveBF16 does for one strip, for
// many pairs and strips in one call, so that packing B costs one call
// (a call per pair row cost more than the packing on the sketch networks'
// 64-row operands).
func pairRows() {
	TEXT("pairRowsAVX512", NOSPLIT, "func(dst *uint32, b *float32, ldb, pairs, strips, stride int)")
	Pragma("noescape")
	Doc("pairRowsAVX512 sets dst[p·32 + s·stride + j] to the bf16 pair (b[2p·ldb + 32s + j],",
		"b[(2p+1)·ldb + 32s + j]) rounded by VCVTNE2PS2BF16, for p < pairs, s < strips, j < 32.")
	dst := Load(Param("dst"), RAX)
	b := Load(Param("b"), RCX)
	ldb := Load(Param("ldb"), RDX)
	SHLQ(U8(2), ldb)
	pairs := Load(Param("pairs"), RBX)
	stride := Load(Param("stride"), RSI)
	SHLQ(U8(2), stride)
	VMOVUPS(interleaveIdx, Z7)
	TESTQ(pairs, pairs)
	JZ(LabelRef("pairrows_done"))
	Label("pairrows_pair")
	r0, r1, d, n := R8, R9, R10, R11
	MOVQ(b, r0)
	LEAQ(Mem{Base: b, Index: ldb, Scale: 1}, r1)
	MOVQ(dst, d)
	Load(Param("strips"), n)
	TESTQ(n, n)
	JZ(LabelRef("pairrows_next"))
	Label("pairrows_strip")
	for h := 0; h < 2; h++ {
		VMOVUPS(Mem{Base: r0, Disp: 64 * h}, Z1)
		VMOVUPS(Mem{Base: r1, Disp: 64 * h}, Z2)
		vcvtne2ps2bf16(Z0, Z2, Z1)
		VPERMW(Z0, Z7, Z0)
		VMOVUPS(Z0, Mem{Base: d, Disp: 64 * h})
	}
	ADDQ(U32(128), r0)
	ADDQ(U32(128), r1)
	ADDQ(stride, d)
	DECQ(n)
	JNZ(LabelRef("pairrows_strip"))
	Label("pairrows_next")
	LEAQ(Mem{Base: b, Index: ldb, Scale: 2}, b)
	ADDQ(U32(128), dst)
	DECQ(pairs)
	JNZ(LabelRef("pairrows_pair"))
	Label("pairrows_done")
	VZEROUPPER()
	RET()
}

// interleaveIdx is the table of VPERMW indices of interleaveBF16.
var interleaveIdx Mem

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
	interleaveIdx = idx
	pairRows()

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

	// The same on ymm registers, for CPUs without AVX-512: 12
	// accumulators, enough for two FMA units of latency 4 or 5.
	TEXT("vfmaddLoopAVX2", NOSPLIT, "func(n int)")
	Doc("vfmaddLoopAVX2 runs 24·n VFMADD231PS on ymm registers (16 flops each).")
	n = Load(Param("n"), RCX)
	ymm := []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13}
	for _, y := range ymm {
		VXORPS(y, y, y)
	}
	Label("fma2_loop")
	for i := 0; i < 24; i++ {
		VFMADD231PS(Y12, Y13, ymm[i%12])
	}
	DECQ(n)
	JNZ(LabelRef("fma2_loop"))
	VZEROUPPER()
	RET()
}

// The modes of amxBF16, bits of its mode argument (as amxLoad etc. in
// package blas).
const (
	amxLoad   = 1 // start from the partial sums in acc, not from zero
	amxStore  = 2 // end by storing the sums to acc, not by finishing C
	amxDirect = 4 // finish by storing the tiles into C (alpha 1, beta 0, 32 rows)
	amxBeta   = 8 // finish with beta·C added
)

// The fields of package blas's amxConvert, by byte offset.
const (
	cvSrc    = 0  // the next chunk of a row of A to convert (32 floats); 0: none
	cvDst    = 8  // where its 16 pairs go
	cvLeft   = 16 // chunks left in the row
	cvPerRow = 24 // chunks a row
	cvRows   = 32 // rows left, of 32
	cvLda    = 40 // bytes from row to row of A
	cvRowSrc = 48 // the current row's first chunk
	cvRowDst = 56 // and where it goes
	cvPairs  = 64 // 0: rows of A to chunks in tile order; 1: row pairs of B to strips (pairStep)
	cvStrip  = 72 // with cvPairs: bytes from strip to strip of the destination
	cvSteps  = 80 // the steps a chunk of amxBF16's loop takes (1–4)
)

// convertStep emits the conversion of one chunk of a row of the next
// block of A (amxConvert's state at cv, 0 in its cvSrc when none is
// left) to its 16 pairs in tile order, and the prefetch of the same
// chunk two rows on: rows 0–15 go to lines 128 bytes apart, rows 16–31
// to the second halves of the same lines; or, with cvPairs, pairStep's
// step. It uses R10, R11 and Z0–Z2.
func convertStep(cv GPPhysical, id string) {
	done := "cv_done_" + id
	src, dst := R10, R11
	MOVQ(Mem{Base: cv, Disp: cvSrc}, src)
	TESTQ(src, src)
	JZ(LabelRef(done))
	CMPQ(Mem{Base: cv, Disp: cvPairs}, U8(0))
	JNE(LabelRef("cv_pairs_" + id))
	VMOVUPS(Mem{Base: src}, Z1)
	VMOVUPS(Mem{Base: src, Disp: 64}, Z2)
	MOVQ(Mem{Base: cv, Disp: cvLda}, dst)
	PREFETCHT0(Mem{Base: src, Index: dst, Scale: 2})
	PREFETCHT0(Mem{Base: src, Index: dst, Scale: 2, Disp: 64})
	vcvtne2ps2bf16(Z0, Z2, Z1)
	MOVQ(Mem{Base: cv, Disp: cvDst}, dst)
	VMOVUPS(Z0, Mem{Base: dst})
	ADDQ(U32(128), src)
	ADDQ(U32(2048), dst)
	MOVQ(dst, Mem{Base: cv, Disp: cvDst})
	DECQ(Mem{Base: cv, Disp: cvLeft})
	JNZ(LabelRef("cv_same_" + id))
	// The next row, or none.
	MOVQ(Mem{Base: cv, Disp: cvRowSrc}, src)
	ADDQ(Mem{Base: cv, Disp: cvLda}, src)
	MOVQ(src, Mem{Base: cv, Disp: cvRowSrc})
	MOVQ(Mem{Base: cv, Disp: cvRowDst}, dst)
	ADDQ(U32(128), dst)
	DECQ(Mem{Base: cv, Disp: cvRows})
	JZ(LabelRef("cv_end_" + id))
	CMPQ(Mem{Base: cv, Disp: cvRows}, U8(16))
	JNE(LabelRef("cv_row_" + id))
	SUBQ(U32(2048-64), dst) // row 16: back to the first line's second half
	Label("cv_row_" + id)
	MOVQ(dst, Mem{Base: cv, Disp: cvRowDst})
	MOVQ(dst, Mem{Base: cv, Disp: cvDst})
	MOVQ(Mem{Base: cv, Disp: cvPerRow}, dst)
	MOVQ(dst, Mem{Base: cv, Disp: cvLeft})
	JMP(LabelRef("cv_same_" + id))
	Label("cv_end_" + id)
	XORL(src.As32(), src.As32())
	Label("cv_same_" + id)
	MOVQ(src, Mem{Base: cv, Disp: cvSrc})
	JMP(LabelRef(done))
	pairStep(cv, id)
	Label(done)
}

// pairStep emits convertStep's other kind (cvPairs): the conversion of
// one strip's 32 columns of a pair of B's rows (2p and 2p+1, as stored,
// cvLda bytes apart) to its pair row of 128 bytes, as pairRows packs it,
// and the prefetch of the same columns two pairs on: strip after strip
// (cvStrip bytes apart in the destination), then the next pair, 128
// bytes on. It ends at convertStep's labels, with the source in R10.
func pairStep(cv GPPhysical, id string) {
	src, r := R10, R11
	Label("cv_pairs_" + id)
	MOVQ(Mem{Base: cv, Disp: cvLda}, r)
	VMOVUPS(Mem{Base: src}, Z1)
	VMOVUPS(Mem{Base: src, Index: r, Scale: 1}, Z2)
	vcvtne2ps2bf16(Z0, Z2, Z1)
	VMOVUPS(Mem{Base: src, Disp: 64}, Z1)
	VMOVUPS(Mem{Base: src, Index: r, Scale: 1, Disp: 64}, Z2)
	vcvtne2ps2bf16(Z1, Z2, Z1)
	PREFETCHT0(Mem{Base: src, Index: r, Scale: 4})
	PREFETCHT0(Mem{Base: src, Index: r, Scale: 4, Disp: 64})
	LEAQ(Mem{Base: r, Index: r, Scale: 4}, r)
	PREFETCHT0(Mem{Base: src, Index: r, Scale: 1})
	PREFETCHT0(Mem{Base: src, Index: r, Scale: 1, Disp: 64})
	VMOVUPS(interleaveIdx, Z2)
	VPERMW(Z0, Z2, Z0)
	VPERMW(Z1, Z2, Z1)
	MOVQ(Mem{Base: cv, Disp: cvDst}, r)
	VMOVUPS(Z0, Mem{Base: r})
	VMOVUPS(Z1, Mem{Base: r, Disp: 64})
	ADDQ(U32(128), src)
	ADDQ(Mem{Base: cv, Disp: cvStrip}, r)
	MOVQ(r, Mem{Base: cv, Disp: cvDst})
	DECQ(Mem{Base: cv, Disp: cvLeft})
	JNZ(LabelRef("cv_same_" + id))
	// The next pair, or none.
	MOVQ(Mem{Base: cv, Disp: cvRowSrc}, src)
	ADDQ(Mem{Base: cv, Disp: cvLda}, src)
	ADDQ(Mem{Base: cv, Disp: cvLda}, src)
	MOVQ(src, Mem{Base: cv, Disp: cvRowSrc})
	MOVQ(Mem{Base: cv, Disp: cvRowDst}, r)
	ADDQ(U32(128), r)
	MOVQ(r, Mem{Base: cv, Disp: cvRowDst})
	MOVQ(r, Mem{Base: cv, Disp: cvDst})
	MOVQ(Mem{Base: cv, Disp: cvPerRow}, r)
	MOVQ(r, Mem{Base: cv, Disp: cvLeft})
	DECQ(Mem{Base: cv, Disp: cvRows})
	JZ(LabelRef("cv_end_" + id))
	JMP(LabelRef("cv_same_" + id))
}

// amxBF16 generates the AMX kernel: for a block of 32 rows of A and
// nstrips strips of packed B (bs bytes apart), it computes each 32×32
// tile of C in four tile registers over chunks chunks of 16 pairs of k
// (32 elements), one TDPBF16PS per tile and chunk. A is packed in tile
// order, chunk by chunk: 2 KB of 16 lines of 128 bytes, each line rows
// r and r+16 (16 pairs each); B's strips are PackedBF16's, 2 KB a chunk
// of 16 lines of 128 bytes, each line a pair row of 32 columns. Every
// tile is 16 rows of 64 bytes 128 bytes apart, and an operand's two
// tiles share their cache lines.
//
// The sums start from zero, or (amxLoad) from acc, 32×32 floats a strip,
// and end stored to acc (amxStore), so that a product's k may be split
// into blocks whose operands stay in the caches; or they finish C: C =
// alpha·sum (+ beta·C with amxBeta) in the first rows rows, the last
// strip's columns under mask, through tmp (32×32 floats); or, with
// amxDirect, stored into C as they are (alpha 1, beta 0, 32 rows, whole
// strips). Storing and loading the sums is exact, so the split does not
// change the bits.
//
// The tile unit multiplies faster than L2 delivers tiles, so while a
// chunk multiplies, the next chunk of B (the next strip's first, after
// the last) is fetched into L1. And while the tiles multiply, the vector
// unit converts the next call's block of A from float32 (as the state
// cv says, cvSteps chunks of its rows, one to four, a chunk of the loop,
// the rest at the end of the call), which converting between calls
// would add to their time (1024³ on one thread: 1.62 ms against 1.87);
// or, the same way, pairs of B's rows of the next k block (four strips'
// a chunk).
//
// Tile state belongs to the OS thread, and Go moves goroutines between
// threads between calls: each call loads the configuration, computes,
// and releases the tiles. Tiles: 0–3 accumulate C (rows 0–15 and 16–31
// by columns 0–15 and 16–31), 4–5 hold A's two 16-row halves, 6–7 B's
// two 16-column halves; all 16 rows of 64 bytes (the configuration cfg
// is built in Go). Each operand tile is loaded just before its first
// use, so that loads and products overlap.
func amxBF16() {
	TEXT("amxBF16", NOSPLIT, "func(cfg *byte, a *uint32, b *uint32, bs, nstrips, chunks int, acc *float32, mode int, c *float32, ldc, rows int, alpha, beta float32, mask uint32, tmp *float32, cv *[11]int)")
	Pragma("noescape")
	Doc("amxBF16 computes rows ≤ 32 rows by 32·nstrips columns of C, or partial sums",
		"of them, with AMX tiles (TDPBF16PS); see package _asm.")
	r := amxPrologue()
	aBase, aCur, strip, s128 := r.aBase, RSI, r.strip, r.s128
	nstr, cptr, accp, mode, ldc := r.nstr, r.cptr, r.accp, r.mode, r.ldc
	bCur, cvp := R8, R14
	Load(Param("cv"), cvp)

	Label("amx_strip")
	Load(Param("mode"), mode)
	TESTQ(U32(amxLoad), mode)
	JZ(LabelRef("amx_zero"))
	for t := 0; t < 4; t++ {
		tileloadd(t, accp, s128, 2048*(t/2)+64*(t%2))
	}
	JMP(LabelRef("amx_chunks"))
	Label("amx_zero")
	for t := 0; t < 4; t++ {
		tilezero(t)
	}
	Label("amx_chunks")
	// In the k loop, mode's register walks the rows of the next strip's
	// block of C, fetching them (no other core holds them: they come
	// exclusive, ready for the stores) while the tiles multiply (0:
	// nothing to fetch).
	cpf := mode
	TESTQ(U32(amxStore), mode)
	JNZ(LabelRef("amx_nocpf"))
	CMPQ(nstr, U8(1))
	JE(LabelRef("amx_nocpf"))
	LEAQ(Mem{Base: cptr, Disp: 128}, cpf)
	JMP(LabelRef("amx_cpf"))
	Label("amx_nocpf")
	XORL(cpf.As32(), cpf.As32())
	Label("amx_cpf")
	MOVQ(aBase, aCur)
	MOVQ(strip, bCur)
	Load(Param("chunks"), RCX)
	Label("amx_chunk")
	tileloadd(4, aCur, s128, 0)
	tileloadd(6, bCur, s128, 0)
	// B's next chunk: bCur+2 KB, or the next strip's first after the
	// last.
	next, pf := R10, R11
	Load(Param("bs"), next)
	ADDQ(strip, next)
	MOVQ(bCur, pf)
	ADDQ(U32(2048), pf)
	CMPQ(RCX, U8(1))
	CMOVQEQ(next, pf)
	prefetchB := func(q int) {
		for l := 8 * q; l < 8*q+8; l++ {
			PREFETCHT0(Mem{Base: pf, Disp: 64 * l})
		}
	}
	prefetchB(0)
	tdpbf16ps(0, 4, 6)
	tileloadd(7, bCur, s128, 64)
	prefetchB(1)
	tdpbf16ps(1, 4, 7)
	tileloadd(5, aCur, s128, 64)
	prefetchB(2)
	tdpbf16ps(2, 5, 6)
	prefetchB(3)
	// Four rows of the next strip's C.
	TESTQ(cpf, cpf)
	JZ(LabelRef("amx_cdone"))
	for r := 0; r < 2; r++ {
		PREFETCHT0(Mem{Base: cpf})
		PREFETCHT0(Mem{Base: cpf, Disp: 64})
		PREFETCHT0(Mem{Base: cpf, Index: ldc, Scale: 1})
		PREFETCHT0(Mem{Base: cpf, Index: ldc, Scale: 1, Disp: 64})
		LEAQ(Mem{Base: cpf, Index: ldc, Scale: 2}, cpf)
	}
	Label("amx_cdone")
	// Up to four chunks of the next block of A (cvSteps of them),
	// converted while the tiles multiply.
	for q := 0; q < 4; q++ {
		if q > 0 {
			CMPQ(Mem{Base: cvp, Disp: cvSteps}, U8(q))
			JLE(LabelRef("amx_paced"))
		}
		convertStep(cvp, fmt.Sprintf("loop%d", q))
	}
	Label("amx_paced")
	tdpbf16ps(3, 5, 7)
	ADDQ(U32(2048), aCur)
	ADDQ(U32(2048), bCur)
	DECQ(RCX)
	JNZ(LabelRef("amx_chunk"))

	Load(Param("mode"), mode)
	TESTQ(U32(amxStore), mode)
	JZ(LabelRef("amx_finish"))
	for t := 0; t < 4; t++ {
		tilestored(accp, s128, 2048*(t/2)+64*(t%2), t)
	}
	JMP(LabelRef("amx_next"))

	// The last strip takes its columns under the mask.
	Label("amx_finish")
	MOVL(U32(0xffffffff), R10L)
	CMPQ(nstr, U8(1))
	JNE(LabelRef("amx_mask"))
	Load(Param("mask"), R10L)
	Label("amx_mask")
	TESTQ(U32(amxDirect), mode)
	JZ(LabelRef("amx_tmp"))
	CMPL(R10L, U32(0xffffffff))
	JNE(LabelRef("amx_tmp"))
	tilestored(cptr, ldc, 0, 0)
	tilestored(cptr, ldc, 64, 1)
	MOVQ(ldc, R11)
	SHLQ(U8(4), R11)
	ADDQ(cptr, R11)
	tilestored(R11, ldc, 0, 2)
	tilestored(R11, ldc, 64, 3)
	JMP(LabelRef("amx_next"))

	// alpha·sum (+ beta·C) into C through tmp, rows 128 bytes apart.
	Label("amx_tmp")
	KMOVW(R10L, K1)
	SHRL(U8(16), R10L)
	KMOVW(R10L, K2)
	Load(Param("tmp"), R10)
	for t := 0; t < 4; t++ {
		tilestored(R10, s128, 2048*(t/2)+64*(t%2), t)
	}
	Load(Param("rows"), RCX)
	MOVQ(cptr, R11)
	Label("amx_row")
	VMULPS(Mem{Base: R10}, Z30, Z0)
	VMULPS(Mem{Base: R10, Disp: 64}, Z30, Z1)
	TESTQ(U32(amxBeta), mode)
	JZ(LabelRef("amx_store"))
	VMOVUPS_Z(Mem{Base: R11}, K1, Z2)
	VMOVUPS_Z(Mem{Base: R11, Disp: 64}, K2, Z3)
	VMULPS(Z31, Z2, Z2)
	VMULPS(Z31, Z3, Z3)
	VADDPS(Z2, Z0, Z0)
	VADDPS(Z3, Z1, Z1)
	Label("amx_store")
	VMOVUPS(Z0, K1, Mem{Base: R11})
	VMOVUPS(Z1, K2, Mem{Base: R11, Disp: 64})
	ADDQ(s128, R10)
	ADDQ(ldc, R11)
	DECQ(RCX)
	JNZ(LabelRef("amx_row"))

	Label("amx_next")
	ADDQ(U32(4096), accp)
	ADDQ(U32(128), cptr)
	ADDQ(Load(Param("bs"), GP64()), strip)
	DECQ(nstr)
	JNZ(LabelRef("amx_strip"))
	tilerelease()
	// What the loop left of the next block of A.
	Label("cv_tail")
	convertStep(cvp, "tail")
	CMPQ(Mem{Base: cvp, Disp: cvSrc}, U8(0))
	JNE(LabelRef("cv_tail"))
	VZEROUPPER()
	RET()
}

// amxHalf generates amxBF16Half, amxBF16 for blocks of at most 16 rows
// (decoding's few sequences): only A's first tile of rows is loaded, and
// strips are taken two at a time, tiles 0–1 accumulating the first's
// columns and 2–3 the second's, so that four independent sums hide the
// latency of TDPBF16PS (with one strip, two sums wait on each other). An
// element's sum is the same sequence of TDPBF16PS steps as in amxBF16, so
// its bits are the same. acc holds each strip's sums as amxBF16's do, of
// which only rows 0–15 are read and written; amxDirect is not taken; no
// next block of A is converted (cv is not read: a block of at most 16
// rows is a product's last).
func amxHalf() {
	TEXT("amxBF16Half", NOSPLIT, "func(cfg *byte, a *uint32, b *uint32, bs, nstrips, chunks int, acc *float32, mode int, c *float32, ldc, rows int, alpha, beta float32, mask uint32, tmp *float32, cv *[11]int)")
	Pragma("noescape")
	Doc("amxBF16Half is amxBF16 for rows ≤ 16, two strips at a time; acc's rows",
		"16–31 are neither read nor written, and cv is not read; see package _asm.")
	r := amxPrologue()
	aBase, aCur, strip, s128 := r.aBase, RSI, r.strip, r.s128
	nstr, cptr, accp, mode, ldc := r.nstr, r.cptr, r.accp, r.mode, r.ldc
	b0, b1 := R8, R14

	Label("half_pair")
	TESTQ(U32(amxLoad), mode)
	JZ(LabelRef("half_zero"))
	tileloadd(0, accp, s128, 0)
	tileloadd(1, accp, s128, 64)
	CMPQ(nstr, U8(1))
	JE(LabelRef("half_init"))
	tileloadd(2, accp, s128, 4096)
	tileloadd(3, accp, s128, 4096+64)
	JMP(LabelRef("half_init"))
	Label("half_zero")
	for t := 0; t < 4; t++ {
		tilezero(t)
	}
	Label("half_init")
	MOVQ(aBase, aCur)
	MOVQ(strip, b0)
	Load(Param("bs"), b1)
	ADDQ(strip, b1)
	Load(Param("chunks"), RCX)
	CMPQ(nstr, U8(1))
	JE(LabelRef("half_one"))

	// Two strips, a chunk of each at a time, or the last strip alone.
	// (Prefetching B's next chunks by hand, one to eight chunks ahead, was
	// slower: the hardware's prefetch streams them.)
	for _, two := range []bool{true, false} {
		loop := "half_one"
		if two {
			loop = "half_two"
		}
		Label(loop)
		tileloadd(4, aCur, s128, 0)
		tileloadd(6, b0, s128, 0)
		tdpbf16ps(0, 4, 6)
		tileloadd(7, b0, s128, 64)
		tdpbf16ps(1, 4, 7)
		if two {
			tileloadd(5, b1, s128, 0)
			tdpbf16ps(2, 4, 5)
			tileloadd(6, b1, s128, 64)
			tdpbf16ps(3, 4, 6)
			ADDQ(U32(2048), b1)
		}
		ADDQ(U32(2048), aCur)
		ADDQ(U32(2048), b0)
		DECQ(RCX)
		JNZ(LabelRef(loop))
		if two {
			JMP(LabelRef("half_end"))
		}
	}

	Label("half_end")
	TESTQ(U32(amxStore), mode)
	JZ(LabelRef("half_finish"))
	tilestored(accp, s128, 0, 0)
	tilestored(accp, s128, 64, 1)
	CMPQ(nstr, U8(1))
	JE(LabelRef("half_done"))
	tilestored(accp, s128, 4096, 2)
	tilestored(accp, s128, 4096+64, 3)
	JMP(LabelRef("half_next"))

	// alpha·sum (+ beta·C) into C through tmp: the first strip's sums in
	// tmp's rows 0–15, the second's in rows 16–31; the last strip takes
	// its columns under the mask.
	Label("half_finish")
	Load(Param("tmp"), R10)
	tilestored(R10, s128, 0, 0)
	tilestored(R10, s128, 64, 1)
	CMPQ(nstr, U8(1))
	JE(LabelRef("half_mask1"))
	tilestored(R10, s128, 2048, 2)
	tilestored(R10, s128, 2048+64, 3)
	MOVL(U32(0xffffffff), R11L)
	JMP(LabelRef("half_rows1"))
	Label("half_mask1")
	Load(Param("mask"), R11L)
	Label("half_rows1")
	halfRows("1", R10, cptr, mode, ldc, s128)
	CMPQ(nstr, U8(1))
	JE(LabelRef("half_done"))
	MOVL(U32(0xffffffff), R11L)
	CMPQ(nstr, U8(2))
	JNE(LabelRef("half_rows2"))
	Load(Param("mask"), R11L)
	Label("half_rows2")
	Load(Param("tmp"), R10)
	ADDQ(U32(2048), R10)
	LEAQ(Mem{Base: cptr, Disp: 128}, aCur)
	halfRows("2", R10, aCur, mode, ldc, s128)

	Label("half_next")
	ADDQ(U32(8192), accp)
	ADDQ(U32(256), cptr)
	Load(Param("bs"), R10)
	ADDQ(R10, strip)
	ADDQ(R10, strip)
	SUBQ(U8(2), nstr)
	JNZ(LabelRef("half_pair"))

	Label("half_done")
	tilerelease()
	VZEROUPPER()
	RET()
}

// halfRows emits the finishing of rows rows of one strip of C at c from
// the sums at tmp (rows 128 bytes apart), the strip's column mask in
// R11L: C = alpha·sum (Z30), + beta·C (Z31) with amxBeta. It advances tmp
// and uses RCX, R11, K1, K2 and Z0–Z3.
func halfRows(id string, tmp, c, mode, ldc, s128 Register) {
	KMOVW(R11L, K1)
	SHRL(U8(16), R11L)
	KMOVW(R11L, K2)
	Load(Param("rows"), RCX)
	MOVQ(c, R11)
	Label("half_row" + id)
	VMULPS(Mem{Base: tmp}, Z30, Z0)
	VMULPS(Mem{Base: tmp, Disp: 64}, Z30, Z1)
	TESTQ(U32(amxBeta), mode)
	JZ(LabelRef("half_store" + id))
	VMOVUPS_Z(Mem{Base: R11}, K1, Z2)
	VMOVUPS_Z(Mem{Base: R11, Disp: 64}, K2, Z3)
	VMULPS(Z31, Z2, Z2)
	VMULPS(Z31, Z3, Z3)
	VADDPS(Z2, Z0, Z0)
	VADDPS(Z3, Z1, Z1)
	Label("half_store" + id)
	VMOVUPS(Z0, K1, Mem{Base: R11})
	VMOVUPS(Z1, K2, Mem{Base: R11, Disp: 64})
	ADDQ(s128, tmp)
	ADDQ(ldc, R11)
	DECQ(RCX)
	JNZ(LabelRef("half_row" + id))
}

// amxWide generates name: one row of C by nstrips strips of packed B
// (decoding from a weight; the last strip's columns under mask), in the order of addition of
// TDPBF16PS on vector FMAs, so that a row decoded alone gets the bits the
// tiles give it in a batch, at the speed of reading B. For each chunk of
// 16 pairs, each element's even (low) and odd (high) products are summed
// apart from zero, each added with one rounding (VFMADD231PS on the
// halves as float32), and then sum + (even + odd); MXCSR's flush-to-zero
// and denormals-are-zero are set for the k loop, which makes the FMAs and
// the additions flush as the instruction does (dot2's fmaBF16, the
// tiles' model amxEmulated). A last chunk of fewer than 16 pairs skips
// the tiles' zero pairs: adding their +0 products could only turn an
// even or odd sum of -0 into +0, and sum + (even + odd), sum never -0
// (it starts at +0), is the same either way. The epilogue is the tiles'
// finish: alpha·sum, + beta·C when accum ≠ 0, each rounded. rows is 1:
// the arguments are wideBF16's.
func amxWide(name string, nstrips int) {
	nvec := 2 * nstrips
	TEXT(name, NOSPLIT, "func(rows, kp int, a *uint32, ars, aps int, b *uint32, bs int, c *float32, ldc int, alpha, beta float32, accum int, mask uint32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes one row by %d columns of C from bf16 pairs of A and", name, 32*nstrips),
		fmt.Sprintf("%d packed strips of B (bs words apart) in TDPBF16PS's order of addition, with", nstrips),
		"float32 FMAs, the last strip's columns under mask; see package _asm.")
	mxcsr := AllocLocal(8)
	kp := Load(Param("kp"), GP64())
	a := Load(Param("a"), GP64())
	aps := Load(Param("aps"), GP64())
	SHLQ(U8(2), aps)
	b := Load(Param("b"), GP64())
	strip := stripAddr(b, nstrips)
	even, odd, sum := zmm[0:nvec], zmm[nvec:2*nvec], zmm[2*nvec:3*nvec]
	blo, bhi, alo, ahi := Z24, Z25, Z26, Z27
	for _, v := range sum {
		VXORPS(v, v, v)
	}
	flushToZero(mxcsr, GP32())

	n := GP64()
	TESTQ(kp, kp)
	JZ(LabelRef("aw_done"))
	Label("aw_chunk")
	for v := 0; v < nvec; v++ {
		VXORPS(even[v], even[v], even[v])
		VXORPS(odd[v], odd[v], odd[v])
	}
	MOVQ(U32(16), n)
	CMPQ(kp, n)
	CMOVQLT(kp, n)
	SUBQ(n, kp)
	Label("aw_pair")
	VPBROADCASTD(Mem{Base: a}, ahi)
	VPSLLD(U8(16), ahi, alo)
	VPANDD_BCST(hiMask, ahi, ahi)
	for v := 0; v < nvec; v++ {
		VMOVUPS(strip(v/2).Offset(64*(v%2)), bhi)
		VPSLLD(U8(16), bhi, blo)
		VPANDD_BCST(hiMask, bhi, bhi)
		VFMADD231PS(alo, blo, even[v])
		VFMADD231PS(ahi, bhi, odd[v])
	}
	ADDQ(aps, a)
	ADDQ(U8(128), b)
	DECQ(n)
	JNZ(LabelRef("aw_pair"))
	for v := 0; v < nvec; v++ {
		VADDPS(odd[v], even[v], even[v])
		VADDPS(even[v], sum[v], sum[v])
	}
	TESTQ(kp, kp)
	JNZ(LabelRef("aw_chunk"))

	Label("aw_done")
	LDMXCSR(mxcsr)
	c := Load(Param("c"), GP64())
	masked := stripMask(nvec)
	VBROADCASTSS(addr("alpha"), alo)
	for _, v := range sum {
		VMULPS(alo, v, v)
	}
	accum := Load(Param("accum"), GP64())
	TESTQ(accum, accum)
	JZ(LabelRef("aw_store"))
	VBROADCASTSS(addr("beta"), ahi)
	for v := 0; v < nvec; v++ {
		if k, ok := masked(v); ok {
			VMOVUPS_Z(Mem{Base: c, Disp: 64 * v}, k, blo)
		} else {
			VMOVUPS(Mem{Base: c, Disp: 64 * v}, blo)
		}
		VMULPS(ahi, blo, blo)
		VADDPS(blo, sum[v], sum[v])
	}
	Label("aw_store")
	for v := 0; v < nvec; v++ {
		if k, ok := masked(v); ok {
			VMOVUPS(sum[v], k, Mem{Base: c, Disp: 64 * v})
		} else {
			VMOVUPS(sum[v], Mem{Base: c, Disp: 64 * v})
		}
	}
	VZEROUPPER()
	RET()
}

// amxRegs are the registers the AMX kernels' prologue loads: A's block,
// B's first strip, 128 (the tiles' stride), the strips, C, acc, mode and
// ldc in bytes; alpha and beta are broadcast in Z30 and Z31.
type amxRegs struct{ aBase, strip, s128, nstr, cptr, accp, mode, ldc GPPhysical }

// amxPrologue loads the tile configuration and the arguments the AMX
// kernels share.
func amxPrologue() amxRegs {
	ldtilecfg(Load(Param("cfg"), RDI))
	r := amxRegs{aBase: RAX, strip: R9, s128: R15, nstr: R12, cptr: R13, accp: RDI, mode: RBX, ldc: RDX}
	Load(Param("a"), r.aBase)
	Load(Param("b"), r.strip)
	MOVQ(U32(128), r.s128)
	Load(Param("nstrips"), r.nstr)
	Load(Param("c"), r.cptr)
	Load(Param("acc"), r.accp)
	Load(Param("mode"), r.mode)
	Load(Param("ldc"), r.ldc)
	SHLQ(U8(2), r.ldc)
	VBROADCASTSS(addr("alpha"), Z30)
	VBROADCASTSS(addr("beta"), Z31)
	return r
}

// amxPack generates the packing of A for amxBF16, from float32 to bf16
// pairs in tile order: chunk c, row i, pair p at dst[512c + 32(i mod 16)
// + 16(i div 16) + p].
//
// amxPackRows reads op(A) = A, whose rows hold k contiguous: each row's
// 32 elements of a chunk convert to its 16 pairs in one VCVTNE2PS2BF16;
// it packs up to 16 rows, 128 bytes apart (called for rows 0–15 and
// 16–31).
// amxPackCols reads op(A) = Aᵀ, whose rows are A's columns: for a chunk,
// the 32 rows of A (k) by 16 columns (rows of op(A)) convert and
// interleave to 16 vectors of 16 pairs, one vector per pair p across 16
// rows of op(A), which a 16×16 transpose of 32-bit words turns into one
// vector per row of op(A).
func amxPack() {
	TEXT("amxPackRows", NOSPLIT, "func(dst *uint32, src *float32, lda, rows, chunks int)")
	Pragma("noescape")
	Doc("amxPackRows sets dst[512c + 32i + p] to the bf16 pair (src[i·lda + 32c + 2p],",
		"src[i·lda + 32c + 2p + 1]) rounded by VCVTNE2PS2BF16, for i < rows ≤ 16,",
		"c < chunks, p < 16.")
	dst, src, lda, rows := RDI, RSI, RDX, RBX
	Load(Param("dst"), dst)
	Load(Param("src"), src)
	Load(Param("lda"), lda)
	SHLQ(U8(2), lda)
	Load(Param("rows"), rows)
	TESTQ(rows, rows)
	JZ(LabelRef("rows_done"))
	Label("rows_row")
	Load(Param("chunks"), RCX)
	MOVQ(src, R8)
	MOVQ(dst, R9)
	Label("rows_chunk")
	VMOVUPS(Mem{Base: R8}, Z1)
	VMOVUPS(Mem{Base: R8, Disp: 64}, Z2)
	vcvtne2ps2bf16(Z0, Z2, Z1)
	VMOVUPS(Z0, Mem{Base: R9})
	ADDQ(U8(128), R8)
	ADDQ(U32(2048), R9)
	DECQ(RCX)
	JNZ(LabelRef("rows_chunk"))
	ADDQ(lda, src)
	ADDQ(U8(128), dst)
	DECQ(rows)
	JNZ(LabelRef("rows_row"))
	Label("rows_done")
	VZEROUPPER()
	RET()

	TEXT("amxPackCols", NOSPLIT, "func(dst *uint32, src *float32, lda, chunks int)")
	Pragma("noescape")
	Doc("amxPackCols sets dst[512c + 32(i mod 16) + 16(i div 16) + p] to the bf16 pair",
		"(src[(32c + 2p)·lda + i], src[(32c + 2p + 1)·lda + i]) rounded by",
		"VCVTNE2PS2BF16, for i < 32, c < chunks, p < 16.")
	dst, src, lda = RDI, RSI, RDX
	Load(Param("dst"), dst)
	Load(Param("src"), src)
	Load(Param("lda"), lda)
	SHLQ(U8(2), lda)
	VMOVUPS(interleaveIdx, Z31)
	Load(Param("chunks"), RCX)
	TESTQ(RCX, RCX)
	JZ(LabelRef("cols_done"))
	Label("cols_chunk")
	for h := 0; h < 2; h++ { // rows 16h..16h+15 of op(A)
		MOVQ(src, R8)
		v := zmm[:16]
		for p := 0; p < 16; p++ {
			VMOVUPS(Mem{Base: R8, Disp: 64 * h}, Z16)
			VMOVUPS(Mem{Base: R8, Index: lda, Scale: 1, Disp: 64 * h}, Z17)
			vcvtne2ps2bf16(v[p], Z17, Z16)
			VPERMW(v[p], Z31, v[p])
			LEAQ(Mem{Base: R8, Index: lda, Scale: 2}, R8)
		}
		rowsOut := transpose16(v, zmm[16:31])
		for i, r := range rowsOut {
			VMOVUPS(r, Mem{Base: dst, Disp: 128*i + 64*h})
		}
	}
	// The next chunk: 32 rows of A on, 2 KB of dst.
	MOVQ(lda, R8)
	SHLQ(U8(5), R8)
	ADDQ(R8, src)
	ADDQ(U32(2048), dst)
	DECQ(RCX)
	JNZ(LabelRef("cols_chunk"))
	Label("cols_done")
	VZEROUPPER()
	RET()
}

// transpose16 emits the transpose of the 16×16 matrix of 32-bit words
// whose row r is v[r], and returns the registers that hold the rows of
// the transpose. pool holds the registers it may use besides v (at least
// 2). Three rounds: words of row pairs interleaved (VPUNPCK[LH]DQ), then
// quadwords of those (VPUNPCK[LH]QDQ), which leaves each 128-bit lane of
// u[g][q] holding column 4L+q of rows 4g..4g+3; then two rounds of
// VSHUFI32X4 gather the lanes L of the four groups.
func transpose16(v, pool []VecPhysical) []VecPhysical {
	free := append([]VecPhysical(nil), pool...)
	// pair computes two results of a and b into free registers and
	// frees a and b.
	pair := func(a, b VecPhysical, f, g func(a, b, d VecPhysical)) (VecPhysical, VecPhysical) {
		x, y := free[0], free[1]
		free = free[2:]
		f(a, b, x)
		g(a, b, y)
		free = append(free, a, b)
		return x, y
	}
	lodq := func(a, b, d VecPhysical) { VPUNPCKLDQ(b, a, d) }
	hidq := func(a, b, d VecPhysical) { VPUNPCKHDQ(b, a, d) }
	loqdq := func(a, b, d VecPhysical) { VPUNPCKLQDQ(b, a, d) }
	hiqdq := func(a, b, d VecPhysical) { VPUNPCKHQDQ(b, a, d) }
	// Lanes (0, 2) of a then of b, and (1, 3).
	even := func(a, b, d VecPhysical) { VSHUFI32X4(U8(0x88), b, a, d) }
	odd := func(a, b, d VecPhysical) { VSHUFI32X4(U8(0xdd), b, a, d) }
	var lo, hi [8]VecPhysical
	for j := range lo {
		lo[j], hi[j] = pair(v[2*j], v[2*j+1], lodq, hidq)
	}
	var u [4][4]VecPhysical
	for g := range u {
		u[g][0], u[g][1] = pair(lo[2*g], lo[2*g+1], loqdq, hiqdq)
		u[g][2], u[g][3] = pair(hi[2*g], hi[2*g+1], loqdq, hiqdq)
	}
	out := make([]VecPhysical, 16)
	for q := 0; q < 4; q++ {
		x, y := pair(u[0][q], u[1][q], even, odd) // lanes 0, 2 and 1, 3 of groups 0, 1
		z, w := pair(u[2][q], u[3][q], even, odd)
		out[q], out[8+q] = pair(x, z, even, odd)
		out[4+q], out[12+q] = pair(y, w, even, odd)
	}
	return out
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

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
