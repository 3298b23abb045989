//go:build !purego

package vec

import "golang.org/x/sys/cpu"

//go:generate go run -C _asm . -out ../vec_amd64.s -stubs ../stubs_amd64.go -pkg vec

// impls lists the kernel sets this CPU runs, fastest first. The AVX-512
// kernels also need BMI2 for their tail masks, which every CPU with
// AVX-512F has.
func impls() []impl {
	var s []impl
	if cpu.X86.HasAVX512F && cpu.X86.HasBMI2 && cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		s = append(s, implAVX512)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		s = append(s, implAVX2)
	}
	return append(s, implGo)
}

func dot(x, y []float32) float32 {
	if use >= implAVX2 {
		return dotAVX2(x, y)
	}
	return dotGeneric(x, y)
}

func axpy(alpha float32, x, y []float32) {
	if use >= implAVX2 {
		axpyAVX2(alpha, x, y)
		return
	}
	axpyGeneric(alpha, x, y)
}

func scale(alpha float32, x []float32) {
	if use >= implAVX2 {
		scaleAVX2(alpha, x)
		return
	}
	scaleGeneric(alpha, x)
}

func mul(dst, a, b []float32) {
	switch use {
	case implAVX512:
		mulAVX512(dst, a, b)
	case implAVX2:
		mulAVX2(dst, a, b)
	default:
		mulGeneric(dst, a, b)
	}
}

func add(dst, a, b []float32) {
	switch use {
	case implAVX512:
		addAVX512(dst, a, b)
	case implAVX2:
		addAVX2(dst, a, b)
	default:
		addGeneric(dst, a, b)
	}
}

func sum(x []float32) float32 {
	if use >= implAVX2 {
		return sumAVX2(x)
	}
	return sumGeneric(x)
}

func max32(x []float32) float32 {
	if use >= implAVX2 {
		return maxAVX2(x)
	}
	return maxGeneric(x)
}

func exp(dst, src []float32) {
	if use >= implAVX2 {
		expAVX2(dst, src)
		return
	}
	expGeneric(dst, src)
}

func tanh(dst, src []float32) {
	if use >= implAVX2 {
		tanhAVX2(dst, src)
		return
	}
	tanhGeneric(dst, src)
}

func gelu(dst, src []float32) {
	switch use {
	case implAVX512:
		geluAVX512(dst, src)
	case implAVX2:
		geluAVX2(dst, src)
	default:
		geluGeneric(dst, src)
	}
}

func geluBackward(dx, x, dy []float32) {
	switch use {
	case implAVX512:
		geluBackwardAVX512(dx, x, dy)
	case implAVX2:
		geluBackwardAVX2(dx, x, dy)
	default:
		geluBackwardGeneric(dx, x, dy)
	}
}

func expSubSum(dst, src []float32, m float32) float32 {
	if use >= implAVX2 {
		return expSubSumAVX2(dst, src, m)
	}
	return expSubSumGeneric(dst, src, m)
}

func sumExpSub(x []float32, m float32) float32 {
	if use >= implAVX2 {
		return sumExpSubAVX2(x, m)
	}
	return sumExpSubGeneric(x, m)
}

func sumDev(x []float32, mu float32) (s, q float32) {
	if use >= implAVX2 {
		return sumDevAVX2(x, mu)
	}
	return sumDevGeneric(x, mu)
}

func normAffine(dst, x, gain, bias []float32, mu, rstd float32) {
	if use >= implAVX2 {
		normAffineAVX2(dst, x, gain, bias, mu, rstd)
		return
	}
	normAffineGeneric(dst, x, gain, bias, mu, rstd)
}

func layerNormReduce(dgain, dbias, x, gain, dy []float32, mu, rstd float32) (sg, sgx float32) {
	if use >= implAVX2 {
		return layerNormReduceAVX2(dgain, dbias, x, gain, dy, mu, rstd)
	}
	return layerNormReduceGeneric(dgain, dbias, x, gain, dy, mu, rstd)
}

func layerNormDx(dx, x, gain, dy []float32, mu, rstd, a, b float32) {
	if use >= implAVX2 {
		layerNormDxAVX2(dx, x, gain, dy, mu, rstd, a, b)
		return
	}
	layerNormDxGeneric(dx, x, gain, dy, mu, rstd, a, b)
}

func mulSub(dst, a, b []float32, c float32) {
	if use >= implAVX2 {
		mulSubAVX2(dst, a, b, c)
		return
	}
	mulSubGeneric(dst, a, b, c)
}

func expScale(dst, src []float32, m, s float32) float32 {
	if use >= implAVX2 {
		return expScaleAVX2(dst, src, m, s)
	}
	return expScaleGeneric(dst, src, m, s)
}

func band(dst []int32, x, w []float32, lo, hi float32) (n, above int, weight float64) {
	if use >= implAVX2 {
		return bandAVX2(dst, x, w, lo, hi)
	}
	return bandGeneric(dst, x, w, lo, hi)
}

func biasGELU(h, d, a, b []float32) {
	switch {
	case use == implAVX512 && d == nil:
		biasGELUAVX512(h, a, b)
	case use == implAVX512:
		biasGELUGradAVX512(h, d, a, b)
	case use == implAVX2 && d == nil:
		biasGELUAVX2(h, a, b)
	case use == implAVX2:
		biasGELUGradAVX2(h, d, a, b)
	default:
		biasGELUSeq(h, d, a, b)
	}
}

func geluMul(dst, a, b []float32) {
	switch use {
	case implAVX512:
		geluMulAVX512(dst, a, b)
	case implAVX2:
		geluMulAVX2(dst, a, b)
	default:
		geluMulSeq(dst, a, b)
	}
}

func geluMulBackward(da, db, a, b, dy []float32) {
	switch use {
	case implAVX512:
		geluMulBackwardAVX512(da, db, a, b, dy)
	case implAVX2:
		geluMulBackwardAVX2(da, db, a, b, dy)
	default:
		geluMulBackwardSeq(da, db, a, b, dy)
	}
}

func swapAdd(run, x []float32) {
	switch use {
	case implAVX512:
		swapAddAVX512(run, x)
	case implAVX2:
		swapAddAVX2(run, x)
	default:
		swapAddGeneric(run, x)
	}
}

func symOuter(phi, m, t []float32, r, n int) {
	if use == implAVX512 {
		symOuterAVX512(phi, m, t, r, n)
		return
	}
	symOuterSeq(phi, m, t, r, n)
}

func symOuterBackward(dm, dphi, m, t []float32, r, n int) {
	if use == implAVX512 {
		symOuterBackwardAVX512(dm, dphi, m, t, r, n)
		return
	}
	symOuterBackwardBuf(dm, dphi, m, t, r, n)
}

// standardizeFast runs Standardize's kernel, with a gain and a bias, and
// reports whether there was one for the kernels in use.
func standardizeFast(y, xhat, x, gain, bias []float32, mean, rstd float32) bool {
	if use != implAVX512 {
		return false
	}
	standardizeAVX512(y, xhat, x, gain, bias, -mean, rstd)
	return true
}

// layerNormRowsFast runs LayerNormRows's kernel and reports whether there
// was one for the kernels in use and a row of len(gain) floats.
func layerNormRowsFast(dst, x []float32, ldx int, gain, bias, mean, rstd []float32, eps float32) bool {
	if use != implAVX512 || len(gain)%32 != 0 {
		return false
	}
	layerNormRowsAVX512(dst, x, ldx, gain, bias, mean, rstd, eps)
	return true
}

// layerNormBackwardRowsFast runs LayerNormBackwardRows's kernel and
// reports whether there was one for the kernels in use and a row of
// len(gain) floats.
func layerNormBackwardRowsFast(dx []float32, lddx int, dgain, dbias, x []float32, ldx int, gain, dy, mean, rstd []float32) bool {
	if use != implAVX512 || len(gain)%16 != 0 {
		return false
	}
	layerNormBackwardRowsAVX512(dx, lddx, dgain, dbias, x, ldx, gain, dy, mean, rstd)
	return true
}

func standardizeGradsFast(dgain, dbias, g, dy, xhat, gain []float32) bool {
	if use != implAVX512 {
		return false
	}
	standardizeGradsAVX512(dgain, dbias, g, dy, xhat, gain)
	return true
}

func standardizeDxFast(g, xhat []float32, rstd, a, b float32) bool {
	if use != implAVX512 {
		return false
	}
	standardizeDxAVX512(g, xhat, rstd, a, b)
	return true
}

func sumSquares(x []float32) float64 {
	if use == implAVX512 {
		return sumSquaresAVX512(x)
	}
	return sumSquaresGeneric(x)
}

func adamW(w, g, m, v []float32, b1, c1, b2, c2, step, invBias2, eps, decay float32) {
	if use == implAVX512 {
		adamWAVX512(w, g, m, v, b1, c1, b2, c2, step, invBias2, eps, decay)
		return
	}
	adamWGeneric(w, g, m, v, b1, c1, b2, c2, step, invBias2, eps, decay)
}

// addRowsFast runs AddRows's kernel and reports whether there was one
// for the kernels in use.
func addRowsFast(dst, m []float32, ld, rows int) bool {
	if use != implAVX512 {
		return false
	}
	addRowsAVX512(dst, m, ld, rows)
	return true
}

func prefetch(x []float32) {
	if len(x) > 0 {
		prefetchLines(x)
	}
}
