package main

// The fused kernels: one pass over memory for what a sequence of the
// other kernels computes in several, with the same bits (see ../fused.go).
// GELU and its derivative share one exponential (geluParts512).

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// biasGELU512 emits biasGELUAVX512, h = GELU(a+b), and with grad
// biasGELUGradAVX512, which also writes d = GELU'(a+b).
func biasGELU512(grad bool) {
	if grad {
		TEXT("biasGELUGradAVX512", NOSPLIT, "func(h, d, a, b []float32)")
		Doc("biasGELUGradAVX512 computes x = a[i]+b[i], h[i] = GELU(x) and d[i] = GELU'(x) with AVX-512F; len(d), len(a), len(b) ≥ len(h); d may alias a.")
	} else {
		TEXT("biasGELUAVX512", NOSPLIT, "func(h, a, b []float32)")
		Doc("biasGELUAVX512 computes h[i] = GELU(a[i]+b[i]) with AVX-512F; len(a), len(b) ≥ len(h).")
	}
	Pragma("noescape")
	h, a, b := ptr("h"), ptr("a"), ptr("b")
	ptrs := []Mem{h, a, b}
	var d Mem
	if grad {
		d = ptr("d")
		ptrs = append(ptrs, d)
	}
	n := Load(Param("h").Len(), GP64())
	var lo, elo, hi VecVirtual
	if grad {
		lo, hi = geluClamps512()
	} else {
		lo, elo = geluConsts512()
	}
	// f takes x = a+b and returns GELU(x) and, with grad, GELU'(x).
	f := func(xs []VecVirtual) (ys, gs []VecVirtual) {
		if !grad {
			return geluv512(xs, lo, elo), nil
		}
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
	loop512(n, bases(ptrs...), 2, func(k int) {
		xs := zregs(k)
		for j := range xs {
			VMOVUPS(a.Offset(64*j), xs[j])
			VADDPS(b.Offset(64*j), xs[j], xs[j])
		}
		ys, gs := f(xs)
		for j := range ys {
			VMOVUPS(ys[j], h.Offset(64*j))
			if grad {
				VMOVUPS(gs[j], d.Offset(64*j))
			}
		}
	}, func(m OpmaskVirtual) {
		xv, bv := ZMM(), ZMM()
		VMOVUPS_Z(a, m, xv)
		VMOVUPS_Z(b, m, bv)
		VADDPS(bv, xv, xv)
		ys, gs := f([]VecVirtual{xv})
		VMOVUPS(ys[0], m, h)
		if grad {
			VMOVUPS(gs[0], m, d)
		}
	})
	VZEROUPPER()
	RET()
}

// geluMul512 emits geluMulAVX512, dst = GELU(a)·b.
func geluMul512() {
	TEXT("geluMulAVX512", NOSPLIT, "func(dst, a, b []float32)")
	Pragma("noescape")
	Doc("geluMulAVX512 computes dst[i] = GELU(a[i])·b[i] with AVX-512F; len(a), len(b) ≥ len(dst).")
	dst, a, b := ptr("dst"), ptr("a"), ptr("b")
	n := Load(Param("dst").Len(), GP64())
	lo, elo := geluConsts512()
	loop512(n, bases(dst, a, b), 2, func(k int) {
		xs := zregs(k)
		for j := range xs {
			VMOVUPS(a.Offset(64*j), xs[j])
		}
		ys := geluv512(xs, lo, elo)
		for j, y := range ys {
			VMULPS(b.Offset(64*j), y, y)
			VMOVUPS(y, dst.Offset(64*j))
		}
	}, func(m OpmaskVirtual) {
		xv, bv := ZMM(), ZMM()
		VMOVUPS_Z(a, m, xv)
		VMOVUPS_Z(b, m, bv)
		y := geluv512([]VecVirtual{xv}, lo, elo)[0]
		VMULPS(bv, y, y)
		VMOVUPS(y, m, dst)
	})
	VZEROUPPER()
	RET()
}

// geluMulBackward512 emits geluMulBackwardAVX512, the backward pass of
// geluMulAVX512: da = GELU'(a)·(dy·b), db = GELU(a)·dy.
func geluMulBackward512() {
	TEXT("geluMulBackwardAVX512", NOSPLIT, "func(da, db, a, b, dy []float32)")
	Pragma("noescape")
	Doc("geluMulBackwardAVX512 computes da[i] = GELU'(a[i])·(dy[i]·b[i]) and db[i] = GELU(a[i])·dy[i] with AVX-512F; len(db), len(a), len(b), len(dy) ≥ len(da).")
	da, db, a, b, dy := ptr("da"), ptr("db"), ptr("a"), ptr("b"), ptr("dy")
	n := Load(Param("da").Len(), GP64())
	lo, hi := geluClamps512()
	f := func(xs []VecVirtual, bs, dys []Op) (das, dbs []VecVirtual) {
		ops := make([]Op, len(xs))
		for j, x := range xs {
			ops[j] = x
		}
		p := geluParts512(ops, lo, hi)
		for _, x := range xs {
			VMAXPS(x, lo, x)
		}
		ys := geluValue512(xs, p.e)
		gs := geluSlope512(p)
		for j := range xs {
			VMULPS(dys[j], ys[j], ys[j]) // GELU(a)·dy
			t := ZMM()
			VMOVUPS(dys[j], t)
			VMULPS(bs[j], t, t)     // dy·b
			VMULPS(t, gs[j], gs[j]) // GELU'(a)·(dy·b)
		}
		return gs, ys
	}
	loop512(n, bases(da, db, a, b, dy), 2, func(k int) {
		xs := zregs(k)
		bs, dys := make([]Op, k), make([]Op, k)
		for j := range xs {
			VMOVUPS(a.Offset(64*j), xs[j])
			bs[j], dys[j] = b.Offset(64*j), dy.Offset(64*j)
		}
		das, dbs := f(xs, bs, dys)
		for j := range das {
			VMOVUPS(das[j], da.Offset(64*j))
			VMOVUPS(dbs[j], db.Offset(64*j))
		}
	}, func(m OpmaskVirtual) {
		xv, bv, dyv := ZMM(), ZMM(), ZMM()
		VMOVUPS_Z(a, m, xv)
		VMOVUPS_Z(b, m, bv)
		VMOVUPS_Z(dy, m, dyv)
		das, dbs := f([]VecVirtual{xv}, []Op{bv}, []Op{dyv})
		VMOVUPS(das[0], m, da)
		VMOVUPS(dbs[0], m, db)
	})
	VZEROUPPER()
	RET()
}

// swapAdd512 emits swapAddAVX512: x[i], run[i] = run[i], run[i]+x[i].
func swapAdd512() {
	TEXT("swapAddAVX512", NOSPLIT, "func(run, x []float32)")
	Pragma("noescape")
	Doc("swapAddAVX512 sets x[i], run[i] = run[i], run[i]+x[i] with AVX-512F; len(x) ≥ len(run).")
	run, x := ptr("run"), ptr("x")
	n := Load(Param("run").Len(), GP64())
	loop512(n, bases(run, x), 4, func(k int) {
		rs, xs := zregs(k), zregs(k)
		for j := range rs {
			VMOVUPS(run.Offset(64*j), rs[j])
			VMOVUPS(x.Offset(64*j), xs[j])
		}
		for j := range rs {
			VMOVUPS(rs[j], x.Offset(64*j))
			VADDPS(xs[j], rs[j], rs[j]) // run + x, as Add(run, run, x)
			VMOVUPS(rs[j], run.Offset(64*j))
		}
	}, func(m OpmaskVirtual) {
		rv, xv := ZMM(), ZMM()
		VMOVUPS_Z(run, m, rv)
		VMOVUPS_Z(x, m, xv)
		VMOVUPS(rv, m, x)
		VADDPS(xv, rv, rv)
		VMOVUPS(rv, m, run)
	})
	VZEROUPPER()
	RET()
}

// swapAdd emits swapAddAVX2, swapAddAVX512 on 8-lane vectors.
func swapAdd() {
	TEXT("swapAddAVX2", NOSPLIT, "func(run, x []float32)")
	Pragma("noescape")
	Doc("swapAddAVX2 sets x[i], run[i] = run[i], run[i]+x[i] with AVX2; len(x) ≥ len(run).")
	run, x := ptr("run"), ptr("x")
	n := Load(Param("run").Len(), GP64())
	loop(n, bases(run, x), 4, func(k int) {
		rs, xs := regs(k), regs(k)
		for j := range rs {
			VMOVUPS(run.Offset(32*j), rs[j])
			VMOVUPS(x.Offset(32*j), xs[j])
		}
		for j := range rs {
			VMOVUPS(rs[j], x.Offset(32*j))
			VADDPS(xs[j], rs[j], rs[j])
			VMOVUPS(rs[j], run.Offset(32*j))
		}
	}, func(m VecVirtual) {
		rv, xv := YMM(), YMM()
		VMASKMOVPS(run, m, rv)
		VMASKMOVPS(x, m, xv)
		VMASKMOVPS(rv, m, x)
		VADDPS(xv, rv, rv)
		VMASKMOVPS(rv, m, run)
	})
	VZEROUPPER()
	RET()
}
