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
