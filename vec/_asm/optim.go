package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// sumSquares512 emits sumSquaresAVX512, SumSquares: each 32 floats, as 4
// vectors of 8 doubles, into 4 vectors of partial sums (element i into lane
// i mod 32), the squares fused into the sums (a float32's square is exact
// in float64, so the fused and the unfused sum are one), the last 1 to 31
// floats under masks; then the pairwise sums of sumSquaresGeneric.
func sumSquares512() {
	TEXT("sumSquaresAVX512", NOSPLIT, "func(x []float32) float64")
	Pragma("noescape")
	Doc("sumSquaresAVX512 returns Σ x[i]² in float64, in SumSquares's order, with AVX-512F.")
	x := ptr("x")
	n := Load(Param("x").Len(), GP64())
	acc := zregs(4)
	for _, a := range acc {
		VXORPD(a, a, a)
	}
	square := func(src Op, a VecVirtual) {
		d := ZMM()
		VCVTPS2PD(src, d)
		VFMADD231PD(d, d, a)
	}
	Label("loop")
	CMPQ(n, U8(32))
	JB(LabelRef("tail"))
	for j := range acc {
		square(x.Offset(32*j), acc[j])
	}
	ADDQ(U8(128), x.Base)
	SUBQ(U8(32), n)
	JMP(LabelRef("loop"))

	Label("tail")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	// Two halves of 16 floats under masks (the second maybe empty): the
	// lanes beyond n load zeros, which add nothing to sums of squares.
	ones, bits, rest := GP32(), GP32(), GP64()
	MOVL(U32(0xffff), ones)
	MOVQ(n, rest)
	CMPQ(rest, U8(16))
	JB(LabelRef("mask"))
	MOVQ(U32(16), rest)
	Label("mask")
	BZHIL(rest.As32(), ones, bits)
	k := K()
	KMOVW(bits, k)
	for h := 0; h < 2; h++ {
		v := ZMM()
		VMOVUPS_Z(x.Offset(64*h), k, v)
		square(v.AsY(), acc[2*h])
		hi := YMM()
		VEXTRACTF64X4(U8(1), v, hi)
		square(hi, acc[2*h+1])
		if h == 0 {
			SUBQ(U8(16), n) // the second half's floats: n−16, or none
			JBE(LabelRef("done"))
			BZHIL(n.(GPVirtual).As32(), ones, bits)
			KMOVW(bits, k)
		}
	}

	Label("done")
	VADDPD(acc[2], acc[0], acc[0]) // s[l] + s[l+16]
	VADDPD(acc[3], acc[1], acc[1])
	VADDPD(acc[1], acc[0], acc[0]) // + (l+8)
	hi := YMM()
	VEXTRACTF64X4(U8(1), acc[0], hi)
	lo := YMM()
	VADDPD(hi, acc[0].AsY(), lo) // + (l+4)
	h2 := XMM()
	VEXTRACTF128(U8(1), lo, h2)
	l2 := XMM()
	VADDPD(h2, lo.AsX(), l2) // + (l+2)
	h1 := XMM()
	VPERMILPD(U8(1), l2, h1)
	VADDSD(h1, l2, l2) // + (l+1)
	Store(l2, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// adamW512 emits adamWAVX512, AdamW on 16 floats at a time, the last 1 to
// 15 under a mask, each operation that of adamWGeneric.
func adamW512() {
	TEXT("adamWAVX512", NOSPLIT, "func(w, g, m, v []float32, b1, c1, b2, c2, step, invBias2, eps, decay float32)")
	Pragma("noescape")
	Doc("adamWAVX512 is adamWGeneric with AVX-512F; g, m and v are at least as long as w.")
	w, g, m, v := ptr("w"), ptr("g"), ptr("m"), ptr("v")
	n := Load(Param("w").Len(), GP64())
	c := map[string]VecVirtual{}
	for _, name := range []string{"b1", "c1", "b2", "c2", "step", "invBias2", "eps", "decay"} {
		c[name] = ZMM()
		VBROADCASTSS(paramAddr(name), c[name])
	}
	step := func(load func(Mem, VecVirtual), store func(VecVirtual, Mem), j int) {
		gv, mv, vv, wv := ZMM(), ZMM(), ZMM(), ZMM()
		load(g.Offset(64*j), gv)
		load(m.Offset(64*j), mv)
		load(v.Offset(64*j), vv)
		load(w.Offset(64*j), wv)
		t := ZMM()
		VMULPS(mv, c["b1"], mv) // b1·m
		VMULPS(gv, c["c1"], t)  // (1−b1)·g
		VADDPS(t, mv, mv)
		VMULPS(vv, c["b2"], vv) // b2·v
		VMULPS(gv, c["c2"], t)  // (1−b2)·g
		VMULPS(gv, t, t)        // ·g
		VADDPS(t, vv, vv)
		store(mv, m.Offset(64*j))
		store(vv, v.Offset(64*j))
		VSQRTPS(vv, t)
		VMULPS(c["invBias2"], t, t)
		VADDPS(c["eps"], t, t)
		VMULPS(mv, c["step"], mv) // step·m
		VDIVPS(t, mv, mv)
		VMULPS(wv, c["decay"], t) // decay·w
		VADDPS(t, mv, mv)
		VSUBPS(mv, wv, wv)
		store(wv, w.Offset(64*j))
	}
	loop512(n, bases(w, g, m, v), 2, func(k int) {
		for j := 0; j < k; j++ {
			step(func(src Mem, dst VecVirtual) { VMOVUPS(src, dst) }, func(src VecVirtual, dst Mem) { VMOVUPS(src, dst) }, j)
		}
	}, func(k OpmaskVirtual) {
		step(func(src Mem, dst VecVirtual) { VMOVUPS_Z(src, k, dst) }, func(src VecVirtual, dst Mem) { VMOVUPS(src, k, dst) }, 0)
	})
	VZEROUPPER()
	RET()
}

// addRows512 emits addRowsAVX512, AddRows: dst's columns in blocks of 8
// vectors (then 1, then 1 to 15 floats under a mask), each block held in
// registers while the rows are added to it in order, as Add(dst, dst, row)
// adds them (the same operand order, so NaN payloads agree too).
func addRows512() {
	TEXT("addRowsAVX512", NOSPLIT, "func(dst, m []float32, ld, rows int)")
	Pragma("noescape")
	Doc("addRowsAVX512 adds rows ≥ 1 rows of m, ld floats apart, to dst in order with AVX-512F.")
	dst, m := ptr("dst"), ptr("m")
	n := Load(Param("dst").Len(), GP64())
	ld := Load(Param("ld"), GP64())
	SHLQ(U8(2), ld)
	rows := Load(Param("rows"), GP64())
	// block adds the rows to k vectors of dst at the current pointers,
	// loaded and stored by load and store.
	block := func(id string, k int, load func(Mem, VecVirtual), store func(VecVirtual, Mem), add func(Mem, VecVirtual)) {
		acc := zregs(k)
		for j := range acc {
			load(dst.Offset(64*j), acc[j])
		}
		p, r := GP64(), GP64()
		MOVQ(m.Base, p)
		MOVQ(rows, r)
		Label("rows" + id)
		for j := range acc {
			add(Mem{Base: p, Disp: 64 * j}, acc[j])
		}
		ADDQ(ld, p)
		DECQ(r)
		JNZ(LabelRef("rows" + id))
		for j := range acc {
			store(acc[j], dst.Offset(64*j))
		}
	}
	full := func(src Mem, dst VecVirtual) { VMOVUPS(src, dst) }
	loop512(n, bases(dst, m), 8, func(k int) {
		block(fmt.Sprint(k), k, full, func(src VecVirtual, dst Mem) { VMOVUPS(src, dst) }, func(row Mem, a VecVirtual) { VADDPS(row, a, a) })
	}, func(k OpmaskVirtual) {
		block("Tail", 1, func(src Mem, dst VecVirtual) { VMOVUPS_Z(src, k, dst) }, func(src VecVirtual, dst Mem) { VMOVUPS(src, k, dst) }, func(row Mem, a VecVirtual) {
			t := ZMM()
			VMOVUPS_Z(row, k, t)
			VADDPS(t, a, a)
		})
	})
	VZEROUPPER()
	RET()
}
