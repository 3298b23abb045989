package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
)

// size is the scale of a test case: rows of activations and feature size.
type size struct{ rows, dim int }

var (
	// small cases keep finite differences fast.
	small = size{rows: 6, dim: 8}
	// large cases are big enough that rows are split among goroutines and
	// reductions span several row blocks.
	large = size{rows: 320, dim: 128}
)

// gradCase is one layer set up for the generic checks: forward computes out
// from inputs and params; backward takes dy for out, overwrites dinputs and
// accumulates into the params' gradients.
type gradCase struct {
	params   []*Param
	inputs   []*tensor.Tensor
	dinputs  []*tensor.Tensor
	out      *tensor.Tensor
	forward  func()
	backward func(dy *tensor.Tensor)
	bf16     bool // products in bf16: finite differences with bf16FD
}

// fd returns the step and tolerance of c's finite-difference check.
func (c *gradCase) fd() (eps, tol float64) {
	if c.bf16 {
		return bf16Eps, bf16Tol
	}
	return 1e-2, 1e-2
}

// layerCases lists every layer configuration the generic tests cover.
var layerCases = []struct {
	name  string
	build func(rng *rand.Rand, s size) *gradCase
}{
	{"Linear", func(rng *rand.Rand, s size) *gradCase { return linearCase(rng, s, true, FP32) }},
	{"Linear/nobias", func(rng *rand.Rand, s size) *gradCase { return linearCase(rng, s, false, FP32) }},
	{"Linear/bf16", func(rng *rand.Rand, s size) *gradCase { return linearCase(rng, s, true, BF16) }},
	{"LayerNorm", func(rng *rand.Rand, s size) *gradCase { return layerNormCase(rng, s, GainBias) }},
	{"LayerNorm/gain", func(rng *rand.Rand, s size) *gradCase { return layerNormCase(rng, s, GainOnly) }},
	{"LayerNorm/plain", func(rng *rand.Rand, s size) *gradCase { return layerNormCase(rng, s, NoAffine) }},
	{"LayerNorm/shared", sharedLayerNormCase},
	{"RMSNorm", rmsNormCase},
	{"Embedding", embeddingCase},
	{"Embedding/tied", tiedCase},
	{"Embedding/tied/bf16", func(rng *rand.Rand, s size) *gradCase { return tiedCaseAt(rng, s, BF16) }},
	{"GLU", func(rng *rand.Rand, s size) *gradCase { return gluCase(rng, s, false) }},
	{"GLU/bias", func(rng *rand.Rand, s size) *gradCase { return gluCase(rng, s, true) }},
	{"GLU/SiLU", func(rng *rand.Rand, s size) *gradCase { return gluCaseAct(rng, s, false, SiLU) }},
	{"MLP/GELU", func(rng *rand.Rand, s size) *gradCase { return mlpCase(rng, s, true, GELU) }},
	{"MLP/SiLU/nobias", func(rng *rand.Rand, s size) *gradCase { return mlpCase(rng, s, false, SiLU) }},
	{"RoPE", ropeCase},
	{"Sinusoidal", sinusoidalCase},
	{"CrossEntropy", crossEntropyCase},
	{"CrossEntropy/distill", distillCase},
}

// randTensor returns a tensor of N(0, scale²) entries.
func randTensor(rng *rand.Rand, scale float64, shape ...int) *tensor.Tensor {
	t := tensor.New(shape...)
	for i := range t.Data {
		t.Data[i] = float32(rng.NormFloat64() * scale)
	}
	return t
}

// randomize gives parameters random values, so that gains and biases that
// start at one or zero do not hide mistakes.
func randomize(rng *rand.Rand, ps []*Param) {
	for _, p := range ps {
		p.InitNormal(rng, 0.5)
	}
}

// loss runs forward and returns Σ out⊙w, accumulated in float64.
func (c *gradCase) loss(w *tensor.Tensor) float64 {
	c.forward()
	var s float64
	for i, v := range c.out.Data {
		s += float64(v) * float64(w.Data[i])
	}
	return s
}

// gradients runs forward and backward for dy = w, starting from zero
// parameter gradients and NaN-filled input gradients, and returns copies of
// the input gradients followed by the parameter gradients.
func (c *gradCase) gradients(w *tensor.Tensor) [][]float32 {
	for _, p := range c.params {
		p.Grad.Zero()
	}
	for _, d := range c.dinputs {
		d.Fill(float32(math.NaN()))
	}
	c.forward()
	c.backward(w)
	var gs [][]float32
	for _, d := range c.dinputs {
		gs = append(gs, append([]float32(nil), d.Data...))
	}
	for _, p := range c.params {
		gs = append(gs, append([]float32(nil), p.Grad.Data...))
	}
	return gs
}

// fdErrors compares grads (as returned by gradients) with central
// differences of the loss Σ out⊙w, at up to probes random coordinates of
// every input and parameter. It reports coordinates where
// |analytic − numeric| > tol·(|numeric| + rms), rms being the RMS of that
// tensor's analytic gradient (so small entries are judged absolutely).
func fdErrors(c *gradCase, w *tensor.Tensor, grads [][]float32, rng *rand.Rand, probes int, eps, tol float64) []string {
	type target struct {
		name string
		x    []float32
	}
	var targets []target
	for i, in := range c.inputs {
		targets = append(targets, target{fmt.Sprintf("input %d", i), in.Data})
	}
	for _, p := range c.params {
		targets = append(targets, target{p.Name, p.Value.Data})
	}
	var errs []string
	for k, tg := range targets {
		g := grads[k]
		scale := max(rms(g), 1e-3)
		idx := rng.Perm(len(tg.x))
		if len(idx) > probes {
			idx = idx[:probes]
		}
		for _, i := range idx {
			orig := tg.x[i]
			up, down := orig+float32(eps), orig-float32(eps)
			tg.x[i] = up
			lp := c.loss(w)
			tg.x[i] = down
			lm := c.loss(w)
			tg.x[i] = orig
			numeric := (lp - lm) / (float64(up) - float64(down))
			analytic := float64(g[i])
			if math.Abs(analytic-numeric) > tol*(math.Abs(numeric)+scale) || math.IsNaN(analytic) {
				errs = append(errs, fmt.Sprintf("d %s[%d] = %.6g, finite difference %.6g (gradient RMS %.3g)", tg.name, i, analytic, numeric, scale))
			}
		}
	}
	return errs
}

func rms(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s / float64(max(len(x), 1)))
}

func TestGradients(t *testing.T) {
	for _, tc := range layerCases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			c := tc.build(rng, small)
			w := randTensor(rng, 1, c.out.Shape...)
			grads := c.gradients(w)
			eps, tol := c.fd()
			for _, e := range fdErrors(c, w, grads, rng, 24, eps, tol) {
				t.Error(e)
			}
		})
	}
}

// TestGradientCheckCatchesErrors makes sure the checker above can fail: a
// gradient that is off by 5% in one tensor must be reported.
func TestGradientCheckCatchesErrors(t *testing.T) {
	for _, tc := range layerCases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			c := tc.build(rng, small)
			w := randTensor(rng, 1, c.out.Shape...)
			grads := c.gradients(w)
			for k := range grads {
				bad := append([][]float32(nil), grads...)
				bad[k] = append([]float32(nil), grads[k]...)
				for i := range bad[k] {
					bad[k][i] = bad[k][i]*1.05 + 0.05*float32(max(rms(grads[k]), 1e-3))
				}
				if eps, tol := c.fd(); len(fdErrors(c, w, bad, rng, 24, eps, tol)) == 0 {
					t.Errorf("gradient %d scaled by 1.05: not detected", k)
				}
			}
		})
	}
}

// TestGradientConventions checks that Backward overwrites input gradients
// (NaN-filled beforehand) and accumulates parameter gradients: a second
// forward and backward without zeroing doubles them.
func TestGradientConventions(t *testing.T) {
	for _, tc := range layerCases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			c := tc.build(rng, small)
			w := randTensor(rng, 1, c.out.Shape...)
			first := c.gradients(w)
			for k, d := range c.dinputs {
				for i, v := range d.Data {
					if math.IsNaN(float64(v)) {
						t.Fatalf("input %d gradient [%d] still NaN: not overwritten", k, i)
					}
				}
			}
			for _, d := range c.dinputs {
				d.Fill(7) // must not leak into the result
			}
			c.forward()
			c.backward(w)
			for k, d := range c.dinputs {
				for i, v := range d.Data {
					if v != first[k][i] {
						t.Fatalf("input %d gradient [%d] = %g after a second Backward, want %g", k, i, v, first[k][i])
					}
				}
			}
			for j, p := range c.params {
				g1 := first[len(c.dinputs)+j]
				for i, v := range p.Grad.Data {
					want := 2 * g1[i]
					if math.Abs(float64(v-want)) > 1e-5*(math.Abs(float64(want))+1) {
						t.Fatalf("%s gradient [%d] = %g after two Backwards, want %g (accumulated)", p.Name, i, v, want)
					}
				}
			}
		})
	}
}

// runAt builds a large case and returns its output and gradients for one
// forward and backward at the given GOMAXPROCS.
func runAt(procs int, build func(*rand.Rand, size) *gradCase) (out []float32, grads [][]float32) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	rng := rand.New(rand.NewPCG(5, 6))
	c := build(rng, large)
	w := randTensor(rng, 1, c.out.Shape...)
	grads = c.gradients(w)
	return append([]float32(nil), c.out.Data...), grads
}

func TestDeterministicAcrossThreads(t *testing.T) {
	for _, tc := range layerCases {
		t.Run(tc.name, func(t *testing.T) {
			out1, g1 := runAt(1, tc.build)
			for _, procs := range parallel.TestThreads[1:] {
				out2, g2 := runAt(procs, tc.build)
				if !bitwiseEqual(out1, out2) {
					t.Errorf("forward output differs between GOMAXPROCS=1 and %d", procs)
				}
				for k := range g1 {
					if !bitwiseEqual(g1[k], g2[k]) {
						t.Errorf("gradient %d differs between GOMAXPROCS=1 and %d", k, procs)
					}
				}
			}
		})
	}
}

func bitwiseEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestSteadyStateAllocation checks that once buffers are sized, a forward
// and backward pass allocates at most a little bookkeeping, far less than
// any activation buffer of these cases. It runs on one thread: with more,
// blas.Sgemm's sync.Pool of packing buffers may allocate now and then (a
// buffer parked in another P's private slot cannot be taken), which says
// nothing about these layers.
func TestSteadyStateAllocation(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, tc := range layerCases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 8))
			c := tc.build(rng, large)
			w := randTensor(rng, 1, c.out.Shape...)
			// A collection would empty the sync.Pool that blas keeps its
			// packing buffers in; keep it out of the measurement.
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			for range 3 {
				c.forward()
				c.backward(w)
			}
			const runs = 3
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range runs {
				c.forward()
				c.backward(w)
			}
			runtime.ReadMemStats(&after)
			if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 8<<10 {
				t.Errorf("%d bytes allocated per forward+backward, want ≤ 8 KiB", per)
			}
		})
	}
}
