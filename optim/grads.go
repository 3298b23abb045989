// Package optim trains the parameters of polysketch models: the AdamW
// optimizer with decoupled weight decay, the warm-up-then-linear-decay
// learning-rate schedule, and the gradient utilities of a training step.
//
// One optimizer step over accum micro-batches reads
//
//	optim.ZeroGrad(params)
//	for each micro-batch { forward; backward }  // nn layers accumulate gradients
//	optim.ScaleGrads(params, 1/float32(accum))  // sum of per-batch means → mean
//	norm := optim.ClipGradNorm(params, 1.0)     // skip the step if norm is not finite
//	opt.Update(schedule.LR(opt.Step))
//
// Every reduction sums in a fixed order, so results do not depend on the
// number of threads.
package optim

import (
	"math"

	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/vec"
)

// chunkLen is the number of elements of one parameter handed to a
// goroutine. It is fixed, so partial sums over chunks add up in the same
// order whatever the number of threads.
const chunkLen = 1 << 15

// chunk is the range [lo, hi) of the elements of params[p].
type chunk struct{ p, lo, hi int }

// split cuts every parameter into chunks of at most chunkLen elements, in
// parameter order.
func split(params []*nn.Param) []chunk {
	var cs []chunk
	for i, p := range params {
		n := p.Value.Len()
		for lo := 0; lo < n; lo += chunkLen {
			cs = append(cs, chunk{i, lo, min(lo+chunkLen, n)})
		}
	}
	return cs
}

// ZeroGrad sets every gradient to zero.
func ZeroGrad(params []*nn.Param) {
	for _, p := range params {
		p.Grad.Zero()
	}
}

// ScaleGrads multiplies every gradient by s, for example by 1/accum after
// accumulating the gradients of accum micro-batches, each a mean over its
// own rows, to get the gradient of the mean over all of them.
func ScaleGrads(params []*nn.Param, s float32) {
	cs := split(params)
	parallel.For(len(cs), func(i int) {
		c := cs[i]
		vec.Scale(s, params[c.p].Grad.Data[c.lo:c.hi])
	})
}

// GradNorm returns the L2 norm of all gradients together, accumulated in
// float64 in a fixed order.
func GradNorm(params []*nn.Param) float64 {
	cs := split(params)
	partial := make([]float64, len(cs))
	parallel.For(len(cs), func(i int) {
		c := cs[i]
		partial[i] = vec.SumSquares(params[c.p].Grad.Data[c.lo:c.hi])
	})
	var s float64
	for _, v := range partial {
		s += v
	}
	return math.Sqrt(s)
}

// ClipGradNorm scales all gradients by maxNorm/norm when their global L2
// norm exceeds maxNorm, and returns the norm before clipping. A maxNorm ≤ 0
// only measures. A norm that is NaN or infinite is returned with the
// gradients untouched: the caller should skip that step.
func ClipGradNorm(params []*nn.Param, maxNorm float64) (norm float64) {
	norm = GradNorm(params)
	if maxNorm > 0 && norm > maxNorm && !math.IsInf(norm, 0) {
		ScaleGrads(params, float32(maxNorm/norm))
	}
	return norm
}
