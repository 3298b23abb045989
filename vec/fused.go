package vec

import "fmt"

// Fused passes: each computes in one pass over memory what a sequence of
// the functions above computes in several, with the bits of that
// sequence on every path. The AVX-512 and AVX2 kernels share one
// exponential between GELU and its derivative; the portable path runs the
// sequence.

// BiasGELU computes, for each row of a (rows of len(b) elements), x = a + b
// rounded as Add rounds it, h = GELU(x) and, unless d is nil, d = GELU'(x),
// the bits of GELUBackward(d, x, 1): the activation of a layer whose
// product left a without its bias, and what its backward pass multiplies
// by. len(h) = len(a) = len(d) (unless d is nil) must be a multiple of
// len(b). d may alias a; h may alias neither.
func BiasGELU(h, d, a, b []float32) {
	if len(h) != len(a) || d != nil && len(d) != len(a) || len(b) == 0 && len(a) != 0 || len(b) != 0 && len(a)%len(b) != 0 {
		panic(sprintf("vec.BiasGELU: length mismatch: len(h)=%d, len(d)=%d, len(a)=%d, len(b)=%d: want len(h) = len(a) = len(d) (or d nil), a multiple of len(b)", len(h), len(d), len(a), len(b)))
	}
	w := len(b)
	for lo := 0; lo < len(a); lo += w {
		if d == nil {
			biasGELU(h[lo:lo+w], nil, a[lo:lo+w], b)
		} else {
			biasGELU(h[lo:lo+w], d[lo:lo+w], a[lo:lo+w], b)
		}
	}
}

// GELUMul computes dst[i] = GELU(a[i])·b[i], the bits of GELU and then
// Mul: the gated unit of a GEGLU block. dst may alias a, not b.
func GELUMul(dst, a, b []float32) {
	if len(dst) != len(a) || len(dst) != len(b) {
		panic3("GELUMul", "dst", len(dst), "a", len(a), "b", len(b))
	}
	geluMul(dst, a, b)
}

// GELUMulBackward is the backward pass of GELUMul: for the gradient dy of
// dst it computes da[i] = GELU'(a[i])·(dy[i]·b[i]) and db[i] =
// GELU(a[i])·dy[i], the bits of Mul and GELUBackward, and of GELU and
// Mul. da and db may alias neither each other nor the inputs.
func GELUMulBackward(da, db, a, b, dy []float32) {
	if len(da) != len(db) || len(da) != len(a) || len(da) != len(b) || len(da) != len(dy) {
		panic(sprintf("vec.GELUMulBackward: length mismatch: len(da)=%d, len(db)=%d, len(a)=%d, len(b)=%d, len(dy)=%d", len(da), len(db), len(a), len(b), len(dy)))
	}
	geluMulBackward(da, db, a, b, dy)
}

// SwapAdd sets x[i], run[i] = run[i], run[i]+x[i], the sum rounded as Add
// rounds it: one step of an exclusive prefix sum of rows, where run holds
// the sum of the rows before x and x becomes it.
func SwapAdd(run, x []float32) {
	if len(run) != len(x) {
		panic2("SwapAdd", "run", len(run), "x", len(x))
	}
	swapAdd(run, x)
}

// The sequences the fused kernels stand for, on the kernels of the path in
// use.

func biasGELUSeq(h, d, a, b []float32) {
	if d == nil {
		add(h, a, b)
		gelu(h, h)
		return
	}
	add(d, a, b)
	gelu(h, d)
	slope(d, d)
}

// slope writes d = GELU'(x) as GELUBackward does with dy = 1; d may alias x.
func slope(d, x []float32) {
	for len(d) > 0 {
		n := min(len(d), chunk)
		geluBackward(d[:n], x[:n], ones[:n])
		d, x = d[n:], x[n:]
	}
}

var ones = func() (o [chunk]float32) {
	for i := range o {
		o[i] = 1
	}
	return o
}()

func geluMulSeq(dst, a, b []float32) {
	gelu(dst, a)
	mul(dst, dst, b)
}

func geluMulBackwardSeq(da, db, a, b, dy []float32) {
	gelu(db, a)
	mul(db, db, dy)
	mul(da, dy, b)
	geluBackward(da, a, da)
}

func swapAddGeneric(run, x []float32) {
	x = x[:len(run)]
	for i, r := range run {
		run[i], x[i] = r+x[i], r
	}
}

// Standardize computes the row passes of a layer normalization whose
// every operation rounds on its own, as nn.LayerNorm's do: x̂ = (x −
// mean)·rstd, the difference as Axpy(−mean, 1, x̂) rounds it, then y =
// x̂·gain + bias (y = x̂ for a nil gain, with a nil bias; the bias may be
// nil alone), with the bits of Axpy, Scale, Mul and Add. y may alias x,
// not xhat.
func Standardize(y, xhat, x, gain, bias []float32, mean, rstd float32) {
	n := len(y)
	if len(xhat) != n || len(x) != n || gain != nil && len(gain) != n || bias != nil && (len(bias) != n || gain == nil) {
		panic(sprintf("vec.Standardize: length mismatch: len(y)=%d, len(xhat)=%d, len(x)=%d, len(gain)=%d, len(bias)=%d (a bias needs a gain)", n, len(xhat), len(x), len(gain), len(bias)))
	}
	if gain != nil && bias != nil && standardizeFast(y, xhat, x, gain, bias, mean, rstd) {
		return
	}
	copy(xhat, x)
	for lo := 0; lo < n; lo += chunk {
		hi := min(n, lo+chunk)
		axpy(-mean, ones[:hi-lo], xhat[lo:hi])
	}
	scale(rstd, xhat)
	if gain == nil {
		copy(y, xhat)
		return
	}
	mul(y, xhat, gain)
	if bias != nil {
		add(y, y, bias)
	}
}

// StandardizeGrads computes the elementwise part of the backward pass of
// Standardize over a row, for the gradient dy of its y: dgain += dy·x̂ (the
// product rounded first), dbias += dy, and g = dy·gain (g = dy for a nil
// gain), with the bits of Mul and Add; a nil dgain, dbias or g is skipped.
// g may alias dy.
func StandardizeGrads(dgain, dbias, g, dy, xhat, gain []float32) {
	n := len(dy)
	if len(xhat) != n || dgain != nil && len(dgain) != n || dbias != nil && len(dbias) != n || g != nil && len(g) != n || gain != nil && len(gain) != n {
		panic(sprintf("vec.StandardizeGrads: length mismatch: len(dgain)=%d, len(dbias)=%d, len(g)=%d, len(dy)=%d, len(xhat)=%d, len(gain)=%d", len(dgain), len(dbias), len(g), n, len(xhat), len(gain)))
	}
	if dgain != nil && dbias != nil && g != nil && gain != nil && standardizeGradsFast(dgain, dbias, g, dy, xhat, gain) {
		return
	}
	if dgain != nil {
		var tmp [chunk]float32
		for lo := 0; lo < n; lo += chunk {
			hi := min(n, lo+chunk)
			t := tmp[:hi-lo]
			mul(t, dy[lo:hi], xhat[lo:hi])
			add(dgain[lo:hi], dgain[lo:hi], t)
		}
	}
	if dbias != nil {
		add(dbias, dbias, dy)
	}
	switch {
	case g == nil:
	case gain != nil:
		mul(g, dy, gain)
	default:
		copy(g, dy)
	}
}

// StandardizeDx finishes the input gradient of Standardize over a row:
// g = g·rstd, then g += a·x̂ and g += b, each sum a fused multiply-add,
// with the bits of Scale and two Axpy (the second by ones).
func StandardizeDx(g, xhat []float32, rstd, a, b float32) {
	if len(g) != len(xhat) {
		panic2("StandardizeDx", "g", len(g), "xhat", len(xhat))
	}
	if standardizeDxFast(g, xhat, rstd, a, b) {
		return
	}
	scale(rstd, g)
	axpy(a, xhat, g)
	for lo := 0; lo < len(g); lo += chunk {
		hi := min(len(g), lo+chunk)
		axpy(b, ones[:hi-lo], g[lo:hi])
	}
}

// SymOuter sets phi, F = r(r+1)/2 rows of n, to the products of the r
// rows of n of m (and of t) that a symmetric outer product of each column
// with itself holds once: for c = 0…r−1 the row m_c∗m_c, then m_c∗t_d for
// d = c+1…r−1, each rounded as Mul rounds it. With t = √2·m it is the
// self-tensoring of attention's feature maps, φ = M^⊗2 with the repeated
// entries folded into the √2; one call instead of F calls of Mul on short
// rows, whose overhead was most of the time.
func SymOuter(phi, m, t []float32, r, n int) {
	checkSym("SymOuter", "phi", len(phi), "m", len(m), "t", len(t), r, n)
	symOuter(phi, m, t, r, n)
}

// SymOuterBackward adds to dm ([r × n]) the gradient with respect to m
// of SymOuter's phi with t = √2·m, given its gradient dphi ([F × n]): for
// c = 0…r−1, dm_c += 2·m_c∗dphi_cc, then for each d = c+1…r−1 dm_c +=
// t_d∗dphi_cd and dm_d += t_c∗dphi_cd, in that order, with the bits of
// Mul, then Axpy(2, …) or Add.
func SymOuterBackward(dm, dphi, m, t []float32, r, n int) {
	checkSym("SymOuterBackward", "dphi", len(dphi), "m", len(m), "t", len(t), r, n)
	if len(dm) < r*n {
		panic(fmt.Sprintf("vec.SymOuterBackward: len(dm)=%d, want at least r·n = %d", len(dm), r*n))
	}
	symOuterBackward(dm, dphi, m, t, r, n)
}

// checkSym checks the lengths of SymOuter's arrays for r rows of n.
func checkSym(fn, phi string, nphi int, m string, nm int, t string, nt int, r, n int) {
	if r < 0 || n < 0 {
		panic(fmt.Sprintf("vec.%s: r=%d, n=%d: want r, n ≥ 0", fn, r, n))
	}
	if f := r * (r + 1) / 2; nphi < f*n || nm < r*n || nt < r*n {
		panic(fmt.Sprintf("vec.%s: len(%s)=%d, len(%s)=%d, len(%s)=%d: want at least F·n = %d, r·n = %d, r·n",
			fn, phi, nphi, m, nm, t, nt, f*n, r*n))
	}
}

// symOuterSeq and symOuterBackwardSeq are the sequences SymOuter and
// SymOuterBackward stand for, on the kernels of the path in use; tmp holds
// n floats.
func symOuterSeq(phi, m, t []float32, r, n int) {
	f := 0
	for c := 0; c < r; c++ {
		mc := m[c*n : (c+1)*n]
		mul(phi[f*n:(f+1)*n], mc, mc)
		f++
		for d := c + 1; d < r; d++ {
			mul(phi[f*n:(f+1)*n], mc, t[d*n:(d+1)*n])
			f++
		}
	}
}

func symOuterBackwardSeq(dm, dphi, m, t, tmp []float32, r, n int) {
	tmp = tmp[:n]
	f := 0
	for c := 0; c < r; c++ {
		tc, dc := t[c*n:(c+1)*n], dm[c*n:(c+1)*n]
		mul(tmp, m[c*n:(c+1)*n], dphi[f*n:(f+1)*n])
		axpy(2, tmp, dc)
		f++
		for d := c + 1; d < r; d++ {
			g := dphi[f*n : (f+1)*n]
			mul(tmp, t[d*n:(d+1)*n], g)
			add(dc, dc, tmp)
			dd := dm[d*n : (d+1)*n]
			mul(tmp, tc, g)
			add(dd, dd, tmp)
			f++
		}
	}
}

// symOuterBackwardBuf runs symOuterBackwardSeq with a scratch row of its
// own, on the stack where rows are short (attention's blocks).
func symOuterBackwardBuf(dm, dphi, m, t []float32, r, n int) {
	var buf [256]float32
	tmp := buf[:]
	if n > len(buf) {
		tmp = make([]float32, n)
	}
	symOuterBackwardSeq(dm, dphi, m, t, tmp, r, n)
}
