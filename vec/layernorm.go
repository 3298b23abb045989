package vec

import "math"

// LayerNorm normalizes one row and applies the affine map of layer
// normalization,
//
//	dst[i] = (x[i] - mean)·rstd·gain[i] + bias[i],  rstd = 1/√(variance + eps),
//
// with mean and variance from MeanVar. It returns mean and rstd, which
// LayerNormBackward needs. dst may alias x.
func LayerNorm(dst, x, gain, bias []float32, eps float32) (mean, rstd float32) {
	if len(dst) != len(x) || len(dst) != len(gain) || len(dst) != len(bias) {
		panic4("LayerNorm", "dst", len(dst), "x", len(x), "gain", len(gain), "bias", len(bias))
	}
	mean, variance := MeanVar(x)
	rstd = float32(1 / math.Sqrt(float64(variance)+float64(eps)))
	normAffine(dst, x, gain, bias, mean, rstd)
	return mean, rstd
}

// LayerNormRows is LayerNorm on each of len(mean) rows of n = len(gain)
// floats, with the same bits: row i of x, x[i·ldx:i·ldx+n], normalized into
// dst[i·n:(i+1)·n], and its mean and rstd into mean[i] and rstd[i]. It is
// for short rows, whose calls of LayerNorm cost as much as their
// arithmetic. dst may be x when ldx = n; otherwise they must not overlap.
func LayerNormRows(dst, x []float32, ldx int, gain, bias, mean, rstd []float32, eps float32) {
	n, rows := len(gain), len(mean)
	if len(bias) != n || len(rstd) != rows || ldx < n || len(dst) < rows*n || rows > 0 && len(x) < (rows-1)*ldx+n {
		panic(sprintf("vec.LayerNormRows: length mismatch: len(dst)=%d, len(x)=%d, ldx=%d, len(gain)=%d, len(bias)=%d, len(mean)=%d, len(rstd)=%d: want len(bias) = len(gain) ≤ ldx, len(rstd) = len(mean) rows, len(dst) ≥ rows·len(gain), len(x) ≥ (rows−1)·ldx+len(gain)",
			len(dst), len(x), ldx, n, len(bias), rows, len(rstd)))
	}
	if rows == 0 || n == 0 {
		return
	}
	if layerNormRowsFast(dst, x, ldx, gain, bias, mean, rstd, eps) {
		return
	}
	for i := range rows {
		mean[i], rstd[i] = LayerNorm(dst[i*n:(i+1)*n], x[i*ldx:i*ldx+n], gain, bias, eps)
	}
}

// LayerNormBackward adds the gradients of LayerNorm to dx, dgain and dbias,
// given the input x, gain, and the mean and rstd that LayerNorm returned,
// and the gradient dy of its output. With x̂ = (x - mean)·rstd and
// g = dy·gain,
//
//	dx    += rstd·(g - mean(g) - x̂·mean(g·x̂))
//	dgain += dy·x̂
//	dbias += dy
//
// The outputs must not overlap the inputs or each other.
func LayerNormBackward(dx, dgain, dbias, x, gain, dy []float32, mean, rstd float32) {
	n := len(x)
	if len(dx) != n || len(dgain) != n || len(dbias) != n || len(gain) != n || len(dy) != n {
		panic(sprintf("vec.LayerNormBackward: length mismatch: len(dx)=%d, len(dgain)=%d, len(dbias)=%d, len(x)=%d, len(gain)=%d, len(dy)=%d",
			len(dx), len(dgain), len(dbias), n, len(gain), len(dy)))
	}
	if n == 0 {
		return
	}
	sg, sgx := layerNormReduce(dgain, dbias, x, gain, dy, mean, rstd)
	layerNormDx(dx, x, gain, dy, mean, rstd, sg/float32(n), sgx/float32(n))
}

// LayerNormBackwardRows is LayerNormBackward on each of len(mean) rows of
// n = len(gain) floats, in row order, with the same bits: row i of x is
// x[i·ldx:i·ldx+n], of dx dx[i·lddx:i·lddx+n], of dy dy[i·n:(i+1)·n], and
// mean[i], rstd[i] are what LayerNorm returned for it. Like LayerNormRows,
// it is for short rows. The outputs must not overlap the inputs or each
// other.
func LayerNormBackwardRows(dx []float32, lddx int, dgain, dbias, x []float32, ldx int, gain, dy, mean, rstd []float32) {
	n, rows := len(gain), len(mean)
	if len(dgain) != n || len(dbias) != n || len(rstd) != rows || lddx < n || ldx < n || len(dy) < rows*n ||
		rows > 0 && (len(dx) < (rows-1)*lddx+n || len(x) < (rows-1)*ldx+n) {
		panic(sprintf("vec.LayerNormBackwardRows: length mismatch: len(dx)=%d, lddx=%d, len(dgain)=%d, len(dbias)=%d, len(x)=%d, ldx=%d, len(gain)=%d, len(dy)=%d, len(mean)=%d, len(rstd)=%d: want len(dgain) = len(dbias) = len(gain) ≤ lddx, ldx, len(rstd) = len(mean) rows, len(dy) ≥ rows·len(gain), len(dx) ≥ (rows−1)·lddx+len(gain), len(x) ≥ (rows−1)·ldx+len(gain)",
			len(dx), lddx, len(dgain), len(dbias), len(x), ldx, n, len(dy), rows, len(rstd)))
	}
	if rows == 0 || n == 0 {
		return
	}
	if layerNormBackwardRowsFast(dx, lddx, dgain, dbias, x, ldx, gain, dy, mean, rstd) {
		return
	}
	for i := range rows {
		LayerNormBackward(dx[i*lddx:i*lddx+n], dgain, dbias, x[i*ldx:i*ldx+n], gain, dy[i*n:(i+1)*n], mean[i], rstd[i])
	}
}
