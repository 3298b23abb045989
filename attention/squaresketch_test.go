package attention

import (
	"fmt"
	"math"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// refSquareSketch is sketched squared-polynomial attention of one head in
// float64 from its definition, for the random vectors g (SketchMatrices:
// "g<i>.<t>", [h, r]) and coefficients a: w = (a_0 + Σ_i a_i·M_i(q)·M_i(k))²
// with M_i(x)_c = ∏_t (g_{i,t,c}·x)/√r, and o = Σ w v / Σ w.
func refSquareSketch(g map[string]*tensor.Tensor, a []float32) func(q, k, v [][]float64, causal bool) [][]float64 {
	p := len(a) - 1
	sketch := func(x []float64, i int) []float64 {
		m0 := g[fmt.Sprintf("g%d.1", i)]
		h, r := m0.Shape[0], m0.Shape[1]
		m := make([]float64, r)
		for c := range m {
			m[c] = 1 / math.Sqrt(float64(r))
			for t := 1; t <= i; t++ {
				gt := g[fmt.Sprintf("g%d.%d", i, t)]
				var d float64
				for e := 0; e < h; e++ {
					d += float64(gt.Data[e*r+c]) * x[e]
				}
				m[c] *= d
			}
		}
		return m
	}
	w := func(qi, kj []float64) float64 {
		s := float64(a[0])
		for i := 1; i <= p; i++ {
			s += float64(a[i]) * dotF64(sketch(qi, i), sketch(kj, i))
		}
		return s * s
	}
	return func(q, k, v [][]float64, causal bool) [][]float64 {
		return refKernelRatio(q, k, v, causal, w)
	}
}

// refSquareExact is the exact weights (Σ a_i (q·k)^i)² of the same form.
func refSquareExact(a []float64) func(q, k, v [][]float64, causal bool) [][]float64 {
	return func(q, k, v [][]float64, causal bool) [][]float64 {
		return refKernelRatio(q, k, v, causal, func(qi, kj []float64) float64 {
			s, x := 0.0, dotF64(qi, kj)
			for i := len(a) - 1; i >= 0; i-- {
				s = s*x + a[i]
			}
			return s * s
		})
	}
}

// refKernelRatio is Σ_j w v_j / Σ_j w over j ≤ i (causal) or all j.
func refKernelRatio(q, k, v [][]float64, causal bool, w func(qi, kj []float64) float64) [][]float64 {
	o := make([][]float64, len(q))
	for i := range q {
		o[i] = make([]float64, len(v[0]))
		den := 0.0
		for j := range k {
			if causal && j > i {
				break
			}
			x := w(q[i], k[j])
			den += x
			for c, e := range v[j] {
				o[i][c] += x * e
			}
		}
		for c := range o[i] {
			o[i][c] /= den
		}
	}
	return o
}

// refSquareSketchOf is the conformance reference, for m's own draws and
// coefficients.
func refSquareSketchOf(m Mechanism, causal bool, q, k, v *tensor.Tensor) []float64 {
	a := m.(Trainable).Params()[0].Value.Data
	return perHead(refSquareSketch(m.(Sketched).SketchMatrices(), a))(m, causal, q, k, v)
}

func newSquareSketch(t testing.TB, spec string, causal bool, seed uint64) Mechanism {
	t.Helper()
	cfg, err := ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, Setup{Causal: causal, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	m.(HeadSized).SetHeadSize(confh)
	return m
}

// TestSquareSketchOptions checks blocks, Remat and CumSum, causal and not,
// against the reference, with finite differences for the inputs and the
// coefficients.
func TestSquareSketchOptions(t *testing.T) {
	q, k, v := conformanceInputs(11, 45)
	for _, causal := range []bool{true, false} {
		for _, spec := range []string{
			"sqpolysketch:block=8:degree=3:sketch-size=4:init=ones", "sqpolysketch:block=8:degree=3:sketch-size=4:init=ones:remat",
			"sqpolysketch:block=16:degree=2:sketch-size=4:cumsum", "sqpolysketch:block=64:degree=1:sketch-size=4",
		} {
			m := newSquareSketch(t, spec, causal, 5)
			if d := relMax(forward(m, q, k, v).Data, refSquareSketchOf(m, causal, q, k, v)); d > 1e-4 {
				t.Errorf("%s causal=%v: max |o − reference| / max |reference| = %.3g", spec, causal, d)
			}
			checkGradients(t, m, q, k, v, 1e-2, 3e-2, 4)
			checkParamGradients(t, m, q, k, v, 1e-2, 3e-2, 3)
		}
	}
}

// TestSquareSketchApproximatesExact: the error of the sketched form
// against the exact squared polynomial falls as the sketch size grows
// (mean over seeds of the relative Frobenius error; coefficients all ones,
// degree 2).
func TestSquareSketchApproximatesExact(t *testing.T) {
	rs := []int{4, 16, 64, 256}
	if testing.Short() {
		rs = []int{4, 64}
	}
	const seeds = 4
	var first, prev float64
	for n, r := range rs {
		var e float64
		for seed := range seeds {
			q, k, v := conformanceInputs(uint64(30+seed), 48)
			m := newSquareSketch(t, fmt.Sprintf("sqpolysketch:block=16:degree=2:init=ones:sketch-size=%d", r), true, uint64(40+seed))
			o := forward(m, q, k, v)
			exact := perHead(refSquareExact([]float64{1, 1, 1}))(m, true, q, k, v)
			var num, den float64
			for j, x := range exact {
				num += (float64(o.Data[j]) - x) * (float64(o.Data[j]) - x)
				den += x * x
			}
			e += math.Sqrt(num/den) / seeds
		}
		t.Logf("r=%d: relative error %.4f", r, e)
		if n == 0 {
			first = e
		} else if !(e < prev) {
			t.Errorf("error %.4f at r=%d is not below %.4f at r=%d", e, r, prev, rs[n-1])
		}
		prev = e
	}
	// Measured (go test -run SquareSketchApprox -v): 0.89, 0.68, 0.49, 0.27
	// for r = 4, 16, 64, 256; products of independent projections have a
	// large variance.
	if prev > 0.6*first {
		t.Errorf("error %.4f at r=%d is not below 0.6 × %.4f at r=%d", prev, rs[len(rs)-1], first, rs[0])
	}
}
