package vec

// Fused passes: each computes in one pass over memory what a sequence of
// the functions above computes in several, with the bits of that
// sequence on every path. The AVX-512 kernels share one exponential
// between GELU and its derivative; the other paths run the sequence.

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
