package serve

import (
	"math"
	"testing"
)

func TestSamplerGreedy(t *testing.T) {
	logits := []float32{0.1, 2, -1, 1.9}
	for _, s := range []*sampler{
		newSampler(0, 1, 0, 1, 0),    // temperature 0
		newSampler(1, 1, 1, 1, 0),    // top-k 1
		newSampler(1, 1e-9, 0, 1, 0), // top-p tiny
	} {
		for range 20 {
			if got := s.sample(logits); got != 1 {
				t.Fatalf("sampler %+v drew %d, want the most likely, 1", s, got)
			}
		}
	}
}

// TestSamplerDistribution draws many tokens and compares their
// frequencies with softmax(logits/T), cut to the top k and top p.
func TestSamplerDistribution(t *testing.T) {
	logits := []float32{1, 0, 2, -1, 0.5}
	for _, tc := range []struct {
		name string
		temp float64
		topK int
		topP float64
		keep []int // the tokens that may be drawn
	}{
		{"all", 1, 0, 1, []int{0, 1, 2, 3, 4}},
		{"hot", 2, 0, 1, []int{0, 1, 2, 3, 4}},
		{"top-k 2", 1, 2, 1, []int{2, 0}},
		// softmax: 2→0.563, 1→0.207, 0.5→0.126: p=0.7 keeps logits 2 and 1.
		{"top-p 0.7", 1, 0, 0.7, []int{2, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := make([]float64, len(logits))
			var sum float64
			for _, id := range tc.keep {
				want[id] = math.Exp(float64(logits[id]) / tc.temp)
				sum += want[id]
			}
			const draws = 20000
			counts := make([]float64, len(logits))
			s := newSampler(tc.temp, tc.topP, tc.topK, 42, 0)
			for range draws {
				counts[s.sample(logits)]++
			}
			for id := range logits {
				p := want[id] / sum
				got := counts[id] / draws
				// Five standard deviations of a frequency over 20,000 draws.
				if tol := 5 * math.Sqrt(p*(1-p)/draws); math.Abs(got-p) > tol || p == 0 && got != 0 {
					t.Errorf("token %d: frequency %.4f, want %.4f ± %.4f", id, got, p, tol)
				}
			}
		})
	}
}

// TestSamplerSeeds: the same seed and stream give the same draws; another
// stream gives others.
func TestSamplerSeeds(t *testing.T) {
	logits := make([]float32, 50)
	draw := func(seed, stream uint64) []int32 {
		s := newSampler(1, 1, 0, seed, stream)
		var out []int32
		for range 30 {
			out = append(out, s.sample(logits))
		}
		return out
	}
	a, b, c := draw(1, 0), draw(1, 0), draw(1, 1)
	same := func(x, y []int32) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(a, b) || same(a, c) {
		t.Errorf("draws %v, %v, %v: want the first two equal and the third different", a, b, c)
	}
}
