package attention

import (
	"math"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// refPerformer is Performer attention of one head in float64, from its
// definition, for the random features w ([m × h], as SketchMatrices gives
// them): φ(x) = exp(w·x' − ‖x'‖²/2) with x' = h^(-1/4)·x, unstabilized,
// and the plain ratio.
func refPerformer(w *tensor.Tensor) func(q, k, v [][]float64, causal bool) [][]float64 {
	m, h := w.Shape[0], w.Shape[1]
	phi := func(x []float64) []float64 {
		sc := math.Pow(float64(h), -0.25)
		var half float64
		for _, e := range x {
			half += e * sc * e * sc / 2
		}
		f := make([]float64, m)
		for r := range f {
			var d float64
			for c, e := range x {
				d += float64(w.Data[r*h+c]) * e * sc
			}
			f[r] = math.Exp(d - half)
		}
		return f
	}
	return func(q, k, v [][]float64, causal bool) [][]float64 {
		return refKernel(q, k, v, causal, func(qi, kj []float64) float64 { return dotF64(phi(qi), phi(kj)) })
	}
}

// refPerformerOf is the conformance reference: refPerformer for m's own
// features.
func refPerformerOf(m Mechanism, causal bool, q, k, v *tensor.Tensor) []float64 {
	return perHead(refPerformer(m.(Sketched).SketchMatrices()["w"]))(m, causal, q, k, v)
}

func newPerformer(t testing.TB, spec string, causal bool, h int) Mechanism {
	t.Helper()
	cfg, err := ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, Setup{Causal: causal, Seed: 3, HeadSize: h})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPerformerOptions checks blocks, Remat and CumSum against the
// reference and finite differences, and that Remat's gradients equal the
// blocks' bit for bit.
func TestPerformerOptions(t *testing.T) {
	q, k, v := conformanceInputs(8, 45)
	for _, causal := range []bool{true, false} {
		var want []float64
		var grads []*tensor.Tensor
		for _, spec := range []string{"performer:block=8:features=24", "performer:block=8:features=24:remat", "performer:block=16:features=24:cumsum", "performer:block=64:features=24"} {
			m := newPerformer(t, spec, causal, confh)
			if want == nil {
				want = refPerformerOf(m, causal, q, k, v)
			}
			o := forward(m, q, k, v)
			if d := relMax(o.Data, want); d > 1e-5 {
				t.Errorf("%s causal=%v: max |o − reference| / max |reference| = %.3g", spec, causal, d)
			}
			checkGradients(t, m, q, k, v, 1e-2, 2e-2, 4)
			_, dq, dk, dv := forwardBackward(m, q, k, v, v)
			if spec == "performer:block=8:features=24" {
				grads = []*tensor.Tensor{dq, dk, dv}
			} else if spec == "performer:block=8:features=24:remat" {
				for i, g := range []*tensor.Tensor{dq, dk, dv} {
					if d := maxRelDiff(g.Data, grads[i].Data); d != 0 {
						t.Errorf("causal=%v: Remat's gradient %d differs from the blocks' by %.3g", causal, i, d)
					}
				}
			}
		}
	}
}

func relMax(got []float32, want []float64) float64 {
	var d, s float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-want[i]))
		s = math.Max(s, math.Abs(want[i]))
	}
	if math.IsNaN(d) {
		return math.Inf(1)
	}
	return d / s
}

// TestPerformerLargeLogits: keys and queries far larger than LayerNorm
// leaves them, whose unstabilized features overflow float32, still give
// finite outputs close to the float64 reference, causal and not.
func TestPerformerLargeLogits(t *testing.T) {
	q, k, v := conformanceInputs(9, 40)
	for _, x := range []*tensor.Tensor{q, k} {
		for i := range x.Data {
			x.Data[i] *= 12 // ‖x'‖ ≈ 12: exp(w·x') up to e^±150
		}
	}
	for _, causal := range []bool{true, false} {
		for _, spec := range []string{"performer:block=8:features=32", "performer:block=8:features=32:cumsum"} {
			m := newPerformer(t, spec, causal, confh)
			o := forward(m, q, k, v)
			if d := relMax(o.Data, refPerformerOf(m, causal, q, k, v)); d > 1e-4 {
				t.Errorf("%s causal=%v: max |o − reference| / max |reference| = %.3g", spec, causal, d)
			}
		}
	}
}

// TestPerformerApproximatesSoftmax: the error against exact softmax
// attention falls as the number of features m grows (mean over seeds of
// the relative Frobenius error, non-causal and causal).
func TestPerformerApproximatesSoftmax(t *testing.T) {
	const seeds = 4
	ms := []int{16, 64, 256, 1024}
	if testing.Short() {
		ms = []int{16, 256}
	}
	for _, causal := range []bool{false, true} {
		var first, prev float64
		for i, m := range ms {
			var e float64
			for seed := range seeds {
				q, k, v := conformanceInputs(uint64(20+seed), 64)
				exact := exactAttention(Softmax, causal, 0, q, k, v)
				cfg := PerformerConfig{Features: m, Block: 16}
				mech, err := New(cfg, Setup{Causal: causal, Seed: uint64(100 + seed)})
				if err != nil {
					t.Fatal(err)
				}
				o := forward(mech, q, k, v)
				var num, den float64
				for j := range o.Data {
					d := float64(o.Data[j] - exact.Data[j])
					num += d * d
					den += float64(exact.Data[j]) * float64(exact.Data[j])
				}
				e += math.Sqrt(num/den) / seeds
			}
			t.Logf("causal=%v m=%d: relative error %.4f", causal, m, e)
			if i > 0 && !(e < prev) {
				t.Errorf("causal=%v: error %.4f at m=%d is not below %.4f at m=%d", causal, e, m, prev, ms[i-1])
			}
			if i == 0 {
				first = e
			}
			prev = e
		}
		// Monte Carlo error falls as 1/√m: 16 times the features, a quarter
		// of the error; ask for half.
		if prev > first/2 {
			t.Errorf("causal=%v: error %.4f at m=%d is not half of %.4f at m=%d", causal, prev, ms[len(ms)-1], first, ms[0])
		}
	}
}

// TestPerformerRedraw: SetStep draws new features every Redraw steps,
// the same for the same step whatever came before, and never without
// Redraw.
func TestPerformerRedraw(t *testing.T) {
	w := func(m Mechanism) []float32 { return m.(Sketched).SketchMatrices()["w"].Data }
	a := newPerformer(t, "performer:features=8:redraw=10", true, confh)
	b := newPerformer(t, "performer:features=8:redraw=10", true, confh)
	w0 := append([]float32(nil), w(a)...)
	a.(Stepper).SetStep(9)
	if maxRelDiff(w(a), w0) != 0 {
		t.Error("features changed within the first 10 steps")
	}
	a.(Stepper).SetStep(25)
	if maxRelDiff(w(a), w0) == 0 {
		t.Error("features did not change at step 25")
	}
	b.(Stepper).SetStep(21)
	if maxRelDiff(w(a), w(b)) != 0 {
		t.Error("steps 25 and 21 (both epoch 2) drew different features")
	}
	a.(Stepper).SetStep(3)
	if maxRelDiff(w(a), w0) != 0 {
		t.Error("back at step 3 the features are not the first draw")
	}
	c := newPerformer(t, "performer:features=8", true, confh)
	c.(Stepper).SetStep(1000)
	if maxRelDiff(w(c), w0) != 0 {
		t.Error("features changed without redraw")
	}
}

// TestPerformerOrthogonal: within a block of h rows the features are
// orthogonal, and row lengths vary (chi-distributed, not all √h).
func TestPerformerOrthogonal(t *testing.T) {
	const h, m = 8, 20
	f := newFavor(h, m, 5, 0)
	norm := func(r int) float64 { return math.Sqrt(dotF32(f.w[r*h:(r+1)*h], f.w[r*h:(r+1)*h])) }
	for b := 0; b*h < m; b++ {
		for i := b * h; i < min(m, (b+1)*h); i++ {
			for j := b * h; j < i; j++ {
				if c := dotF32(f.w[i*h:(i+1)*h], f.w[j*h:(j+1)*h]) / (norm(i) * norm(j)); math.Abs(c) > 1e-5 {
					t.Errorf("rows %d and %d: cosine %.3g, want 0", i, j, c)
				}
			}
		}
	}
	if math.Abs(norm(0)-norm(1)) < 1e-6 {
		t.Error("rows 0 and 1 have the same length: not rescaled by independent norms")
	}
}

func dotF32(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

// TestLinearConfigErrors: bad options of ELU and Performer are refused
// before any work, with a message naming the flag and the fix.
func TestLinearConfigErrors(t *testing.T) {
	for _, c := range []struct {
		spec, want string
	}{
		{"performer:features=0", "features 0: must be positive"},
		{"performer:features=-3", "features -3: must be positive"},
		{"performer:redraw=-1", "redraw -1: must be 0 (never) or a positive number of steps"},
		{"performer:block=0", "block 0: must be positive"},
		{"elu:block=-2", "block -2: must be positive"},
		{"elu:features=8", "features is no option of elu attention: its options are block, cumsum, remat"},
		{"performer:features=many", "performer option features=many"},
	} {
		_, err := ParseSpec(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseSpec(%q) = %v, want an error containing %q", c.spec, err, c.want)
		}
	}
	if _, err := New(PerformerConfig{Features: 0, Block: 0}, Setup{}); err == nil || !strings.Contains(err.Error(), "features") || !strings.Contains(err.Error(), "block") {
		t.Errorf("New with two bad options: %v, want both named", err)
	}
}

// TestPerformerCausalStabilizer: later keys far larger than earlier ones
// (their log-scales dominate, so a maximum over the whole sequence would
// underflow the earlier keys' weights) leave the outputs before them bit
// for bit unchanged, for cuts inside and at the ends of blocks, in every
// algorithm, and in the decoder.
func TestPerformerCausalStabilizer(t *testing.T) {
	const N = 45
	q, k, v := conformanceInputs(10, N)
	for _, spec := range []string{"performer:block=8:features=16", "performer:block=8:features=16:remat", "performer:block=8:features=16:cumsum"} {
		m := newPerformer(t, spec, true, confh)
		base := forward(m, q, k, v)
		for _, cut := range []int{3, 7, 8, 20, 43} {
			k2 := k.Clone()
			for b := 0; b < confB*confH; b++ {
				for i := cut + 1; i < N; i++ {
					for d := 0; d < confh; d++ {
						k2.Data[(b*N+i)*confh+d] *= 25
					}
				}
			}
			o := forward(m, q, k2, v)
			for b := 0; b < confB*confH; b++ {
				for i := 0; i <= cut; i++ {
					for d := 0; d < confh; d++ {
						at := (b*N+i)*confh + d
						if o.Data[at] != base.Data[at] {
							t.Fatalf("%s: output at %d changed when keys after %d grew: %v → %v", spec, i, cut, base.Data[at], o.Data[at])
						}
					}
				}
			}
			if d := relMax(o.Data, refPerformerOf(m, true, q, k2, v)); d > 1e-4 {
				t.Errorf("%s, keys after %d ×25: max |o − reference| / max |reference| = %.3g", spec, cut, d)
			}
		}
	}
}
