package sample

import "math"

// The logit bias and the repetition penalties of the OpenAI API, which
// change the logits before any drawing:
//
//	l[j] + bias[j] − count[j]·frequency − (count[j] > 0)·presence
//
// where count[j] is how many times token j was drawn by this Sampler.
// A bias of -100 bans the token. Both touch the few tokens listed or
// drawn: a copy of the logits, then a pass over those.

// adjust returns logits changed by the bias and penalties: a copy in s's
// buffer if any applies, logits itself otherwise.
func (s *Sampler) adjust(logits []float32) []float32 {
	penalize := (s.PresencePenalty != 0 || s.FrequencyPenalty != 0) && len(s.counts) > 0
	if len(s.LogitBias) == 0 && !penalize {
		return logits
	}
	s.adjusted = append(s.adjusted[:0], logits...)
	if penalize {
		for id, n := range s.counts {
			s.adjusted[id] -= float32(float64(n)*s.FrequencyPenalty + s.PresencePenalty)
		}
	}
	for id, b := range s.LogitBias {
		if b == -MaxBias {
			s.adjusted[id] = float32(math.Inf(-1))
		} else {
			s.adjusted[id] += float32(b)
		}
	}
	return s.adjusted
}

// drawn counts token id as drawn, for the penalties.
func (s *Sampler) drawn(id int32) {
	if s.PresencePenalty == 0 && s.FrequencyPenalty == 0 {
		return
	}
	if s.counts == nil {
		s.counts = make(map[int32]int)
	}
	s.counts[id]++
}
