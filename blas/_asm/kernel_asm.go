// Command _asm generates the amd64 SGEMM micro-kernels of package blas with
// avo. It is its own module so that the main module does not depend on avo.
//
// Each kernel computes one mr×nr tile of C from packed panels:
//
//	C[i,j] = alpha·Σ_p a[p·mr+i]·b[p·nr+j] (+ beta·C[i,j] when accum ≠ 0)
//
// for i < mr, j < nr, p < k, where a is an mr-tall strip of A packed
// column by column and b an nr-wide strip of B packed row by row. The tile
// stays in registers for the whole k loop: A is broadcast one element at a
// time and multiplied by whole vectors of B. The kernels of small.go, for
// products with few rows or columns of C, read A and B in place instead.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

//go:generate go run . -out ../kernel_amd64.s -stubs ../kernel_amd64.go -pkg blas

func main() {
	ConstraintExpr("!purego")
	// AVX2+FMA: 16 ymm registers hold 12 accumulators (6 rows × 2
	// vectors of 8), 2 vectors of B and 2 broadcasts of A.
	kernel(shape{name: "kernelAVX2", mr: 6, nvec: 2, width: 8, unroll: 4,
		vec: func(i int) VecPhysical { return ymm[i] }, nregs: 16, feature: "AVX2 and FMA"})
	// AVX-512: 32 zmm registers hold 28 accumulators (14 rows × 2 vectors
	// of 16), 2 vectors of B and 2 broadcasts of A.
	kernel(shape{name: "kernelAVX512", mr: 14, nvec: 2, width: 16, unroll: 4,
		vec: func(i int) VecPhysical { return zmm[i] }, nregs: 32, feature: "AVX-512F"})
	transpose8()
	transpose4()
	// Few rows of C: tiles as wide as the packed kernels' (nr), B read in
	// place. The A broadcasts alternate between two registers when there
	// are enough.
	stream(avx2, "stream", 2, 6)
	stream(avx512, "stream", 2, 14)
	// One or two rows of C (decoding a token): tiles four times as wide,
	// so that each k step reads B in longer runs and more independent
	// accumulators hide the FMA latency. The arithmetic of an element is
	// that of stream, so a row gives the same bits by either kernel.
	stream(avx2, "wide", 4, 2)
	stream(avx512, "wide", 8, 2)
	dots(avx2, 4, 2)
	dots(avx512, 4, 4)
	bf16Kernels()
	Generate()
}

// transpose8 generates the packing helper for the operands whose k index
// is the contiguous one (A as stored, B transposed): 8×8 blocks moved
// through registers with the classic unpack/shuffle/permute transpose.
func transpose8() {
	TEXT("transpose8AVX2", NOSPLIT, "func(dst *float32, dstride int, src *float32, sstride int, blocks int)")
	Pragma("noescape")
	Doc("transpose8AVX2 sets dst[(8b+p)·dstride + i] = src[i·sstride + 8b+p] for",
		"i, p < 8 and b < blocks, with AVX2.")
	d0 := Load(Param("dst"), RDI)
	ds := Load(Param("dstride"), RDX)
	s0 := Load(Param("src"), RSI)
	ss := Load(Param("sstride"), RCX)
	n := Load(Param("blocks"), R8)
	SHLQ(U8(2), ds)
	SHLQ(U8(2), ss)
	ds3, ss3 := R9, R10
	LEAQ(Mem{Base: ds, Index: ds, Scale: 2}, ds3)
	LEAQ(Mem{Base: ss, Index: ss, Scale: 2}, ss3)
	d4, s4 := R11, R12
	LEAQ(Mem{Base: d0, Index: ds, Scale: 4}, d4)
	LEAQ(Mem{Base: s0, Index: ss, Scale: 4}, s4)
	dstep := R13
	LEAQ(Mem{Base: ds, Index: ds, Scale: 1}, dstep) // 2·ds
	SHLQ(U8(2), dstep)                              // 8·ds

	rows := func(b, idx3 Register, st Register) []Mem {
		return []Mem{{Base: b}, {Base: b, Index: st, Scale: 1}, {Base: b, Index: st, Scale: 2}, {Base: b, Index: idx3, Scale: 1}}
	}
	src := append(rows(s0, ss3, ss), rows(s4, ss3, ss)...)
	dst := append(rows(d0, ds3, ds), rows(d4, ds3, ds)...)

	Label("transpose8_loop")
	TESTQ(n, n)
	JZ(LabelRef("transpose8_done"))
	r := ymm[0:8]
	t := ymm[8:16]
	for i := range r {
		VMOVUPS(src[i], r[i])
	}
	for i := 0; i < 8; i += 2 {
		VUNPCKLPS(r[i+1], r[i], t[i])   // a0 b0 a1 b1 | a4 b4 a5 b5
		VUNPCKHPS(r[i+1], r[i], t[i+1]) // a2 b2 a3 b3 | a6 b6 a7 b7
	}
	u := r
	for h := 0; h < 8; h += 4 {
		VSHUFPS(U8(0x44), t[h+2], t[h], u[h])     // column 0 | 4 of rows h..h+3
		VSHUFPS(U8(0xEE), t[h+2], t[h], u[h+1])   // column 1 | 5
		VSHUFPS(U8(0x44), t[h+3], t[h+1], u[h+2]) // column 2 | 6
		VSHUFPS(U8(0xEE), t[h+3], t[h+1], u[h+3]) // column 3 | 7
	}
	out := t
	for p := 0; p < 4; p++ {
		VPERM2F128(U8(0x20), u[p+4], u[p], out[p])
		VPERM2F128(U8(0x31), u[p+4], u[p], out[p+4])
	}
	for p := range out {
		VMOVUPS(out[p], dst[p])
	}
	ADDQ(U8(32), s0)
	ADDQ(U8(32), s4)
	ADDQ(dstep, d0)
	ADDQ(dstep, d4)
	DECQ(n)
	JMP(LabelRef("transpose8_loop"))

	Label("transpose8_done")
	VZEROUPPER()
	RET()
}

var (
	ymm = []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15}
	zmm = []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15,
		Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}
)

// shape describes one micro-kernel: mr rows by nvec vectors of width
// float32 lanes, with the k loop unrolled unroll times.
type shape struct {
	name    string
	mr      int
	nvec    int
	width   int
	unroll  int
	vec     func(i int) VecPhysical
	nregs   int
	feature string
}

func kernel(s shape) {
	nr := s.nvec * s.width
	nacc := s.mr * s.nvec
	if nacc+s.nvec+2 > s.nregs {
		panic(fmt.Sprintf("%s: %d accumulators do not fit", s.name, nacc))
	}
	TEXT(s.name, NOSPLIT, "func(k int, a, b, c *float32, ldc int, alpha, beta float32, accum int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes a %d×%d tile of C with %s; see package _asm.", s.name, s.mr, nr, s.feature))

	k := Load(Param("k"), RCX)
	a := Mem{Base: Load(Param("a"), RSI)}
	b := Mem{Base: Load(Param("b"), RDI)}
	c := Load(Param("c"), RDX)
	ldc := Load(Param("ldc"), R8)
	SHLQ(U8(2), ldc)

	acc := make([]VecPhysical, nacc)
	for i := range acc {
		acc[i] = s.vec(i)
		VXORPS(acc[i], acc[i], acc[i])
	}
	bv := make([]VecPhysical, s.nvec)
	for v := range bv {
		bv[v] = s.vec(nacc + v)
	}
	bc := []VecPhysical{s.vec(nacc + s.nvec), s.vec(nacc + s.nvec + 1)}

	// Warm the C tile while the k loop runs.
	row := GP64()
	MOVQ(c, row)
	for i := 0; i < s.mr; i++ {
		PREFETCHT0(Mem{Base: row})
		PREFETCHT0(Mem{Base: row, Disp: 4*nr - 4})
		if i < s.mr-1 {
			ADDQ(ldc, row)
		}
	}

	// step multiplies row u of the packed panels into the accumulators.
	step := func(u int) {
		for v := range bv {
			VMOVUPS(b.Offset(4*(u*nr+v*s.width)), bv[v])
		}
		for i := 0; i < s.mr; i++ {
			x := bc[i%2]
			VBROADCASTSS(a.Offset(4*(u*s.mr+i)), x)
			for v := range bv {
				VFMADD231PS(bv[v], x, acc[i*s.nvec+v])
			}
		}
	}

	Label(s.name + "_loop")
	CMPQ(k, U8(s.unroll))
	JL(LabelRef(s.name + "_tail"))
	for u := 0; u < s.unroll; u++ {
		step(u)
	}
	ADDQ(U32(4*s.unroll*s.mr), a.Base)
	ADDQ(U32(4*s.unroll*nr), b.Base)
	SUBQ(U8(s.unroll), k)
	JMP(LabelRef(s.name + "_loop"))

	Label(s.name + "_tail")
	TESTQ(k, k)
	JZ(LabelRef(s.name + "_store"))
	step(0)
	ADDQ(U32(4*s.mr), a.Base)
	ADDQ(U32(4*nr), b.Base)
	DECQ(k)
	JMP(LabelRef(s.name + "_tail"))

	// C = alpha·acc (+ beta·C).
	Label(s.name + "_store")
	alpha, beta := bv[0], bc[0]
	VBROADCASTSS(addr("alpha"), alpha)
	for i := range acc {
		VMULPS(alpha, acc[i], acc[i])
	}
	accum := Load(Param("accum"), GP64())
	TESTQ(accum, accum)
	JZ(LabelRef(s.name + "_overwrite"))
	VBROADCASTSS(addr("beta"), beta)
	for i := 0; i < s.mr; i++ {
		for v := 0; v < s.nvec; v++ {
			m := Mem{Base: c, Disp: 4 * v * s.width}
			VFMADD231PS(m, beta, acc[i*s.nvec+v])
			VMOVUPS(acc[i*s.nvec+v], m)
		}
		if i < s.mr-1 {
			ADDQ(ldc, c)
		}
	}
	VZEROUPPER()
	RET()

	Label(s.name + "_overwrite")
	for i := 0; i < s.mr; i++ {
		for v := 0; v < s.nvec; v++ {
			VMOVUPS(acc[i*s.nvec+v], Mem{Base: c, Disp: 4 * v * s.width})
		}
		if i < s.mr-1 {
			ADDQ(ldc, c)
		}
	}
	VZEROUPPER()
	RET()
}

// addr is the stack address of the named scalar parameter.
func addr(name string) Mem {
	p, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return p.Addr
}

// transpose4 is transpose8 for strips 4 to 7 rows tall (the AVX2 kernel's
// 6-row strips of A): 4×8 blocks, each output row half a ymm register.
func transpose4() {
	TEXT("transpose4AVX2", NOSPLIT, "func(dst *float32, dstride int, src *float32, sstride int, blocks int)")
	Pragma("noescape")
	Doc("transpose4AVX2 sets dst[(8b+p)·dstride + i] = src[i·sstride + 8b+p] for",
		"i < 4, p < 8 and b < blocks, with AVX2.")
	d0 := Load(Param("dst"), RDI)
	ds := Load(Param("dstride"), RDX)
	s0 := Load(Param("src"), RSI)
	ss := Load(Param("sstride"), RCX)
	n := Load(Param("blocks"), R8)
	SHLQ(U8(2), ds)
	SHLQ(U8(2), ss)
	ds3, ss3 := R9, R10
	LEAQ(Mem{Base: ds, Index: ds, Scale: 2}, ds3)
	LEAQ(Mem{Base: ss, Index: ss, Scale: 2}, ss3)
	d4 := R11
	LEAQ(Mem{Base: d0, Index: ds, Scale: 4}, d4)
	dstep := R13
	LEAQ(Mem{Base: ds, Index: ds, Scale: 1}, dstep)
	SHLQ(U8(2), dstep) // 8·ds

	src := []Mem{{Base: s0}, {Base: s0, Index: ss, Scale: 1}, {Base: s0, Index: ss, Scale: 2}, {Base: s0, Index: ss3, Scale: 1}}
	dlo := []Mem{{Base: d0}, {Base: d0, Index: ds, Scale: 1}, {Base: d0, Index: ds, Scale: 2}, {Base: d0, Index: ds3, Scale: 1}}
	dhi := []Mem{{Base: d4}, {Base: d4, Index: ds, Scale: 1}, {Base: d4, Index: ds, Scale: 2}, {Base: d4, Index: ds3, Scale: 1}}

	Label("transpose4_loop")
	TESTQ(n, n)
	JZ(LabelRef("transpose4_done"))
	r, t, u := ymm[0:4], ymm[4:8], ymm[8:12]
	for i := range r {
		VMOVUPS(src[i], r[i])
	}
	VUNPCKLPS(r[1], r[0], t[0])
	VUNPCKHPS(r[1], r[0], t[1])
	VUNPCKLPS(r[3], r[2], t[2])
	VUNPCKHPS(r[3], r[2], t[3])
	VSHUFPS(U8(0x44), t[2], t[0], u[0]) // column 0 | 4
	VSHUFPS(U8(0xEE), t[2], t[0], u[1]) // column 1 | 5
	VSHUFPS(U8(0x44), t[3], t[1], u[2]) // column 2 | 6
	VSHUFPS(U8(0xEE), t[3], t[1], u[3]) // column 3 | 7
	for p := range u {
		VMOVUPS(u[p].AsX(), dlo[p])
		VEXTRACTF128(U8(1), u[p], dhi[p])
	}
	ADDQ(U8(32), s0)
	ADDQ(dstep, d0)
	ADDQ(dstep, d4)
	DECQ(n)
	JMP(LabelRef("transpose4_loop"))

	Label("transpose4_done")
	VZEROUPPER()
	RET()
}
