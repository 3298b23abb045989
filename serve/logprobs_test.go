package serve

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/data/tokenizer"
)

// TestLogprobsAccuracy compares the log-probabilities logprobs report
// with a softmax computed in float64 throughout, over GPT-2's vocabulary
// and smaller ones, flat and peaked: they agree within 2e-6, a few
// float32 units of the sum.
func TestLogprobsAccuracy(t *testing.T) {
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
			tok := int32(rng.IntN(V))
			row := rowPool.get(V)
			copy(row, logits)
			lp := (&tokenLogprobs{logits: row, toks: []int32{tok}, offsets: []int{0}, top: 3, tk: tokenizer.Byte}).compute()
			if got, want := *lp.TokenLogprobs[0], float64(logits[tok])-want; math.Abs(got-want) > tol {
				t.Errorf("V=%d, scale %v: log-probability %.9g, want %.9g", V, scale, got, want)
			}
		}
	}
}
