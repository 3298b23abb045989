//go:build !amd64 || purego

package vec

// impls lists the kernel sets this build runs: only the portable one, as
// there is no assembly for this architecture or with the purego tag.
func impls() []impl { return []impl{implGo} }

func dot(x, y []float32) float32                      { return dotGeneric(x, y) }
func axpy(alpha float32, x, y []float32)              { axpyGeneric(alpha, x, y) }
func scale(alpha float32, x []float32)                { scaleGeneric(alpha, x) }
func mul(dst, a, b []float32)                         { mulGeneric(dst, a, b) }
func add(dst, a, b []float32)                         { addGeneric(dst, a, b) }
func sum(x []float32) float32                         { return sumGeneric(x) }
func max32(x []float32) float32                       { return maxGeneric(x) }
func exp(dst, src []float32)                          { expGeneric(dst, src) }
func tanh(dst, src []float32)                         { tanhGeneric(dst, src) }
func gelu(dst, src []float32)                         { geluGeneric(dst, src) }
func geluBackward(dx, x, dy []float32)                { geluBackwardGeneric(dx, x, dy) }
func expSubSum(dst, src []float32, m float32) float32 { return expSubSumGeneric(dst, src, m) }
func sumExpSub(x []float32, m float32) float32        { return sumExpSubGeneric(x, m) }
func sumDev(x []float32, mu float32) (s, q float32)   { return sumDevGeneric(x, mu) }

func normAffine(dst, x, gain, bias []float32, mu, rstd float32) {
	normAffineGeneric(dst, x, gain, bias, mu, rstd)
}

func layerNormReduce(dgain, dbias, x, gain, dy []float32, mu, rstd float32) (sg, sgx float32) {
	return layerNormReduceGeneric(dgain, dbias, x, gain, dy, mu, rstd)
}

func layerNormDx(dx, x, gain, dy []float32, mu, rstd, a, b float32) {
	layerNormDxGeneric(dx, x, gain, dy, mu, rstd, a, b)
}

func mulSub(dst, a, b []float32, c float32) { mulSubGeneric(dst, a, b, c) }

func expScale(dst, src []float32, m, s float32) float32 { return expScaleGeneric(dst, src, m, s) }

func band(dst []int32, x, w []float32, lo, hi float32) (n, above int, weight float64) {
	return bandGeneric(dst, x, w, lo, hi)
}

func biasGELU(h, d, a, b []float32)              { biasGELUSeq(h, d, a, b) }
func geluMul(dst, a, b []float32)                { geluMulSeq(dst, a, b) }
func geluMulBackward(da, db, a, b, dy []float32) { geluMulBackwardSeq(da, db, a, b, dy) }
func swapAdd(run, x []float32)                   { swapAddGeneric(run, x) }
func symOuter(phi, m, t []float32, r, n int)     { symOuterSeq(phi, m, t, r, n) }

func symOuterBackward(dm, dphi, m, t []float32, r, n int) {
	symOuterBackwardBuf(dm, dphi, m, t, r, n)
}

// The fused row passes of Standardize have no kernels of their own here.
func layerNormRowsFast(dst, x []float32, ldx int, gain, bias, mean, rstd []float32, eps float32) bool {
	return false
}
func layerNormBackwardRowsFast(dx []float32, lddx int, dgain, dbias, x []float32, ldx int, gain, dy, mean, rstd []float32) bool {
	return false
}
func standardizeFast(y, xhat, x, gain, bias []float32, mean, rstd float32) bool { return false }
func standardizeGradsFast(dgain, dbias, g, dy, xhat, gain []float32) bool       { return false }
func standardizeDxFast(g, xhat []float32, rstd, a, b float32) bool              { return false }

func sumSquares(x []float32) float64 { return sumSquaresGeneric(x) }

func adamW(w, g, m, v []float32, b1, c1, b2, c2, step, invBias2, eps, decay float32) {
	adamWGeneric(w, g, m, v, b1, c1, b2, c2, step, invBias2, eps, decay)
}

func addRowsFast(dst, m []float32, ld, rows int) bool { return false }

func prefetch(x []float32) {}
