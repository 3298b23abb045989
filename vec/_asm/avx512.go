package main

// The AVX-512F kernels: GELU, its backward pass, Mul and Add on 16-lane ZMM
// vectors. They differ from the AVX2 ones in three ways. The tail of 1 to
// 15 elements loads and stores under a K mask. Constants are broadcast
// from memory operands ({1to16}), which costs no extra instruction. And e^x
// is scaled by 2^n with VSCALEFPS, which rounds a subnormal result once
// and needs none of the exponent arithmetic of expv.

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// mask512 returns a mask of the first n lanes, 0 < n < 16.
func mask512(n Register) OpmaskVirtual {
	ones, bits := GP32(), GP32()
	MOVL(U32(0xffff), ones)
	BZHIL(n.(GPVirtual).As32(), ones, bits)
	k := K()
	KMOVW(bits, k)
	return k
}

// loop512 is loop for 16-lane vectors: body processes k vectors at the
// current pointers, first unroll at a time, then one at a time; tail
// handles the last 1 to 15 elements under a mask.
func loop512(n Register, ptrs []Register, unroll int, body func(k int), tail func(m OpmaskVirtual)) {
	advance := func(k int) {
		for _, p := range ptrs {
			ADDQ(U32(64*k), p)
		}
		SUBQ(U32(16*k), n)
	}
	if unroll > 1 {
		Label("loopN")
		CMPQ(n, U32(16*unroll))
		JB(LabelRef("loop1"))
		body(unroll)
		advance(unroll)
		JMP(LabelRef("loopN"))
	}
	Label("loop1")
	CMPQ(n, U32(16))
	JB(LabelRef("tail"))
	body(1)
	advance(1)
	JMP(LabelRef("loop1"))
	Label("tail")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	tail(mask512(n))
	Label("done")
}

func zregs(k int) []VecVirtual {
	r := make([]VecVirtual, k)
	for i := range r {
		r[i] = ZMM()
	}
	return r
}

// binary512 emits dst[i] = op(a[i], b[i]).
func binary512(name, what string, op func(ops ...Op)) {
	TEXT(name+"AVX512", NOSPLIT, "func(dst, a, b []float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%sAVX512 computes %s with AVX-512F; len(a), len(b) ≥ len(dst).", name, what))
	dst, a, b := ptr("dst"), ptr("a"), ptr("b")
	n := Load(Param("dst").Len(), GP64())
	loop512(n, bases(dst, a, b), 4, func(k int) {
		xs := zregs(k)
		for j := range xs {
			VMOVUPS(a.Offset(64*j), xs[j])
		}
		for j := range xs {
			op(b.Offset(64*j), xs[j], xs[j])
		}
		for j := range xs {
			VMOVUPS(xs[j], dst.Offset(64*j))
		}
	}, func(m OpmaskVirtual) {
		av, bv := ZMM(), ZMM()
		VMOVUPS_Z(a, m, av)
		VMOVUPS_Z(b, m, bv)
		op(bv, av, av)
		VMOVUPS(av, m, dst)
	})
	VZEROUPPER()
	RET()
}

// exp512 returns e^x for each of xs, which it overwrites, for x ≤ 0 or
// NaN: the kernels that use it never ask for more. It is expNegv with the
// scaling done by VSCALEFPS, which needs no exponent arithmetic and keeps
// NaN. With lo, x is first clamped to expLo from below. With lo nil, x
// must be at least -2²²·ln 2 ≈ -2.9e6, so that adding magic still rounds
// x·log2e to n; below expLo, r then stays small, as each step of the
// reduction is one fused operation, and p·2^n rounds to 0, as it would
// after the clamp.
func exp512(xs []VecVirtual, lo VecVirtual) []VecVirtual {
	if lo != nil {
		for _, x := range xs {
			VMAXPS(x, lo, x) // returns x if x is NaN
		}
	}
	ns := zregs(len(xs))
	for j, x := range xs {
		VBROADCASTSS(splat("expMagic", expMagic), ns[j])
		VFMADD231PS_BCST(splat("log2e", log2e), x, ns[j]) // x·log2e + magic: n in the low mantissa bits
		VSUBPS_BCST(splat("expMagic", expMagic), ns[j], ns[j])
	}
	for j, x := range xs { // r = x - n·ln2, x overwritten
		VFNMADD231PS_BCST(splat("ln2Hi", ln2Hi), ns[j], x)
		VFNMADD231PS_BCST(splat("ln2Lo", ln2Lo), ns[j], x)
	}
	ps := zregs(len(xs))
	for j := range xs {
		VBROADCASTSS(splat("expP4", expP4), ps[j])
	}
	for _, c := range []struct {
		name string
		v    float32
	}{{"expP3", expP3}, {"expP2", expP2}, {"expP1", expP1}, {"expP0", expP0}, {"one", 1}, {"one", 1}} {
		for j, r := range xs {
			VFMADD213PS_BCST(splat(c.name, c.v), r, ps[j]) // p = p·r + c
		}
	}
	for j := range xs {
		VSCALEFPS(ns[j], ps[j], ps[j]) // p·2^n
	}
	return ps
}

// recip512 returns 1/d for each of ds, d in [1, 2], from VRCP14PS (relative
// error below 2⁻¹⁴) and one Newton step, r + r·(1 - d·r), which squares
// the error to below 2⁻²⁸: the result is within half an ulp and 2⁻²⁸ of
// 1/d, nearly as accurate as VDIVPS, and cheaper where the divider limits
// the speed.
func recip512(ds []VecVirtual) []VecVirtual {
	rs, es := zregs(len(ds)), zregs(len(ds))
	for j, d := range ds {
		VRCP14PS(d, rs[j])
	}
	for j, d := range ds {
		VMOVAPS(d, es[j])
		VFNMADD213PS_BCST(one(), rs[j], es[j]) // 1 - d·r
	}
	for j := range ds {
		VFMADD231PS(es[j], rs[j], rs[j]) // r + r·(1 - d·r)
	}
	return rs
}

// gelu512 emits geluAVX512; see geluGeneric in ../generic.go.
func gelu512() {
	TEXT("geluAVX512", NOSPLIT, "func(dst, src []float32)")
	Pragma("noescape")
	Doc("geluAVX512 computes dst[i] = GELU(src[i]) with AVX-512F; len(src) ≥ len(dst).")
	dst, src := ptr("dst"), ptr("src")
	n := Load(Param("dst").Len(), GP64())
	lo, elo := geluConsts512()
	loop512(n, bases(dst, src), 2, func(k int) {
		xs := zregs(k)
		for j := range xs {
			VMOVUPS(src.Offset(64*j), xs[j])
		}
		ys := geluv512(xs, lo, elo)
		for j := range ys {
			VMOVUPS(ys[j], dst.Offset(64*j))
		}
	}, func(m OpmaskVirtual) {
		xv := ZMM()
		VMOVUPS_Z(src, m, xv)
		y := geluv512([]VecVirtual{xv}, lo, elo)[0]
		VMOVUPS(y, m, dst)
	})
	VZEROUPPER()
	RET()
}

// geluConsts512 loads the clamps of GELU: -100 for x and expLo for the
// exponent.
func geluConsts512() (lo, elo VecVirtual) {
	lo, elo = ZMM(), ZMM()
	VBROADCASTSS(splat("minus100", -100), lo)
	VBROADCASTSS(splat("expLo", expLo), elo)
	return lo, elo
}

// geluv512 returns GELU(x) for each of xs, which it clamps from below
// to -100 in place.
func geluv512(xs []VecVirtual, lo, elo VecVirtual) []VecVirtual {
	k := len(xs)
	vs, es := zregs(k), zregs(k)
	for j, x := range xs {
		VMAXPS(x, lo, x) // keeps NaN
		VMULPS(x, x, vs[j])
		VBROADCASTSS(splat("geluA", geluA), es[j])
		VFMADD231PS_BCST(splat("geluB", geluB), vs[j], es[j])
		VMULPS(x, es[j], vs[j])                                     // v = -2u
		VPORD_BCST(splatBits("signMask", 0x80000000), vs[j], es[j]) // -|v|
	}
	return geluValue512(xs, exp512(es, elo))
}

// geluValue512 returns GELU(x) = max(x, x·E)/(1+E) for each of xs (x
// clamped from below to -100) from E = e^-|2u| (es, kept).
func geluValue512(xs, es []VecVirtual) []VecVirtual {
	ys := zregs(len(xs))
	for j, e := range es {
		num := ZMM()
		VMULPS(xs[j], e, num)
		geluNum(xs[j], num)
		VADDPS_BCST(one(), e, ys[j])
		// A true division: it measured as fast here as VRCP14PS
		// with a Newton step, and rounds better.
		VDIVPS(ys[j], num, ys[j])
	}
	return ys
}

// geluParts holds, for vectors x, what GELU'(x) is made of (see
// geluBackwardGeneric in ../generic.go): v = x clamped to [-100, 100],
// w = -2u of v, E = e^-|w|, whether w > 0 (or +0), and v·d(2u)/dx.
type geluParts struct {
	e, du []VecVirtual
	pos   []OpmaskVirtual
}

// geluParts512 computes the parts of GELU' for xs (registers or memory
// operands). E is also that of GELU(x): for |x| ≤ 100 its exponent is
// GELU's, and beyond, both round e^-|w| to 0.
func geluParts512(xs []Op, lo, hi VecVirtual) geluParts {
	k := len(xs)
	vs, x2s, ws, es, dus := zregs(k), zregs(k), zregs(k), zregs(k), zregs(k)
	pos := make([]OpmaskVirtual, k)
	for j := range xs {
		VMINPS(xs[j], hi, vs[j]) // keeps NaN, as in expv
		VMAXPS(vs[j], lo, vs[j])
		VMULPS(vs[j], vs[j], x2s[j])
		VBROADCASTSS(splat("geluA", geluA), ws[j])
		VFMADD231PS_BCST(splat("geluB", geluB), x2s[j], ws[j])
		VMULPS(vs[j], ws[j], ws[j])                                 // w = -2u
		VPORD_BCST(splatBits("signMask", 0x80000000), ws[j], es[j]) // -|w|
		pos[j] = K()
		VPTESTNMD_BCST(splatBits("signMask", 0x80000000), ws[j], pos[j]) // w > 0, or +0
		VBROADCASTSS(splat("geluD0", geluD0), dus[j])                    // d(2u)/dx
		VFMADD231PS_BCST(splat("geluD1", geluD1), x2s[j], dus[j])
		VMULPS(vs[j], dus[j], dus[j])
	}
	// |w| ≤ 100·(-geluA + -geluB·100²) ≈ 7.2e4: exp512 needs no clamp.
	return geluParts{e: exp512(es, nil), du: dus, pos: pos}
}

// geluAndSlope512 returns GELU(x) and GELU'(x) for each of xs from one
// exponential, with the bits of geluv512 and of geluSlope512 on its own;
// it clamps xs from below to -100 in place, as geluv512 does.
func geluAndSlope512(xs []VecVirtual, lo, hi VecVirtual) (ys, gs []VecVirtual) {
	ops := make([]Op, len(xs))
	for j, x := range xs {
		ops[j] = x
	}
	p := geluParts512(ops, lo, hi)
	for _, x := range xs {
		VMAXPS(x, lo, x) // as geluv512 clamps it; keeps NaN
	}
	ys = geluValue512(xs, p.e)
	return ys, geluSlope512(p)
}

// geluSlope512 returns GELU'(x) from its parts, which it overwrites.
func geluSlope512(p geluParts) []VecVirtual {
	ds := zregs(len(p.e))
	for j, e := range p.e {
		VADDPS_BCST(one(), e, ds[j])
	}
	// D = 1/(1+E), by VRCP14PS and a Newton step, which measured a
	// few per cent faster than VDIVPS here.
	ds = recip512(ds)
	for j, e := range p.e {
		VMULPS(ds[j], e, e) // E·D
		s := ZMM()
		VBLENDMPS(e, ds[j], p.pos[j], s) // σ(2u)
		VMULPS(e, p.du[j], p.du[j])      // x·2u'·E·D
		VFMADD213PS(s, ds[j], p.du[j])   // σ + x·2u'·E·D·D
	}
	return p.du
}

// geluClamps512 loads the clamps of GELU': -100 and 100.
func geluClamps512() (lo, hi VecVirtual) {
	lo, hi = ZMM(), ZMM()
	VBROADCASTSS(splat("minus100", -100), lo)
	VBROADCASTSS(splat("plus100", 100), hi)
	return lo, hi
}

// geluBackward512 emits geluBackwardAVX512; see geluBackwardGeneric in
// ../generic.go.
func geluBackward512() {
	TEXT("geluBackwardAVX512", NOSPLIT, "func(dx, x, dy []float32)")
	Pragma("noescape")
	Doc("geluBackwardAVX512 computes dx[i] = dy[i]·GELU'(x[i]) with AVX-512F; len(x), len(dy) ≥ len(dx).")
	dx, x, dy := ptr("dx"), ptr("x"), ptr("dy")
	n := Load(Param("dx").Len(), GP64())
	lo, hi := geluClamps512()
	f := func(xs, dys []Op) []VecVirtual {
		gs := geluSlope512(geluParts512(xs, lo, hi))
		for j, g := range gs {
			VMULPS(dys[j], g, g)
		}
		return gs
	}
	loop512(n, bases(dx, x, dy), 4, func(k int) {
		xs, dys := make([]Op, k), make([]Op, k)
		for j := range xs {
			xs[j], dys[j] = x.Offset(64*j), dy.Offset(64*j)
		}
		ys := f(xs, dys)
		for j := range ys {
			VMOVUPS(ys[j], dx.Offset(64*j))
		}
	}, func(m OpmaskVirtual) {
		xv, dyv := ZMM(), ZMM()
		VMOVUPS_Z(x, m, xv)
		VMOVUPS_Z(dy, m, dyv)
		y := f([]Op{xv}, []Op{dyv})[0]
		VMOVUPS(y, m, dx)
	})
	VZEROUPPER()
	RET()
}
