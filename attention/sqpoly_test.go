package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
)

// refSquarePoly is exact squared polynomial attention of one head in
// float64 from its definition, for coefficients a (lowest degree first):
// f = (Σ_i a_i (q·k)^i)² and o_i = Σ_j f_ij v_j / Σ_j f_ij over j ≤ i
// (causal) or all j; a row whose weights all vanish is 0.
func refSquarePoly(a []float64) func(q, k, v [][]float64, causal bool) [][]float64 {
	return func(q, k, v [][]float64, causal bool) [][]float64 {
		o := make([][]float64, len(q))
		for i := range q {
			o[i] = make([]float64, len(v[0]))
			var den float64
			for j := range k {
				if causal && j > i {
					break
				}
				x, g := dotF64(q[i], k[j]), 0.0
				for c := len(a) - 1; c >= 0; c-- {
					g = g*x + a[c]
				}
				f := g * g
				den += f
				for c, e := range v[j] {
					o[i][c] += f * e
				}
			}
			for c := range o[i] {
				if den > 0 {
					o[i][c] /= den
				}
			}
		}
		return o
	}
}

// refSquarePolyOf is the conformance reference, for m's coefficients.
func refSquarePolyOf(m Mechanism, causal bool, q, k, v *tensor.Tensor) []float64 {
	var a []float64
	for _, x := range m.(Sketched).SketchMatrices()["coefficients"].Data {
		a = append(a, float64(x))
	}
	return perHead(refSquarePoly(a))(m, causal, q, k, v)
}

func newSquarePoly(t testing.TB, spec string, causal bool, seed uint64) Mechanism {
	t.Helper()
	cfg, err := ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, Setup{Causal: causal, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSquarePolyReference compares Forward with the float64 reference for
// degrees, initializations and tile sizes, causal and not, at the
// conformance scale (|q·k| about 1) and at the model's (q and k
// LayerNormed without scale, |q·k| up to h), where the thesis's U(−50, 50)
// coefficients make f far larger than float32 holds unless scaled.
func TestSquarePolyReference(t *testing.T) {
	for _, c := range []struct {
		spec  string
		N, h  int
		scale float64 // rows of q and k normalized to this standard deviation
		tol   float64
	}{
		{"sqpoly:block=8:degree=1:init=ones", 37, 8, 0.6, 1e-5},
		{"sqpoly:block=8:degree=3", 37, 8, 0.6, 1e-5},
		{"sqpoly:block=16:degree=2:coefficients=0.5,-2,1", 45, 8, 0.6, 1e-5},
		{"sqpoly:block=64:degree=6:init=ones", 45, 8, 0.6, 1e-5},
		{"sqpoly:block=8:degree=3", 37, 16, 1, 1e-4},
		{"sqpoly:block=8:degree=6", 37, 16, 1, 1e-4},
		// f reaches (50·128^8)² ≈ 10^37 per key: its row sums overflow float32.
		{"sqpoly:block=8:degree=8", 37, 128, 1, 1e-4},
		// g itself reaches 10^3·128^8 ≈ 7·10^19: g² overflows float32.
		{"sqpoly:block=8:degree=8:coefficients=1 0 0 0 0 0 0 0 1e3", 37, 128, 1, 1e-4},
	} {
		for _, causal := range []bool{true, false} {
			t.Run(name(c.spec, causal)+fmt.Sprintf("/h=%d", c.h), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(c.h), 5))
				q, k, v := randTensor(rng, 1, 1, 2, c.N, c.h), randTensor(rng, 1, 1, 2, c.N, c.h), randTensor(rng, 1, 1, 2, c.N, c.h)
				normalizeRows(q, c.scale)
				normalizeRows(k, c.scale)
				if c.h == 128 {
					// Keys close to the queries: q·k near h.
					for i := range k.Data {
						k.Data[i] = q.Data[i] + 0.1*k.Data[i]
					}
				}
				m := newSquarePoly(t, c.spec, causal, 3)
				got := forward(m, q, k, v)
				want := refSquarePolyOf(m, causal, q, k, v)
				if d := relMax(got.Data, want); !(d <= c.tol) {
					t.Errorf("max |o − ref| / max |ref| = %.3g > %.3g", d, c.tol)
				}
			})
		}
	}
}

// TestSquarePolyGradients checks dq, dk, dv and the coefficients'
// gradient against finite differences, for the thesis's initialization
// and the hand-set ones, and for explicit coefficients with a zero.
func TestSquarePolyGradients(t *testing.T) {
	for _, spec := range []string{
		"sqpoly:block=8:degree=3",
		"sqpoly:block=8:degree=2:init=ones",
		"sqpoly:block=16:degree=4:coefficients=1,0,-1,0.5,0.25",
	} {
		for _, causal := range []bool{true, false} {
			t.Run(name(spec, causal), func(t *testing.T) {
				m := newSquarePoly(t, spec, causal, 9)
				q, k, v := conformanceInputs(12, 19)
				checkGradients(t, m, q, k, v, 1e-2, 2e-2, 8)
				checkParamGradients(t, m, q, k, v, 1e-2, 2e-2, 3)
			})
		}
	}
}

// TestSquarePolyHugeGradients: dq, dk, dv where g² overflows float32
// (|g| ≈ 10^30), which the weights survive by scaling g before squaring.
func TestSquarePolyHugeGradients(t *testing.T) {
	for _, causal := range []bool{true, false} {
		m := newSquarePoly(t, "sqpoly:block=8:degree=2:coefficients=1e30,1e29,1e30", causal, 1)
		q, k, v := conformanceInputs(16, 19)
		checkGradients(t, m, q, k, v, 1e-2, 2e-2, 8)
	}
}

// TestSquarePolyFrozen: frozen coefficients are no parameter and get no
// gradient, and the attention is the same as unfrozen.
func TestSquarePolyFrozen(t *testing.T) {
	q, k, v := conformanceInputs(13, 21)
	live := newSquarePoly(t, "sqpoly:block=8:degree=3", true, 4)
	frozen := newSquarePoly(t, "sqpoly:block=8:degree=3:frozen", true, 4)
	if ps := frozen.(Trainable).Params(); len(ps) != 0 {
		t.Fatalf("frozen: %d parameters, want none", len(ps))
	}
	if len(live.(Trainable).Params()) != 1 {
		t.Fatal("unfrozen: want the coefficients as the one parameter")
	}
	o1, dq1, dk1, dv1 := forwardBackward(live, q, k, v, v)
	o2, dq2, dk2, dv2 := forwardBackward(frozen, q, k, v, v)
	for i, p := range [][2]*tensor.Tensor{{o1, o2}, {dq1, dq2}, {dk1, dk2}, {dv1, dv2}} {
		if !slices.Equal(p[0].Data, p[1].Data) {
			t.Errorf("output %d differs between frozen and unfrozen", i)
		}
	}
	if g := frozen.(*squarePolyAttn).coef.Grad.Data; slices.ContainsFunc(g, func(x float32) bool { return x != 0 }) {
		t.Errorf("frozen coefficients got a gradient %v", g)
	}
}

// TestSquarePolyInit checks the initializations: ones, explicit values,
// and U(−50, 50) drawn from the seed (different seeds, different draws;
// the same seed, the same draws, those of sqpolysketch).
func TestSquarePolyInit(t *testing.T) {
	coef := func(spec string, seed uint64) []float32 {
		return newSquarePoly(t, spec, true, seed).(Sketched).SketchMatrices()["coefficients"].Data
	}
	if got := coef("sqpoly:degree=4:init=ones", 1); !slices.Equal(got, []float32{1, 1, 1, 1, 1}) {
		t.Errorf("init=ones: %v", got)
	}
	for _, c := range []string{"0.5, -2,1e1", "0.5 -2 1e1"} {
		if got := coef("sqpoly:degree=2:coefficients="+c, 1); !slices.Equal(got, []float32{0.5, -2, 10}) {
			t.Errorf("coefficients=%s: %v", c, got)
		}
	}
	a, b := coef("sqpoly:degree=6", 1), coef("sqpoly:degree=6", 2)
	if slices.Equal(a, b) {
		t.Error("seeds 1 and 2 drew the same coefficients")
	}
	if !slices.Equal(a, coef("sqpoly:degree=6", 1)) {
		t.Error("seed 1 drew different coefficients twice")
	}
	for _, x := range append(a, b...) {
		if !(x >= -50 && x < 50) {
			t.Errorf("coefficient %g outside [−50, 50)", x)
		}
	}
	sk := newSquareSketch(t, "sqpolysketch:degree=6", true, 1).(Trainable).Params()[0].Value.Data
	if !slices.Equal(a, sk) {
		t.Errorf("sqpoly drew %v, sqpolysketch %v for the same seed", a, sk)
	}
}

// TestSquarePolyZeroRows: coefficients all 0 give weights all 0, hence
// outputs and gradients 0, not NaN.
func TestSquarePolyZeroRows(t *testing.T) {
	q, k, v := conformanceInputs(14, 19)
	m := newSquarePoly(t, "sqpoly:block=8:degree=1:coefficients=0,0", true, 1)
	o, dq, dk, dv := forwardBackward(m, q, k, v, v)
	for i, x := range [][]float32{o.Data, dq.Data, dk.Data, dv.Data} {
		if slices.ContainsFunc(x, func(x float32) bool { return x != 0 }) {
			t.Errorf("result %d is not all 0", i)
		}
	}
}

// TestSquarePolyConfigErrors: bad options are refused before any work,
// each with a line saying how to fix it.
func TestSquarePolyConfigErrors(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"sqpoly:degree=0", "degree 0: the inner polynomial's degree must be 1 to 8"},
		{"sqpoly:degree=9", "degree 9"},
		{"sqpoly:init=normal", `init "normal": use uniform or ones`},
		{"sqpoly:block=0", "block 0: must be positive"},
		{"sqpoly:degree=2:coefficients=1,x,3", `value 2 ("x") is not a finite number`},
		{"sqpoly:degree=1:coefficients=1,NaN", "is not a finite number"},
		{"sqpoly:degree=3:coefficients=1,2", "2 values for degree 3; give 4 values or degree 1"},
		{"sqpoly:degree=3:coefficients= ,", "no values"},
		{"sqpoly:terms=3", "terms is no option of sqpoly attention: its options are degree, init, coefficients, frozen, block"},
	} {
		_, err := ParseSpec(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.spec, err, c.want)
		}
	}
}

// TestSquarePolyDecoderCoefficients: the decoder reads the current
// coefficients, as a decoder of a model being trained must.
func TestSquarePolyDecoderCoefficients(t *testing.T) {
	q, k, v := conformanceInputs(15, 11)
	m := newSquarePoly(t, "sqpoly:block=8:degree=2", true, 2)
	d, err := NewDecoder(m, confB, confH, confh)
	if err != nil {
		t.Fatal(err)
	}
	m.(Trainable).Params()[0].Value.Data[1] += 7
	want := forward(m, q, k, v)
	if diff := maxRelDiff(decodeChunks(t, d, q, k, v, []int{3}).Data, want.Data); diff > 1e-5 {
		t.Errorf("decoder differs from Forward by %.3g after a coefficient changed", diff)
	}
	if _, err := NewDecoder(newSquarePoly(t, "sqpoly", false, 2), 1, 1, 8); err == nil {
		t.Error("a non-causal sqpoly gave a decoder")
	}
}

// TestSquarePolyThreadsCoefficients: the coefficients' gradient, summed
// over work items, is bitwise the same for every GOMAXPROCS, with one
// head (its key tiles split into groups) and with several.
func TestSquarePolyThreadsCoefficients(t *testing.T) {
	for _, B := range []int{1, 3} {
		rng := rand.New(rand.NewPCG(uint64(B), 6))
		q, k, v := randTensor(rng, 1, B, 1, 200, 8), randTensor(rng, 1, B, 1, 200, 8), randTensor(rng, 1, B, 1, 200, 8)
		normalizeRows(q, 0.6)
		normalizeRows(k, 0.6)
		var want []float32
		for _, procs := range parallel.TestThreads {
			var got []float32
			withProcs(procs, func() {
				m := newSquarePoly(t, "sqpoly:block=16:degree=4", true, 8)
				forwardBackward(m, q, k, v, v)
				got = m.(Trainable).Params()[0].Grad.Data
			})
			if want == nil {
				want = got
			} else if !slices.Equal(got, want) {
				t.Errorf("B=%d, GOMAXPROCS=%d: coefficient gradient %v, one thread's %v", B, procs, got, want)
			}
		}
	}
}

// TestSquareSketchAgainstSquarePoly measures sqpolysketch, the linear-time
// form, against the exact squared polynomial of sqpoly's definition (the
// thesis's plain ratio) for the same coefficients: the thesis's U(−50, 50)
// draws, which both mechanisms take from the seed. The error (mean over
// seeds of the relative Frobenius error, degree 2, causal) falls as the
// sketch size grows. sqpolysketch adds 1 to its denominator; with these
// coefficients the weights are in the hundreds and more, so that 1 moves
// the outputs far less than the sketch does.
func TestSquareSketchAgainstSquarePoly(t *testing.T) {
	rs := []int{4, 16, 64, 256}
	if testing.Short() {
		rs = []int{4, 64}
	}
	const seeds = 4
	for _, c := range []struct{ name, opts string }{
		{"uniform", ""},        // the thesis's U(−50, 50): 0.91, 0.77, 0.50, 0.33 measured
		{"ones", ":init=ones"}, // (1 + x + x²)²: 0.78, 0.68, 0.42, 0.23
	} {
		t.Run(c.name, func(t *testing.T) {
			var first, prev float64
			for n, r := range rs {
				var e float64
				for seed := range seeds {
					q, k, v := conformanceInputs(uint64(50+seed), 48)
					m := newSquareSketch(t, fmt.Sprintf("sqpolysketch:block=16:degree=2:sketch-size=%d%s", r, c.opts), true, uint64(60+seed))
					var a []float64
					for _, x := range m.(Trainable).Params()[0].Value.Data {
						a = append(a, float64(x))
					}
					o := forward(m, q, k, v)
					exact := perHead(refSquarePoly(a))(m, true, q, k, v)
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
			if prev > 0.6*first {
				t.Errorf("error %.4f at r=%d is not below 0.6 × %.4f at r=%d", prev, rs[len(rs)-1], first, rs[0])
			}
		})
	}
}
