package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// The student pieces (engine_mixed.go) beyond the conformance rows: with
// parameters away from their initial values, with scores far beyond
// float32's exponential range, and the property that makes a softmax
// student start where its teacher is.

// studentSpecs are the students of these tests, small; a learned sketch
// normalizes its input, so that non-causal attention (no local blocks)
// does not depend on the temperature: those are tested causal only.
var studentSpecs = []struct {
	spec          string
	bidirectional bool
}{
	{"polysketch:block=8:sketch-size=8:local-softmax:mix:scale", true},
	{"polysketch:block=8:sketch-size=8:learned:local-softmax:mix:scale", false},
	{"polysketch:block=8:sketch-size=8:mix:scale", true},
	{"polysketch:block=8:sketch-size=8:learned:local-softmax:scale:remat", false},
}

// newStudent builds spec for heads of size h, with its per-head parameters
// made from Setup.Heads, and sets them to random values.
func newStudent(t *testing.T, spec string, causal bool, h int, seed uint64) *engine {
	t.Helper()
	cfg, err := ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, Setup{Causal: causal, Seed: 7, HeadSize: h, Heads: confH})
	if err != nil {
		t.Fatal(err)
	}
	a := m.(*engine)
	rng := rand.New(rand.NewPCG(seed, 1))
	if a.tune.scale != nil {
		for i := range a.tune.scale.Value.Data {
			a.tune.scale.Value.Data[i] = scaleInit(h) + float32(rng.NormFloat64()*0.3)
		}
	}
	if a.tune.mix != nil {
		for i := range a.tune.mix.Value.Data {
			a.tune.mix.Value.Data[i] = float32(rng.NormFloat64())
		}
	}
	return a
}

// TestStudentParams: New with Setup.Heads makes the per-head parameters
// at once, named, shaped [H], and starting at h^-1/4 and 0.
func TestStudentParams(t *testing.T) {
	cfg, err := ParseSpec("polysketch:sketch-size=8:local-softmax:mix:scale")
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, Setup{Causal: true, HeadSize: 16, Heads: 3})
	if err != nil {
		t.Fatal(err)
	}
	ps := m.(Trainable).Params()
	if len(ps) != 2 || ps[0].Name != "scale" || ps[1].Name != "mix" {
		t.Fatalf("params %v, want scale and mix", ps)
	}
	for _, p := range ps {
		if p.Value.Len() != 3 {
			t.Errorf("%s has %d values, want one per head (3)", p.Name, p.Value.Len())
		}
	}
	if s := ps[0].Value.Data[0]; math.Abs(math.Exp(2*float64(s))-0.25) > 1e-6 {
		t.Errorf("scale starts at %v: e^2s = %v, want 1/√16", s, math.Exp(2*float64(s)))
	}
	if b := ps[1].Value.Data[0]; b != 0 {
		t.Errorf("mix starts at %v, want 0", b)
	}
}

// TestStudentTuned compares the students with random per-head parameters
// with the float64 reference and checks their gradients, causal and not,
// and the decoder against Forward.
func TestStudentTuned(t *testing.T) {
	for _, c := range studentSpecs {
		for _, causal := range []bool{true, false} {
			if !causal && !c.bidirectional {
				continue
			}
			t.Run(name(c.spec, causal), func(t *testing.T) {
				m := newStudent(t, c.spec, causal, confh, 3)
				q, k, v := conformanceInputs(8, confN)
				if d := maxRelDiff(forward(m, q, k, v).Data, f32(refPolysketchOf(m, causal, q, k, v))); !(d < 1e-4) {
					t.Errorf("max |o − reference| / max |reference| = %.3g", d)
				}
				q, k, v = conformanceInputs(9, 13)
				checkGradients(t, m, q, k, v, 1e-2, 3e-2, 6)
				checkParamGradients(t, m, q, k, v, 1e-2, 3e-2, 3)
				if !causal {
					return
				}
				q, k, v = conformanceInputs(10, confN)
				want := forward(m, q, k, v)
				d, err := NewDecoder(m, confB, confH, confh)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range conformanceSchedules {
					d.Reset()
					if diff := maxRelDiff(decodeChunks(t, d, q, k, v, s).Data, want.Data); !(diff < 1e-4) {
						t.Errorf("schedule %v: decoded outputs differ from Forward by %.3g", s, diff)
					}
				}
			})
		}
	}
}

func f32(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

// TestStudentLargeScores runs a softmax student on scores up to about
// ±150, where exp overflows float32 (above 88) and a remote term of weight
// e^β is negligible or not depending on the row: the stabilizer must give
// the float64 reference's outputs, finite gradients and a decoder that
// agrees, for queries whose largest local score is far above β and far
// below it.
func TestStudentLargeScores(t *testing.T) {
	for _, c := range studentSpecs[:2] {
		spec := c.spec
		t.Run(spec, func(t *testing.T) {
			m := newStudent(t, spec, true, confh, 4)
			q, k, v := conformanceInputs(11, confN)
			rng := rand.New(rand.NewPCG(12, 1))
			// Rows of q of very different norms: scores from about ±0.1 to ±150.
			for r := 0; r < len(q.Data); r += confh {
				f := float32(math.Exp(rng.Float64()*7 - 2))
				for d := range confh {
					q.Data[r+d] *= f
				}
			}
			for i := range k.Data {
				k.Data[i] *= 4
			}
			m.tune.mix.Value.Data[0], m.tune.mix.Value.Data[1] = 30, -5
			o := forward(m, q, k, v)
			want := refPolysketchOf(m, true, q, k, v)
			for i, x := range want {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					t.Fatalf("the reference is not finite at %d: inputs too large for the test", i)
				}
			}
			if d := maxRelDiff(o.Data, f32(want)); !(d < 1e-4) {
				t.Errorf("max |o − reference| / max |reference| = %.3g", d)
			}
			dq, dk, dv := tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...)
			m.Backward(dq, dk, dv, v)
			for _, g := range []*tensor.Tensor{dq, dk, dv, m.tune.scale.Grad, m.tune.mix.Grad} {
				if err := g.CheckFinite("gradient"); err != nil {
					t.Fatal(err)
				}
			}
			d, err := NewDecoder(m, confB, confH, confh)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range [][]int{{1}, {9}} {
				d.Reset()
				if diff := maxRelDiff(decodeChunks(t, d, q, k, v, s).Data, o.Data); !(diff < 1e-4) {
					t.Errorf("schedule %v: decoded outputs differ from Forward by %.3g", s, diff)
				}
			}
		})
	}
}

// TestStudentStartsAsSoftmax: a softmax student at its initial
// temperature computes, for every position of the first block, softmax
// attention exactly (to float32 rounding), whatever its sketch.
func TestStudentStartsAsSoftmax(t *testing.T) {
	const b = 8
	q, k, v := conformanceInputs(13, confN)
	for i := range q.Data { // scores of a few units, as a trained layer's
		q.Data[i] *= 3
		k.Data[i] *= 3
	}
	soft, err := New(SoftmaxConfig{}, Setup{Causal: true})
	if err != nil {
		t.Fatal(err)
	}
	want := forward(soft, q, k, v)
	for _, spec := range []string{
		fmt.Sprintf("polysketch:block=%d:sketch-size=8:local-softmax:scale", b),
		fmt.Sprintf("polysketch:block=%d:sketch-size=8:learned:local-softmax:scale:mix", b),
	} {
		cfg, err := ParseSpec(spec)
		if err != nil {
			t.Fatal(err)
		}
		m, err := New(cfg, Setup{Causal: true, Seed: 3, HeadSize: confh, Heads: confH})
		if err != nil {
			t.Fatal(err)
		}
		o := forward(m, q, k, v)
		var worst, later float64
		for hd := range confB * confH {
			for i := range confN {
				for d := range confh {
					at := (hd*confN+i)*confh + d
					diff := math.Abs(float64(o.Data[at] - want.Data[at]))
					if i < b {
						worst = max(worst, diff)
					} else {
						later = max(later, diff)
					}
				}
			}
		}
		if worst > 1e-5 {
			t.Errorf("%s: the first block differs from softmax attention by %.3g", spec, worst)
		}
		if later < 1e-3 { // the test must see the sketch where it is one
			t.Errorf("%s: positions after the first block equal softmax's too (%.3g): the test proves nothing", spec, later)
		}
	}
}

// TestStudentOptionsNeedLocal: local_softmax and mix need the local
// blocks of the block algorithm, and the error says so in the options'
// own names.
func TestStudentOptionsNeedLocal(t *testing.T) {
	for _, spec := range []string{
		"polysketch:local-softmax:local=false",
		"polysketch:mix:local=false",
		"polysketch:local-softmax:cumsum",
	} {
		_, err := ParseSpec(spec)
		if err == nil {
			t.Errorf("%s: accepted", spec)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "need local blocks (local)") {
			t.Errorf("%s: %v", spec, err)
		}
	}
}
