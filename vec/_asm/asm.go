// Command _asm generates vec_amd64.s and stubs_amd64.go, the AVX2+FMA
// kernels of package vec and, in avx512.go, the AVX-512F versions of a few
// of them. Run it through go generate in the vec directory.
//
// Every kernel has the same shape: a loop over several 8-lane vectors at a
// time, a loop over single vectors, and a tail of 1 to 7 elements done with
// masked loads and stores, so that no scalar code is needed for exp and its
// kin (16 lanes and 1 to 15 elements for AVX-512). The Go versions in
// ../generic.go compute the same things with the same constants; keep the
// two in sync.
package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

func main() {
	ConstraintExpr("!purego")

	dot()
	axpy()
	scale()
	binary("mul", "dst[i] = a[i]·b[i]", VMULPS)
	binary("add", "dst[i] = a[i]+b[i]", VADDPS)
	sum()
	maxKernel()
	unary("exp", "dst[i] = e^src[i]", expv)
	unary("tanh", "dst[i] = tanh(src[i])", tanhv)
	unary("gelu", "dst[i] = GELU(src[i])", geluv)
	geluBackward()
	expSubSum(true)
	expSubSum(false)
	sumDev()
	mulSub()
	expScale()
	band()
	normAffine()
	layerNormReduce()
	layerNormDx()

	binary512("mul", "dst[i] = a[i]·b[i]", VMULPS)
	binary512("add", "dst[i] = a[i]+b[i]", VADDPS)
	gelu512()
	geluBackward512()
	biasGELU512(false)
	biasGELU512(true)
	geluMul512()
	geluMulBackward512()
	biasGELU2(false)
	biasGELU2(true)
	geluMul2()
	geluMulBackward2()
	swapAdd512()
	symOuter512()
	symOuterBackward512()
	swapAdd()
	standardize512()
	standardizeGrads512()
	standardizeDx512()
	layerNormRows512()
	layerNormBackwardRows512()
	sumSquares512()
	adamW512()
	addRows512()
	prefetchLines()

	Generate()
}

// Constants, each a 32-byte vector of eight equal lanes so that it can be a
// memory operand of a 256-bit instruction.
var consts = map[string]constant{}

type constant struct {
	mem  Mem
	bits uint32
}

func splatBits(name string, bits uint32) Mem {
	if c, ok := consts[name]; ok {
		if c.bits != bits {
			panic(fmt.Sprintf("constant %s defined twice, as %#x and %#x", name, c.bits, bits))
		}
		return c.mem
	}
	m := GLOBL(name, RODATA|NOPTR)
	for i := 0; i < 8; i++ {
		DATA(4*i, U32(bits))
	}
	consts[name] = constant{m, bits}
	return m
}

func splat(name string, v float32) Mem { return splatBits(name, math.Float32bits(v)) }

// The constants of ../generic.go.
const (
	expHi    = 89
	expLo    = -104
	log2e    = 1.44269504088896341
	expMagic = 12582912
	ln2Hi    = 0.693359375
	ln2Lo    = -2.12194440e-4
	expP0    = 0.49999994
	expP1    = 0.166665196
	expP2    = 0.0416683964
	expP3    = 0.00836879667
	expP4    = 0.00138144335

	tanhSmall = 0.625
	tanhQ0    = -0.333332807
	tanhQ1    = 0.133314416
	tanhQ2    = -0.0537397154
	tanhQ3    = 0.020639088
	tanhQ4    = -0.00570498733

	geluC0 = 0.7978845608028654
	geluC1 = 0.044715
	geluA  = -2 * geluC0
	geluB  = -2 * geluC0 * geluC1
	geluD0 = 2 * geluC0
	geluD1 = 6 * geluC0 * geluC1
)

func one() Mem { return splat("one", 1) }

// iota holds 0, 1, …, 7: comparing n against it gives the mask of the
// first n lanes.
func iota() Mem {
	if iotaMem == nil {
		m := GLOBL("iota", RODATA|NOPTR)
		for i := 0; i < 8; i++ {
			DATA(4*i, U32(i))
		}
		iotaMem = &m
	}
	return *iotaMem
}

var iotaMem *Mem

// mask returns a vector whose first n lanes are all ones, 0 < n < 8.
func mask(n Register) VecVirtual {
	m := YMM()
	VMOVD(n.(GPVirtual).As32(), m.AsX())
	VPBROADCASTD(m.AsX(), m)
	VPCMPGTD(iota(), m, m)
	return m
}

// loop emits the loop structure shared by all kernels over n elements: body
// processes k vectors at the current pointers, first unroll at a time, then
// one at a time; tail handles the last 1 to 7 elements under a mask.
func loop(n Register, ptrs []Register, unroll int, body func(k int), tail func(m VecVirtual)) {
	advance := func(k int) {
		for _, p := range ptrs {
			ADDQ(U32(32*k), p)
		}
		SUBQ(U32(8*k), n)
	}
	if unroll > 1 {
		Label("loopN")
		CMPQ(n, U32(8*unroll))
		JB(LabelRef("loop1"))
		body(unroll)
		advance(unroll)
		JMP(LabelRef("loopN"))
	}
	Label("loop1")
	CMPQ(n, U32(8))
	JB(LabelRef("tail"))
	body(1)
	advance(1)
	JMP(LabelRef("loop1"))
	Label("tail")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	tail(mask(n))
	Label("done")
}

// paramAddr returns the stack slot of a scalar argument.
func paramAddr(name string) Mem {
	b, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}

// lenAddr returns the stack slot of a slice argument's length.
func lenAddr(name string) Mem {
	b, err := Param(name).Len().Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}

func ptr(name string) Mem { return Mem{Base: Load(Param(name).Base(), GP64())} }

func regs(k int) []VecVirtual {
	r := make([]VecVirtual, k)
	for i := range r {
		r[i] = YMM()
	}
	return r
}

func bases(ms ...Mem) []Register {
	r := make([]Register, len(ms))
	for i, m := range ms {
		r[i] = m.Base
	}
	return r
}

// hsum adds the lanes of v, in a fixed order, into the low lane of the
// returned register.
func hsum(v VecVirtual) VecVirtual {
	return hreduce(v, VADDPS, VADDSS)
}

func hreduce(v VecVirtual, op, opss func(ops ...Op)) VecVirtual {
	hi, lo, t := XMM(), XMM(), XMM()
	VEXTRACTF128(U8(1), v, hi)
	op(hi, v.AsX(), lo)
	VMOVHLPS(lo, lo, t)
	op(t, lo, lo)
	VMOVSHDUP(lo, t)
	opss(t, lo, lo)
	return lo
}

func doc(name, what string) {
	TEXT(name, NOSPLIT, "")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes %s with AVX2 and FMA.", name, what))
}

func dot() {
	TEXT("dotAVX2", NOSPLIT, "func(x, y []float32) float32")
	Pragma("noescape")
	Doc("dotAVX2 returns Σ x[i]·y[i] with AVX2 and FMA; len(y) ≥ len(x).")
	x, y := ptr("x"), ptr("y")
	n := Load(Param("x").Len(), GP64())
	acc := regs(4)
	for _, a := range acc {
		VXORPS(a, a, a)
	}
	loop(n, bases(x, y), 4, func(k int) {
		xs := regs(k)
		for j := range xs {
			VMOVUPS(x.Offset(32*j), xs[j])
		}
		for j := range xs {
			VFMADD231PS(y.Offset(32*j), xs[j], acc[j])
		}
	}, func(m VecVirtual) {
		xv, yv := YMM(), YMM()
		VMASKMOVPS(x, m, xv)
		VMASKMOVPS(y, m, yv)
		VFMADD231PS(yv, xv, acc[1])
	})
	returnSum(acc)
}

func axpy() {
	TEXT("axpyAVX2", NOSPLIT, "func(alpha float32, x, y []float32)")
	Pragma("noescape")
	Doc("axpyAVX2 computes y += alpha·x with AVX2 and FMA; len(y) ≥ len(x).")
	alpha := YMM()
	VBROADCASTSS(paramAddr("alpha"), alpha)
	x, y := ptr("x"), ptr("y")
	n := Load(Param("x").Len(), GP64())
	loop(n, bases(x, y), 4, func(k int) {
		xs := regs(k)
		for j := range xs {
			VMOVUPS(x.Offset(32*j), xs[j])
		}
		for j := range xs {
			VFMADD213PS(y.Offset(32*j), alpha, xs[j])
		}
		for j := range xs {
			VMOVUPS(xs[j], y.Offset(32*j))
		}
	}, func(m VecVirtual) {
		xv, yv := YMM(), YMM()
		VMASKMOVPS(x, m, xv)
		VMASKMOVPS(y, m, yv)
		VFMADD231PS(xv, alpha, yv)
		VMASKMOVPS(yv, m, y)
	})
	VZEROUPPER()
	RET()
}

func scale() {
	TEXT("scaleAVX2", NOSPLIT, "func(alpha float32, x []float32)")
	Pragma("noescape")
	Doc("scaleAVX2 computes x *= alpha with AVX2.")
	alpha := YMM()
	VBROADCASTSS(paramAddr("alpha"), alpha)
	x := ptr("x")
	n := Load(Param("x").Len(), GP64())
	loop(n, bases(x), 4, func(k int) {
		xs := regs(k)
		for j := range xs {
			VMULPS(x.Offset(32*j), alpha, xs[j])
		}
		for j := range xs {
			VMOVUPS(xs[j], x.Offset(32*j))
		}
	}, func(m VecVirtual) {
		xv := YMM()
		VMASKMOVPS(x, m, xv)
		VMULPS(xv, alpha, xv)
		VMASKMOVPS(xv, m, x)
	})
	VZEROUPPER()
	RET()
}

// binary emits dst[i] = op(a[i], b[i]).
func binary(name, what string, op func(ops ...Op)) {
	TEXT(name+"AVX2", NOSPLIT, "func(dst, a, b []float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%sAVX2 computes %s with AVX2; len(a), len(b) ≥ len(dst).", name, what))
	dst, a, b := ptr("dst"), ptr("a"), ptr("b")
	n := Load(Param("dst").Len(), GP64())
	loop(n, bases(dst, a, b), 4, func(k int) {
		xs := regs(k)
		for j := range xs {
			VMOVUPS(a.Offset(32*j), xs[j])
		}
		for j := range xs {
			op(b.Offset(32*j), xs[j], xs[j])
		}
		for j := range xs {
			VMOVUPS(xs[j], dst.Offset(32*j))
		}
	}, func(m VecVirtual) {
		av, bv := YMM(), YMM()
		VMASKMOVPS(a, m, av)
		VMASKMOVPS(b, m, bv)
		op(bv, av, av)
		VMASKMOVPS(av, m, dst)
	})
	VZEROUPPER()
	RET()
}

func sum() {
	TEXT("sumAVX2", NOSPLIT, "func(x []float32) float32")
	Pragma("noescape")
	Doc("sumAVX2 returns Σ x[i] with AVX2.")
	x := ptr("x")
	n := Load(Param("x").Len(), GP64())
	acc := regs(4)
	for _, a := range acc {
		VXORPS(a, a, a)
	}
	loop(n, bases(x), 4, func(k int) {
		for j := 0; j < k; j++ {
			VADDPS(x.Offset(32*j), acc[j], acc[j])
		}
	}, func(m VecVirtual) {
		xv := YMM()
		VMASKMOVPS(x, m, xv)
		VADDPS(xv, acc[1], acc[1])
	})
	returnSum(acc)
}

// returnSum returns the sum of four accumulators, added in pairs (0+1,
// 2+3, then both) and then across the lanes: one order for every kernel
// that sums, so that their results agree bit for bit.
func returnSum(acc []VecVirtual) {
	VADDPS(acc[1], acc[0], acc[0])
	VADDPS(acc[3], acc[2], acc[2])
	VADDPS(acc[2], acc[0], acc[0])
	Store(hsum(acc[0]), ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// maxKernel keeps, besides the running maxima, the lanes that have seen a
// NaN: VMAXPS returns its second source when either is NaN, so a NaN would
// be forgotten by the next comparison.
func maxKernel() {
	TEXT("maxAVX2", NOSPLIT, "func(x []float32) float32")
	Pragma("noescape")
	Doc("maxAVX2 returns the largest element of x, -Inf if x is empty, NaN if x holds a NaN, with AVX2.")
	x := ptr("x")
	n := Load(Param("x").Len(), GP64())
	negInf := splatBits("negInf", 0xff800000)
	acc := regs(4)
	for _, a := range acc {
		VMOVUPS(negInf, a)
	}
	nan := YMM()
	VXORPS(nan, nan, nan)
	loop(n, bases(x), 4, func(k int) {
		xs := regs(k)
		for j := range xs {
			VMOVUPS(x.Offset(32*j), xs[j])
		}
		for j := range xs {
			VMAXPS(xs[j], acc[j], acc[j])
		}
		for j := 0; j < k; j += 2 {
			u := YMM()
			if j+1 < k {
				VCMPPS(U8(3), xs[j+1], xs[j], u) // unordered: either is NaN
			} else {
				VCMPPS(U8(3), xs[j], xs[j], u)
			}
			VORPS(u, nan, nan)
		}
	}, func(m VecVirtual) {
		xv, u, ni := YMM(), YMM(), YMM()
		VMASKMOVPS(x, m, xv)
		VMOVUPS(negInf, ni)
		VBLENDVPS(m, xv, ni, xv)
		VMAXPS(xv, acc[1], acc[1])
		VCMPPS(U8(3), xv, xv, u)
		VORPS(u, nan, nan)
	})
	r := GP32()
	VMOVMSKPS(nan, r)
	TESTL(r, r)
	JNZ(LabelRef("isnan"))
	VMAXPS(acc[1], acc[0], acc[0])
	VMAXPS(acc[3], acc[2], acc[2])
	VMAXPS(acc[2], acc[0], acc[0])
	Store(hreduce(acc[0], VMAXPS, VMAXSS), ReturnIndex(0))
	VZEROUPPER()
	RET()
	Label("isnan")
	q := XMM()
	VMOVSS(splatBits("nan", 0x7fc00000), q)
	Store(q, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// unary emits dst[i] = f(src[i]) two vectors at a time.
func unary(name, what string, f func(xs []VecVirtual) []VecVirtual) {
	TEXT(name+"AVX2", NOSPLIT, "func(dst, src []float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%sAVX2 computes %s with AVX2 and FMA; len(src) ≥ len(dst).", name, what))
	dst, src := ptr("dst"), ptr("src")
	n := Load(Param("dst").Len(), GP64())
	loop(n, bases(dst, src), 2, func(k int) {
		xs := regs(k)
		for j := range xs {
			VMOVUPS(src.Offset(32*j), xs[j])
		}
		ys := f(xs)
		for j := range ys {
			VMOVUPS(ys[j], dst.Offset(32*j))
		}
	}, func(m VecVirtual) {
		xv := YMM()
		VMASKMOVPS(src, m, xv)
		y := f([]VecVirtual{xv})[0]
		VMASKMOVPS(y, m, dst)
	})
	VZEROUPPER()
	RET()
}

// broadcast loads a constant into a register, for the operand positions
// that cannot take memory.
func broadcast(name string, v float32) VecVirtual {
	r := YMM()
	VBROADCASTSS(splat(name, v), r)
	return r
}

// expv returns e^x for each of xs, which it overwrites. See expInto in
// ../generic.go: x = n·ln2 + r, e^r by a polynomial, 2^n = 2^k1·2^k2 built
// in the exponent bits.
func expv(xs []VecVirtual) []VecVirtual {
	// Clamp into [expLo, expHi]. VMINPS and VMAXPS return their second
	// source, x, if either is NaN, so NaN survives.
	hi, lo := broadcast("expHi", expHi), broadcast("expLo", expLo)
	for _, x := range xs {
		VMINPS(x, hi, x)
		VMAXPS(x, lo, x)
	}
	ts, ns, ps := expPoly(xs, "expMagic", expMagic)
	// With kb = n + 254 (the bits of t minus those of magic - 254):
	// 2^k1 has exponent field kb>>1 = k1 + 127, and 2^k2 has kb - (kb>>1),
	// so the field of 2^k2 is (kb<<23) - (field of 2^k1 << 23).
	bias := splatBits("expMagic254", math.Float32bits(expMagic)-254)
	for j := range xs {
		kb, s1 := ns[j], YMM() // n is dead: reuse its register
		VPSUBD(bias, ts[j], kb)
		VPSRAD(U8(1), kb, s1)
		VPSLLD(U8(23), s1, s1)
		VPSLLD(U8(23), kb, kb)
		VPSUBD(s1, kb, kb)
		VMULPS(s1, ps[j], ps[j])
		VMULPS(kb, ps[j], ps[j])
	}
	return ps
}

// expNegv is expv for x ≤ 0, as GELU needs it, in fewer instructions: n
// is then at most 0, so p·2^(n+64) is a normal number, made exactly by
// adding n+64 to the exponent bits of p, and one multiplication by 2^-64
// rounds the result once, into the subnormals where it must, as expv's
// does. For a NaN x the result may be any value, not NaN, so the callers
// must let NaN reach their result by another way.
func expNegv(xs []VecVirtual) []VecVirtual {
	lo := broadcast("expLo", expLo)
	for _, x := range xs {
		VMAXPS(x, lo, x)
	}
	// With magic + 64, the low bits of t hold n + 64 instead of n, and
	// shifting them into the exponent field drops the bits of magic.
	ts, _, ps := expPoly(xs, "expMagic64", expMagic+64)
	for j := range xs {
		VPSLLD(U8(23), ts[j], ts[j])
		VPADDD(ts[j], ps[j], ps[j])
		VMULPS(splat("twoMinus64", 0x1p-64), ps[j], ps[j])
	}
	return ps
}

// expPoly is the part of expv and expNegv before the scaling. With magic
// the value of magicName, it returns t = x·log2e + magic, which holds n in
// its low mantissa bits offset by magic - 1.5·2²³, n = t - magic as a
// float, and p ≈ e^r, r = x - n·ln2. It overwrites xs.
func expPoly(xs []VecVirtual, magicName string, magicVal float32) (ts, ns, ps []VecVirtual) {
	magic := splat(magicName, magicVal)
	ts, ns = regs(len(xs)), regs(len(xs))
	for j, x := range xs {
		VMOVUPS(magic, ts[j])
		VFMADD231PS(splat("log2e", log2e), x, ts[j]) // t = x·log2e + magic: n in the low mantissa bits
		VSUBPS(magic, ts[j], ns[j])                  // n as a float
	}
	for j, x := range xs { // r = x - n·ln2, x overwritten
		VFNMADD231PS(splat("ln2Hi", ln2Hi), ns[j], x)
		VFNMADD231PS(splat("ln2Lo", ln2Lo), ns[j], x)
	}
	ps = regs(len(xs))
	for j := range xs {
		VMOVUPS(splat("expP4", expP4), ps[j])
	}
	for _, c := range []struct {
		name string
		v    float32
	}{{"expP3", expP3}, {"expP2", expP2}, {"expP1", expP1}, {"expP0", expP0}, {"one", 1}, {"one", 1}} {
		for j, r := range xs {
			VFMADD213PS(splat(c.name, c.v), r, ps[j]) // p = p·r + c
		}
	}
	return ts, ns, ps
}

// tanhv returns tanh x for each of xs, which it overwrites; see
// tanhGeneric in ../generic.go. Both branches are computed and blended.
func tanhv(xs []VecVirtual) []VecVirtual {
	k := len(xs)
	as, sgn, small := regs(k), regs(k), regs(k)
	for j, x := range xs {
		VANDPS(splatBits("absMask", 0x7fffffff), x, as[j])
		VXORPS(as[j], x, sgn[j]) // the sign bit of x
	}
	// Small |x|: a + a·z·q(z).
	zs, qs := regs(k), regs(k)
	for j, a := range as {
		VMULPS(a, a, zs[j])
		VMOVUPS(splat("tanhQ4", tanhQ4), qs[j])
	}
	for _, c := range []struct {
		name string
		v    float32
	}{{"tanhQ3", tanhQ3}, {"tanhQ2", tanhQ2}, {"tanhQ1", tanhQ1}, {"tanhQ0", tanhQ0}} {
		for j, z := range zs {
			VFMADD213PS(splat(c.name, c.v), z, qs[j])
		}
	}
	for j, a := range as {
		VMULPS(a, zs[j], zs[j])                                   // a·z
		VFMADD213PS(a, qs[j], zs[j])                              // a·z·q + a
		VCMPPS(U8(1), splat("tanhSmall", tanhSmall), a, small[j]) // a < tanhSmall; false for NaN
	}
	// Large |x|: 1 - 2/(e^(2a) + 1).
	es := regs(k)
	for j, a := range as {
		VADDPS(a, a, es[j])
	}
	es = expv(es)
	for j, e := range es {
		two := YMM()
		VADDPS(one(), e, e)
		VMOVUPS(splat("two", 2), two)
		VDIVPS(e, two, two)
		VMOVUPS(one(), e)
		VSUBPS(two, e, e)
		VBLENDVPS(small[j], zs[j], e, e)
		VORPS(sgn[j], e, e)
	}
	return es
}

// geluv returns GELU(x) for each of xs; see geluGeneric in ../generic.go.
func geluv(xs []VecVirtual) []VecVirtual {
	clampGELU(xs)
	ws, es := regs(len(xs)), regs(len(xs))
	for j, x := range xs {
		VMULPS(x, x, ws[j])
		VMOVUPS(splat("geluA", geluA), es[j])
		VFMADD231PS(splat("geluB", geluB), ws[j], es[j])
		VMULPS(x, es[j], ws[j])                                // v = -2u
		VORPS(splatBits("signMask", 0x80000000), ws[j], es[j]) // -|v|
	}
	return geluValue(xs, expNegv(es)) // NaN reaches the result through x
}

// clampGELU clamps each of xs from below to -100 in place, as GELU does;
// NaN stays, as in expv.
func clampGELU(xs []VecVirtual) {
	lo := broadcast("minus100", -100)
	for _, x := range xs {
		VMAXPS(x, lo, x)
	}
}

// geluNum turns num = x·E into the numerator of GELU, x·E if v > 0 else
// x. As v > 0 exactly when x < 0 (for x = -0, E = 1), and E ≤ 1, that is
// the larger of x·E and x, whether x is positive or negative: VMAXPS does
// without a mask. When either is NaN, VMAXPS returns its second source,
// x: so +Inf·0 = NaN gives +Inf, and a NaN x stays NaN.
func geluNum(x, num VecVirtual) {
	VMAXPS(x, num, num)
}

func geluBackward() {
	TEXT("geluBackwardAVX2", NOSPLIT, "func(dx, x, dy []float32)")
	Pragma("noescape")
	Doc("geluBackwardAVX2 computes dx[i] = dy[i]·GELU'(x[i]) with AVX2 and FMA; len(x), len(dy) ≥ len(dx).")
	dx, x, dy := ptr("dx"), ptr("x"), ptr("dy")
	n := Load(Param("dx").Len(), GP64())
	f := func(xs, dys []Op) []VecVirtual {
		gs := geluSlope(geluPartsOf(xs))
		for j, g := range gs {
			VMULPS(dys[j], g, g)
		}
		return gs
	}
	loop(n, bases(dx, x, dy), 2, func(k int) {
		xs, dys := make([]Op, k), make([]Op, k)
		for j := range xs {
			xs[j], dys[j] = x.Offset(32*j), dy.Offset(32*j)
		}
		ys := f(xs, dys)
		for j := range ys {
			VMOVUPS(ys[j], dx.Offset(32*j))
		}
	}, func(m VecVirtual) {
		xv, dyv := YMM(), YMM()
		VMASKMOVPS(x, m, xv)
		VMASKMOVPS(dy, m, dyv)
		y := f([]Op{xv}, []Op{dyv})[0]
		VMASKMOVPS(y, m, dx)
	})
	VZEROUPPER()
	RET()
}

// geluParts2 holds, for vectors x, what GELU'(x) is made of (see
// geluBackwardGeneric in ../generic.go): v = x clamped to [-100, 100], v²,
// w = -2u of v, and E = e^-|w|.
type geluParts2 struct{ vs, x2s, ws, es []VecVirtual }

// geluPartsOf computes the parts of GELU' for xs (registers or memory
// operands). E is also that of GELU(x) (geluv): for |x| ≤ 100 its
// exponent is GELU's, and beyond, expNegv clamps both exponents to expLo.
func geluPartsOf(xs []Op) geluParts2 {
	k := len(xs)
	lo, hi := broadcast("minus100", -100), broadcast("plus100", 100)
	p := geluParts2{regs(k), regs(k), regs(k), regs(k)}
	for j := range xs {
		VMINPS(xs[j], hi, p.vs[j])
		VMAXPS(p.vs[j], lo, p.vs[j])
		VMULPS(p.vs[j], p.vs[j], p.x2s[j])
		VMOVUPS(splat("geluA", geluA), p.ws[j])
		VFMADD231PS(splat("geluB", geluB), p.x2s[j], p.ws[j])
		VMULPS(p.vs[j], p.ws[j], p.ws[j])                          // w = -2u
		VORPS(splatBits("signMask", 0x80000000), p.ws[j], p.es[j]) // -|w|
	}
	p.es = expNegv(p.es) // NaN reaches the result through v
	return p
}

// geluSlope returns GELU'(x) from its parts, leaving E as it is.
func geluSlope(p geluParts2) []VecVirtual {
	out := regs(len(p.es))
	for j, e := range p.es {
		d, ed, du := YMM(), YMM(), YMM()
		VADDPS(one(), e, d)
		VDIVPS(d, broadcast("one", 1), d) // D = 1/(1+E)
		VMULPS(e, d, ed)                  // E·D
		// σ(2u): E·D if w > 0 else D, choosing by the sign bit of
		// w: for w = +0, E = 1 makes the two the same.
		VBLENDVPS(p.ws[j], d, ed, out[j])
		VMOVUPS(splat("geluD0", geluD0), du) // d(2u)/dx
		VFMADD231PS(splat("geluD1", geluD1), p.x2s[j], du)
		VMULPS(p.vs[j], du, du)
		VMULPS(ed, du, du)
		VFMADD213PS(out[j], d, du) // σ + x·2u'·E·D·D
		out[j] = du
	}
	return out
}

// geluAndSlope returns GELU(x) and GELU'(x) for each of xs from one
// exponential, with the bits of geluv and of geluSlope on its own; it
// clamps xs from below to -100 in place, as geluv does.
func geluAndSlope(xs []VecVirtual) (ys, gs []VecVirtual) {
	ops := make([]Op, len(xs))
	for j, x := range xs {
		ops[j] = x
	}
	p := geluPartsOf(ops)
	gs = geluSlope(p)
	clampGELU(xs)
	return geluValue(xs, p.es), gs
}

// geluValue returns GELU(x) = max(x, x·E)/(1+E) for each of xs, clamped
// (clampGELU), from E = e^-|2u| (es, overwritten).
func geluValue(xs, es []VecVirtual) []VecVirtual {
	for j, e := range es {
		num := YMM()
		VMULPS(xs[j], e, num)
		geluNum(xs[j], num)
		VADDPS(one(), e, e)
		VDIVPS(e, num, e)
	}
	return es
}

// expSubSum emits expSubSumAVX2, which sets dst[i] = e^(src[i]-m) and
// returns their sum (for Softmax), or without store sumExpSubAVX2, which
// only returns the sum (for LogSumExp).
func expSubSum(store bool) {
	var dst, src Mem
	var n Register
	if store {
		TEXT("expSubSumAVX2", NOSPLIT, "func(dst, src []float32, m float32) float32")
		Pragma("noescape")
		Doc("expSubSumAVX2 sets dst[i] = e^(src[i]-m) and returns their sum, with AVX2 and FMA; len(src) ≥ len(dst).")
		dst, src = ptr("dst"), ptr("src")
		n = Load(Param("dst").Len(), GP64())
	} else {
		TEXT("sumExpSubAVX2", NOSPLIT, "func(x []float32, m float32) float32")
		Pragma("noescape")
		Doc("sumExpSubAVX2 returns Σ e^(x[i]-m) with AVX2 and FMA.")
		src = ptr("x")
		n = Load(Param("x").Len(), GP64())
	}
	m := YMM()
	VBROADCASTSS(paramAddr("m"), m)
	acc := regs(2)
	for _, a := range acc {
		VXORPS(a, a, a)
	}
	ptrs := bases(src)
	if store {
		ptrs = bases(dst, src)
	}
	loop(n, ptrs, 2, func(k int) {
		xs := regs(k)
		for j := range xs {
			VMOVUPS(src.Offset(32*j), xs[j])
			VSUBPS(m, xs[j], xs[j])
		}
		es := expv(xs)
		for j, e := range es {
			if store {
				VMOVUPS(e, dst.Offset(32*j))
			}
			VADDPS(e, acc[j], acc[j])
		}
	}, func(mk VecVirtual) {
		xv := YMM()
		VMASKMOVPS(src, mk, xv)
		VSUBPS(m, xv, xv)
		e := expv([]VecVirtual{xv})[0]
		VANDPS(mk, e, e) // the masked-off lanes hold e^-m
		if store {
			VMASKMOVPS(e, mk, dst)
		}
		VADDPS(e, acc[1], acc[1])
	})
	VADDPS(acc[1], acc[0], acc[0])
	Store(hsum(acc[0]), ReturnIndex(0))
	VZEROUPPER()
	RET()
}

func sumDev() {
	TEXT("sumDevAVX2", NOSPLIT, "func(x []float32, mu float32) (s, q float32)")
	Pragma("noescape")
	Doc("sumDevAVX2 returns Σ (x[i]-mu) and Σ (x[i]-mu)² with AVX2 and FMA.")
	x := ptr("x")
	n := Load(Param("x").Len(), GP64())
	mu := YMM()
	VBROADCASTSS(paramAddr("mu"), mu)
	s, q := regs(4), regs(4)
	for j := range s {
		VXORPS(s[j], s[j], s[j])
		VXORPS(q[j], q[j], q[j])
	}
	loop(n, bases(x), 4, func(k int) {
		ds := regs(k)
		for j := range ds {
			VMOVUPS(x.Offset(32*j), ds[j])
			VSUBPS(mu, ds[j], ds[j])
			VADDPS(ds[j], s[j], s[j])
			VFMADD231PS(ds[j], ds[j], q[j])
		}
	}, func(m VecVirtual) {
		d := YMM()
		VMASKMOVPS(x, m, d)
		VSUBPS(mu, d, d)
		VANDPS(m, d, d) // the masked-off lanes hold -mu
		VADDPS(d, s[1], s[1])
		VFMADD231PS(d, d, q[1])
	})
	for _, a := range [][]VecVirtual{s, q} {
		VADDPS(a[1], a[0], a[0])
		VADDPS(a[3], a[2], a[2])
		VADDPS(a[2], a[0], a[0])
	}
	Store(hsum(s[0]), Return("s"))
	Store(hsum(q[0]), Return("q"))
	VZEROUPPER()
	RET()
}

// access loads and stores vector j of the loop body, or the masked tail.
type access struct {
	load  func(m Mem) VecVirtual
	store func(v VecVirtual, m Mem)
}

func full(j int) access {
	return access{
		load: func(m Mem) VecVirtual {
			r := YMM()
			VMOVUPS(m.Offset(32*j), r)
			return r
		},
		store: func(v VecVirtual, m Mem) { VMOVUPS(v, m.Offset(32*j)) },
	}
}

func masked(mask VecVirtual) access {
	return access{
		load: func(m Mem) VecVirtual {
			r := YMM()
			VMASKMOVPS(m, mask, r)
			return r
		},
		store: func(v VecVirtual, m Mem) { VMASKMOVPS(v, mask, m) },
	}
}

// each runs step on the k vectors of a loop body.
func each(k int, step func(a access, j int)) {
	for j := 0; j < k; j++ {
		step(full(j), j)
	}
}

func scalarParam(name string) VecVirtual {
	r := YMM()
	VBROADCASTSS(paramAddr(name), r)
	return r
}

// xhat returns (x - mu)·rstd.
func xhat(a access, x Mem, mu, rstd VecVirtual) VecVirtual {
	v := a.load(x)
	VSUBPS(mu, v, v)
	VMULPS(rstd, v, v)
	return v
}

func normAffine() {
	TEXT("normAffineAVX2", NOSPLIT, "func(dst, x, gain, bias []float32, mu, rstd float32)")
	Pragma("noescape")
	Doc("normAffineAVX2 computes dst[i] = (x[i]-mu)·rstd·gain[i] + bias[i] with AVX2 and FMA.")
	dst, x, g, b := ptr("dst"), ptr("x"), ptr("gain"), ptr("bias")
	n := Load(Param("dst").Len(), GP64())
	mu, rstd := scalarParam("mu"), scalarParam("rstd")
	step := func(a access, _ int) {
		v := xhat(a, x, mu, rstd)
		VFMADD213PS(a.load(b), a.load(g), v)
		a.store(v, dst)
	}
	loop(n, bases(dst, x, g, b), 4, func(k int) { each(k, step) }, func(m VecVirtual) { step(masked(m), 0) })
	VZEROUPPER()
	RET()
}

// layerNormReduce emits the first pass of the LayerNorm backward: with
// x̂ = (x-mu)·rstd and g = dy·gain, it returns Σ g and Σ g·x̂ and adds dy·x̂
// to dgain and dy to dbias. Masked-off lanes load dy = 0 and so add nothing.
func layerNormReduce() {
	TEXT("layerNormReduceAVX2", NOSPLIT, "func(dgain, dbias, x, gain, dy []float32, mu, rstd float32) (sg, sgx float32)")
	Pragma("noescape")
	Doc("layerNormReduceAVX2 is the first pass of LayerNormBackward, with AVX2 and FMA.")
	dg, db, x, g, dy := ptr("dgain"), ptr("dbias"), ptr("x"), ptr("gain"), ptr("dy")
	n := Load(Param("dgain").Len(), GP64())
	mu, rstd := scalarParam("mu"), scalarParam("rstd")
	sg, sgx := regs(2), regs(2)
	for j := range sg {
		VXORPS(sg[j], sg[j], sg[j])
		VXORPS(sgx[j], sgx[j], sgx[j])
	}
	step := func(a access, j int) {
		xh := xhat(a, x, mu, rstd)
		d := a.load(dy)
		t := a.load(dg)
		VFMADD231PS(xh, d, t) // dgain += dy·x̂
		a.store(t, dg)
		t = a.load(db)
		VADDPS(d, t, t) // dbias += dy
		a.store(t, db)
		VMULPS(a.load(g), d, d) // g = dy·gain
		VADDPS(d, sg[j%2], sg[j%2])
		VFMADD231PS(xh, d, sgx[j%2])
	}
	loop(n, bases(dg, db, x, g, dy), 2, func(k int) { each(k, step) }, func(m VecVirtual) { step(masked(m), 1) })
	VADDPS(sg[1], sg[0], sg[0])
	VADDPS(sgx[1], sgx[0], sgx[0])
	Store(hsum(sg[0]), Return("sg"))
	Store(hsum(sgx[0]), Return("sgx"))
	VZEROUPPER()
	RET()
}

// layerNormDx emits the second pass of the LayerNorm backward:
// dx += rstd·(g - a - x̂·b).
func layerNormDx() {
	TEXT("layerNormDxAVX2", NOSPLIT, "func(dx, x, gain, dy []float32, mu, rstd, a, b float32)")
	Pragma("noescape")
	Doc("layerNormDxAVX2 is the second pass of LayerNormBackward, with AVX2 and FMA.")
	dx, x, g, dy := ptr("dx"), ptr("x"), ptr("gain"), ptr("dy")
	n := Load(Param("dx").Len(), GP64())
	mu, rstd := scalarParam("mu"), scalarParam("rstd")
	ma, mb := scalarParam("a"), scalarParam("b")
	step := func(ac access, _ int) {
		xh := xhat(ac, x, mu, rstd)
		gv := ac.load(dy)
		VMULPS(ac.load(g), gv, gv)
		VSUBPS(ma, gv, gv)       // g - a
		VFNMADD231PS(mb, xh, gv) // - x̂·b
		t := ac.load(dx)
		VFMADD231PS(rstd, gv, t) // dx += rstd·(…)
		ac.store(t, dx)
	}
	loop(n, bases(dx, x, g, dy), 2, func(k int) { each(k, step) }, func(m VecVirtual) { step(masked(m), 0) })
	VZEROUPPER()
	RET()
}

func mulSub() {
	TEXT("mulSubAVX2", NOSPLIT, "func(dst, a, b []float32, c float32)")
	Pragma("noescape")
	Doc("mulSubAVX2 computes dst[i] = a[i]·(b[i]-c) with AVX2; len(a), len(b) ≥ len(dst).")
	dst, a, b := ptr("dst"), ptr("a"), ptr("b")
	n := Load(Param("dst").Len(), GP64())
	c := scalarParam("c")
	step := func(ac access, _ int) {
		v := ac.load(b)
		VSUBPS(c, v, v)
		VMULPS(ac.load(a), v, v)
		ac.store(v, dst)
	}
	loop(n, bases(dst, a, b), 4, func(k int) { each(k, step) }, func(m VecVirtual) { step(masked(m), 0) })
	VZEROUPPER()
	RET()
}

// expScale emits expScaleAVX2: the exponentials of (src[i]-m)·s, the
// subtraction and the product each rounded as in Go, so that the result
// is Exp's of the scaled value bit for bit, and their sum, added in the
// order of sumAVX2 (four accumulators for four vectors at a time, one
// vector at a time into the first, the tail into the second), so that it
// is Sum's of the result bit for bit. The four vectors are computed two
// at a time, for the registers.
func expScale() {
	TEXT("expScaleAVX2", NOSPLIT, "func(dst, src []float32, m, s float32) float32")
	Pragma("noescape")
	Doc("expScaleAVX2 sets dst[i] = e^((src[i]-m)·s) and returns their sum as sumAVX2 adds them, with AVX2 and FMA; len(src) ≥ len(dst).")
	dst, src := ptr("dst"), ptr("src")
	n := Load(Param("dst").Len(), GP64())
	m, s := scalarParam("m"), scalarParam("s")
	acc := regs(4)
	for _, a := range acc {
		VXORPS(a, a, a)
	}
	loop(n, bases(dst, src), 4, func(k int) {
		for j0 := 0; j0 < k; j0 += 2 {
			xs := regs(min(2, k-j0))
			for j := range xs {
				VMOVUPS(src.Offset(32*(j0+j)), xs[j])
				VSUBPS(m, xs[j], xs[j])
				VMULPS(s, xs[j], xs[j])
			}
			for j, e := range expv(xs) {
				VMOVUPS(e, dst.Offset(32*(j0+j)))
				VADDPS(e, acc[j0+j], acc[j0+j])
			}
		}
	}, func(mk VecVirtual) {
		xv := YMM()
		VMASKMOVPS(src, mk, xv)
		VSUBPS(m, xv, xv)
		VMULPS(s, xv, xv)
		e := expv([]VecVirtual{xv})[0]
		VMASKMOVPS(e, mk, dst)
		VANDPS(mk, e, e) // the masked-off lanes hold e^(-m·s); sumAVX2 loads zeros there
		VADDPS(e, acc[1], acc[1])
	})
	returnSum(acc)
}

// band emits bandAVX2. Each vector compares x with hi and lo: the lanes
// at or above hi add their weights, widened to float64, into two vectors
// of four lanes (element i into lane i mod 8, as bandGeneric adds them),
// and are counted in eight integer lanes; the indices of the lanes in the
// band are packed by a permutation from a table and stored at once while
// dst has room for eight more, without a branch on the data (a band's
// lanes come at random), then written one by one while it has room for
// any, and counted from a table of bit counts throughout. The loop takes
// two vectors at a time.
func band() {
	TEXT("bandAVX2", NOSPLIT, "func(dst []int32, x, w []float32, lo, hi float32) (n, above int, weight float64)")
	Pragma("noescape")
	Doc("bandAVX2 writes to dst the indices of the elements of x in [lo, hi), as many as fit, counts them, and counts and adds (in float64) the weights w[i] of those at or above hi, with AVX2; len(w) ≥ len(x).")
	d := Load(Param("dst").Base(), GP64())
	room := lenAddr("dst") // in memory: the registers are all taken
	x, w := ptr("x"), ptr("w")
	n := Load(Param("x").Len(), GP64())
	lo, hi := scalarParam("lo"), scalarParam("hi")
	acc0, acc1, cntAbove, iv := YMM(), YMM(), YMM(), YMM()
	for _, a := range []VecVirtual{acc0, acc1, cntAbove} {
		VXORPS(a, a, a)
	}
	VMOVDQU(iota(), iv) // the indices of the vector's elements
	tb := GP64()
	LEAQ(compressTable(), tb)
	count, limit := GP64(), GP64()
	XORQ(count, count)
	MOVQ(room, limit)
	SUBQ(U8(8), limit) // room for eight more while count ≤ limit
	step := func(mk VecVirtual, j int, sfx string) {
		xv, wv, ge, in := YMM(), YMM(), YMM(), YMM()
		if mk == nil {
			VMOVUPS(x.Offset(32*j), xv)
			VMOVUPS(w.Offset(32*j), wv)
		} else {
			VMASKMOVPS(x, mk, xv)
			VMASKMOVPS(w, mk, wv)
		}
		VCMPPS(U8(0x1d), hi, xv, ge) // x ≥ hi, false for NaN
		VCMPPS(U8(0x1d), lo, xv, in) // x ≥ lo
		VANDNPS(in, ge, in)          // lo ≤ x < hi
		if mk != nil {
			VANDPS(mk, ge, ge)
			VANDPS(mk, in, in)
		}
		VPSUBD(ge, cntAbove, cntAbove) // a true lane is -1
		VANDPS(ge, wv, wv)
		l, h, hx := YMM(), YMM(), XMM()
		VCVTPS2PD(wv.AsX(), l)
		VEXTRACTF128(U8(1), wv, hx)
		VCVTPS2PD(hx, h)
		VADDPD(l, acc0, acc0)
		VADDPD(h, acc1, acc1)
		bits := GP64()
		VMOVMSKPS(in, bits.As32())
		pop := Mem{Base: tb, Index: bits, Scale: 8, Disp: popCounts} // the count of bits
		CMPQ(count, limit)
		JG(LabelRef("few" + sfx))
		perm := YMM()
		VPMOVZXBD(Mem{Base: tb, Index: bits, Scale: 8}, perm)
		VPERMD(iv, perm, perm)
		VMOVDQU(perm, Mem{Base: d, Index: count, Scale: 4})
		ADDQ(pop, count)
		JMP(LabelRef("next" + sfx))
		Label("few" + sfx)
		at := GP64()
		MOVQ(count, at)
		ADDQ(pop, count)
		TESTL(bits.As32(), bits.As32())
		JZ(LabelRef("next" + sfx))
		base := GP64() // the index of the vector's first element
		VMOVD(iv.AsX(), base.As32())
		Label("bit" + sfx)
		CMPQ(room, at)
		JBE(LabelRef("next" + sfx))
		i := GP64()
		BSFQ(bits, i)
		BTRQ(i, bits)
		ADDQ(base, i)
		MOVL(i.As32(), Mem{Base: d, Index: at, Scale: 4})
		INCQ(at)
		TESTQ(bits, bits)
		JNZ(LabelRef("bit" + sfx))
		Label("next" + sfx)
		VPADDD(splatBits("eight", 8), iv, iv)
	}
	loop(n, bases(x, w), 2, func(k int) {
		for j := range k {
			step(nil, j, fmt.Sprintf("%d_%d", k, j))
		}
	}, func(mk VecVirtual) { step(mk, 0, "T") })
	// The weights: lanes i and i+4 first, then (0+2) + (1+3).
	VADDPD(acc1, acc0, acc0)
	hx, lx := XMM(), XMM()
	VEXTRACTF128(U8(1), acc0, hx)
	VADDPD(hx, acc0.AsX(), lx)
	VUNPCKHPD(lx, lx, hx)
	VADDSD(hx, lx, lx)
	Store(count, ReturnIndex(0))
	Store(hsumInt(cntAbove).As64(), ReturnIndex(1))
	Store(lx, ReturnIndex(2))
	VZEROUPPER()
	RET()
}

// hsumInt returns the sum of the eight int32 lanes of v in a register.
func hsumInt(v VecVirtual) GPVirtual {
	c, t := XMM(), XMM()
	VEXTRACTI128(U8(1), v, c)
	VPADDD(c, v.AsX(), c)
	VPSHUFD(U8(0x4e), c, t)
	VPADDD(t, c, c)
	VPSHUFD(U8(0xb1), c, t)
	VPADDD(t, c, c)
	r := GP32()
	VMOVD(c, r)
	return r
}

// compressTable holds, for each mask of eight lanes, the positions of its
// set bits in order (then zeros), a byte each: the permutation that packs
// those lanes; and from popCounts on, each mask's number of set bits,
// eight bytes each for an addition from memory (one table, one register
// for its address).
func compressTable() Mem {
	if compressMem == nil {
		m := GLOBL("compress", RODATA|NOPTR)
		for mask := range 256 {
			var perm uint64
			k := 0
			for lane := range 8 {
				if mask>>lane&1 != 0 {
					perm |= uint64(lane) << (8 * k)
					k++
				}
			}
			DATA(8*mask, U64(perm))
		}
		for mask := range 256 {
			c := 0
			for b := mask; b != 0; b &= b - 1 {
				c++
			}
			DATA(popCounts+8*mask, U64(c))
		}
		compressMem = &m
	}
	return *compressMem
}

// popCounts is where compressTable's counts start.
const popCounts = 256 * 8

var compressMem *Mem
