// Package vec holds the float32 vector kernels of polysketch: dot products,
// axpy, scaling, elementwise exp, tanh and GELU, row softmax and the
// statistics of layer normalization.
//
// PLACEHOLDER implementations: the vectorized versions replace these; the API
// is fixed. Every function panics if slice lengths disagree.
package vec

import "math"

// Dot returns Σ x[i]·y[i].
func Dot(x, y []float32) float32 {
	var s float32
	for i := range x {
		s += x[i] * y[i]
	}
	return s
}

// Axpy computes y += alpha·x.
func Axpy(alpha float32, x, y []float32) {
	for i := range x {
		y[i] += alpha * x[i]
	}
}

// Scale computes x *= alpha.
func Scale(alpha float32, x []float32) {
	for i := range x {
		x[i] *= alpha
	}
}

// Mul computes dst[i] = a[i]·b[i] (the Hadamard product); dst may alias a or b.
func Mul(dst, a, b []float32) {
	for i := range dst {
		dst[i] = a[i] * b[i]
	}
}

// Add computes dst[i] = a[i]+b[i]; dst may alias a or b.
func Add(dst, a, b []float32) {
	for i := range dst {
		dst[i] = a[i] + b[i]
	}
}

// Sum returns Σ x[i].
func Sum(x []float32) float32 {
	var s float32
	for _, v := range x {
		s += v
	}
	return s
}

// Max returns the largest element of x, or -Inf for an empty x.
func Max(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		if v > m {
			m = v
		}
	}
	return m
}

// Exp computes dst[i] = e^src[i]; dst may alias src.
func Exp(dst, src []float32) {
	for i := range dst {
		dst[i] = float32(math.Exp(float64(src[i])))
	}
}

// Tanh computes dst[i] = tanh(src[i]); dst may alias src.
func Tanh(dst, src []float32) {
	for i := range dst {
		dst[i] = float32(math.Tanh(float64(src[i])))
	}
}

// GELU computes the tanh approximation of GELU; dst may alias src.
func GELU(dst, src []float32) {
	for i := range dst {
		x := float64(src[i])
		dst[i] = float32(0.5 * x * (1 + math.Tanh(0.7978845608028654*(x+0.044715*x*x*x))))
	}
}

// GELUBackward computes dx[i] = dy[i]·GELU'(x[i]); dx may alias dy.
func GELUBackward(dx, x, dy []float32) {
	for i := range dx {
		v := float64(x[i])
		t := math.Tanh(0.7978845608028654 * (v + 0.044715*v*v*v))
		d := 0.5*(1+t) + 0.5*v*(1-t*t)*0.7978845608028654*(1+3*0.044715*v*v)
		dx[i] = float32(d) * dy[i]
	}
}

// Softmax replaces x by softmax(x), subtracting the maximum for stability.
func Softmax(x []float32) {
	m := Max(x)
	var s float64
	for i, v := range x {
		e := math.Exp(float64(v - m))
		x[i] = float32(e)
		s += e
	}
	Scale(float32(1/s), x)
}

// MeanVar returns the mean and the (biased) variance of x, as layer
// normalization needs them.
func MeanVar(x []float32) (mean, variance float32) {
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	mu := s / float64(len(x))
	var q float64
	for _, v := range x {
		d := float64(v) - mu
		q += d * d
	}
	return float32(mu), float32(q / float64(len(x)))
}
