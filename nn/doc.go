// Package nn holds the layers of the polysketch Transformer, each with its
// forward and backward pass side by side: Linear, LayerNorm, Embedding (with
// the tied output projection), the GLU feed-forward block, rotary and
// sinusoidal position embeddings, and softmax cross-entropy.
//
// Conventions shared by every layer:
//
//   - Activations are row-major tensors whose last dimension is the feature
//     dimension; all leading dimensions are rows (rows = batch·tokens), so a
//     [B,N,d] tensor and its [B·N,d] view are treated alike.
//   - Forward(y, x) writes into a caller-provided y of the right shape and
//     caches what Backward needs. Layers that need their input x in
//     Backward keep a reference to it (Linear, GLU, the tied projection of
//     Embedding): do not modify x between Forward and Backward. LayerNorm
//     keeps its own copy of the normalized input and needs no reference.
//   - Backward OVERWRITES input gradients and ACCUMULATES (+=) into
//     parameter gradients, so gradients of several micro-batches sum up; the
//     trainer zeroes parameter gradients once per optimizer step. A nil
//     input gradient means "not needed" and skips that work.
//   - Shape mismatches are programming errors and panic with a message that
//     names the shapes.
//   - Buffers are sized on the first call for a shape and reused, so
//     training steps do not allocate beyond the small bookkeeping of
//     goroutine fan-out.
//   - Work is parallel over rows (or output tiles inside blas.Sgemm),
//     bounded by GOMAXPROCS, and reductions over rows (bias and gain
//     gradients, the loss) sum in a fixed order, so results are bitwise
//     identical whatever the number of threads.
//
// A layer is not safe for concurrent use, with one exception: Linear's
// Apply and ApplyBackward run on matrix views (blas.General) on the calling
// goroutine, keep no state and send gradients to the caller's buffers, so
// that many goroutines may run one layer on their own rows, as attention's
// learned sketches do.
package nn
