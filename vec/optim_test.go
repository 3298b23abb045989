package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSumSquares checks each path bit for bit against the portable order,
// and that order against a float64 sum in index order, which it equals
// up to the rounding of float64 sums.
func TestSumSquares(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			// Magnitudes 2⁻²⁰ to 2²⁰ apart, so that sums of squares round
			// in float64 and the order of the sums shows.
			x := fill(rng, a.slice(n), -3, 3)
			for i := range x {
				x[i] = float32(math.Ldexp(float64(x[i]), rng.IntN(41)-20))
			}
			got, want := SumSquares(x), sumSquaresGeneric(x)
			if math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("SumSquares = %v (%#x), the portable order gives %v (%#x)", got, math.Float64bits(got), want, math.Float64bits(want))
			}
			var ref float64
			for _, v := range x {
				ref += float64(v) * float64(v)
			}
			if math.Abs(got-ref) > 1e-14*ref {
				t.Fatalf("SumSquares = %v, the sum in index order %v", got, ref)
			}
		})
	})
	for _, tt := range []struct {
		x    []float32
		want float64
	}{
		{nil, 0},
		{[]float32{3, 4}, 25},
		{[]float32{1e30, 1e-30, 1e30}, 2 * float64(float32(1e30)) * float64(float32(1e30))}, // beyond float32
		{[]float32{inf, 1}, math.Inf(1)},
		{[]float32{nan, 1}, math.NaN()},
	} {
		if got := SumSquares(tt.x); !(got == tt.want || math.IsNaN(got) && math.IsNaN(tt.want)) {
			t.Errorf("SumSquares(%v) = %v, want %v", tt.x, got, tt.want)
		}
	}
}

// TestAdamW checks each path bit for bit against the scalar update as
// optim.AdamW wrote it before this kernel (in float32, with no fused
// operations), over lengths with every tail, weights decayed and not.
func TestAdamW(t *testing.T) {
	const b1, b2, step, invBias2, eps = 0.9, 0.95, 1e-3, 3.2, 1e-8
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			for _, decay := range []float32{0, 1e-4} {
				w, g := fill(rng, a.slice(n), -1, 1), fill(rng, a.slice(n), -0.1, 0.1)
				m, v := fill(rng, a.slice(n), -0.01, 0.01), fill(rng, a.slice(n), 0, 1e-4)
				ww, wm, wv := append([]float32(nil), w...), append([]float32(nil), m...), append([]float32(nil), v...)
				AdamW(w, g, m, v, b1, b2, step, invBias2, eps, decay)
				for j, gj := range g {
					mj := float32(b1*wm[j]) + float32((1-float32(b1))*gj)
					vj := float32(b2*wv[j]) + float32(float32((1-float32(b2))*gj)*gj)
					r := float32(float32(math.Sqrt(float64(vj)))*invBias2) + eps
					wj := ww[j] - (float32(step*mj)/r + float32(decay*ww[j]))
					if !same(m[j], mj) || !same(v[j], vj) || !same(w[j], wj) {
						t.Fatalf("decay %g, element %d: w, m, v = %g, %g, %g; want %g, %g, %g", decay, j, w[j], m[j], v[j], wj, mj, vj)
					}
				}
			}
		})
	})
}
