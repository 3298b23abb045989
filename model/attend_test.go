package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// TestAttentionAlone: AttentionForward on the projections Tap gives
// reproduces the attention output of Forward bit for bit, and
// AttentionBackward's parameter gradients match finite differences.
func TestAttentionAlone(t *testing.T) {
	const B, N = 2, 13
	for _, spec := range []string{"polysketch:learned", "polysketch:learned:raw-qk:scale:local-softmax:mix", "softmax"} {
		t.Run(spec, func(t *testing.T) {
			m := mustNew(t, tiny(spec))
			perturb(m, 4)
			rng := rand.New(rand.NewPCG(1, 2))
			tokens := randomTokens(rng, B*N, m.cfg.Vocab)
			var qkv, o []*tensor.Tensor
			m.Tap = func(i int, x, y *tensor.Tensor) {
				qkv, o = append(qkv, x.Clone()), append(o, y.Clone())
			}
			m.Forward(tokens, B, N)
			m.Tap = nil
			if len(qkv) != m.cfg.Layers {
				t.Fatalf("Tap called %d times for %d layers", len(qkv), m.cfg.Layers)
			}
			for i := range m.cfg.Layers {
				if got := m.AttentionForward(i, qkv[i]); !slices.Equal(got.Data, o[i].Data) {
					t.Fatalf("layer %d: AttentionForward differs from Forward's attention", i)
				}
			}
			// loss(i) = Σ o·w of layer 1.
			const layer = 1
			w := tensor.New(o[layer].Shape...)
			for j := range w.Data {
				w.Data[j] = float32(rng.NormFloat64())
			}
			loss := func() float64 {
				var s float64
				for j, x := range m.AttentionForward(layer, qkv[layer]).Data {
					s += float64(x) * float64(w.Data[j])
				}
				return s
			}
			m.AttentionForward(layer, qkv[layer])
			m.AttentionBackward(layer, w)
			checked := 0
			for _, p := range m.Params() {
				g := p.Grad.Data
				onPath := strings.HasPrefix(p.Name, "layers.1.attn.") && !strings.Contains(p.Name, "qkv") && !strings.Contains(p.Name, ".out.")
				if !onPath {
					if rms(g) != 0 {
						t.Errorf("%s: gradient %.3g, but it is not on the attention path", p.Name, rms(g))
					}
					continue
				}
				checked++
				checkProbeOf(t, p.Name, p.Value.Data, g, loss, rng)
			}
			if spec != "softmax" && checked == 0 {
				t.Error("no parameter on the attention path was checked")
			}
		})
	}
}

// TestDistill: at weight 0 Distill is Loss, and its gradient with weight
// (a model's logits as the teacher) matches finite differences.
func TestDistill(t *testing.T) {
	const B, N, weight = 2, 9, 0.8
	cfg := tiny("polysketch:learned")
	m := mustNew(t, cfg)
	perturb(m, 5)
	teacher := mustNew(t, tiny("softmax"))
	perturb(teacher, 6)
	rng := rand.New(rand.NewPCG(3, 4))
	tokens, targets := randomTokens(rng, B*N, cfg.Vocab), randomTokens(rng, B*N, cfg.Vocab)
	targets[2] = -1
	tl := teacher.Forward(tokens, B, N).Clone()
	ce0 := m.Loss(tokens, targets, B, N)
	ce, kl := m.Distill(tokens, targets, B, N, tl, 0)
	if math.Abs(ce-ce0) > 1e-6*ce0 || !(kl > 0) {
		t.Fatalf("weight 0: cross-entropy %v (Loss %v), KL %v", ce, ce0, kl)
	}
	loss := func() float64 {
		ce, kl := m.Distill(tokens, targets, B, N, tl, weight)
		return ce + weight*kl
	}
	loss()
	m.Backward()
	for _, p := range m.Params() {
		if !strings.Contains(p.Name, "head") && !strings.Contains(p.Name, "layers.0.attn.qkv") {
			continue
		}
		checkProbeOf(t, p.Name, p.Value.Data, p.Grad.Data, loss, rng)
	}
}

// checkProbeOf compares 4 coordinates of the gradient g of loss with
// respect to x with Ridders' derivative.
func checkProbeOf(t *testing.T, name string, x, g []float32, loss func() float64, rng *rand.Rand) {
	t.Helper()
	scale := rms(g)
	for range 4 {
		j := rng.IntN(len(g))
		orig := x[j]
		numeric, errEst := ridders(func(d float64) float64 {
			x[j] = orig + float32(d)
			return loss()
		}, 1.6e-2)
		x[j] = orig
		if math.Abs(float64(g[j])-numeric) > 2e-2*(math.Abs(numeric)+scale)+errEst {
			t.Errorf("%s[%d]: gradient %.6g, finite difference %.6g ± %.2g", name, j, g[j], numeric, errEst)
		}
	}
}
