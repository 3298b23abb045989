// Package sample draws tokens from a language model's logits: the most
// likely one at temperature 0, else one drawn from softmax(logits/T) cut
// to the top k and then to the smallest set of probability top p
// (nucleus), with the caller's generator, so that the tokens depend on the
// logits and the seed alone. generate and serve share it.
package sample

import (
	"math"
	"math/rand/v2"
	"slices"
)

// Sampler draws tokens; its fields are its settings.
type Sampler struct {
	Temperature float64    // 0 takes the most likely token
	TopK        int        // the k most likely only; 0 for all
	TopP        float64    // the most likely of total probability TopP only; 1 for all
	Rand        *rand.Rand // the source of the draws

	order []int     // token ids, most likely first
	probs []float64 // their weights
}

// New returns a Sampler drawing with rng.
func New(temperature, topP float64, topK int, rng *rand.Rand) *Sampler {
	return &Sampler{Temperature: temperature, TopK: topK, TopP: topP, Rand: rng}
}

// Next returns a token id drawn from logits.
func (s *Sampler) Next(logits []float32) int32 {
	if s.Temperature == 0 {
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
	if s.TopK > 0 && s.TopK < len(s.order) {
		s.order = s.order[:s.TopK]
	}
	top := float64(logits[s.order[0]])
	s.probs = s.probs[:0]
	var sum float64
	for _, id := range s.order {
		p := math.Exp((float64(logits[id]) - top) / s.Temperature)
		s.probs = append(s.probs, p)
		sum += p
	}
	keep, acc := len(s.probs), 0.0
	for i, p := range s.probs {
		acc += p / sum
		if acc >= s.TopP {
			keep = i + 1
			break
		}
	}
	s.order, s.probs = s.order[:keep], s.probs[:keep]
	sum = 0
	for _, p := range s.probs {
		sum += p
	}
	u := s.Rand.Float64() * sum
	for i, p := range s.probs {
		if u < p {
			return int32(s.order[i])
		}
		u -= p
	}
	return int32(s.order[len(s.order)-1])
}
