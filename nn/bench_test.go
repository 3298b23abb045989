package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// Training sizes: 4096 rows (batch·tokens) of width 256.
const benchRows, benchDim = 4096, 256

// benchPass times one forward and backward pass; flops counts both (0 if
// not meaningful) and is reported as GFLOPS.
func benchPass(b *testing.B, flops float64, forward, backward func()) {
	forward()
	backward()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		forward()
		backward()
	}
	if flops > 0 {
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
	}
}

func BenchmarkLinear(b *testing.B) {
	for _, out := range []int{benchDim, 4 * benchDim} {
		b.Run(fmt.Sprintf("%dx%dx%d", benchRows, benchDim, out), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 1))
			l := NewLinear("lin", benchDim, out, true, rng)
			x := randTensor(rng, 1, benchRows, benchDim)
			y, dy, dx := tensor.New(benchRows, out), randTensor(rng, 1, benchRows, out), tensor.New(benchRows, benchDim)
			flops := 3 * 2 * float64(benchRows*benchDim*out) // y, dx, dW
			benchPass(b, flops, func() { l.Forward(y, x) }, func() { l.Backward(dx, dy) })
		})
	}
}

func BenchmarkGLU(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	g := NewGLU("ffn", benchDim, 0, false, rng)
	x := randTensor(rng, 1, benchRows, benchDim)
	y, dy, dx := tensor.New(benchRows, benchDim), randTensor(rng, 1, benchRows, benchDim), tensor.New(benchRows, benchDim)
	flops := 3 * 2 * float64(benchRows*benchDim*3*g.Hidden) // three [d, Hidden] matrices, three products each
	benchPass(b, flops, func() { g.Forward(y, x) }, func() { g.Backward(dx, dy) })
}

func BenchmarkLayerNorm(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 3))
	l := NewLayerNorm("ln", benchDim, GainBias)
	x := lnInput(rng, benchRows, benchDim)
	y, dy, dx := tensor.New(benchRows, benchDim), randTensor(rng, 1, benchRows, benchDim), tensor.New(benchRows, benchDim)
	b.SetBytes(4 * 5 * benchRows * benchDim) // x, y, dy, dx, x̂ at least once
	benchPass(b, 0, func() { l.Forward(y, x) }, func() { l.Backward(dx, dy) })
}

// BenchmarkLayerNormHeads times the LayerNorm of q heads as the model
// runs it (qk-norm): rows of 64 read where they lie in the rows of a q/k/v
// projection (8 sequences of 1,024 tokens, 4 heads, 768 columns: rows 3 KB
// apart, which no hardware prefetcher follows), forward and backward, in
// the heads' order (apart) and, for comparison, over contiguous rows.
func BenchmarkLayerNormHeads(b *testing.B) {
	const B, H, N, h, stride = 8, 4, 1024, 64, 768
	rng := rand.New(rand.NewPCG(1, 4))
	qkv := randTensor(rng, 1, B*N, stride)
	l := NewLayerNorm("qn", h, GainBias)
	y, dy := tensor.New(B, H, N, h), randTensor(rng, 1, B, H, N, h)
	dqkv := tensor.New(B*N, stride)
	head := func(m *tensor.Tensor) func(r int) []float32 {
		return func(r int) []float32 {
			bi, n := r/N, r%N
			at := (bi/H*N+n)*stride + bi%H*h
			return m.Data[at : at+h]
		}
	}
	contiguous := &tensor.Tensor{Shape: []int{B * H * N, h}, Data: qkv.Data[:B*H*N*h]}
	dx := tensor.New(B*H*N, h)
	b.Run("apart", func(b *testing.B) {
		benchPass(b, 0, func() { l.ForwardRows(y, head(qkv)) }, func() { l.BackwardRows(head(dqkv), dy) })
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*B*H*N), "ns/row")
	})
	b.Run("contiguous", func(b *testing.B) {
		benchPass(b, 0, func() { l.Forward(y, contiguous) }, func() { l.Backward(dx, dy) })
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*B*H*N), "ns/row")
	})
}

// BenchmarkCrossEntropy times the fused loss and gradient, written over the
// logits as a training step would.
func BenchmarkCrossEntropy(b *testing.B) {
	for _, V := range []int{256, 50257} {
		b.Run(fmt.Sprintf("V=%d", V), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 4))
			logits := randTensor(rng, 1, benchRows, V)
			targets := ids(rng, benchRows, V)
			var ce CrossEntropy
			b.SetBytes(int64(4 * benchRows * V))
			benchPass(b, 0, func() { ce.Loss(logits, logits, targets) }, func() {})
		})
	}
}
