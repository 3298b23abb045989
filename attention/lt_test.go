package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/blas"
)

func randSlice(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
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

// at returns entry (i, j) of a matrix of n rows, row-major with k
// columns, or kept transposed ([k × n]).
func at(x []float32, transposed bool, i, j, n, k int) float64 {
	if transposed {
		return float64(x[j*n+i])
	}
	return float64(x[i*k+j])
}

// TestLowerKernels checks the diagonal-block kernels, row-major and
// transposed, against their definitions: S = lt(a·bᵀ), lt(S)·y and lt(S)ᵀ·y.
func TestLowerKernels(t *testing.T) {
	const k = 5
	for _, sz := range ltSizes {
		n := sz.n
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 3))
			a, b, y := randSlice(rng, n*k), randSlice(rng, n*k), randSlice(rng, n*k)
			for _, tr := range []bool{false, true} {
				s := randSlice(rng, n*n) // overwritten on the lower triangle and the diagonal tiles
				if tr {
					lowerAtB(blas.NewGeneral(n, n, s), blas.NewGeneral(k, n, a), blas.NewGeneral(k, n, b))
				} else {
					lowerABt(blas.NewGeneral(n, n, s), blas.NewGeneral(n, k, a), blas.NewGeneral(n, k, b))
				}
				wantS := make([]float64, n*n)
				for i := 0; i < n; i++ {
					for j := 0; j <= i; j++ {
						for c := 0; c < k; c++ {
							wantS[i*n+j] += at(a, tr, i, c, n, k) * at(b, tr, j, c, n, k)
						}
					}
				}
				var lower []float32
				var wantLower []float64
				for i := 0; i < n; i++ {
					lower = append(lower, s[i*n:i*n+i+1]...)
					wantLower = append(wantLower, wantS[i*n:i*n+i+1]...)
				}
				if err, scale := maxErr(lower, wantLower); err > 1e-5*scale {
					t.Errorf("transposed=%v: S: max error %.3g (scale %.3g)", tr, err, scale)
				}
				mul, tmul := randSlice(rng, n*k), randSlice(rng, n*k)
				if tr {
					lowerMulT(blas.NewGeneral(k, n, mul), blas.NewGeneral(n, n, s), blas.NewGeneral(k, n, y), 0)
					lowerTMulT(blas.NewGeneral(k, n, tmul), blas.NewGeneral(n, n, s), blas.NewGeneral(k, n, y), 0)
				} else {
					lowerMul(blas.NewGeneral(n, k, mul), blas.NewGeneral(n, n, s), blas.NewGeneral(n, k, y), 0)
					lowerTMul(blas.NewGeneral(n, k, tmul), blas.NewGeneral(n, n, s), blas.NewGeneral(n, k, y), 0)
				}
				wantMul, wantTMul := make([]float64, n*k), make([]float64, n*k)
				for i := 0; i < n; i++ {
					for j := 0; j <= i; j++ {
						for c := 0; c < k; c++ {
							wantMul[i*k+c] += wantS[i*n+j] * at(y, tr, j, c, n, k)
							wantTMul[j*k+c] += wantS[i*n+j] * at(y, tr, i, c, n, k)
						}
					}
				}
				for _, g := range []struct {
					name string
					got  []float32
					want []float64
				}{{"lt(S)·y", mul, wantMul}, {"lt(S)ᵀ·y", tmul, wantTMul}} {
					got := g.got
					if tr { // back to row-major
						got = make([]float32, n*k)
						blas.Copy(blas.Trans, blas.NewGeneral(k, n, g.got), blas.NewGeneral(n, k, got))
					}
					if err, scale := maxErr(got, g.want); err > 1e-5*scale {
						t.Errorf("transposed=%v: %s: max error %.3g (scale %.3g)", tr, g.name, err, scale)
					}
				}
			}
		})
	}
}

// TestScans checks the scans over per-block states against their
// definitions, plain and relative to block maxima (scaled maps), over
// element ranges as the engine splits them.
func TestScans(t *testing.T) {
	const size = 7
	for _, tn := range []int{1, 2, 5} {
		rng := rand.New(rand.NewPCG(uint64(tn), 4))
		states := randSlice(rng, (tn+1)*size)
		bmax, pmax := randSlice(rng, tn+1), make([]float32, tn+1)
		A := math.Inf(-1)
		for l := 0; l < tn; l++ {
			bmax[l] *= 30 // exp(±90): overflows unless rescaled
			pmax[l] = float32(A)
			A = math.Max(A, float64(bmax[l]))
		}
		pmax[tn] = float32(A)
		want := func(weight func(l, j int) float64, include func(l, j int) bool) []float64 {
			w := make([]float64, tn*size)
			for l := 0; l < tn; l++ {
				for j := 0; j < tn; j++ {
					if include(l, j) {
						for e := 0; e < size; e++ {
							w[l*size+e] += weight(l, j) * float64(states[j*size+e])
						}
					}
				}
			}
			return w
		}
		one := func(l, j int) float64 { return 1 }
		before := func(l, j int) bool { return j < l }
		after := func(l, j int) bool { return j > l }
		for _, c := range []struct {
			name string
			scan func(st, run, tmp []float32, lo, hi int)
			want []float64
		}{
			{"prefix", func(st, run, tmp []float32, lo, hi int) { prefixScan(cols(st, tn, size, lo, hi), run) }, want(one, before)},
			{"suffix", func(st, run, tmp []float32, lo, hi int) { suffixScan(cols(st, tn, size, lo, hi), run) }, want(one, after)},
			{"scaled prefix", func(st, run, tmp []float32, lo, hi int) { scaledPrefixScan(cols(st, tn, size, lo, hi), run, tmp, bmax) },
				want(func(l, j int) float64 { return math.Exp(float64(bmax[j] - pmax[l])) }, before)},
			{"scaled suffix", func(st, run, tmp []float32, lo, hi int) {
				scaledSuffixScan(cols(st, tn, size, lo, hi), run, tmp, bmax, pmax)
			}, want(func(l, j int) float64 { return math.Exp(float64(bmax[l] - pmax[j])) }, after)},
		} {
			st := append([]float32(nil), states[:tn*size]...)
			run, tmp := make([]float32, size), make([]float32, size)
			c.scan(st, run, tmp, 0, 3)
			c.scan(st, run, tmp, 3, size)
			if err, scale := maxErr(st, c.want); err > 1e-5*scale || math.IsNaN(err) {
				t.Errorf("t=%d: %s: max error %.3g (scale %.3g)", tn, c.name, err, scale)
			}
		}
		for _, scaled := range []bool{false, true} {
			dst := make([]float32, size)
			wantSum := make([]float64, size)
			for j := 0; j < tn; j++ {
				w := 1.0
				if scaled {
					w = math.Exp(float64(bmax[j] - pmax[tn]))
				}
				for e := range wantSum {
					wantSum[e] += w * float64(states[j*size+e])
				}
			}
			if scaled {
				scaledSum(dst, blas.NewGeneral(tn, size, states), bmax)
			} else {
				sumStates(dst, blas.NewGeneral(tn, size, states))
			}
			if err, scale := maxErr(dst, wantSum); err > 1e-5*scale {
				t.Errorf("t=%d: sum (scaled %v): max error %.3g (scale %.3g)", tn, scaled, err, scale)
			}
		}
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
			lowerABt(blas.NewGeneral(n, n, s), blas.NewGeneral(n, m, a), blas.NewGeneral(n, m, b))
			lowerPow(w, s, make([]float32, n), n, p)
			lowerMul(blas.NewGeneral(n, k, y), blas.NewGeneral(n, n, w), blas.NewGeneral(n, k, c), 0)
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

// cols returns columns [lo, hi) of the t×size matrix st.
func cols(st []float32, t, size, lo, hi int) blas.General {
	return blas.General{Rows: t, Cols: hi - lo, Stride: size, Data: st[lo:]}
}
