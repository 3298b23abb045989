package optim

import (
	"fmt"
	"math"
)

// Schedule is the learning-rate schedule of the PolySketchFormer
// experiments: a linear warm-up to Peak over the first Warmup steps, then a
// linear decay to Min at step Total, and Min after that. For the update
// taken after step updates (AdamW.Step):
//
//	LR(step) = Peak·(step+1)/Warmup                                  step < Warmup
//	LR(step) = Peak + (Min−Peak)·(step−Warmup)/(Total−Warmup)        Warmup ≤ step ≤ Total
//	LR(step) = Min                                                   step > Total
//
// The warm-up counts from step+1 so that the first update is not wasted at
// learning rate zero. The paper uses Peak 7e-4 (Transformer++ recipe),
// Warmup 10k, Total 125k and decays to zero.
//
// With Cosine set, the decay follows half a cosine instead of a line, as
// in GPT-3's and Chinchilla's recipes: it stays near Peak longer and
// flattens out as it nears Min.
//
//	LR(step) = Min + (Peak−Min)·(1 + cos(π·(step−Warmup)/(Total−Warmup)))/2
type Schedule struct {
	Peak, Min     float64
	Warmup, Total int
	Cosine        bool
}

// Validate reports a schedule that makes no sense.
func (s Schedule) Validate() error {
	switch {
	case !(s.Peak > 0):
		return fmt.Errorf("schedule: peak learning rate %v must be positive", s.Peak)
	case !(s.Min >= 0 && s.Min <= s.Peak):
		return fmt.Errorf("schedule: final learning rate %v outside [0, peak %v]", s.Min, s.Peak)
	case s.Warmup < 0:
		return fmt.Errorf("schedule: negative warm-up %d", s.Warmup)
	case s.Total < s.Warmup:
		return fmt.Errorf("schedule: total steps %d fewer than warm-up steps %d", s.Total, s.Warmup)
	}
	return nil
}

// LR returns the learning rate of the update taken after step updates.
func (s Schedule) LR(step int) float64 {
	switch {
	case step < s.Warmup:
		return s.Peak * float64(step+1) / float64(s.Warmup)
	case step >= s.Total:
		return s.Min
	case s.Cosine:
		return s.Min + (s.Peak-s.Min)*(1+math.Cos(math.Pi*float64(step-s.Warmup)/float64(s.Total-s.Warmup)))/2
	default:
		return s.Peak + (s.Min-s.Peak)*float64(step-s.Warmup)/float64(s.Total-s.Warmup)
	}
}
