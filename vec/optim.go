package vec

import "math"

// Kernels of the optimizer's passes over all the parameters: memory-bound
// where they are vectors, and on a large model a tenth of a training step
// where they were scalar loops.

// SumSquares returns Σ x[i]², each square exact in float64 and summed in
// float64 in a fixed order whatever the path: x[i]² into the (i mod 32)th
// of 32 partial sums, which are then added pairwise (the partial sums l
// and l+16, of those l and l+8, and so on).
func SumSquares(x []float32) float64 {
	return sumSquares(x)
}

func sumSquaresGeneric(x []float32) float64 {
	var s [32]float64
	i := 0
	for ; i+32 <= len(x); i += 32 {
		x := x[i : i+32 : i+32]
		for l, v := range x {
			s[l] += float64(v) * float64(v)
		}
	}
	for l, v := range x[i:] {
		s[l] += float64(v) * float64(v)
	}
	for w := 16; w > 0; w /= 2 {
		for l := range w {
			s[l] += s[l+w]
		}
	}
	return s[0]
}

// AdamW makes one step of AdamW on the weights w with gradient g, updating
// the moments m and v in place (all of len(w)): with each operation
// rounded to float32 in this order,
//
//	m = b1·m + (1−b1)·g
//	v = b2·v + (1−b2)·g·g
//	w = w − (step·m/(√v·invBias2 + eps) + decay·w)
//
// where step is the learning rate over 1−b1^t, invBias2 is 1/√(1−b2^t),
// and decay the learning rate times the weight decay.
func AdamW(w, g, m, v []float32, b1, b2, step, invBias2, eps, decay float32) {
	if len(g) != len(w) || len(m) != len(w) || len(v) != len(w) {
		panic4("AdamW", "w", len(w), "g", len(g), "m", len(m), "v", len(v))
	}
	adamW(w, g, m, v, b1, 1-b1, b2, 1-b2, step, invBias2, eps, decay)
}

// adamWGeneric is AdamW with c1 = 1−b1 and c2 = 1−b2. The conversions keep
// the compiler from fusing a product and a sum, which the kernels do not.
func adamWGeneric(w, g, m, v []float32, b1, c1, b2, c2, step, invBias2, eps, decay float32) {
	g, m, v = g[:len(w)], m[:len(w)], v[:len(w)]
	for j, gj := range g {
		mj := float32(b1*m[j]) + float32(c1*gj)
		vj := float32(b2*v[j]) + float32(float32(c2*gj)*gj)
		m[j], v[j] = mj, vj
		// The square root of a float32 in float64, rounded to float32,
		// is the float32 square root.
		r := float32(float32(math.Sqrt(float64(vj)))*invBias2) + eps
		w[j] -= float32(step*mj)/r + float32(decay*w[j])
	}
}
