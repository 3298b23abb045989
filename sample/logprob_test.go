package sample

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestLogSumExpAccuracy compares LogSumExp (float32 exponentials,
// float64 block sums) with a sum computed in float64 throughout, over
// GPT-2's vocabulary and smaller ones, flat and peaked: they agree within
// 2e-6, a few float32 units of the sum.
func TestLogSumExpAccuracy(t *testing.T) {
	const tol = 2e-6
	rng := rand.New(rand.NewPCG(3, 7))
	for _, V := range []int{1, 5, 1000, 50257} {
		for _, scale := range []float64{0.01, 1, 10, 40} {
			logits := make([]float32, V)
			for i := range logits {
				logits[i] = float32(scale*rng.NormFloat64() + 5)
			}
			top := math.Inf(-1)
			for _, l := range logits {
				top = max(top, float64(l))
			}
			var sum float64
			for _, l := range logits {
				sum += math.Exp(float64(l) - top)
			}
			want := top + math.Log(sum)
			if got := LogSumExp(logits); math.Abs(got-want) > tol {
				t.Errorf("V=%d, scale %v: log-sum-exp %.9g, want %.9g (float64), off by %.2g > %g", V, scale, got, want, got-want, tol)
			}
		}
	}
}
