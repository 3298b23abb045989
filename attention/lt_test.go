package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func randSlice(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// naiveLT returns lt(a·bᵀ)·c in float64 from the definition.
func naiveLT(a, b, c []float32, n, m, k int) []float64 {
	y := make([]float64, n*k)
	for i := 0; i < n; i++ {
		for j := 0; j <= i; j++ {
			var s float64
			for p := 0; p < m; p++ {
				s += float64(a[i*m+p]) * float64(b[j*m+p])
			}
			for d := 0; d < k; d++ {
				y[i*k+d] += s * float64(c[j*k+d])
			}
		}
	}
	return y
}

// naiveLTGrad returns the gradients of Σ dy ∗ lt(a·bᵀ)·c in float64:
// dA = lt(dY·Cᵀ)·B, dB = lt(dY·Cᵀ)ᵀ·A, dC = lt(A·Bᵀ)ᵀ·dY.
func naiveLTGrad(dy, a, b, c []float32, n, m, k int) (da, db, dc []float64) {
	da, db, dc = make([]float64, n*m), make([]float64, n*m), make([]float64, n*k)
	for i := 0; i < n; i++ {
		for j := 0; j <= i; j++ {
			var s, g float64
			for p := 0; p < m; p++ {
				s += float64(a[i*m+p]) * float64(b[j*m+p])
			}
			for d := 0; d < k; d++ {
				g += float64(dy[i*k+d]) * float64(c[j*k+d])
			}
			for p := 0; p < m; p++ {
				da[i*m+p] += g * float64(b[j*m+p])
				db[j*m+p] += g * float64(a[i*m+p])
			}
			for d := 0; d < k; d++ {
				dc[j*k+d] += s * float64(dy[i*k+d])
			}
		}
	}
	return da, db, dc
}

func maxErr(got []float32, want []float64) (err, scale float64) {
	for i := range want {
		err = math.Max(err, math.Abs(float64(got[i])-want[i]))
		scale = math.Max(scale, math.Abs(want[i]))
	}
	return err, scale
}

// ltSizes covers N < b, N = b, N not a multiple of b, many blocks, and
// blocks of several diagonal tiles with a partial one.
var ltSizes = []struct{ n, block int }{
	{5, 8}, {8, 8}, {13, 4}, {200, 16}, {301, 150}, {1, 1}, {7, 1},
}

func TestLTMul(t *testing.T) {
	const m, k = 5, 3
	for _, sz := range ltSizes {
		t.Run(fmt.Sprintf("n=%d/b=%d", sz.n, sz.block), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(sz.n), uint64(sz.block)))
			a, b, c := randSlice(rng, sz.n*m), randSlice(rng, sz.n*m), randSlice(rng, sz.n*k)
			y := randSlice(rng, sz.n*k) // overwritten
			ltMul(y, a, b, c, sz.n, m, k, sz.block)
			if err, scale := maxErr(y, naiveLT(a, b, c, sz.n, m, k)); err > 1e-5*scale {
				t.Errorf("max |y - naive| = %.3g (max |naive| %.3g)", err, scale)
			}
		})
	}
}

func TestLTMulBackward(t *testing.T) {
	const m, k = 5, 3
	for _, sz := range ltSizes {
		t.Run(fmt.Sprintf("n=%d/b=%d", sz.n, sz.block), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(sz.n)+7, uint64(sz.block)))
			n := sz.n
			a, b, c, dy := randSlice(rng, n*m), randSlice(rng, n*m), randSlice(rng, n*k), randSlice(rng, n*k)
			da, db, dc := randSlice(rng, n*m), randSlice(rng, n*m), randSlice(rng, n*k) // overwritten
			ltMulBackward(da, db, dc, dy, a, b, c, n, m, k, sz.block)
			wa, wb, wc := naiveLTGrad(dy, a, b, c, n, m, k)
			for _, g := range []struct {
				name string
				got  []float32
				want []float64
			}{{"da", da, wa}, {"db", db, wb}, {"dc", dc, wc}} {
				if err, scale := maxErr(g.got, g.want); err > 1e-5*scale {
					t.Errorf("%s: max |got - naive| = %.3g (max |naive| %.3g)", g.name, err, scale)
				}
			}
			// Central finite differences of L = Σ dy ∗ lt(a·bᵀ)·c on a few
			// coordinates of each input (L is bilinear in each, so they are
			// exact up to rounding).
			y := make([]float32, n*k)
			loss := func() float64 {
				ltMul(y, a, b, c, n, m, k, sz.block)
				var s float64
				for i := range y {
					s += float64(y[i]) * float64(dy[i])
				}
				return s
			}
			for _, in := range []struct {
				name string
				x, g []float32
			}{{"a", a, da}, {"b", b, db}, {"c", c, dc}} {
				for range 5 {
					i := rng.IntN(len(in.x))
					const eps = 1e-2
					orig := in.x[i]
					in.x[i] = orig + eps
					up := loss()
					in.x[i] = orig - eps
					down := loss()
					in.x[i] = orig
					num := (up - down) / (2 * eps)
					if math.Abs(num-float64(in.g[i])) > 1e-2*(math.Abs(num)+1) {
						t.Errorf("d%s[%d] = %.6g, finite difference %.6g", in.name, i, in.g[i], num)
					}
				}
			}
		})
	}
}

// TestLowerPow checks the diagonal-block kernel lt((A·Bᵀ)^p)·C with its
// row sums against the definition, for the powers polysketch uses.
func TestLowerPow(t *testing.T) {
	for _, p := range []int{1, 2, 4, 8} {
		for _, n := range []int{1, 7, 64, 130} {
			rng := rand.New(rand.NewPCG(uint64(p), uint64(n)))
			const m, k = 4, 3
			a, b, c := randSlice(rng, n*m), randSlice(rng, n*m), randSlice(rng, n*k)
			s, w := randSlice(rng, n*n), randSlice(rng, n*n) // stale contents must not matter
			y, d := make([]float32, n*k), make([]float32, n)
			lowerABt(s, a, m, b, m, n, m)
			lowerPow(w, s, make([]float32, n), n, p)
			lowerMul(y, k, w, c, k, n, k, 0)
			lowerRowSums(d, w, n)
			for i := 0; i < n; i++ {
				var sum, abs float64
				want := make([]float64, k)
				for j := 0; j <= i; j++ {
					var sij float64
					for q := 0; q < m; q++ {
						sij += float64(a[i*m+q]) * float64(b[j*m+q])
					}
					wij := math.Pow(sij, float64(p))
					sum += wij
					abs += math.Abs(wij)
					for e := range want {
						want[e] += wij * float64(c[j*k+e])
					}
				}
				tol := 1e-5 * (abs + 1) * 10
				if math.Abs(float64(d[i])-sum) > tol {
					t.Fatalf("p=%d n=%d: row sum %d = %v, want %v", p, n, i, d[i], sum)
				}
				for e := range want {
					if math.Abs(float64(y[i*k+e])-want[e]) > tol*3 {
						t.Fatalf("p=%d n=%d: y[%d,%d] = %v, want %v", p, n, i, e, y[i*k+e], want[e])
					}
				}
			}
		}
	}
}

func TestIpow(t *testing.T) {
	for _, c := range []struct {
		x    float32
		p    int
		want float32
	}{{2, 0, 1}, {2, 1, 2}, {-2, 3, -8}, {1.5, 4, 5.0625}, {-1, 8, 1}, {3, 5, 243}} {
		if got := ipow(c.x, c.p); got != c.want {
			t.Errorf("ipow(%v, %d) = %v, want %v", c.x, c.p, got, c.want)
		}
	}
}
