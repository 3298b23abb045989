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

// TestAddRows checks each path bit for bit against Add(dst, dst, row) row
// by row (NaN payloads included: two NaNs meet in a column) and the
// finite results against float32 sums in row order, over widths with
// every tail, strides wider than the rows, and one row.
func TestAddRows(t *testing.T) {
	nan2 := math.Float32frombits(0x7fc0abcd)
	specials := []float32{inf, ninf, nan, nan2, 3e38, -3e38, 1e-40, float32(math.Copysign(0, -1))}
	paths(t, func(t *testing.T) {
		for _, n := range []int{1, 15, 16, 17, 100, 127, 128, 129, 256, 300} {
			for _, rows := range []int{1, 3, 64} {
				for _, pad := range []int{0, 5} {
					rng := rand.New(rand.NewPCG(uint64(n), uint64(rows*8+pad)))
					ld := n + pad
					m := fill(rng, make([]float32, (rows-1)*ld+n), -2, 2)
					dst := fill(rng, make([]float32, n), -1, 1)
					for i := 0; i < rows && n > 4; i++ {
						m[i*ld+rng.IntN(n)] = specials[rng.IntN(len(specials))]
					}
					if n > 3 {
						dst[3], m[3] = nan2, nan // two payloads meet
					}
					want, ref := append([]float32(nil), dst...), append([]float32(nil), dst...)
					for i := range rows {
						row := m[i*ld : i*ld+n]
						Add(want, want, row)
						for j, v := range row {
							ref[j] += v
						}
					}
					AddRows(dst, m, ld, rows)
					for j := range dst {
						if !same(dst[j], want[j]) {
							t.Fatalf("n=%d rows=%d ld=%d: element %d = %g (%#x), Add row by row gives %g (%#x)", n, rows, ld, j, dst[j], math.Float32bits(dst[j]), want[j], math.Float32bits(want[j]))
						}
						if ref[j] == ref[j] && !same(dst[j], ref[j]) {
							t.Fatalf("n=%d rows=%d ld=%d: element %d = %g, the sum in row order %g", n, rows, ld, j, dst[j], ref[j])
						}
					}
				}
			}
		}
	})
	// No rows, or rows of nothing: nothing read or written.
	AddRows(nil, nil, 0, 5)
	dst := []float32{1, 2}
	AddRows(dst, nil, 2, 0)
	if dst[0] != 1 || dst[1] != 2 {
		t.Errorf("AddRows with no rows changed dst to %v", dst)
	}
	for _, tt := range []struct{ m, ld, rows int }{{3, 2, 2}, {4, 1, 2}, {4, 2, -1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("AddRows(len(dst)=2, len(m)=%d, ld=%d, rows=%d) did not panic", tt.m, tt.ld, tt.rows)
				}
			}()
			AddRows(make([]float32, 2), make([]float32, tt.m), tt.ld, tt.rows)
		}()
	}
}
