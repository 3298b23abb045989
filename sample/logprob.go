package sample

import (
	"math"

	"github.com/polysketch/polysketch/vec"
)

// lseBlock is how many terms LogSumExp adds in float32 before adding
// their sum in float64.
const lseBlock = 1024

// LogSumExp returns log Σ e^l over logits, the normalizer of
// log-probabilities (a token's is its logit minus it): the vectorized
// float32 exponentials of vec.SumExp below the maximum, their sums over
// blocks added in float64, so that the rounding stays that of a block (a
// few float32 units) however long the vocabulary. logprobs and scoring
// texts under a model share it.
func LogSumExp(logits []float32) float64 {
	top := vec.Max(logits)
	if math.IsInf(float64(top), 0) || top != top {
		return float64(top)
	}
	var sum float64
	for lo := 0; lo < len(logits); lo += lseBlock {
		sum += float64(vec.SumExp(logits[lo:min(lo+lseBlock, len(logits))], top))
	}
	return float64(top) + math.Log(sum)
}
