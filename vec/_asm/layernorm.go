package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// fold512 returns lanes 0–7 plus lanes 8–15 of z: the sum of the two
// 8-lane sums the AVX2 kernels keep where these keep one of 16 lanes.
func fold512(z VecVirtual) VecVirtual {
	hi, lo := YMM(), YMM()
	VEXTRACTF64X4(U8(1), z, hi)
	VADDPS(hi, z.AsY(), lo)
	return lo
}

// zfull loads a whole 16-lane vector at the address given, for xhat.
var zfull = access{load: func(m Mem) VecVirtual {
	r := ZMM()
	VMOVUPS(m, r)
	return r
}}

// eachRow emits a loop that runs body for each of rows rows, then next,
// which moves the pointers to the next row; and the function's end.
func eachRow(rows Register, body, next func()) {
	Label("row")
	TESTQ(rows, rows)
	JZ(LabelRef("done"))
	body()
	next()
	DECQ(rows)
	JMP(LabelRef("row"))
	Label("done")
	VZEROUPPER()
	RET()
}

// layerNormRows512 emits layerNormRowsAVX512: LayerNorm on each of many
// rows in one call, for rows too short for the calls of MeanVar and
// normAffine to be cheap beside their work (the learned sketch's networks
// normalize rows of 64 and 256 floats). It has the bits of LayerNorm on
// the AVX2 path, row by row, for rows of a multiple of 32 floats: the four
// 8-lane sums of sumAVX2 and sumDevAVX2 are two 16-lane ones here (lanes
// 0–7 and 8–15 of the first are the first two), folded in their order; the
// scalar steps are MeanVar's and LayerNorm's, one instruction each; the
// last pass is normAffineAVX2's, instruction for instruction.
func layerNormRows512() {
	TEXT("layerNormRowsAVX512", NOSPLIT, "func(dst, x []float32, ldx int, gain, bias, mean, rstd []float32, eps float32)")
	Pragma("noescape")
	Doc("layerNormRowsAVX512 sets row i of dst (len(gain) floats from dst[i·len(gain)]) to LayerNorm of row i of x (from x[i·ldx]), mean[i] and rstd[i] to its mean and 1/σ, for i < len(mean), with AVX-512F; len(gain) is a positive multiple of 32.")
	dst, x, gain, bias := ptr("dst"), ptr("x"), ptr("gain"), ptr("bias")
	mean, rstd := ptr("mean"), ptr("rstd")
	n := Load(Param("gain").Len(), GP64())
	rows := Load(Param("mean").Len(), GP64())
	ldx := Load(Param("ldx"), GP64())
	SHLQ(U8(2), ldx)
	nf := XMM()
	VCVTSI2SSQ(n, nf, nf)
	SHLQ(U8(2), n) // bytes a row
	eps := XMM()
	VMOVSS(paramAddr("eps"), eps)
	VCVTSS2SD(eps, eps, eps)
	oneD := XMM()
	c := GP64()
	MOVQ(U64(0x3ff0000000000000), c)
	VMOVQ(c, oneD)
	zero := XMM()
	VXORPS(zero, zero, zero)
	i := GP64()
	eachRow(rows, func() { layerNormRow(x, dst, gain, bias, mean, rstd, n, i, nf, eps, oneD, zero) }, func() {
		ADDQ(ldx, x.Base)
		ADDQ(n, dst.Base)
		ADDQ(U8(4), mean.Base)
		ADDQ(U8(4), rstd.Base)
	})
}

// layerNormRow emits layerNormRows512's work on one row.
func layerNormRow(x, dst, gain, bias, mean, rstd Mem, n, i Register, nf, eps, oneD, zero VecVirtual) {
	at := func(base Mem, disp int) Mem { return Mem{Base: base.Base, Index: i, Scale: 1, Disp: disp} }
	reduce := func(a, b VecVirtual) VecVirtual {
		fa, fb := fold512(a), fold512(b)
		VADDPS(fb, fa, fa)
		return hsum(fa)
	}
	zeros := func(k int) []VecVirtual {
		zs := zregs(k)
		for _, z := range zs {
			VXORPS(z, z, z)
		}
		return zs
	}

	// sumAVX2.
	s := zeros(2)
	XORQ(i, i)
	Label("sum")
	VADDPS(at(x, 0), s[0], s[0])
	VADDPS(at(x, 64), s[1], s[1])
	ADDQ(U8(128), i)
	CMPQ(i, n)
	JB(LabelRef("sum"))
	mu := XMM()
	VDIVSS(nf, reduce(s[0], s[1]), mu)

	// sumDevAVX2.
	zmu := ZMM()
	VBROADCASTSS(mu, zmu)
	d := zeros(4) // the sums of x − mu, then of their squares
	XORQ(i, i)
	Label("dev")
	for j := 0; j < 2; j++ {
		t := ZMM()
		VMOVUPS(at(x, 64*j), t)
		VSUBPS(zmu, t, t)
		VADDPS(t, d[j], d[j])
		VFMADD231PS(t, t, d[2+j])
	}
	ADDQ(U8(128), i)
	CMPQ(i, n)
	JB(LabelRef("dev"))
	sd, q := reduce(d[0], d[1]), reduce(d[2], d[3])

	// MeanVar and LayerNorm: v = max(0, (q − s·s/n)/n) (NaN kept), mean =
	// mu + s/n, rstd = float32(1/√(float64(v) + float64(eps))).
	v := XMM()
	VMULSS(sd, sd, v)
	VDIVSS(nf, v, v)
	VSUBSS(v, q, v)
	VDIVSS(nf, v, v)
	VMAXSS(v, zero, v)
	m := XMM()
	VDIVSS(nf, sd, m)
	VADDSS(m, mu, m)
	VMOVSS(m, mean)
	r := XMM()
	VCVTSS2SD(v, r, r)
	VADDSD(eps, r, r)
	VSQRTSD(r, r, r)
	VDIVSD(r, oneD, r)
	VCVTSD2SS(r, r, r)
	VMOVSS(r, rstd)

	// normAffineAVX2.
	zm, zr := ZMM(), ZMM()
	VBROADCASTSS(m, zm)
	VBROADCASTSS(r, zr)
	XORQ(i, i)
	Label("norm")
	for j := 0; j < 2; j++ {
		t, g := xhat(zfull, at(x, 64*j), zm, zr), ZMM()
		VMOVUPS(at(gain, 64*j), g)
		VFMADD213PS(at(bias, 64*j), g, t)
		VMOVUPS(t, at(dst, 64*j))
	}
	ADDQ(U8(128), i)
	CMPQ(i, n)
	JB(LabelRef("norm"))
}

// layerNormBackwardRows512 emits layerNormBackwardRowsAVX512:
// LayerNormBackward on each of many rows in one call, with the bits of
// layerNormReduceAVX2 and layerNormDxAVX2 row by row, for rows of a
// multiple of 16 floats: their two 8-lane sums (of the even and the odd 8
// floats) are one 16-lane sum here, folded as they add them, and each
// instruction has the form of theirs.
func layerNormBackwardRows512() {
	TEXT("layerNormBackwardRowsAVX512", NOSPLIT, "func(dx []float32, lddx int, dgain, dbias, x []float32, ldx int, gain, dy, mean, rstd []float32)")
	Pragma("noescape")
	Doc("layerNormBackwardRowsAVX512 adds to row i of dx (from dx[i·lddx]), dgain and dbias the gradients of LayerNorm of row i of x (from x[i·ldx]) for row i of dy (len(gain) floats from dy[i·len(gain)]), given mean[i] and rstd[i], for i < len(mean), with AVX-512F; len(gain) is a positive multiple of 16.")
	dx, dgain, dbias, x := ptr("dx"), ptr("dgain"), ptr("dbias"), ptr("x")
	gain, dy, mean, rstd := ptr("gain"), ptr("dy"), ptr("mean"), ptr("rstd")
	n := Load(Param("gain").Len(), GP64())
	rows := Load(Param("mean").Len(), GP64())
	lddx := Load(Param("lddx"), GP64())
	SHLQ(U8(2), lddx)
	ldx := Load(Param("ldx"), GP64())
	SHLQ(U8(2), ldx)
	nf := XMM()
	VCVTSI2SSQ(n, nf, nf)
	SHLQ(U8(2), n) // bytes a row
	i := GP64()
	eachRow(rows, func() { layerNormBackwardRow(dx, dgain, dbias, x, gain, dy, mean, rstd, n, i, nf) }, func() {
		ADDQ(lddx, dx.Base)
		ADDQ(ldx, x.Base)
		ADDQ(n, dy.Base)
		ADDQ(U8(4), mean.Base)
		ADDQ(U8(4), rstd.Base)
	})
}

// layerNormBackwardRow emits layerNormBackwardRows512's work on one row.
func layerNormBackwardRow(dx, dgain, dbias, x, gain, dy, mean, rstd Mem, n, i Register, nf VecVirtual) {
	at := func(base Mem) Mem { return Mem{Base: base.Base, Index: i, Scale: 1} }
	zmu, zrs := ZMM(), ZMM()
	VBROADCASTSS(mean, zmu)
	VBROADCASTSS(rstd, zrs)

	// layerNormReduceAVX2: dgain += dy·x̂, dbias += dy, Σ g and Σ g·x̂
	// with g = dy·gain.
	sg, sgx := ZMM(), ZMM()
	VXORPS(sg, sg, sg)
	VXORPS(sgx, sgx, sgx)
	XORQ(i, i)
	Label("reduce")
	xh, d, t := xhat(zfull, at(x), zmu, zrs), ZMM(), ZMM()
	VMOVUPS(at(dy), d)
	VMOVUPS(at(dgain), t)
	VFMADD231PS(xh, d, t)
	VMOVUPS(t, at(dgain))
	VMOVUPS(at(dbias), t)
	VADDPS(d, t, t)
	VMOVUPS(t, at(dbias))
	VMOVUPS(at(gain), t)
	VMULPS(t, d, d)
	VADDPS(d, sg, sg)
	VFMADD231PS(xh, d, sgx)
	ADDQ(U8(64), i)
	CMPQ(i, n)
	JB(LabelRef("reduce"))
	a, b := ZMM(), ZMM()
	sa := hsum(fold512(sg))
	VDIVSS(nf, sa, sa)
	VBROADCASTSS(sa, a)
	sb := hsum(fold512(sgx))
	VDIVSS(nf, sb, sb)
	VBROADCASTSS(sb, b)

	// layerNormDxAVX2: dx += (dy·gain − a − x̂·b)·rstd.
	XORQ(i, i)
	Label("dx")
	xh2, g, u := xhat(zfull, at(x), zmu, zrs), ZMM(), ZMM()
	VMOVUPS(at(dy), g)
	VMOVUPS(at(gain), u)
	VMULPS(u, g, g)
	VSUBPS(a, g, g)
	VFNMADD231PS(b, xh2, g)
	VMOVUPS(at(dx), u)
	VFMADD231PS(zrs, g, u)
	VMOVUPS(u, at(dx))
	ADDQ(U8(64), i)
	CMPQ(i, n)
	JB(LabelRef("dx"))
}

// prefetchLines emits prefetchLines: PREFETCHT0 for each 64-byte line that
// x touches.
func prefetchLines() {
	TEXT("prefetchLines", NOSPLIT, "func(x []float32)")
	Pragma("noescape")
	Doc("prefetchLines fetches the cache lines of x toward L1 (PREFETCHT0); len(x) > 0.")
	p := Load(Param("x").Base(), GP64())
	end := Load(Param("x").Len(), GP64())
	LEAQ(Mem{Base: p, Index: end, Scale: 4}, end)
	Label("line")
	PREFETCHT0(Mem{Base: p})
	ADDQ(U8(64), p)
	CMPQ(p, end)
	JB(LabelRef("line"))
	RET()
}
