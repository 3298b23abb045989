package attention

import (
	"fmt"
	"math"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// softmaxAttn is textbook attention, softmax(QKᵀ/√h)·V, the reference the
// other mechanisms are tested against. It materializes the N×N weight
// matrix of every head and keeps it for the backward pass, which needs one
// more N×N matrix per thread: memory grows as B·H·N², so it is for tests
// and short sequences; use flash otherwise. Heads run in parallel, each
// with two matrix products forward and four backward.
type softmaxAttn struct {
	causal  bool
	q, k, v *tensor.Tensor
	p       []float32   // [B·H, N, N] weights of the last Forward
	dp      [][]float32 // N×N scratch per worker for dP and dS
	call    softmaxCall

	forwardFn, backwardFn func(w, i int) // bound once: no allocation per call
}

// softmaxCall holds the tensors of the call in progress.
type softmaxCall struct {
	N, h           int
	o              []float32
	dq, dk, dv, do []float32
}

func newSoftmax(o kernelOptions) Mechanism {
	a := &softmaxAttn{causal: o.Causal}
	a.forwardFn, a.backwardFn = a.forwardHead, a.backwardHead
	return a
}

func (a *softmaxAttn) Kind() Kind { return Softmax }

// Workspace counts the saved weights, B·H·N², and one N×N scratch matrix
// per thread of the backward pass.
func (a *softmaxAttn) Workspace(B, H, N, h int) int64 {
	return 4 * int64(N) * int64(N) * int64(B*H+a.workers(B*H))
}

func (a *softmaxAttn) workers(heads int) int {
	return max(min(parallel.Threads(), heads), 1)
}

func (a *softmaxAttn) Forward(o, q, k, v *tensor.Tensor) {
	mustMatch("softmax.Forward", q, k, v, o)
	B, H, N, h := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	a.q, a.k, a.v = q, k, v
	a.p = tensor.Grow(a.p, B*H*N*N)
	a.call = softmaxCall{N: N, h: h, o: o.Data}
	parallel.Run(B*H, a.workers(B*H), a.forwardFn)
	a.call = softmaxCall{}
}

func (a *softmaxAttn) forwardHead(_, bh int) {
	N, h := a.call.N, a.call.h
	head := bh * N * h
	q, k, v := a.q.Data[head:head+N*h], a.k.Data[head:head+N*h], a.v.Data[head:head+N*h]
	p := a.p[bh*N*N : (bh+1)*N*N]
	blas.SgemmSerial(blas.NoTrans, blas.Trans, float32(1/math.Sqrt(float64(h))), blas.NewGeneral(N, h, q), blas.NewGeneral(N, h, k), 0, blas.NewGeneral(N, N, p))
	for i := 0; i < N; i++ {
		row := p[i*N : (i+1)*N]
		n := N
		if a.causal {
			n = i + 1
		}
		vec.Softmax(row[:n])
		clear(row[n:])
	}
	blas.SgemmSerial(blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(N, N, p), blas.NewGeneral(N, h, v), 0, blas.NewGeneral(N, h, a.call.o[head:head+N*h]))
}

func (a *softmaxAttn) Backward(dq, dk, dv, do *tensor.Tensor) {
	if a.q == nil {
		panic("attention.softmax.Backward: called before Forward")
	}
	mustMatch("softmax.Backward", a.q, dq, dk, dv, do)
	B, H, N, h := a.q.Shape[0], a.q.Shape[1], a.q.Shape[2], a.q.Shape[3]
	workers := a.workers(B * H)
	for len(a.dp) < workers {
		a.dp = append(a.dp, nil)
	}
	for w := range a.dp[:workers] {
		a.dp[w] = tensor.Grow(a.dp[w], N*N)
	}
	if len(a.p) != B*H*N*N {
		panic(fmt.Sprintf("attention.softmax.Backward: weights of %d floats for shape %v", len(a.p), a.q.Shape))
	}
	a.call = softmaxCall{N: N, h: h, dq: dq.Data, dk: dk.Data, dv: dv.Data, do: do.Data}
	parallel.Run(B*H, workers, a.backwardFn)
	a.call = softmaxCall{}
}

// backwardHead computes, for one head, dV = Pᵀ·dO, dP = dO·Vᵀ,
// dS = P∘(dP − rowsum(P∘dP)), dQ = dS·K/√h and dK = dSᵀ·Q/√h.
func (a *softmaxAttn) backwardHead(w, bh int) {
	c := &a.call
	N, h := c.N, c.h
	head := bh * N * h
	span := func(x []float32) []float32 { return x[head : head+N*h] }
	q, k, v, do := span(a.q.Data), span(a.k.Data), span(a.v.Data), span(c.do)
	p := a.p[bh*N*N : (bh+1)*N*N]
	ds := a.dp[w]
	scale := float32(1 / math.Sqrt(float64(h)))
	blas.SgemmSerial(blas.Trans, blas.NoTrans, 1, blas.NewGeneral(N, N, p), blas.NewGeneral(N, h, do), 0, blas.NewGeneral(N, h, span(c.dv)))
	blas.SgemmSerial(blas.NoTrans, blas.Trans, 1, blas.NewGeneral(N, h, do), blas.NewGeneral(N, h, v), 0, blas.NewGeneral(N, N, ds))
	for i := 0; i < N; i++ {
		pr, dr := p[i*N:(i+1)*N], ds[i*N:(i+1)*N]
		d := vec.Dot(pr, dr)
		vec.Mul(dr, dr, pr)
		vec.Axpy(-d, pr, dr)
	}
	blas.SgemmSerial(blas.NoTrans, blas.NoTrans, scale, blas.NewGeneral(N, N, ds), blas.NewGeneral(N, h, k), 0, blas.NewGeneral(N, h, span(c.dq)))
	blas.SgemmSerial(blas.Trans, blas.NoTrans, scale, blas.NewGeneral(N, N, ds), blas.NewGeneral(N, h, q), 0, blas.NewGeneral(N, h, span(c.dk)))
}

// SoftmaxConfig configures softmax attention, which has no options.
type SoftmaxConfig struct{}

func (SoftmaxConfig) Mechanism() string { return string(Softmax) }
func (SoftmaxConfig) Validate() error   { return nil }

func init() {
	Register(Entry{
		Name: string(Softmax), Order: 10, Cost: "O(N²·h) time, O(N²) memory",
		Summary:    "softmax(q·k/√h) over the N×N score matrix: the reference, for tests and small N",
		Properties: Properties{ContextLimit: true},
		Default:    func() Config { return SoftmaxConfig{} },
		New:        func(_ Config, s Setup) (Mechanism, error) { return newSoftmax(kernelOptions{Causal: s.Causal}), nil },
	})
}
