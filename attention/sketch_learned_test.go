package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
)

// learnedCases covers the learned sketch in every mode: local exact or
// sketched diagonal blocks, causal or not, Remat, CumSum, degrees 4 and 8
// (and 16, three levels of networks).
var learnedCases = []psCase{
	{name: "local/p4", causal: true, local: true, degree: 4, r: 4, b: 4},
	{name: "local/p4/remat", causal: true, local: true, degree: 4, r: 4, b: 4, remat: true},
	{name: "sketched/p4", causal: true, degree: 4, r: 4, b: 4},
	{name: "sketched/p4/remat", causal: true, degree: 4, r: 4, b: 4, remat: true},
	{name: "local/p8", causal: true, local: true, degree: 8, r: 4, b: 4},
	{name: "local/p8/remat", causal: true, local: true, degree: 8, r: 4, b: 4, remat: true},
	{name: "sketched/p8", causal: true, degree: 8, r: 4, b: 4},
	{name: "sketched/p8/remat", causal: true, degree: 8, r: 4, b: 4, remat: true},
	{name: "noncausal/p4", degree: 4, r: 4, b: 4},
	{name: "noncausal/p4/remat", degree: 4, r: 4, b: 4, remat: true},
	{name: "noncausal/p8", degree: 8, r: 4, b: 4},
	{name: "cumsum/p4", causal: true, degree: 4, r: 4, b: 4, cumsum: true},
	{name: "cumsum/p8", causal: true, degree: 8, r: 4, b: 4, cumsum: true},
	{name: "sketched/p16", causal: true, degree: 16, r: 4, b: 4},
}

func learnedOptions(c psCase) kernelOptions {
	o := c.options()
	o.Sketch, o.Learned = Gaussian, true
	return o
}

// newLearnedMech builds a learned polysketch for head size h and perturbs
// its parameters away from the initialization (biases 0, gains 1), so that
// tests see every parameter matter.
func newLearnedMech(t testing.TB, c psCase, h int) *engine {
	t.Helper()
	m := mustNew(t, Polysketch, learnedOptions(c)).(*engine)
	m.setHeadSize(h)
	rng := rand.New(rand.NewPCG(21, 22))
	for _, p := range m.Params() {
		for i := range p.Value.Data {
			p.Value.Data[i] += float32(0.2 * rng.NormFloat64())
		}
	}
	return m
}

// refNet evaluates the network named name in float64, literally as
// documented: f(x) = W4·GELU(W3·(W2·LN2(GELU(W1·LN1(x)+b1))+b2)+b3)+b4.
func refNet(x []float64, name string, ps map[string]*nn.Param) []float64 {
	get := func(s string) *nn.Param { return ps[name+"."+s] }
	ln := func(x []float64, g, b *nn.Param) []float64 {
		var mean, v float64
		for _, xi := range x {
			mean += xi
		}
		mean /= float64(len(x))
		for _, xi := range x {
			v += (xi - mean) * (xi - mean)
		}
		v /= float64(len(x))
		y := make([]float64, len(x))
		for i, xi := range x {
			y[i] = (xi-mean)/math.Sqrt(v+1e-5)*float64(g.Value.Data[i]) + float64(b.Value.Data[i])
		}
		return y
	}
	lin := func(x []float64, w, b *nn.Param) []float64 {
		out := w.Value.Shape[1]
		y := make([]float64, out)
		for o := range y {
			y[o] = float64(b.Value.Data[o])
			for i, xi := range x {
				y[o] += xi * float64(w.Value.Data[i*out+o])
			}
		}
		return y
	}
	gelu := func(x []float64) []float64 {
		for i, v := range x {
			x[i] = 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
		}
		return x
	}
	a := gelu(lin(ln(x, get("ln1.gain"), get("ln1.bias")), get("l1.weight"), get("l1.bias")))
	a = lin(ln(a, get("ln2.gain"), get("ln2.bias")), get("l2.weight"), get("l2.bias"))
	a = gelu(lin(a, get("l3.weight"), get("l3.bias")))
	return lin(a, get("l4.weight"), get("l4.bias"))
}

// refLearned evaluates M(x) of Algorithm 2 (LEARNABLEPOLYSKETCHWITHNEGATIVITY)
// in float64, taking the networks f1, f2, … in the order of its recursion.
func refLearned(x []float64, d int, ps map[string]*nn.Param, next *int) []float64 {
	if d == 1 {
		return x
	}
	m1 := refLearned(x, d/2, ps, next)
	m2 := refLearned(x, d/2, ps, next)
	y1 := refNet(m1, fmt.Sprintf("sketch.f%d", *next+1), ps)
	y2 := refNet(m2, fmt.Sprintf("sketch.f%d", *next+2), ps)
	*next += 2
	r := float64(len(y1))
	out := make([]float64, len(y1))
	for c := range out {
		out[c] = math.Sqrt(r) * math.Tanh(y1[c]*y2[c]/math.Sqrt(r))
	}
	return out
}

// refSketched evaluates PolySketch attention in float64 for the sketch
// M(x) = sk(x): w_ij = (M(q_i)·M(k_j))², or (q_i·k_j)^p in the diagonal
// blocks with Local; o_i = Σ w_ij v_j / (1 + Σ w_ij). With tn's
// per-head parameters (engine_mixed.go) q and k are scaled by e^s, the
// feature weights by e^β, and with Softmax the local weights are
// exp(q_i·k_j) and causal denominators have no 1.
func refSketched(q, k, v *tensor.Tensor, o kernelOptions, sk func(x []float64) []float64, tn refTune) []float64 {
	B, H, N, h := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	local := o.Local && o.Causal && !o.CumSum
	one := 1.0
	if o.Softmax && o.Causal {
		one = 0
	}
	dot := func(a, b []float64) float64 {
		var s float64
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	out := make([]float64, len(q.Data))
	for bh := 0; bh < B*H; bh++ {
		f, mix := 1.0, 1.0
		if tn.scale != nil {
			f = math.Exp(tn.scale[bh%H])
		}
		if tn.mix != nil {
			mix = math.Exp(tn.mix[bh%H])
		}
		row := func(x *tensor.Tensor, at int) []float64 { // of q and k: scaled
			r := make([]float64, h)
			for d := range r {
				r[d] = f * float64(x.Data[at*h+d])
			}
			return r
		}
		value := func(at int) []float64 {
			r := make([]float64, h)
			for d := range r {
				r[d] = float64(v.Data[at*h+d])
			}
			return r
		}
		mk := make([][]float64, N)
		for j := range mk {
			mk[j] = sk(row(k, bh*N+j))
		}
		for i := 0; i < N; i++ {
			qi, mq := row(q, bh*N+i), sk(row(q, bh*N+i))
			den, num := one, make([]float64, h)
			last := N - 1
			if o.Causal {
				last = i
			}
			for j := 0; j <= last; j++ {
				var w float64
				switch {
				case local && i/o.Block == j/o.Block && o.Softmax:
					w = math.Exp(dot(qi, row(k, bh*N+j)))
				case local && i/o.Block == j/o.Block:
					w = math.Pow(dot(qi, row(k, bh*N+j)), float64(o.Degree))
				default:
					s := dot(mq, mk[j])
					w = mix * s * s
				}
				den += w
				for d, x := range value(bh*N + j) {
					num[d] += w * x
				}
			}
			for d := range num {
				out[(bh*N+i)*h+d] = num[d] / den
			}
		}
	}
	return out
}

// refTune holds the per-head parameters of Scale and Mix for refSketched
// (nil: off).
type refTune struct{ scale, mix []float64 }

// tuneOf returns m's per-head parameters, in float64.
func tuneOf(m *engine) refTune {
	var t refTune
	if m.tune == nil {
		return t
	}
	f64 := func(p *nn.Param) []float64 {
		if p == nil {
			return nil
		}
		x := make([]float64, p.Value.Len())
		for i, v := range p.Value.Data {
			x[i] = float64(v)
		}
		return x
	}
	return refTune{scale: f64(m.tune.scale), mix: f64(m.tune.mix)}
}

func paramMap(ps []*nn.Param) map[string]*nn.Param {
	m := make(map[string]*nn.Param, len(ps))
	for _, p := range ps {
		m[p.Name] = p
	}
	return m
}

func TestLearnedMatchesReference(t *testing.T) {
	for _, c := range learnedCases {
		for _, n := range []int{3, 11, 70} { // one block, several; 280 rows make two chunks
			t.Run(fmt.Sprintf("%s/N=%d", c.name, n), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(1, uint64(n)))
				h := 6
				q, k, v := randTensor(rng, 0.5, 2, 2, n, h), randTensor(rng, 0.5, 2, 2, n, h), randTensor(rng, 1, 2, 2, n, h)
				m := newLearnedMech(t, c, h)
				o := forward(m, q, k, v)
				ps := paramMap(m.Params())
				want := refSketched(q, k, v, learnedOptions(c), func(x []float64) []float64 {
					next := 0
					return refLearned(x, c.degree/2, ps, &next)
				}, refTune{})
				var worst, scale float64
				for i := range want {
					worst = math.Max(worst, math.Abs(float64(o.Data[i])-want[i]))
					scale = math.Max(scale, math.Abs(want[i]))
				}
				if worst > 1e-4*scale {
					t.Errorf("max |o - reference| = %.3g (max |reference| %.3g)", worst, scale)
				}
			})
		}
	}
}

// fdStep is the finite-difference step for case c: degree 8 composes two
// levels of networks and tanh (degree 16 three), curved enough that the
// truncation error of a step of 1e-2 exceeds the tolerance; it shrinks
// with the step, towards the analytic gradient.
func fdStep(c psCase) float64 {
	switch {
	case c.degree >= 16:
		return 2e-4
	case c.degree >= 8:
		return 1e-3
	}
	return 1e-2
}

func TestLearnedGradients(t *testing.T) {
	for _, c := range learnedCases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(2, 3))
			n, h := 11, 6
			q, k, v := randTensor(rng, 0.7, 1, 2, n, h), randTensor(rng, 0.7, 1, 2, n, h), randTensor(rng, 1, 1, 2, n, h)
			checkGradients(t, newLearnedMech(t, c, h), q, k, v, fdStep(c), 2e-2, 30)
		})
	}
}

// checkParamGradients compares the parameter gradients of Backward with
// fourth-order central finite differences of L = Σ o ⊙ w (the five-point
// stencil: its truncation error falls as eps⁴, so eps can be large enough
// for float32 rounding in the loss not to swamp a degree-16 sketch's
// difference quotients), probing `probes` random
// elements of every parameter, judged as checkGradients does (against the
// RMS of that parameter's gradient). Gradients start at a non-zero value
// that Backward must add to.
func checkParamGradients(t *testing.T, m Mechanism, q, k, v *tensor.Tensor, eps, tol float64, probes int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(17, 19))
	w := randTensor(rng, 1, q.Shape...)
	loss := func() float64 {
		o := forward(m, q, k, v)
		var s float64
		for i := range o.Data {
			s += float64(o.Data[i]) * float64(w.Data[i])
		}
		return s
	}
	ps := m.(Trainable).Params()
	if len(ps) == 0 {
		t.Fatal("no parameters")
	}
	const before = 0.5
	for _, p := range ps {
		p.Grad.Fill(before)
	}
	forward(m, q, k, v)
	m.Backward(tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...), w)
	for _, p := range ps {
		g := make([]float32, p.Grad.Len())
		for i, x := range p.Grad.Data {
			g[i] = x - before
		}
		scale := rms(g)
		if scale == 0 {
			t.Errorf("%s: gradient is zero", p.Name)
			continue
		}
		for range probes {
			i := rng.IntN(len(p.Value.Data))
			orig := p.Value.Data[i]
			at := func(d float64) float64 {
				p.Value.Data[i] = orig + float32(d)
				return loss()
			}
			numeric := (8*(at(eps)-at(-eps)) - (at(2*eps) - at(-2*eps))) / (12 * eps)
			p.Value.Data[i] = orig
			if math.Abs(float64(g[i])-numeric) > tol*(math.Abs(numeric)+scale) {
				t.Errorf("%s[%d]: gradient %.6g, finite difference %.6g (gradient RMS %.3g)", p.Name, i, g[i], numeric, scale)
			}
		}
	}
}

func TestLearnedParamGradients(t *testing.T) {
	for _, c := range learnedCases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(4, 5))
			n, h := 11, 6
			q, k, v := randTensor(rng, 0.7, 1, 2, n, h), randTensor(rng, 0.7, 1, 2, n, h), randTensor(rng, 1, 1, 2, n, h)
			eps := fdStep(c)
			if c.degree >= 16 {
				eps = 1e-3 // the five-point stencil allows it; 2e-4 drowns in rounding
			}
			checkParamGradients(t, newLearnedMech(t, c, h), q, k, v, eps, 2e-2, 3)
		})
	}
}

// TestLearnedGradientsChunks checks all gradients where the rows of q and
// of k span several chunks (B·H·N = 540: 8 of netChunk = 64 rows and one
// of 28) in several groups (9, of two chunks each).
func TestLearnedGradientsChunks(t *testing.T) {
	for _, c := range []psCase{learnedCases[0], learnedCases[7], learnedCases[10], learnedCases[11]} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			n, h := 45, 6
			q, k, v := randTensor(rng, 0.7, 3, 4, n, h), randTensor(rng, 0.7, 3, 4, n, h), randTensor(rng, 1, 3, 4, n, h)
			m := newLearnedMech(t, c, h)
			checkGradients(t, m, q, k, v, fdStep(c), 2e-2, 20)
			if want := (540 + netChunk - 1) / netChunk; m.L.chunks != want || m.L.groups != want || 540%netChunk == 0 {
				t.Fatalf("%d chunks per input in %d groups, want %d in %d, the last shorter", m.L.chunks, m.L.groups, want, want)
			}
			checkParamGradients(t, m, q, k, v, fdStep(c), 2e-2, 2)
		})
	}
}

func TestLearnedCausal(t *testing.T) {
	for _, c := range learnedCases {
		if !c.causal {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(6, 7))
			q, k, v := randTensor(rng, 0.7, 1, 2, 13, 6), randTensor(rng, 0.7, 1, 2, 13, 6), randTensor(rng, 1, 1, 2, 13, 6)
			checkCausal(t, newLearnedMech(t, c, 6), q, k, v)
		})
	}
}

// TestLearnedWeightsNonNegative recovers every weight w_ij relative to its
// row's denominator D_i = 1 + Σ_j w_ij: with v the indicator of key j,
// o_i = w_ij/D_i, and with v = 1, o_i = 1 − 1/D_i. All of them ≥ 0 and
// the latter < 1 means D_i ≥ 1 and every w_ij ≥ 0.
func TestLearnedWeightsNonNegative(t *testing.T) {
	for _, c := range learnedCases {
		if c.local && c.causal {
			continue // exact (q·k)^p inside blocks; the sketched cases cover M
		}
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(8, 9))
			n, h := 9, 6
			q, k := randTensor(rng, 1, 1, 1, n, h), randTensor(rng, 1, 1, 1, n, h)
			m := newLearnedMech(t, c, h)
			v := tensor.New(1, 1, n, h)
			v.Fill(1)
			for i, x := range forward(m, q, k, v).Data {
				if !(x >= 0 && x < 1) {
					t.Fatalf("v = 1: o[%d] = %v, want 1 − 1/D in [0, 1)", i, x)
				}
			}
			for j := 0; j < n; j++ {
				v.Zero()
				for d := 0; d < h; d++ {
					v.Data[j*h+d] = 1
				}
				for i, x := range forward(m, q, k, v).Data {
					if x < 0 {
						t.Fatalf("weight of key %d at row %d: w/D = %v < 0", j, i/h, x)
					}
				}
			}
		})
	}
}

// learnedGradients runs Forward and Backward with a fixed output gradient
// and returns o, dq, dk, dv and the parameter gradients (from zero).
func learnedGradients(m *engine, q, k, v *tensor.Tensor) []*tensor.Tensor {
	for _, p := range m.Params() {
		p.Grad.Zero()
	}
	o, dq, dk, dv := gradients(m, q, k, v)
	out := []*tensor.Tensor{o, dq, dk, dv}
	for _, p := range m.Params() {
		out = append(out, p.Grad.Clone())
	}
	return out
}

func requireAllEqual(t *testing.T, m *engine, a, b []*tensor.Tensor) {
	t.Helper()
	names := []string{"o", "dq", "dk", "dv"}
	for _, p := range m.Params() {
		names = append(names, "gradient of "+p.Name)
	}
	for i := range a {
		requireEqual(t, names[i], a[i], b[i])
	}
}

// TestLearnedDeterministic runs shapes with several chunks per group
// (B·H·N = 4200 rows of q and of k: 66 chunks of netChunk rows in
// netGroups groups, the last chunk shorter) at every GOMAXPROCS of
// parallel.TestThreads: outputs and all gradients must be bitwise equal.
func TestLearnedDeterministic(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range learnedCases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(10, 11))
			q, k, v := randTensor(rng, 0.7, 2, 3, 700, 6), randTensor(rng, 0.7, 2, 3, 700, 6), randTensor(rng, 1, 2, 3, 700, 6)
			runtime.GOMAXPROCS(1)
			m1 := newLearnedMech(t, c, 6)
			g1 := learnedGradients(m1, q, k, v)
			for _, procs := range parallel.TestThreads[1:] {
				runtime.GOMAXPROCS(procs)
				m2 := newLearnedMech(t, c, 6)
				g2 := learnedGradients(m2, q, k, v)
				if m2.L.workers < 2 || m2.L.groups != netGroups || m2.L.chunks <= netGroups || 4200%m2.L.chunk == 0 {
					t.Fatalf("layout %+v at GOMAXPROCS=%d: want several workers, %d groups of several chunks, the last shorter", m2.L, procs, netGroups)
				}
				requireAllEqual(t, m1, g1, g2)
			}
		})
	}
}

// TestLearnedRematIdentical: Remat recomputes the same values in the same
// order, so all gradients are bitwise those without it.
func TestLearnedRematIdentical(t *testing.T) {
	for _, c := range learnedCases {
		if c.remat || c.cumsum {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(12, 13))
			q, k, v := randTensor(rng, 0.7, 2, 3, 19, 6), randTensor(rng, 0.7, 2, 3, 19, 6), randTensor(rng, 1, 2, 3, 19, 6)
			c2 := c
			c2.remat = true
			m := newLearnedMech(t, c, 6)
			requireAllEqual(t, m, learnedGradients(m, q, k, v), learnedGradients(newLearnedMech(t, c2, 6), q, k, v))
		})
	}
}

// TestLearnedOverwrites: Backward overwrites dq, dk, dv, whatever they held.
func TestLearnedOverwrites(t *testing.T) {
	for _, c := range learnedCases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(20, 21))
			q, k, v := randTensor(rng, 0.7, 1, 2, 11, 6), randTensor(rng, 0.7, 1, 2, 11, 6), randTensor(rng, 1, 1, 2, 11, 6)
			m := newLearnedMech(t, c, 6)
			_, dq, dk, dv := gradients(m, q, k, v)
			held := []*tensor.Tensor{tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...)}
			for _, x := range held {
				x.Fill(7)
			}
			m.Backward(held[0], held[1], held[2], randTensor(rand.New(rand.NewPCG(9, 9)), 1, q.Shape...))
			requireEqual(t, "dq", dq, held[0])
			requireEqual(t, "dk", dk, held[1])
			requireEqual(t, "dv", dv, held[2])
		})
	}
}

// TestLearnedAccumulates: a second Backward adds the same gradients again.
func TestLearnedAccumulates(t *testing.T) {
	c := learnedCases[0]
	rng := rand.New(rand.NewPCG(14, 15))
	q, k, v := randTensor(rng, 0.7, 1, 2, 11, 6), randTensor(rng, 0.7, 1, 2, 11, 6), randTensor(rng, 1, 1, 2, 11, 6)
	m := newLearnedMech(t, c, 6)
	once := learnedGradients(m, q, k, v)[4:]
	d := []*tensor.Tensor{tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...)}
	m.Backward(d[0], d[1], d[2], randTensor(rand.New(rand.NewPCG(9, 9)), 1, q.Shape...))
	for i, p := range m.Params() {
		for j, x := range p.Grad.Data {
			if want := 2 * once[i].Data[j]; math.Abs(float64(x-want)) > 1e-5*math.Abs(float64(want))+1e-30 {
				t.Fatalf("%s[%d] after two Backwards: %v, want 2 × %v", p.Name, j, x, once[i].Data[j])
			}
		}
	}
}

func TestLearnedParams(t *testing.T) {
	const h, r = 6, 4
	layers := []struct{ name, shape string }{
		{"ln1.gain", "[IN]"}, {"ln1.bias", "[IN]"}, {"l1.weight", "[IN 32]"}, {"l1.bias", "[32]"},
		{"ln2.gain", "[32]"}, {"ln2.bias", "[32]"}, {"l2.weight", "[32 4]"}, {"l2.bias", "[4]"},
		{"l3.weight", "[4 32]"}, {"l3.bias", "[32]"}, {"l4.weight", "[32 4]"}, {"l4.bias", "[4]"},
	}
	for _, tc := range []struct {
		degree int
		inputs []int // input dimension of f1, f2, …
	}{
		{2, nil},
		{4, []int{h, h}},
		{8, []int{h, h, h, h, r, r}},
		{16, []int{h, h, h, h, r, r, h, h, h, h, r, r, r, r}},
	} {
		t.Run(fmt.Sprintf("p%d", tc.degree), func(t *testing.T) {
			o := learnedOptions(psCase{causal: true, local: true, degree: tc.degree, r: r, b: 4})
			m := mustNew(t, Polysketch, o).(*engine)
			if ps := m.Params(); ps != nil {
				t.Fatalf("Params before the head size is known: %d, want none", len(ps))
			}
			m.setHeadSize(h)
			ps := m.Params()
			var want []string
			for f, in := range tc.inputs {
				for _, l := range layers {
					want = append(want, fmt.Sprintf("sketch.f%d.%s %s", f+1, l.name, strings.ReplaceAll(l.shape, "IN", fmt.Sprint(in))))
				}
			}
			if len(ps) != len(want) {
				t.Fatalf("%d parameters, want %d (12 for each of p−2 = %d networks)", len(ps), len(want), len(tc.inputs))
			}
			seen := map[string]bool{}
			for i, p := range ps {
				if got := fmt.Sprintf("%s %v", p.Name, p.Value.Shape); got != want[i] {
					t.Errorf("parameter %d: %s, want %s", i, got, want[i])
				}
				if seen[p.Name] {
					t.Errorf("%s listed twice", p.Name)
				}
				seen[p.Name] = true
				if !slicesEqual(p.Value.Shape, p.Grad.Shape) {
					t.Errorf("%s: gradient %v for value %v", p.Name, p.Grad.Shape, p.Value.Shape)
				}
				if p.Decay != strings.HasSuffix(p.Name, ".weight") {
					t.Errorf("%s: Decay %v", p.Name, p.Decay)
				}
			}
			// The same options give the same values; the first Forward keeps them.
			m2 := mustNew(t, Polysketch, o).(*engine)
			rng := rand.New(rand.NewPCG(1, 1))
			x := randTensor(rng, 1, 1, 1, 5, h)
			forward(m2, x, x, x)
			ps2 := m2.Params()
			for i, p := range ps {
				requireEqual(t, p.Name, p.Value, ps2[i].Value)
			}
			forward(m, x, x, x)
			if len(ps) > 0 && m.Params()[0] != ps[0] {
				t.Error("Forward replaced the parameters setHeadSize created")
			}
			// Another seed, other weights.
			o.Seed++
			m3 := mustNew(t, Polysketch, o).(*engine)
			m3.setHeadSize(h)
			for i, p := range m3.Params() {
				if strings.HasSuffix(p.Name, ".weight") && p.Value.Data[0] == ps[i].Value.Data[0] {
					t.Errorf("%s: seed %d and %d give the same first weight", p.Name, o.Seed-1, o.Seed)
				}
			}
		})
	}
}

func slicesEqual(a, b []int) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func TestLearnedHeadSizeFixed(t *testing.T) {
	m := newLearnedMech(t, learnedCases[0], 6)
	x := tensor.New(1, 1, 5, 8)
	defer func() {
		if recover() == nil {
			t.Error("Forward with head size 8 after setHeadSize(6) did not panic")
		}
	}()
	forward(m, x, x, x)
}

// TestLearnedDegree2 checks that degree 2 learns nothing: M(x) = x as in
// the plain mechanism.
func TestLearnedDegree2(t *testing.T) {
	c := psCase{causal: true, degree: 2, r: 4, b: 4, sketch: Gaussian}
	rng := rand.New(rand.NewPCG(16, 17))
	q, k, v := randTensor(rng, 0.7, 1, 2, 11, 6), randTensor(rng, 0.7, 1, 2, 11, 6), randTensor(rng, 1, 1, 2, 11, 6)
	m := mustNew(t, Polysketch, learnedOptions(c))
	o1, dq1, _, _ := gradients(m, q, k, v)
	o2, dq2, _, _ := gradients(mustNew(t, Polysketch, c.options()), q, k, v)
	requireEqual(t, "o", o1, o2)
	requireEqual(t, "dq", dq1, dq2)
	if ps := m.(Trainable).Params(); len(ps) != 0 {
		t.Errorf("degree 2: %d parameters, want none", len(ps))
	}
}

// TestLearnedDecoder decodes position by position with the learned sketch
// (decode_sketch.go runs sketch.apply on one row per head) and compares with
// Forward; also for a mechanism whose sketch the decoder builds.
func TestLearnedDecoder(t *testing.T) {
	for _, c := range learnedCases {
		if !c.causal {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(18, 19))
			q, k, v := randTensor(rng, 0.7, 2, 3, 13, 6), randTensor(rng, 0.7, 2, 3, 13, 6), randTensor(rng, 1, 2, 3, 13, 6)
			m := newLearnedMech(t, c, 6)
			want := forward(m, q, k, v)
			if d, at := worstPosition(decodeAll(t, m, q, k, v), want); d > 1e-5 {
				t.Errorf("decoder differs from Forward by %.3g (relative) at position %d", d, at)
			}
			fresh := mustNew(t, Polysketch, learnedOptions(c))
			got := decodeAll(t, fresh, q, k, v)
			if d, at := worstPosition(got, forward(mustNew(t, Polysketch, learnedOptions(c)), q, k, v)); d > 1e-5 {
				t.Errorf("fresh decoder differs from Forward by %.3g (relative) at position %d", d, at)
			}
		})
	}
}

func TestLearnedNoSketchMatrices(t *testing.T) {
	m := newLearnedMech(t, learnedCases[0], 6)
	x := tensor.New(1, 1, 5, 6)
	forward(m, x, x, x)
	if mats := m.SketchMatrices(); mats != nil {
		t.Errorf("SketchMatrices of a learned sketch: %d matrices, want nil", len(mats))
	}
}

func TestLearnedNoAllocs(t *testing.T) {
	if psRace {
		t.Skip("the race detector allocates")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, c := range learnedCases {
		t.Run(c.name, func(t *testing.T) {
			checkNoAllocs(t, newLearnedMech(t, c, 6), 70, 6)
		})
	}
}

// TestLearnedWorkspace checks that Workspace reports what Forward holds:
// its buffers, the parameters and their gradients, and the transposes of
// the networks' weights.
func TestLearnedWorkspace(t *testing.T) {
	for _, c := range learnedCases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(14, 15))
			q := randTensor(rng, 0.7, 2, 3, 21, 6)
			m := mustNew(t, Polysketch, learnedOptions(c)).(*engine)
			want := m.Workspace(2, 3, 21, 6)
			forward(m, q, q, q)
			got := int64(cap(m.mem)) * 4
			for _, p := range m.Params() {
				got += int64(p.Value.Len()+p.Grad.Len()) * 4
			}
			for _, nets := range m.sk.net.levels {
				for _, f := range nets {
					for _, t := range f.wT {
						got += int64(cap(t)) * 4
					}
				}
			}
			if got != want {
				t.Errorf("Workspace says %d bytes, Forward holds %d", want, got)
			}
		})
	}
}

// Learned sketches own parameters; with the head size in Setup, New
// makes them, so that an optimizer or a checkpoint can take them before
// training.
func ExampleSetup() {
	cfg := PolysketchConfig{Degree: 4, SketchSize: 32, Block: 256, Local: true, Sketch: Gaussian, Learned: true}
	m, err := New(cfg, Setup{Causal: true, Seed: 1, HeadSize: 64})
	if err != nil {
		panic(err)
	}
	ps := m.(Trainable).Params()
	n := 0
	for _, p := range ps {
		n += p.Value.Len()
	}
	fmt.Println(len(ps), "parameters,", n, "floats")
	for _, p := range ps[:4] {
		fmt.Println(p.Name, p.Value.Shape)
	}
	// Output:
	// 24 parameters, 84352 floats
	// sketch.f1.ln1.gain [64]
	// sketch.f1.ln1.bias [64]
	// sketch.f1.l1.weight [64 256]
	// sketch.f1.l1.bias [256]
}

// learnedFlops counts the matrix-product FLOPs of the learned sketch's
// networks per Forward and Backward over N rows of q and of k: each network
// on in inputs costs 2·(8·in·r + 24r²) per row forward; Backward costs twice
// that (input and weight gradients) plus the recomputed layers: l1 and l3,
// 2·(8·in·r + 8r²), or with Remat the whole forward.
func learnedFlops(o kernelOptions, N, h int) (fwd, bwd float64) {
	r := o.SketchSize
	var perRow, again float64
	nets, in := o.Degree/2, h // level 0: d networks on x; then halving, on r
	for ; nets >= 2; nets, in = nets/2, r {
		perRow += float64(nets) * 2 * float64(8*in*r+24*r*r)
		again += float64(nets) * 2 * float64(8*in*r+8*r*r)
	}
	if o.Remat {
		again = perRow
	}
	fwd = 2 * float64(N) * perRow
	return fwd, 2*fwd + 2*float64(N)*again
}

// BenchmarkPolysketchLearned compares learned and random sketches, both
// with local exact blocks (the paper's settings: degree 4, r = 32,
// b = 256, h = 64), Forward and Forward+Backward in one run; GFLOP/s
// counts the attention's products (psFlops) plus, for learned, the
// networks' (learnedFlops).
func BenchmarkPolysketchLearned(b *testing.B) {
	for _, H := range []int{1, 4} {
		s := psShape{1, H, 4096, 64}
		for _, learned := range []bool{false, true} {
			o := defaultKernelOptions()
			o.Learned = learned
			name := "random"
			fwd, bwd := psFlops(o, s.N, s.h)
			if learned {
				name = "learned"
				lf, lb := learnedFlops(o, s.N, s.h)
				fwd, bwd = fwd+lf, bwd+lb
			}
			fwd, bwd = fwd*float64(s.B*s.H), bwd*float64(s.B*s.H)
			b.Run(fmt.Sprintf("%s/fwd/%v", name, s), func(b *testing.B) {
				benchPass(b, mustNew(b, Polysketch, o), s, false, fwd)
			})
			b.Run(fmt.Sprintf("%s/fwdbwd/%v", name, s), func(b *testing.B) {
				benchPass(b, mustNew(b, Polysketch, o), s, true, fwd+bwd)
			})
		}
	}
}
