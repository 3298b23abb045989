package sample

import (
	"math"
	"math/rand/v2"
	"testing"
)

// draw is s.Next, which must not fail.
func draw(t testing.TB, s *Sampler, logits []float32) int32 {
	t.Helper()
	id, err := s.Next(logits)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestSampleGreedy(t *testing.T) {
	logits := []float32{0.1, 2, -1, 1.9, 2}
	for _, s := range []Sampler{
		{Settings: Settings{Temperature: 0}},                   // greedy
		{Settings: Settings{Temperature: 5, TopK: 1, TopP: 1}}, // one candidate left
		{Settings: Settings{Temperature: 1, TopP: 1e-9}},       // the nucleus of the most likely alone
	} {
		s.Rand = rand.New(rand.NewPCG(1, 2))
		for range 20 {
			if got := draw(t, &s, logits); got != 1 {
				t.Errorf("%+v: sampled %d, want 1, the first of the most likely", s, got)
			}
		}
	}
}

// TestSampleDistribution draws many tokens and compares their frequencies
// with the distribution each setting defines.
func TestSampleDistribution(t *testing.T) {
	p := []float64{0.5, 0.3, 0.15, 0.05}
	logits := make([]float32, len(p))
	for i, v := range p {
		logits[i] = float32(math.Log(v)) + 3 // a shift changes nothing
	}
	tests := []struct {
		name string
		s    Sampler
		want []float64
	}{
		{"plain", Sampler{Settings: Settings{Temperature: 1, TopP: 1}}, p},
		{"top-k 2", Sampler{Settings: Settings{Temperature: 1, TopK: 2, TopP: 1}}, []float64{0.5 / 0.8, 0.3 / 0.8, 0, 0}},
		// 0.5 < 0.7 ≤ 0.5+0.3: the nucleus is the first two.
		{"top-p 0.7", Sampler{Settings: Settings{Temperature: 1, TopP: 0.7}}, []float64{0.5 / 0.8, 0.3 / 0.8, 0, 0}},
		{"top-p 0.9", Sampler{Settings: Settings{Temperature: 1, TopP: 0.9}}, []float64{0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
		{"temperature 2", Sampler{Settings: Settings{Temperature: 2, TopP: 1}}, normalize([]float64{math.Sqrt(0.5), math.Sqrt(0.3), math.Sqrt(0.15), math.Sqrt(0.05)})},
	}
	const draws = 200000
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			s.Rand = rand.New(rand.NewPCG(3, 4))
			counts := make([]float64, len(p))
			for range draws {
				counts[draw(t, &s, logits)]++
			}
			for i := range counts {
				got := counts[i] / draws
				// 5 standard deviations of a frequency, at least.
				tol := 5 * math.Sqrt(tc.want[i]*(1-tc.want[i])/draws)
				if math.Abs(got-tc.want[i]) > tol || (tc.want[i] == 0 && got != 0) {
					t.Errorf("token %d: frequency %.4f, want %.4f", i, got, tc.want[i])
				}
			}
		})
	}
}

func normalize(p []float64) []float64 {
	var s float64
	for _, v := range p {
		s += v
	}
	for i := range p {
		p[i] /= s
	}
	return p
}
