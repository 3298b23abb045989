package main

// The fused kernels: one pass over memory for what a sequence of the
// other kernels computes in several, with the same bits (see ../fused.go).
// GELU and its derivative share one exponential (geluParts512).

import (
	"fmt"

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
		return geluAndSlope512(xs, lo, hi)
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
		ys, gs := geluAndSlope512(xs, lo, hi)
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

// standardize512 emits standardizeAVX512, nn.LayerNorm's forward passes
// over a row in one: x̂ = (x − mean)·rstd as Axpy(−mean, 1, ·) and Scale
// compute it, y = x̂·gain + bias as Mul and Add do, each instruction in
// the form of theirs (the same operand order, for NaNs).
func standardize512() {
	TEXT("standardizeAVX512", NOSPLIT, "func(y, xhat, x, gain, bias []float32, negMean, rstd float32)")
	Pragma("noescape")
	Doc("standardizeAVX512 computes xhat[i] = (x[i] - mean)·rstd and y[i] = xhat[i]·gain[i] + bias[i], each operation rounded, with AVX-512F; the other slices are at least as long as y, and y may alias x.")
	y, xh, x, gain, bias := ptr("y"), ptr("xhat"), ptr("x"), ptr("gain"), ptr("bias")
	n := Load(Param("y").Len(), GP64())
	nm, rs := ZMM(), ZMM()
	VBROADCASTSS(paramAddr("negMean"), nm)
	VBROADCASTSS(paramAddr("rstd"), rs)
	f := func(xv Op) VecVirtual {
		t := ZMM()
		VBROADCASTSS(one(), t)
		VFMADD213PS(xv, nm, t) // −mean·1 + x, as Axpy(−mean, ones, x̂)
		VMULPS(t, rs, t)       // as Scale(rstd, x̂)
		return t
	}
	loop512(n, bases(y, xh, x, gain, bias), 2, func(k int) {
		for j := 0; j < k; j++ {
			t := f(x.Offset(64 * j))
			VMOVUPS(t, xh.Offset(64*j))
			VMULPS(gain.Offset(64*j), t, t) // as Mul(y, x̂, gain)
			VADDPS(bias.Offset(64*j), t, t) // as Add(y, y, bias)
			VMOVUPS(t, y.Offset(64*j))
		}
	}, func(m OpmaskVirtual) {
		xv, gv, bv := ZMM(), ZMM(), ZMM()
		VMOVUPS_Z(x, m, xv)
		VMOVUPS_Z(gain, m, gv)
		VMOVUPS_Z(bias, m, bv)
		t := f(xv)
		VMOVUPS(t, m, xh)
		VMULPS(gv, t, t)
		VADDPS(bv, t, t)
		VMOVUPS(t, m, y)
	})
	VZEROUPPER()
	RET()
}

// standardizeGrads512 emits standardizeGradsAVX512, the elementwise part
// of nn.LayerNorm's backward pass over a row, in the forms of Mul and Add:
// dgain += dy·x̂, dbias += dy, g = dy·gain.
func standardizeGrads512() {
	TEXT("standardizeGradsAVX512", NOSPLIT, "func(dgain, dbias, g, dy, xhat, gain []float32)")
	Pragma("noescape")
	Doc("standardizeGradsAVX512 computes dgain[i] += dy[i]·xhat[i], dbias[i] += dy[i] and g[i] = dy[i]·gain[i], each operation rounded, with AVX-512F; the other slices are at least as long as g, and g may alias dy.")
	dg, db, g, dy, xh, gain := ptr("dgain"), ptr("dbias"), ptr("g"), ptr("dy"), ptr("xhat"), ptr("gain")
	n := Load(Param("g").Len(), GP64())
	f := func(dyv VecVirtual, xhv, gainv, dgv, dbv Op) (pg, pb, gv VecVirtual) {
		t, pg, pb, gv := ZMM(), ZMM(), ZMM(), ZMM()
		VMULPS(xhv, dyv, t) // as Mul(tmp, dy, x̂)
		VMOVUPS(dgv, pg)
		VADDPS(t, pg, pg) // as Add(dgain, dgain, tmp)
		VMOVUPS(dbv, pb)
		VADDPS(dyv, pb, pb)    // as Add(dbias, dbias, dy)
		VMULPS(gainv, dyv, gv) // as Mul(g, dy, gain)
		return pg, pb, gv
	}
	loop512(n, bases(dg, db, g, dy, xh, gain), 2, func(k int) {
		for j := 0; j < k; j++ {
			dyv := ZMM()
			VMOVUPS(dy.Offset(64*j), dyv)
			pg, pb, gv := f(dyv, xh.Offset(64*j), gain.Offset(64*j), dg.Offset(64*j), db.Offset(64*j))
			VMOVUPS(pg, dg.Offset(64*j))
			VMOVUPS(pb, db.Offset(64*j))
			VMOVUPS(gv, g.Offset(64*j))
		}
	}, func(m OpmaskVirtual) {
		dyv, xhv, gainv, dgv, dbv := ZMM(), ZMM(), ZMM(), ZMM(), ZMM()
		VMOVUPS_Z(dy, m, dyv)
		VMOVUPS_Z(xh, m, xhv)
		VMOVUPS_Z(gain, m, gainv)
		VMOVUPS_Z(dg, m, dgv)
		VMOVUPS_Z(db, m, dbv)
		pg, pb, gv := f(dyv, xhv, gainv, dgv, dbv)
		VMOVUPS(pg, m, dg)
		VMOVUPS(pb, m, db)
		VMOVUPS(gv, m, g)
	})
	VZEROUPPER()
	RET()
}

// standardizeDx512 emits standardizeDxAVX512, the last pass of
// nn.LayerNorm's backward pass over a row, in the forms of Scale and
// Axpy: g = g·rstd, then g += a·x̂ and g += b·1, each a fused
// multiply-add.
func standardizeDx512() {
	TEXT("standardizeDxAVX512", NOSPLIT, "func(g, xhat []float32, rstd, a, b float32)")
	Pragma("noescape")
	Doc("standardizeDxAVX512 computes g[i] = fma(b, 1, fma(a, xhat[i], g[i]·rstd)) with AVX-512F; len(xhat) ≥ len(g).")
	g, xh := ptr("g"), ptr("xhat")
	n := Load(Param("g").Len(), GP64())
	rs, a, b := ZMM(), ZMM(), ZMM()
	VBROADCASTSS(paramAddr("rstd"), rs)
	VBROADCASTSS(paramAddr("a"), a)
	VBROADCASTSS(paramAddr("b"), b)
	f := func(gv, xhv Op) VecVirtual {
		s, t, u := ZMM(), ZMM(), ZMM()
		VMULPS(gv, rs, s) // as Scale(rstd, g)
		VMOVUPS(xhv, t)
		VFMADD213PS(s, a, t) // a·x̂ + g, as Axpy(a, x̂, g)
		VBROADCASTSS(one(), u)
		VFMADD213PS(t, b, u) // b·1 + g, as Axpy(b, ones, g)
		return u
	}
	loop512(n, bases(g, xh), 4, func(k int) {
		for j := 0; j < k; j++ {
			u := f(g.Offset(64*j), xh.Offset(64*j))
			VMOVUPS(u, g.Offset(64*j))
		}
	}, func(m OpmaskVirtual) {
		gv, xhv := ZMM(), ZMM()
		VMOVUPS_Z(g, m, gv)
		VMOVUPS_Z(xh, m, xhv)
		u := f(gv, xhv)
		VMOVUPS(u, m, g)
	})
	VZEROUPPER()
	RET()
}

// at returns a register holding the address of element jc of the array
// argument name.
func at(name string, jc Register) Register {
	p := Load(Param(name).Base(), GP64())
	LEAQ(Mem{Base: p, Index: jc, Scale: 4}, p)
	return p
}

// rowBytes returns a register holding the bytes of a row, 4n.
func rowBytes() Register {
	row := Load(Param("n"), GP64())
	SHLQ(U8(2), row)
	return row
}

// labels makes the labels of a function's loops unique.
var labels int

func label(name string) string {
	labels++
	return fmt.Sprintf("%s%d", name, labels)
}

// rowProduct emits dst[j] = a[j]·b[j] for the n columns of a row (n read
// from the arguments), 16 at a time, the last 1 to 16 under a mask; the
// product's operands in the order of Mul(dst, a, b).
func rowProduct(dst, a, b Register) {
	j := GP64()
	XORQ(j, j)
	loop, done := label("prod"), label("prodDone")
	Label(loop)
	cnt := Load(Param("n"), GP64())
	SUBQ(j, cnt)
	JLE(LabelRef(done))
	sixteen := GP64()
	MOVQ(U32(16), sixteen)
	CMPQ(cnt, sixteen)
	CMOVQGT(sixteen, cnt)
	k := mask512(cnt)
	x, y := ZMM(), ZMM()
	VMOVUPS_Z(Mem{Base: a, Index: j, Scale: 4}, k, x)
	VMOVUPS_Z(Mem{Base: b, Index: j, Scale: 4}, k, y)
	VMULPS(y, x, x)
	VMOVUPS(x, k, Mem{Base: dst, Index: j, Scale: 4})
	ADDQ(U32(16), j)
	JMP(LabelRef(loop))
	Label(done)
}

// symOuter512 emits symOuterAVX512; see symOuterSeq in ../fused.go: the
// same products in the same order, row by row, operands in the same
// order. (Going through all the rows for each 16 columns, which the
// backward pass does, wrote 528 rows of 256 columns at half the speed of
// the calls it replaces.)
func symOuter512() {
	TEXT("symOuterAVX512", NOSPLIT, "func(phi, m, t []float32, r, n int)")
	Pragma("noescape")
	Doc("symOuterAVX512 computes SymOuter's rows with AVX-512F; phi, m and t hold F·n, r·n and r·n elements.")
	row := rowBytes()
	pphi, pm, ptc := Load(Param("phi").Base(), GP64()), Load(Param("m").Base(), GP64()), Load(Param("t").Base(), GP64())
	c := Load(Param("r"), GP64()) // rows left, this one included
	Label("row")
	TESTQ(c, c)
	JZ(LabelRef("rowsDone"))
	rowProduct(pphi, pm, pm)
	ADDQ(row, pphi)
	pt, left := GP64(), GP64()
	LEAQ(Mem{Base: ptc, Index: row, Scale: 1}, pt)
	MOVQ(c, left)
	DECQ(left)
	Label("col")
	TESTQ(left, left)
	JZ(LabelRef("colsDone"))
	rowProduct(pphi, pm, pt)
	ADDQ(row, pphi)
	ADDQ(row, pt)
	DECQ(left)
	JMP(LabelRef("col"))
	Label("colsDone")
	ADDQ(row, pm)
	ADDQ(row, ptc)
	DECQ(c)
	JMP(LabelRef("row"))
	Label("rowsDone")
	VZEROUPPER()
	RET()
}

// symGroup is the columns symOuterBackward512 keeps in registers at
// once: four vectors of dm_c and of t_c.
const symGroup = 4

// symOuterBackward512 emits symOuterBackwardAVX512; see
// symOuterBackwardSeq in ../fused.go: the same operations, operands in
// the same order (so that NaN payloads come out alike), by groups of 64
// columns, dm_c and t_c of the group in registers while row c is done.
func symOuterBackward512() {
	TEXT("symOuterBackwardAVX512", NOSPLIT, "func(dm, dphi, m, t []float32, r, n int)")
	Pragma("noescape")
	Doc("symOuterBackwardAVX512 computes SymOuterBackward's sums with AVX-512F; dm, m and t hold r·n elements, dphi F·n.")
	row := rowBytes()
	two := ZMM()
	VBROADCASTSS(splat("two", 2), two)
	jc := GP64()
	XORQ(jc, jc)
	Label("group")
	cnt := Load(Param("n"), GP64())
	SUBQ(jc, cnt)
	JLE(LabelRef("done"))
	// The masks of the group's vectors: min(16, max(0, cnt−16v)) lanes.
	var ks [symGroup]OpmaskVirtual
	for v := range ks {
		lanes, sixteen := GP64(), GP64()
		MOVQ(cnt, lanes)
		MOVQ(U32(16), sixteen)
		CMPQ(lanes, sixteen)
		CMOVQGT(sixteen, lanes)
		ks[v] = mask512(lanes)
		if v < symGroup-1 {
			SUBQ(U32(16), cnt)
			zero := GP64()
			XORQ(zero, zero)
			CMPQ(cnt, zero)
			CMOVQLT(zero, cnt)
		}
	}
	pg, pm, ptc, pdc := at("dphi", jc), at("m", jc), at("t", jc), at("dm", jc)
	c := Load(Param("r"), GP64())
	Label("brow")
	TESTQ(c, c)
	JZ(LabelRef("browsDone"))
	var dc, tc [symGroup]VecVirtual
	for v := range dc {
		dc[v], tc[v] = ZMM(), ZMM()
		off := Mem{Base: pdc}.Offset(64 * v)
		tmp, g := ZMM(), ZMM()
		VMOVUPS_Z(off, ks[v], dc[v])
		VMOVUPS_Z(Mem{Base: pm}.Offset(64*v), ks[v], tmp)
		VMOVUPS_Z(Mem{Base: pg}.Offset(64*v), ks[v], g)
		VMULPS(g, tmp, tmp)          // Mul(tmp, m_c, dphi_cc)
		VFMADD213PS(dc[v], two, tmp) // Axpy(2, tmp, dc): tmp = 2·tmp + dc
		VMOVAPS(tmp, dc[v])
		VMOVUPS_Z(Mem{Base: ptc}.Offset(64*v), ks[v], tc[v])
	}
	ADDQ(row, pg)
	off, left := GP64(), GP64()
	MOVQ(row, off)
	MOVQ(c, left)
	DECQ(left)
	Label("bcol")
	TESTQ(left, left)
	JZ(LabelRef("bcolsDone"))
	for v := range dc {
		gd, td, dd := ZMM(), ZMM(), ZMM()
		VMOVUPS_Z(Mem{Base: pg}.Offset(64*v), ks[v], gd)
		VMOVUPS_Z(Mem{Base: ptc, Index: off, Scale: 1}.Offset(64*v), ks[v], td)
		VMULPS(gd, td, td)       // Mul(tmp, t_d, g)
		VADDPS(td, dc[v], dc[v]) // Add(dc, dc, tmp)
		VMOVUPS_Z(Mem{Base: pdc, Index: off, Scale: 1}.Offset(64*v), ks[v], dd)
		VMULPS(gd, tc[v], gd) // Mul(tmp, t_c, g)
		VADDPS(gd, dd, dd)    // Add(dd, dd, tmp)
		VMOVUPS(dd, ks[v], Mem{Base: pdc, Index: off, Scale: 1}.Offset(64*v))
	}
	ADDQ(row, pg)
	ADDQ(row, off)
	DECQ(left)
	JMP(LabelRef("bcol"))
	Label("bcolsDone")
	for v := range dc {
		VMOVUPS(dc[v], ks[v], Mem{Base: pdc}.Offset(64*v))
	}
	ADDQ(row, pdc)
	ADDQ(row, pm)
	ADDQ(row, ptc)
	DECQ(c)
	JMP(LabelRef("brow"))
	Label("browsDone")
	ADDQ(U32(16*symGroup), jc)
	JMP(LabelRef("group"))
	Label("done")
	VZEROUPPER()
	RET()
}

// The AVX2 fused kernels: the same sequences on the AVX2 kernels' bits
// (geluv, geluBackward, mul, add), GELU and GELU' sharing one exponential
// (geluAndSlope), for the CPUs without AVX-512.

// biasGELU2 emits biasGELUAVX2, h = GELU(a+b), and with grad
// biasGELUGradAVX2, which also writes d = GELU'(a+b).
func biasGELU2(grad bool) {
	if grad {
		TEXT("biasGELUGradAVX2", NOSPLIT, "func(h, d, a, b []float32)")
		Doc("biasGELUGradAVX2 computes x = a[i]+b[i], h[i] = GELU(x) and d[i] = GELU'(x) with AVX2 and FMA; len(d), len(a), len(b) ≥ len(h); d may alias a.")
	} else {
		TEXT("biasGELUAVX2", NOSPLIT, "func(h, a, b []float32)")
		Doc("biasGELUAVX2 computes h[i] = GELU(a[i]+b[i]) with AVX2 and FMA; len(a), len(b) ≥ len(h).")
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
	// f takes x = a+b and returns GELU(x) and, with grad, GELU'(x).
	f := func(xs []VecVirtual) (ys, gs []VecVirtual) {
		if !grad {
			return geluv(xs), nil
		}
		return geluAndSlope(xs)
	}
	loop(n, bases(ptrs...), 2, func(k int) {
		xs := regs(k)
		for j := range xs {
			VMOVUPS(a.Offset(32*j), xs[j])
			VADDPS(b.Offset(32*j), xs[j], xs[j]) // a + b, as add
		}
		ys, gs := f(xs)
		for j := range ys {
			VMOVUPS(ys[j], h.Offset(32*j))
			if grad {
				VMOVUPS(gs[j], d.Offset(32*j))
			}
		}
	}, func(m VecVirtual) {
		xv, bv := YMM(), YMM()
		VMASKMOVPS(a, m, xv)
		VMASKMOVPS(b, m, bv)
		VADDPS(bv, xv, xv)
		ys, gs := f([]VecVirtual{xv})
		VMASKMOVPS(ys[0], m, h)
		if grad {
			VMASKMOVPS(gs[0], m, d)
		}
	})
	VZEROUPPER()
	RET()
}

// geluMul2 emits geluMulAVX2, dst = GELU(a)·b.
func geluMul2() {
	TEXT("geluMulAVX2", NOSPLIT, "func(dst, a, b []float32)")
	Pragma("noescape")
	Doc("geluMulAVX2 computes dst[i] = GELU(a[i])·b[i] with AVX2 and FMA; len(a), len(b) ≥ len(dst).")
	dst, a, b := ptr("dst"), ptr("a"), ptr("b")
	n := Load(Param("dst").Len(), GP64())
	loop(n, bases(dst, a, b), 2, func(k int) {
		xs := regs(k)
		for j := range xs {
			VMOVUPS(a.Offset(32*j), xs[j])
		}
		ys := geluv(xs)
		for j, y := range ys {
			VMULPS(b.Offset(32*j), y, y) // GELU(a)·b, as mul
			VMOVUPS(y, dst.Offset(32*j))
		}
	}, func(m VecVirtual) {
		xv, bv := YMM(), YMM()
		VMASKMOVPS(a, m, xv)
		VMASKMOVPS(b, m, bv)
		y := geluv([]VecVirtual{xv})[0]
		VMULPS(bv, y, y)
		VMASKMOVPS(y, m, dst)
	})
	VZEROUPPER()
	RET()
}

// geluMulBackward2 emits geluMulBackwardAVX2, the backward pass of
// geluMulAVX2: da = GELU'(a)·(dy·b), db = GELU(a)·dy.
func geluMulBackward2() {
	TEXT("geluMulBackwardAVX2", NOSPLIT, "func(da, db, a, b, dy []float32)")
	Pragma("noescape")
	Doc("geluMulBackwardAVX2 computes da[i] = GELU'(a[i])·(dy[i]·b[i]) and db[i] = GELU(a[i])·dy[i] with AVX2 and FMA; len(db), len(a), len(b), len(dy) ≥ len(da).")
	da, db, a, b, dy := ptr("da"), ptr("db"), ptr("a"), ptr("b"), ptr("dy")
	n := Load(Param("da").Len(), GP64())
	f := func(xs []VecVirtual, bs, dys []Op) (das, dbs []VecVirtual) {
		ys, gs := geluAndSlope(xs)
		for j := range xs {
			VMULPS(dys[j], ys[j], ys[j]) // GELU(a)·dy
			t := YMM()
			VMOVUPS(dys[j], t)
			VMULPS(bs[j], t, t)     // dy·b
			VMULPS(t, gs[j], gs[j]) // GELU'(a)·(dy·b), as geluBackward
		}
		return gs, ys
	}
	loop(n, bases(da, db, a, b, dy), 2, func(k int) {
		xs := regs(k)
		bs, dys := make([]Op, k), make([]Op, k)
		for j := range xs {
			VMOVUPS(a.Offset(32*j), xs[j])
			bs[j], dys[j] = b.Offset(32*j), dy.Offset(32*j)
		}
		das, dbs := f(xs, bs, dys)
		for j := range das {
			VMOVUPS(das[j], da.Offset(32*j))
			VMOVUPS(dbs[j], db.Offset(32*j))
		}
	}, func(m VecVirtual) {
		xv, bv, dyv := YMM(), YMM(), YMM()
		VMASKMOVPS(a, m, xv)
		VMASKMOVPS(b, m, bv)
		VMASKMOVPS(dy, m, dyv)
		das, dbs := f([]VecVirtual{xv}, []Op{bv}, []Op{dyv})
		VMASKMOVPS(das[0], m, da)
		VMASKMOVPS(dbs[0], m, db)
	})
	VZEROUPPER()
	RET()
}
