package model

import (
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/nn"
)

// unit is bfloat16's unit roundoff, 2⁻⁸.
const unit = 1.0 / 256

// TestBF16Forward checks that a bf16 model computes what its fp32 self
// does, to bf16 accuracy, and that its decoders match its own Forward.
// Each product rounds both factors, a relative error of up to 2·unit a
// term; the logits pass through two layers of four products and the head,
// whose errors add: 16·unit bounds their difference from fp32 (relative
// to the largest logit; measured 0.0032 and 0.0044). A decoder runs the same products on the same
// rounded weights; its activations differ from Forward's in the last fp32
// bits, which can move a rounded activation by one bf16 step where it
// lies on the edge between two: unit bounds that.
func TestBF16Forward(t *testing.T) {
	untied := tiny("softmax")
	untied.Tied = false
	cases := []struct {
		name string
		cfg  Config
	}{
		{"polysketch/learned", tiny("polysketch:learned")},
		{"polysketch/learned/remat", tiny("polysketch:learned:remat")},
		{"softmax/untied", untied},
	}
	for _, a := range architectures() {
		cases = append(cases, struct {
			name string
			cfg  Config
		}{a.name, a.cfg})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const B, N = 2, 13
			c := tc.cfg
			m := mustNew(t, c)
			perturb(m, 7)
			tokens := randomTokens(rand.New(rand.NewPCG(5, 5)), B*N, c.Vocab)
			fp32 := m.Forward(tokens, B, N).Clone()
			m.SetPrecision(nn.BF16)
			bf16 := m.Forward(tokens, B, N).Clone()
			d, _ := worst(bf16, fp32)
			t.Logf("bf16 vs fp32 logits: %.3g of the largest", d)
			if d > 16*unit || d == 0 {
				t.Errorf("bf16 logits differ from fp32 by %.3g of the largest, want in (0, %g]", d, 16*unit)
			}
			dec, err := m.NewDecoder(B)
			if err != nil {
				t.Fatal(err)
			}
			got := decodeLogits(t, dec, tokens, B, N, c.Vocab)
			if d, n := worst(got, bf16); d > unit {
				t.Errorf("bf16 decoded logits at position %d differ from bf16 Forward by %.3g of the largest, want ≤ %g", n, d, unit)
			}
			m.SetPrecision(nn.FP32)
			if again := m.Forward(tokens, B, N); !sameBits(again.Data, fp32.Data) {
				t.Error("back in fp32, the logits are not those of before bf16")
			}
		})
	}
}

// TestBF16SketchNetworks checks that a bf16 model's training step runs
// the learned sketch networks in bf16 too where bf16 multiplies faster
// (blas.FasterBF16): switching them alone back to fp32 changes the loss
// and the gradients of the networks' parameters. Elsewhere they stay
// fp32: the same bits either way.
// The bound on the change is loose: bf16 moves some of this tiny, perturbed
// model's network gradients by up to 10% of their largest element (and
// the whole model's gradients by about 1%, see TestBF16Gradients).
func TestBF16SketchNetworks(t *testing.T) {
	const B, N = 2, 40
	c := tiny("polysketch:learned")
	m := mustNew(t, c)
	perturb(m, 7)
	rng := rand.New(rand.NewPCG(8, 8))
	tokens, targets := randomTokens(rng, B*N, c.Vocab), randomTokens(rng, B*N, c.Vocab)
	step := func() (float64, [][]float32) {
		for _, p := range m.Params() {
			p.Grad.Zero()
		}
		loss := m.Loss(tokens, targets, B, N)
		m.Backward()
		var grads [][]float32
		for _, l := range m.layers {
			for _, p := range l.attn.(attention.Trainable).Params() {
				grads = append(grads, append([]float32(nil), p.Grad.Data...))
			}
		}
		return loss, grads
	}
	m.SetPrecision(nn.BF16)
	bf16Loss, bf16Grads := step()
	for _, l := range m.layers {
		l.attn.(attention.Rounder).SetPrecision(nn.FP32) // the networks alone
	}
	fp32Loss, fp32Grads := step()
	if len(bf16Grads) == 0 {
		t.Fatal("the model has no sketch network parameters")
	}
	if !blas.FasterBF16() {
		if bf16Loss != fp32Loss {
			t.Errorf("bf16 kernel %s: loss %v with the sketch networks as a bf16 model runs them, %v in fp32: want them fp32", blas.KernelBF16(), bf16Loss, fp32Loss)
		}
		for i := range bf16Grads {
			if d := relDiff(bf16Grads[i], fp32Grads[i]); d != 0 {
				t.Errorf("bf16 kernel %s: sketch parameter %d: the gradient moves by %.3g with the networks as a bf16 model runs them: want them fp32", blas.KernelBF16(), i, d)
			}
		}
		return
	}
	if bf16Loss == fp32Loss {
		t.Errorf("loss %v with the sketch networks in bf16 and in fp32: they did not run in bf16", bf16Loss)
	}
	for i := range bf16Grads {
		if d := relDiff(bf16Grads[i], fp32Grads[i]); d == 0 || d > 0.25 {
			t.Errorf("sketch parameter %d: bf16 networks move its gradient by %.3g (relative), want in (0, 0.25]", i, d)
		}
	}
}

// TestReleaseFP32 checks that a bf16 model decodes the same bits with
// its float32 dense weights released, and refuses what needs them.
func TestReleaseFP32(t *testing.T) {
	c := tiny("polysketch:learned")
	c.Tied = false
	m := mustNew(t, c)
	perturb(m, 3)
	if err := m.ReleaseFP32(); err == nil {
		t.Error("ReleaseFP32 of an fp32 model succeeded")
	}
	m.SetPrecision(nn.BF16)
	tokens := randomTokens(rand.New(rand.NewPCG(1, 1)), 9, c.Vocab)
	decode := func() []float32 {
		dec, err := m.NewDecoder(1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dec.Prefill(tokens[:5]); err != nil {
			t.Fatal(err)
		}
		var out []float32
		for _, tok := range tokens[5:] {
			logits, err := dec.Step([]int32{tok})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, logits.Data...)
		}
		return out
	}
	before := decode()
	if err := m.ReleaseFP32(); err != nil {
		t.Fatal(err)
	}
	for _, l := range m.linears() {
		if l.Weight.Value.Data != nil || l.BF16.T != nil {
			t.Errorf("%s: float32 values or transposed copy kept", l.Weight.Name)
		}
	}
	if !sameBits(decode(), before) {
		t.Error("decoded logits changed when the float32 weights were released")
	}
	for _, f := range []struct {
		name string
		run  func()
		want string
	}{
		{"Backward", func() { m.Loss(tokens, tokens, 1, len(tokens)); m.Backward() }, "no bf16 copy"},
		{"SetPrecision", func() { m.SetPrecision(nn.FP32) }, "released"},
		{"RoundWeights", func() { m.RoundWeights() }, "released"},
	} {
		func() {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, f.want) {
					t.Errorf("%s after ReleaseFP32: panic %v, want one saying %q", f.name, r, f.want)
				}
			}()
			f.run()
		}()
	}
}

// TestDeterminismBF16 requires a bf16 model's loss and gradients to be
// bitwise identical for every GOMAXPROCS of parallel.TestThreads, on a model large enough
// for the products to split their tiles among goroutines.
func TestDeterminismBF16(t *testing.T) {
	const B, N = 4, 64
	for _, spec := range []string{"polysketch:learned", "flash"} {
		t.Run(spec, func(t *testing.T) {
			c := Config{Vocab: 256, Dim: 64, Layers: 2, Heads: 4, Context: N, Attention: small(spec, 16), Seed: 3}
			rng := rand.New(rand.NewPCG(4, 4))
			tokens, targets := randomTokens(rng, B*N, c.Vocab), randomTokens(rng, B*N, c.Vocab)
			run := func(procs int) (float64, [][]float32) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				m := mustNew(t, c)
				m.SetPrecision(nn.BF16)
				loss := m.Loss(tokens, targets, B, N)
				m.Backward()
				var grads [][]float32
				for _, p := range m.Params() {
					grads = append(grads, p.Grad.Data)
				}
				return loss, grads
			}
			loss1, grads1 := run(1)
			for _, procs := range parallel.TestThreads[1:] {
				loss, grads := run(procs)
				if math.Float64bits(loss) != math.Float64bits(loss1) {
					t.Fatalf("GOMAXPROCS=%d: loss %v, with 1 thread %v", procs, loss, loss1)
				}
				for i := range grads {
					if !sameBits(grads[i], grads1[i]) {
						t.Fatalf("GOMAXPROCS=%d: gradient %d differs from that with 1 thread", procs, i)
					}
				}
			}
		})
	}
}

func sameBits(a, b []float32) bool {
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

// TestBF16Gradients compares a bf16 model's gradients with its fp32
// self's. Each product that makes a gradient rounds both factors (up to
// 2·unit of each term), and a few products lie between the loss and any
// parameter: over all parameters together, ‖g − g*‖/‖g*‖ within 4·unit
// (measured 0.007 and 0.011), and per parameter within 16·unit, for the
// small gradients that nearly cancel (a sketch network's LayerNorm gain,
// whose gradient is 200 times smaller than the embedding's, measured
// 0.045). A bf16 backward product wired wrong (a stale or transposed
// copy) is off by far more.
func TestBF16Gradients(t *testing.T) {
	untied := tiny("polysketch:learned")
	untied.Tied = false
	for _, c := range []Config{tiny("polysketch:learned"), untied} {
		const B, N = 2, 13
		rng := rand.New(rand.NewPCG(6, 6))
		tokens, targets := randomTokens(rng, B*N, c.Vocab), randomTokens(rng, B*N, c.Vocab)
		grads := func(p nn.Precision) [][]float32 {
			m := mustNew(t, c)
			perturb(m, 2)
			m.SetPrecision(p)
			m.Loss(tokens, targets, B, N)
			m.Backward()
			var gs [][]float32
			for _, q := range m.Params() {
				gs = append(gs, q.Grad.Data)
			}
			return gs
		}
		fp32, bf16 := grads(nn.FP32), grads(nn.BF16)
		var dAll, nAll float64
		for i, p := range mustNew(t, c).Params() {
			var d, n float64
			for j := range fp32[i] {
				e := float64(bf16[i][j]) - float64(fp32[i][j])
				d += e * e
				n += float64(fp32[i][j]) * float64(fp32[i][j])
			}
			dAll, nAll = dAll+d, nAll+n
			if r := math.Sqrt(d / n); n > 0 && r > 16*unit {
				t.Errorf("tied %v: gradient of %s differs from fp32 by %.3g, want ≤ %g", c.Tied, p.Name, r, 16*unit)
			}
		}
		if r := math.Sqrt(dAll / nAll); r > 4*unit || r == 0 {
			t.Errorf("tied %v: the gradients differ from fp32 by %.3g, want in (0, %g]", c.Tied, r, 4*unit)
		} else {
			t.Logf("tied %v: the gradients differ from fp32 by %.3g", c.Tied, r)
		}
	}
}
