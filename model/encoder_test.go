package model

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// encoder returns tiny(spec) as an encoder with the given positions and
// LayerNorm placement.
func encoder(spec, positions string, post bool) Config {
	c := tiny(spec)
	c.Bidirectional, c.Positions, c.PostNorm = true, positions, post
	return c
}

// encoderCases are the encoder variants: the thesis's (post-LayerNorm,
// learned or sinusoidal positions) and pre-LayerNorm with rotary ones.
func encoderCases() []struct {
	name string
	cfg  Config
} {
	return []struct {
		name string
		cfg  Config
	}{
		{"softmax/post/learned", encoder("softmax", PositionsLearned, true)},
		{"softmax/post/sinusoidal", encoder("softmax", PositionsSinusoidal, true)},
		{"polynomial/pre/rope", encoder("polynomial:degree=8", PositionsRoPE, false)},
		{"polysketch/post/learned", encoder("polysketch:learned", PositionsLearned, true)},
	}
}

func TestEncoderGradients(t *testing.T) {
	for _, c := range encoderCases() {
		t.Run(c.name, func(t *testing.T) { checkModelGradients(t, c.cfg) })
	}
}

// TestEncoderSeesEverything: changing the last token changes the logits
// at every position (bidirectional attention), and swapping two tokens
// changes more than their own positions' logits (the model knows
// positions).
func TestEncoderSeesEverything(t *testing.T) {
	const N = 9
	for _, c := range encoderCases() {
		t.Run(c.name, func(t *testing.T) {
			m := mustNew(t, c.cfg)
			perturb(m, 5)
			tokens := randomTokens(rand.New(rand.NewPCG(3, 3)), N, c.cfg.Vocab)
			V := c.cfg.Vocab
			base := m.Forward(tokens, 1, N).Clone()
			changed := append([]int32(nil), tokens...)
			changed[N-1] = (changed[N-1] + 1) % int32(V)
			got := m.Forward(changed, 1, N)
			for n := range N - 1 {
				same := true
				for v := range V {
					same = same && got.Data[n*V+v] == base.Data[n*V+v]
				}
				if same {
					t.Errorf("changing the last token left the logits at position %d as they were", n)
				}
			}
		})
	}
}

func TestEncoderNoDecoder(t *testing.T) {
	m := mustNew(t, encoder("softmax", PositionsLearned, true))
	if _, err := m.NewDecoder(1); err == nil || !strings.Contains(err.Error(), "bidirectional") {
		t.Errorf("NewDecoder of an encoder: error %v, want one saying it is bidirectional", err)
	}
}

func TestEncoderConfig(t *testing.T) {
	jsonRoundTrip(t, encoder("polysketch:learned", PositionsLearned, true))
	for _, tc := range []struct {
		name, want string
		f          func(c *Config)
	}{
		{"post-norm decoder", "post_norm: an option of encoder models", func(c *Config) { c.PostNorm = true }},
		{"sinusoidal decoder", `positions "sinusoidal": an option of encoder models`, func(c *Config) { c.Positions = PositionsSinusoidal }},
		{"unknown positions", `positions "alibi": use rope, rope-only, sinusoidal or learned`, func(c *Config) { c.Bidirectional, c.Positions = true, "alibi" }},
	} {
		c := tiny("softmax")
		tc.f(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
