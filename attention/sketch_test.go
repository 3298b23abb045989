package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/tensor"
)

// sketchRows returns M(x) for the n rows of x, row-major [n × out].
func sketchRows(s *sketch, x []float32, n int) []float32 {
	pre, mT := make([]float32, s.preW*n), make([]float32, s.out*n)
	scr := s.newScratch(n)
	s.apply(blas.NewGeneral(n, s.in, x), pre, mT, &scr)
	m := make([]float32, n*s.out)
	blas.Copy(blas.Trans, blas.NewGeneral(s.out, n, mT), blas.NewGeneral(n, s.out, m))
	return m
}

func dot64(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

// TestSketchUnbiased checks E[M(q)·M(k)] = (q·k)^d for the degree-d
// sketches (d = p/2 for p = 4 and 8), Gaussian and SRHT: the mean over
// many seeds must lie within 4 standard errors of the target, and the
// standard error must be small enough for that to mean something.
func TestSketchUnbiased(t *testing.T) {
	const h, r, seeds = 8, 16, 3000
	rng := rand.New(rand.NewPCG(1, 2))
	q := randSlice(rng, h)
	k := make([]float32, h)
	for i := range k { // correlated with q, so that q·k is far from 0
		k[i] = 0.8*q[i] + 0.6*float32(rng.NormFloat64())
	}
	for _, kind := range []SketchKind{Gaussian, SRHT} {
		for _, d := range []int{2, 4} {
			target := math.Pow(dot64(q, k), float64(d))
			var sum, sum2 float64
			for seed := range seeds {
				s := newSketch(kind, d, h, r, uint64(seed))
				x := sketchRows(s, append(append([]float32(nil), q...), k...), 2)
				e := dot64(x[:r], x[r:])
				sum += e
				sum2 += e * e
			}
			mean := sum / seeds
			se := math.Sqrt((sum2/seeds - mean*mean) / (seeds - 1))
			t.Logf("%s d=%d: mean %.4g ± %.2g (target %.4g)", kind, d, mean, se, target)
			if math.Abs(mean-target) > 4*se {
				t.Errorf("%s degree %d: mean of M(q)·M(k) over %d seeds = %.4g ± %.2g, want (q·k)^%d = %.4g", kind, d, seeds, mean, se, d, target)
			}
			if se > 0.1*math.Abs(target) {
				t.Errorf("%s degree %d: standard error %.2g too large to test the mean %.4g", kind, d, se, target)
			}
		}
	}
}

// TestSketchErrorRate measures the error of Theorem 1.1,
// ‖φ(Q)φ(K)ᵀ − (QKᵀ)^p‖_F / (‖Q^⊗p‖_F ‖K^⊗p‖_F), averaged over seeds, for
// r = 8, 32, 128, and requires it to fall at least as fast as 1/√r: the
// least-squares slope of log error against log r must be ≤ -0.5 (with a
// tolerance of 0.08 for the sampling noise of the average).
func TestSketchErrorRate(t *testing.T) {
	const n, h, seeds = 24, 16, 12
	rng := rand.New(rand.NewPCG(3, 4))
	Q, K := randSlice(rng, n*h), randSlice(rng, n*h)
	for _, kind := range []SketchKind{Gaussian, SRHT} {
		for _, p := range []int{4, 8} {
			var xs, ys []float64
			for _, r := range []int{8, 32, 128} {
				var mean float64
				for seed := range seeds {
					s := newSketch(kind, p/2, h, r, uint64(seed)+100)
					mean += featureError(s, Q, K, n, p) / seeds
				}
				t.Logf("%s p=%d r=%d: relative Frobenius error %.4g", kind, p, r, mean)
				xs, ys = append(xs, math.Log(float64(r))), append(ys, math.Log(mean))
			}
			slope := fitSlope(xs, ys)
			t.Logf("%s p=%d: slope %.3f (Theorem 1.1: -0.5)", kind, p, slope)
			if slope > -0.5+0.08 {
				t.Errorf("%s p=%d: error falls like r^%.3f, slower than 1/√r", kind, p, slope)
			}
		}
	}
}

// featureError is the relative Frobenius error of the features φ for Q, K.
func featureError(s *sketch, Q, K []float32, n, p int) float64 {
	F := featureDim(s.out)
	phi := func(x []float32) []float32 {
		pre, mT, tilde := make([]float32, s.preW*n), make([]float32, s.out*n), make([]float32, s.out*n)
		scr := s.newScratch(n)
		s.apply(blas.NewGeneral(n, s.in, x), pre, mT, &scr)
		phiT := make([]float32, F*n)
		selfTensor(phiT, mT, tilde, s.out, n)
		out := make([]float32, n*F)
		blas.Copy(blas.Trans, blas.NewGeneral(F, n, phiT), blas.NewGeneral(n, F, out))
		return out
	}
	pq, pk := phi(Q), phi(K)
	h := s.in
	var err2, nq, nk float64
	for i := 0; i < n; i++ {
		nq += math.Pow(dot64(Q[i*h:(i+1)*h], Q[i*h:(i+1)*h]), float64(p))
		nk += math.Pow(dot64(K[i*h:(i+1)*h], K[i*h:(i+1)*h]), float64(p))
		for j := 0; j < n; j++ {
			e := dot64(pq[i*F:(i+1)*F], pk[j*F:(j+1)*F]) - math.Pow(dot64(Q[i*h:(i+1)*h], K[j*h:(j+1)*h]), float64(p))
			err2 += e * e
		}
	}
	return math.Sqrt(err2) / (math.Sqrt(nq) * math.Sqrt(nk))
}

func fitSlope(xs, ys []float64) float64 {
	var mx, my float64
	for i := range xs {
		mx += xs[i] / float64(len(xs))
		my += ys[i] / float64(len(ys))
	}
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	return sxy / sxx
}

// TestSelfTensor checks that the symmetric features have the dot products
// of M^⊗2, (m·m')² ≥ 0, and half its dimension.
func TestSelfTensor(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, r := range []int{1, 2, 7, 32} {
		const n = 5
		if featureDim(r) != r*(r+1)/2 {
			t.Fatalf("featureDim(%d) = %d", r, featureDim(r))
		}
		m := randSlice(rng, n*r) // Mᵀ, [r × n]
		phiT, tilde := make([]float32, featureDim(r)*n), make([]float32, r*n)
		selfTensor(phiT, m, tilde, r, n)
		F := featureDim(r)
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				var got, mm float64
				for f := 0; f < F; f++ {
					got += float64(phiT[f*n+i]) * float64(phiT[f*n+j])
				}
				for c := 0; c < r; c++ {
					mm += float64(m[c*n+i]) * float64(m[c*n+j])
				}
				if math.Abs(got-mm*mm) > 1e-5*(1+mm*mm) {
					t.Errorf("r=%d: φ(m_%d)·φ(m_%d) = %v, want (m·m')² = %v", r, i, j, got, mm*mm)
				}
				if got < -1e-6 {
					t.Errorf("r=%d: negative weight %v", r, got)
				}
			}
		}
	}
}

// TestSketchBackward checks the gradients of the self-tensored sketch,
// x ↦ Σ w ∗ φ(M(x)), through the Hadamard products and the projections,
// against central finite differences.
func TestSketchBackward(t *testing.T) {
	const n, h, r = 3, 8, 5
	for _, kind := range []SketchKind{Gaussian, SRHT} {
		for _, d := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/d=%d", kind, d), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, uint64(d)))
				s := newSketch(kind, d, h, r, 9)
				F := featureDim(s.out)
				x, w := randSlice(rng, n*h), randSlice(rng, F*n)
				scr := s.newScratch(n)
				pre, mT, tilde, phiT := make([]float32, s.preW*n), make([]float32, s.out*n), make([]float32, s.out*n), make([]float32, F*n)
				loss := func() float64 {
					s.apply(blas.NewGeneral(n, h, x), pre, mT, &scr)
					selfTensor(phiT, mT, tilde, s.out, n)
					return dot64(phiT, w)
				}
				loss()
				dm := make([]float32, s.out*n)
				selfTensorBackward(dm, w, mT, tilde, s.out, n, false)
				dx := randSlice(rng, n*h) // accumulate onto this
				base := append([]float32(nil), dx...)
				s.backward(blas.NewGeneral(n, h, dx), true, dm, pre, &scr)
				for i := range x {
					const eps = 1e-2
					orig := x[i]
					x[i] = orig + eps
					up := loss()
					x[i] = orig - eps
					down := loss()
					x[i] = orig
					num := (up - down) / (2 * eps)
					got := float64(dx[i] - base[i])
					if math.Abs(got-num) > 1e-2*(math.Abs(num)+1) {
						t.Errorf("dx[%d] = %.6g, finite difference %.6g", i, got, num)
					}
				}
			})
		}
	}
}

// TestSRHTMatchesDense checks the fast Walsh–Hadamard path against the
// dense matrices SketchMatrices reports, for a head size that needs
// padding.
func TestSRHTMatchesDense(t *testing.T) {
	const n, h, r = 4, 12, 6
	rng := rand.New(rand.NewPCG(8, 9))
	x := randSlice(rng, n*h)
	for _, d := range []int{2, 4} {
		s := newSketch(SRHT, d, h, r, 3)
		got := sketchRows(s, x, n)
		mats := s.matrices()
		for i := 0; i < n; i++ {
			xi := make([]float64, h)
			for j := range xi {
				xi[j] = float64(x[i*h+j])
			}
			next := 0
			want := refSketch(xi, d, mats, &next)
			for c := range want {
				if math.Abs(float64(got[i*r+c])-want[c]) > 1e-4*(1+math.Abs(want[c])) {
					t.Fatalf("d=%d row %d: M[%d] = %v by FWHT, %v by the dense matrices", d, i, c, got[i*r+c], want[c])
				}
			}
		}
	}
}

// TestSketchMatricesFormula reproduces a non-causal degree-4 output from
// the documented formula φ(x) = (((x·g1) ∗ (x·g2))/√r)^⊗2 with the full
// r² Kronecker features (not the symmetric ones the code uses).
func TestSketchMatricesFormula(t *testing.T) {
	const n, h, r = 9, 8, 4
	for _, kind := range []SketchKind{Gaussian, SRHT} {
		rng := rand.New(rand.NewPCG(10, 11))
		q, k, v := randTensor(rng, 0.6, 1, 1, n, h), randTensor(rng, 0.6, 1, 1, n, h), randTensor(rng, 1, 1, 1, n, h)
		opts := kernelOptions{Degree: 4, SketchSize: r, Block: 4, Sketch: kind, Seed: 5}
		m := mustNew(t, Polysketch, opts)
		o := forward(m, q, k, v)
		mats := m.(Sketched).SketchMatrices()
		if len(mats) != 2 || mats["g1"] == nil || mats["g2"] == nil {
			t.Fatalf("SketchMatrices = %v, want g1 and g2", mats)
		}
		g1, g2 := mats["g1"], mats["g2"]
		phi := func(x []float32) []float64 {
			mx := make([]float64, r)
			for c := 0; c < r; c++ {
				var a, b float64
				for j := 0; j < h; j++ {
					a += float64(x[j]) * float64(g1.Data[j*r+c])
					b += float64(x[j]) * float64(g2.Data[j*r+c])
				}
				mx[c] = a * b / math.Sqrt(r)
			}
			out := make([]float64, 0, r*r)
			for _, a := range mx {
				for _, b := range mx {
					out = append(out, a*b)
				}
			}
			return out
		}
		S, z := make([]float64, r*r*h), make([]float64, r*r)
		for j := 0; j < n; j++ {
			pk := phi(k.Data[j*h : (j+1)*h])
			for f, x := range pk {
				z[f] += x
				for d := 0; d < h; d++ {
					S[f*h+d] += x * float64(v.Data[j*h+d])
				}
			}
		}
		for i := 0; i < n; i++ {
			pq := phi(q.Data[i*h : (i+1)*h])
			den := 1.0
			for f, x := range pq {
				den += x * z[f]
			}
			for d := 0; d < h; d++ {
				var num float64
				for f, x := range pq {
					num += x * S[f*h+d]
				}
				if got := float64(o.Data[i*h+d]); math.Abs(got-num/den) > 1e-4*(1+math.Abs(num/den)) {
					t.Fatalf("%s: o[%d,%d] = %v, formula gives %v", kind, i, d, got, num/den)
				}
			}
		}
	}
}

// TestPolysketchNonNegativeWeights runs sketched attention (no exact local
// blocks, degree 4 and 8) on values V ≥ 0: with non-negative weights every
// output is a convex combination shrunk towards 0, so 0 ≤ o ≤ max V; a
// negative weight anywhere, as an unsquared sketch gives, breaks that for
// some row.
func TestPolysketchNonNegativeWeights(t *testing.T) {
	for _, p := range []int{4, 8} {
		rng := rand.New(rand.NewPCG(12, uint64(p)))
		const n, h = 70, 8
		q, k := randTensor(rng, 1, 1, 2, n, h), randTensor(rng, 1, 1, 2, n, h)
		v := tensor.New(1, 2, n, h)
		for i := range v.Data {
			v.Data[i] = float32(rng.Float64())
		}
		o := forward(mustNew(t, Polysketch, kernelOptions{Causal: true, Degree: p, SketchSize: 4, Block: 16, Sketch: Gaussian, Seed: 1}), q, k, v)
		for i, x := range o.Data {
			if x < -1e-6 || x > 1+1e-6 {
				t.Fatalf("p=%d: output %d = %v outside [0, 1] for values in [0, 1]", p, i, x)
			}
		}
	}
}
