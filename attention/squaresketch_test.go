package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
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
		return refKernel(q, k, v, causal, w)
	}
}

// refSquareSketchOf is the conformance reference, for m's own draws and
// coefficients.
// It reads the random vectors and the coefficients from what attend
// exports (SketchMatrices), trained or frozen.
func refSquareSketchOf(m Mechanism, causal bool, q, k, v *tensor.Tensor) []float64 {
	g := m.(Sketched).SketchMatrices()
	return perHead(refSquareSketch(g, g["coefficients"].Data))(m, causal, q, k, v)
}

func newSquareSketch(t testing.TB, spec string, causal bool, seed uint64) Mechanism {
	t.Helper()
	cfg, err := ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, Setup{Causal: causal, Seed: seed, HeadSize: confh})
	if err != nil {
		t.Fatal(err)
	}
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

// TestSquareSketchFrozen: frozen coefficients are no parameter and get no
// gradient; the attention and the inputs' gradients are those of the
// trained form, bit for bit.
func TestSquareSketchFrozen(t *testing.T) {
	q, k, v := conformanceInputs(16, 29)
	for _, causal := range []bool{true, false} {
		live := newSquareSketch(t, "sqpolysketch:block=8:degree=3:sketch-size=4", causal, 6)
		frozen := newSquareSketch(t, "sqpolysketch:block=8:degree=3:sketch-size=4:frozen", causal, 6)
		if ps := frozen.(Trainable).Params(); len(ps) != 0 {
			t.Fatalf("frozen: %d parameters, want none", len(ps))
		}
		ps := live.(Trainable).Params()
		if len(ps) != 1 || ps[0].Name != "coefficients" {
			t.Fatal("trained: want the coefficients as the one parameter")
		}
		o1, dq1, dk1, dv1 := forwardBackward(live, q, k, v, v)
		o2, dq2, dk2, dv2 := forwardBackward(frozen, q, k, v, v)
		for i, p := range [][2]*tensor.Tensor{{o1, o2}, {dq1, dq2}, {dk1, dk2}, {dv1, dv2}} {
			if !slices.Equal(p[0].Data, p[1].Data) {
				t.Errorf("causal=%v: result %d differs between frozen and trained", causal, i)
			}
		}
		if !slices.ContainsFunc(ps[0].Grad.Data, func(x float32) bool { return x != 0 }) {
			t.Errorf("causal=%v: trained coefficients got no gradient", causal)
		}
		a := frozen.(Sketched).SketchMatrices()["coefficients"]
		if a == nil || !slices.Equal(a.Data, ps[0].Value.Data) {
			t.Errorf("causal=%v: frozen exports coefficients %v, want those drawn for the seed, %v", causal, a, ps[0].Value.Data)
		}
		checkGradients(t, frozen, q, k, v, 1e-2, 3e-2, 3)
	}
}

// TestSquareSketchCoefficients: explicit coefficients are used and
// exported as given, and the hand-set (1+x+x²)² is init=ones; with many
// columns both approach the exact form of those coefficients.
func TestSquareSketchCoefficients(t *testing.T) {
	coef := func(spec string) []float32 {
		return newSquareSketch(t, spec, true, 1).(Sketched).SketchMatrices()["coefficients"].Data
	}
	for _, c := range []struct {
		spec string
		want []float32
	}{
		{"sqpolysketch:degree=2:coefficients=0.5,-2,1e1", []float32{0.5, -2, 10}},
		{"sqpolysketch:degree=2:coefficients=0.5 -2 1e1", []float32{0.5, -2, 10}},
		{"sqpolysketch:degree=2:init=ones", []float32{1, 1, 1}},
		{"sqpolysketch:degree=2:init=ones:coefficients=3,0,-1", []float32{3, 0, -1}},
	} {
		if got := coef(c.spec); !slices.Equal(got, c.want) {
			t.Errorf("%s: coefficients %v, want %v", c.spec, got, c.want)
		}
	}
	q, k, v := conformanceInputs(17, 33)
	m := newSquareSketch(t, "sqpolysketch:block=8:degree=2:sketch-size=4:coefficients=1,-0.5,2", true, 3)
	if d := relMax(forward(m, q, k, v).Data, refSquareSketchOf(m, true, q, k, v)); d > 1e-4 {
		t.Errorf("max |o − reference| / max |reference| = %.3g", d)
	}
	// The error falls with the sketch size for these coefficients too
	// (mean over seeds; TestSquareSketchAgainstSquarePoly sweeps it).
	exact := perHead(refSquarePoly([]float64{1, -0.5, 2}))(m, true, q, k, v)
	errAt := func(r int) float64 {
		var e float64
		for seed := range uint64(4) {
			m := newSquareSketch(t, fmt.Sprintf("sqpolysketch:block=8:degree=2:sketch-size=%d:coefficients=1,-0.5,2", r), true, 50+seed)
			e += relMax(forward(m, q, k, v).Data, exact) / 4
		}
		return e
	}
	// Measured: 0.94 at r=4, 0.49 at r=256.
	if e4, e256 := errAt(4), errAt(256); !(e256 < 0.7*e4) {
		t.Errorf("mean max relative error against the exact form: %.3g at r=4, %.3g at r=256; want it below 0.7 × the first", e4, e256)
	} else {
		t.Logf("mean max relative error against the exact form: %.3g at r=4, %.3g at r=256", e4, e256)
	}
}

// TestSquareSketchConfigErrors: bad options are refused before any work,
// each with a line saying how to fix it.
func TestSquareSketchConfigErrors(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"sqpolysketch:degree=0", "degree 0: the inner polynomial's degree must be 1 to 8"},
		{"sqpolysketch:sketch-size=0", "sketch_size 0: must be positive"},
		{"sqpolysketch:init=normal", `init "normal": use uniform or ones`},
		{"sqpolysketch:degree=2:coefficients=1,x,3", `value 2 ("x") is not a finite number`},
		{"sqpolysketch:degree=1:coefficients=1,Inf", "is not a finite number"},
		{"sqpolysketch:degree=3:coefficients=1,2", "2 values for degree 3; give 4 values or degree 1"},
		{"sqpolysketch:frozen=maybe", "frozen"},
	} {
		_, err := ParseSpec(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.spec, err, c.want)
		}
	}
}

// TestSquareSketchThesisInit: with the thesis's U(−50, 50) coefficients,
// heads of 64 and rows of norm 8 (what the model's LayerNorm gives), the
// weights span many orders of magnitude (50²·(q·k)^(2p)); the float32
// engine still agrees with the float64 reference, causal and not, and its
// gradients with finite differences.
func TestSquareSketchThesisInit(t *testing.T) {
	const N, h = 72, 64
	rng := rand.New(rand.NewPCG(21, 22))
	q, k, v := randTensor(rng, 1, 1, 1, N, h), randTensor(rng, 1, 1, 1, N, h), randTensor(rng, 1, 1, 1, N, h)
	normalizeRows(q, 1)
	normalizeRows(k, 1)
	for _, p := range []int{3, 6} {
		for _, causal := range []bool{true, false} {
			cfg, err := ParseSpec(fmt.Sprintf("sqpolysketch:degree=%d:sketch-size=4:block=16", p))
			if err != nil {
				t.Fatal(err)
			}
			m, err := New(cfg, Setup{Causal: causal, Seed: 8, HeadSize: h})
			if err != nil {
				t.Fatal(err)
			}
			if d := relMax(forward(m, q, k, v).Data, refSquareSketchOf(m, causal, q, k, v)); d > 1e-4 {
				t.Errorf("p=%d causal=%v: max |o − reference| / max |reference| = %.3g", p, causal, d)
			}
			if p == 3 {
				checkGradients(t, m, q, k, v, 1e-3, 5e-2, 3)
			}
		}
	}
}
