package model

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
)

func encoderCases() []Config {
	base := Config{Vocab: 11, Dim: 16, Layers: 2, Heads: 2, Context: 16, Degree: 4, SketchSize: 4, Block: 8, Sketch: attention.Gaussian, Seed: 1}
	var cs []Config
	for _, k := range []struct {
		kind           attention.Kind
		local, learned bool
	}{{attention.Softmax, false, false}, {attention.Polynomial, false, false}, {attention.Polysketch, false, false}, {attention.Polysketch, true, true}} {
		c := base
		c.Attention, c.Local, c.Learned = k.kind, k.local, k.learned
		cs = append(cs, c)
	}
	return cs
}

// TestEncoderGradients checks the encoder's Backward against finite
// differences, for every mechanism's non-causal form.
func TestEncoderGradients(t *testing.T) {
	const B, N = 2, 13
	for _, cfg := range encoderCases() {
		t.Run(string(cfg.Attention), func(t *testing.T) {
			m, err := NewEncoder(cfg)
			if err != nil {
				t.Fatal(err)
			}
			perturb(m, 3)
			rng := rand.New(rand.NewPCG(4, 4))
			tokens := randomTokens(rng, B*N, cfg.Vocab)
			targets := randomTokens(rng, B*N, cfg.Vocab)
			targets[5] = -1
			m.Loss(tokens, targets, B, N)
			m.Backward()
			for _, p := range m.Params() {
				if strings.HasSuffix(p.Name, "qkv.weight") || strings.HasPrefix(p.Name, "layers.0.") && strings.HasSuffix(p.Name, "gain") || strings.Contains(p.Name, "sketch") {
					checkProbe(t, m, probe{label: p.Name, p: p, n: len(p.Value.Data)}, tokens, targets, B, N, rng)
				}
			}
		})
	}
}

// TestEncoderSeesAhead requires the first position's logits to change when
// only the last token does: the encoder is not causal.
func TestEncoderSeesAhead(t *testing.T) {
	const N = 13
	for _, cfg := range encoderCases() {
		m, err := NewEncoder(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(5, 5))
		tokens := randomTokens(rng, N, cfg.Vocab)
		before := m.Forward(tokens, 1, N).Clone()
		tokens[N-1] = (tokens[N-1] + 1) % int32(cfg.Vocab)
		after := m.Forward(tokens, 1, N)
		same := true
		for v := range cfg.Vocab {
			same = same && before.Data[v] == after.Data[v]
		}
		if same {
			t.Errorf("%s: position 0 does not see the last token", cfg.Attention)
		}
		if _, err := m.NewDecoder(1); err == nil {
			t.Errorf("%s: an encoder made a decoder", cfg.Attention)
		}
	}
}
