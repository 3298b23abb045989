package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The kernels below serve products with few rows (or few columns) of C,
// where packing B would cost more than the product: they read the
// operands where they lie, with strides.

// isa is one vector instruction set: its registers and lane count.
type isa struct {
	suffix  string // of the function names
	width   int    // float32 lanes per vector
	vec     func(i int) VecPhysical
	nregs   int
	feature string
}

var (
	avx2   = isa{suffix: "AVX2", width: 8, vec: func(i int) VecPhysical { return ymm[i] }, nregs: 16, feature: "AVX2 and FMA"}
	avx512 = isa{suffix: "AVX512", width: 16, vec: func(i int) VecPhysical { return zmm[i] }, nregs: 32, feature: "AVX-512F"}
)

// strided returns the address of row i of a matrix whose rows lie s bytes
// apart, from bases[q] = row 4q and s3 = 3s, so that every row of up to
// 16 is one addressing mode.
func strided(bases []Register, s, s3 Register, i int) Mem {
	b := bases[i/4]
	switch i % 4 {
	case 1:
		return Mem{Base: b, Index: s, Scale: 1}
	case 2:
		return Mem{Base: b, Index: s, Scale: 2}
	case 3:
		return Mem{Base: b, Index: s3, Scale: 1}
	}
	return Mem{Base: b}
}

// rowBases loads s (in elements) as a byte stride and returns it, 3s and
// the bases of rows 0, 4, 8, … below rows.
func rowBases(base Register, stride string, rows int) ([]Register, Register, Register) {
	s := Load(Param(stride), GP64())
	SHLQ(U8(2), s)
	s3 := GP64()
	LEAQ(Mem{Base: s, Index: s, Scale: 2}, s3)
	bases := []Register{base}
	for q := 1; 4*q < rows; q++ {
		bq := GP64()
		LEAQ(Mem{Base: bases[q-1], Index: s, Scale: 4}, bq)
		bases = append(bases, bq)
	}
	return bases, s, s3
}

// stream generates the kernel base+x.suffix for products with few rows
// of C, for 1 to maxRows rows (a run-time argument: one code path per count). It computes
//
//	C[i,j] = alpha·Σ_p A(i,p)·b[p·ldb+j] (+ beta·C[i,j] when accum ≠ 0)
//
// for i < rows, j < nvec·width, p < k, with A(i,p) = a[i·ars + p·aps]: A
// as stored (ars = lda, aps = 1) or transposed (ars = 1, aps = lda). The
// tile of C stays in registers while B streams through, one row of the
// tile per k step; B is read where it lies, never packed.
func stream(x isa, base string, nvec, maxRows int) {
	name := base + x.suffix
	W := nvec * x.width
	TEXT(name, NOSPLIT, "func(rows, k int, a *float32, ars, aps int, b *float32, ldb int, c *float32, ldc int, alpha, beta float32, accum int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes rows ≤ %d rows of a %d-wide tile of C from A (with", name, maxRows, W),
		"strides ars, aps) and B (rows ldb apart) where they lie, with "+x.feature+";",
		"see package _asm.")
	rows := Load(Param("rows"), GP64())
	for r := 1; r <= maxRows; r++ {
		CMPQ(rows, U8(r))
		JEQ(LabelRef(fmt.Sprintf("%s_%d", name, r)))
	}
	RET()
	for r := 1; r <= maxRows; r++ {
		streamRows(x, name, nvec, r)
	}
}

// streamAhead is how many k steps ahead the stream kernels prefetch B;
// 16 measured best of 8, 16 and 32 for 8 or more rows, alike for fewer.
const streamAhead = 16

func streamRows(x isa, name string, nvec, rows int) {
	nacc := rows * nvec
	nbc := 2 // broadcasts of A, alternating when registers allow
	if nacc+nvec+nbc > x.nregs {
		nbc = 1
	}
	if nacc+nvec+nbc > x.nregs {
		panic(fmt.Sprintf("%s: %d rows of %d vectors do not fit", name, rows, nvec))
	}
	pre := fmt.Sprintf("%s_%d", name, rows)
	Label(pre)
	k := Load(Param("k"), GP64())
	bases, rs, rs3 := rowBases(Load(Param("a"), GP64()), "ars", rows)
	aps := Load(Param("aps"), GP64())
	SHLQ(U8(2), aps)
	b := Load(Param("b"), GP64())
	ldb := Load(Param("ldb"), GP64())
	SHLQ(U8(2), ldb)

	acc := make([]VecPhysical, nacc)
	for i := range acc {
		acc[i] = x.vec(i)
		VXORPS(acc[i], acc[i], acc[i])
	}
	bv := make([]VecPhysical, nvec)
	for v := range bv {
		bv[v] = x.vec(nacc + v)
	}
	bc := make([]VecPhysical, nbc)
	for i := range bc {
		bc[i] = x.vec(nacc + nvec + i)
	}

	// B's rows lie far apart, beyond the reach of the hardware
	// prefetchers: fetch the tile's row streamAhead steps ahead.
	ahead := GP64()
	IMUL3Q(U32(streamAhead), ldb, ahead)

	Label(pre + "_loop")
	for l := 0; l < 4*nvec*x.width; l += 64 {
		PREFETCHT0(Mem{Base: b, Index: ahead, Scale: 1, Disp: l})
	}
	for v := range bv {
		VMOVUPS(Mem{Base: b, Disp: 4 * v * x.width}, bv[v])
	}
	for i := 0; i < rows; i++ {
		y := bc[i%nbc]
		VBROADCASTSS(strided(bases, rs, rs3, i), y)
		for v := range bv {
			VFMADD231PS(bv[v], y, acc[i*nvec+v])
		}
	}
	for _, q := range bases {
		ADDQ(aps, q)
	}
	ADDQ(ldb, b)
	DECQ(k)
	JNZ(LabelRef(pre + "_loop"))

	// C = alpha·acc (+ beta·C).
	c := Load(Param("c"), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(U8(2), ldc)
	alpha := bv[0]
	VBROADCASTSS(addr("alpha"), alpha)
	for i := range acc {
		VMULPS(alpha, acc[i], acc[i])
	}
	accum := Load(Param("accum"), GP64())
	TESTQ(accum, accum)
	JZ(LabelRef(pre + "_overwrite"))
	beta := bc[0]
	VBROADCASTSS(addr("beta"), beta)
	row := GP64()
	MOVQ(c, row)
	for i := 0; i < rows; i++ {
		for v := 0; v < nvec; v++ {
			m := Mem{Base: row, Disp: 4 * v * x.width}
			VFMADD231PS(m, beta, acc[i*nvec+v])
			VMOVUPS(acc[i*nvec+v], m)
		}
		if i < rows-1 {
			ADDQ(ldc, row)
		}
	}
	VZEROUPPER()
	RET()

	Label(pre + "_overwrite")
	for i := 0; i < rows; i++ {
		for v := 0; v < nvec; v++ {
			VMOVUPS(acc[i*nvec+v], Mem{Base: c, Disp: 4 * v * x.width})
		}
		if i < rows-1 {
			ADDQ(ldc, c)
		}
	}
	VZEROUPPER()
	RET()
}

// dots generates the kernel for products of A by Bᵀ with few rows of C
// (or, with the operands swapped, few columns), for 1 to maxRows rows (a
// run-time argument). It computes the rows×cols dot products
//
//	out[i·cols+j] = Σ_p a[i·lda+p]·b[j·ldb+p]
//
// for p < k, each in vector lanes summed across at the end; a final
// partial vector is loaded under the mask at *mask (-1 for the lanes to
// read, 0 for the others). Both operands are read where they lie.
func dots(x isa, cols, maxRows int) {
	name := "dots" + x.suffix
	TEXT(name, NOSPLIT, "func(rows, k int, a *float32, lda int, b *float32, ldb int, out *float32, mask *int32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[i·%d+j] to the dot product of rows i < rows ≤ %d of a", name, cols, maxRows),
		fmt.Sprintf("(lda apart) and j < %d of b (ldb apart), of length k, with %s;", cols, x.feature),
		"mask selects the lanes of a last partial vector. See package _asm.")
	rows := Load(Param("rows"), GP64())
	for r := 1; r <= maxRows; r++ {
		CMPQ(rows, U8(r))
		JEQ(LabelRef(fmt.Sprintf("%s_%d", name, r)))
	}
	RET()
	for r := 1; r <= maxRows; r++ {
		dotsRows(x, name, cols, r)
	}
}

func dotsRows(x isa, name string, cols, rows int) {
	nacc := rows * cols
	if nacc+rows+cols > x.nregs {
		panic(fmt.Sprintf("%s: %d×%d dot products do not fit", name, rows, cols))
	}
	pre := fmt.Sprintf("%s_%d", name, rows)
	Label(pre)
	k := Load(Param("k"), GP64())
	as, ars, ars3 := rowBases(Load(Param("a"), GP64()), "lda", rows)
	bs, brs, brs3 := rowBases(Load(Param("b"), GP64()), "ldb", cols)

	acc := make([]VecPhysical, nacc)
	for i := range acc {
		acc[i] = x.vec(i)
		VXORPS(acc[i], acc[i], acc[i])
	}
	av := make([]VecPhysical, rows)
	for i := range av {
		av[i] = x.vec(nacc + i)
	}
	bv := make([]VecPhysical, cols)
	for j := range bv {
		bv[j] = x.vec(nacc + rows + j)
	}
	fma := func() {
		for i := range av {
			for j := range bv {
				VFMADD231PS(bv[j], av[i], acc[i*cols+j])
			}
		}
	}
	advance := func(bytes int) {
		for _, q := range as {
			ADDQ(U32(bytes), q)
		}
		for _, q := range bs {
			ADDQ(U32(bytes), q)
		}
	}

	n := GP64()
	MOVQ(k, n)
	shift := map[int]uint8{8: 3, 16: 4}[x.width]
	SHRQ(U8(shift), n)
	JZ(LabelRef(pre + "_tail"))
	Label(pre + "_loop")
	for i := range av {
		VMOVUPS(strided(as, ars, ars3, i), av[i])
	}
	for j := range bv {
		VMOVUPS(strided(bs, brs, brs3, j), bv[j])
	}
	fma()
	advance(4 * x.width)
	DECQ(n)
	JNZ(LabelRef(pre + "_loop"))

	Label(pre + "_tail")
	ANDQ(U32(x.width-1), k)
	JZ(LabelRef(pre + "_reduce"))
	mp := Load(Param("mask"), GP64())
	if x.width == 16 {
		m := av[0]
		VMOVUPS(Mem{Base: mp}, m)
		VPTESTMD(m, m, K1)
		for i := range av {
			VMOVUPS_Z(strided(as, ars, ars3, i), K1, av[i])
		}
		for j := range bv {
			VMOVUPS_Z(strided(bs, brs, brs3, j), K1, bv[j])
		}
	} else {
		m := bv[0]
		VMOVUPS(Mem{Base: mp}, m)
		for i := range av {
			VMASKMOVPS(strided(as, ars, ars3, i), m, av[i])
		}
		for j := len(bv) - 1; j >= 0; j-- { // bv[0] holds the mask until last
			VMASKMOVPS(strided(bs, brs, brs3, j), m, bv[j])
		}
	}
	fma()

	// Sum each accumulator's lanes: a row's cols sums end up side by side
	// in one xmm register (cols = 4) and are stored together.
	Label(pre + "_reduce")
	if cols != 4 {
		panic("dots: the reduction assumes 4 columns")
	}
	out := Load(Param("out"), GP64())
	for i := 0; i < rows; i++ {
		xs := make([]VecPhysical, cols)
		for j := range xs {
			a := acc[i*cols+j]
			t := bv[0]
			if x.width == 16 {
				// Whole-zmm adds: t may be a register past 15, which
				// AVX-512F reaches only at full width.
				VEXTRACTF64X4(U8(1), a, t.AsY())
				VADDPS(t, a, a)
				VEXTRACTF32X4(U8(1), a, t.AsX())
				VADDPS(t, a, a)
			} else {
				VEXTRACTF128(U8(1), a, t.AsX())
				VADDPS(t.AsX(), a.AsX(), a.AsX())
			}
			xs[j] = a
		}
		VHADDPS(xs[1].AsX(), xs[0].AsX(), xs[0].AsX()) // 0 0 1 1
		VHADDPS(xs[3].AsX(), xs[2].AsX(), xs[2].AsX()) // 2 2 3 3
		VHADDPS(xs[2].AsX(), xs[0].AsX(), xs[0].AsX()) // 0 1 2 3
		VMOVUPS(xs[0].AsX(), Mem{Base: out, Disp: 16 * i})
	}
	VZEROUPPER()
	RET()
}
