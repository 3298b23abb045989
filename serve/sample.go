package serve

import (
	"math"
	"math/rand/v2"
	"slices"
)

// sampler draws a request's tokens from logits: divided by the
// temperature (0 takes the most likely token), cut to the top-k most
// likely (0: all), then to the smallest set whose probability reaches
// top-p (1: all), and drawn with the request's own generator, so that its
// tokens depend on its seed alone.
type sampler struct {
	temperature float64
	topK        int
	topP        float64
	rng         *rand.Rand

	order []int     // token ids, most likely first
	probs []float64 // their weights
}

// newSampler returns a sampler drawing from the generator seeded by
// (seed, stream): choice i of a request samples with stream i.
func newSampler(temperature, topP float64, topK int, seed, stream uint64) *sampler {
	return &sampler{temperature: temperature, topK: topK, topP: topP, rng: rand.New(rand.NewPCG(seed, stream))}
}

// sample returns a token id drawn from logits.
func (s *sampler) sample(logits []float32) int32 {
	if s.temperature == 0 {
		best := 0
		for i, l := range logits {
			if l > logits[best] {
				best = i
			}
		}
		return int32(best)
	}
	s.order = s.order[:0]
	for i := range logits {
		s.order = append(s.order, i)
	}
	// Most likely first, ties broken by id: the order, and so the token
	// drawn, depends on the logits alone.
	slices.SortFunc(s.order, func(a, b int) int {
		switch {
		case logits[a] > logits[b]:
			return -1
		case logits[a] < logits[b]:
			return 1
		}
		return a - b
	})
	if s.topK > 0 && s.topK < len(s.order) {
		s.order = s.order[:s.topK]
	}
	top := float64(logits[s.order[0]])
	s.probs = s.probs[:0]
	var sum float64
	for _, id := range s.order {
		p := math.Exp((float64(logits[id]) - top) / s.temperature)
		s.probs = append(s.probs, p)
		sum += p
	}
	keep, acc := len(s.probs), 0.0
	for i, p := range s.probs {
		acc += p / sum
		if acc >= s.topP {
			keep = i + 1
			break
		}
	}
	s.order, s.probs = s.order[:keep], s.probs[:keep]
	sum = 0
	for _, p := range s.probs {
		sum += p
	}
	u := s.rng.Float64() * sum
	for i, p := range s.probs {
		if u < p {
			return int32(s.order[i])
		}
		u -= p
	}
	return int32(s.order[len(s.order)-1])
}
