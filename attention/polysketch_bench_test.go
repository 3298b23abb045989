package attention

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// psFlops counts the useful floating-point operations of one polysketch
// Forward and Backward per batch·head, matrix products only: the sketches
// of q and k, the states φ(K_l)ᵀV_l, the outputs φ(Q_l)·Z_l, the causal
// diagonal blocks (their lower triangles), and in the backward pass the
// products that make gradients. Recomputation (the diagonal block's S in
// Backward, everything Remat recomputes) does not count.
func psFlops(o kernelOptions, N, h int) (fwd, bwd float64) {
	d, r := o.Degree/2, o.SketchSize
	ro := r
	var sk float64 // one sketch of N rows
	if d == 1 {
		ro = h
	} else {
		sk = 2 * float64(N*h*d*r)
		for n := d / 2; n >= 2; n /= 2 {
			sk += 2 * float64(N*r*r*n)
		}
	}
	F := float64(featureDim(ro))
	p := blocks{N, o.Block}
	t := p.count()
	_, first := p.span(0)
	_, last := p.span(t - 1)
	state, out := float64(N), float64(N)
	var pairs float64
	if o.Causal && !o.CumSum {
		state, out = float64(N-last), float64(N-first)
		for l := 0; l < t; l++ {
			_, rows := p.span(l)
			pairs += float64(rows*(rows+1)) / 2
		}
	}
	if o.CumSum {
		out = float64(N)
	}
	m := float64(h) // columns of the diagonal block's S
	if !o.Local {
		m = float64(ro)
	}
	fwd = 2*sk + 2*F*float64(h)*(state+out) + 2*pairs*(m+float64(h))
	bwd = 2*sk + 4*F*float64(h)*(state+out) + 2*pairs*(2*float64(h)+2*m)
	return fwd, bwd
}

// psShape is one benchmark size; µs/token divides by B·N (all heads of a
// token count once).
type psShape struct{ B, H, N, h int }

func (s psShape) String() string { return fmt.Sprintf("B=%d,H=%d,N=%d,h=%d", s.B, s.H, s.N, s.h) }

// benchPass times Forward, or Forward+Backward, of m on random inputs of
// shape s, reporting µs per token, CPU-µs per token (all threads; less
// disturbed by other work on the machine than the wall clock) and, when
// flops is positive, GFLOP/s of wall clock and of CPU time.
func benchPass(b *testing.B, m Mechanism, s psShape, backward bool, flops float64) {
	rng := rand.New(rand.NewPCG(1, 2))
	q, k, v := randTensor(rng, 0.3, s.B, s.H, s.N, s.h), randTensor(rng, 0.3, s.B, s.H, s.N, s.h), randTensor(rng, 1, s.B, s.H, s.N, s.h)
	do := randTensor(rng, 1, s.B, s.H, s.N, s.h)
	o, dq, dk, dv := tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...)
	m.Forward(o, q, k, v) // size the buffers outside the timing
	m.Backward(dq, dk, dv, do)
	cpu := psCPUTime()
	for b.Loop() {
		m.Forward(o, q, k, v)
		if backward {
			m.Backward(dq, dk, dv, do)
		}
	}
	per := b.Elapsed().Seconds() / float64(b.N)
	tokens := float64(s.B * s.N)
	b.ReportMetric(per*1e6/tokens, "µs/token")
	used := (psCPUTime() - cpu).Seconds() / float64(b.N)
	if used > 0 {
		b.ReportMetric(used*1e6/tokens, "cpu-µs/token")
	}
	if flops > 0 {
		b.ReportMetric(flops/per/1e9, "GFLOP/s")
		if used > 0 {
			b.ReportMetric(flops/used/1e9, "GFLOP/cpu-s")
		}
	}
}

// BenchmarkPolysketch measures causal polysketch attention with the
// paper's settings (degree 4, r = 32, b = 256, local exact blocks), one
// head of h = 64, Forward alone and Forward+Backward: µs per token and the
// rate of its useful FLOPs (psFlops). Variants: 4 heads, sketched diagonal
// blocks, Remat, and CumSum (the per-token baseline).
func BenchmarkPolysketch(b *testing.B) {
	base := defaultKernelOptions()
	remat, cum, sketched := base, base, base
	remat.Remat = true
	cum.CumSum, cum.Local = true, false
	sketched.Local = false
	for _, v := range []struct {
		name string
		opts kernelOptions
		H    int
		ns   []int
	}{
		{"local", base, 1, []int{1024, 2048, 4096, 16384, 32768, 65536}},
		{"local", base, 4, []int{4096}},
		{"sketched", sketched, 1, []int{4096}},
		{"remat", remat, 1, []int{4096, 65536}},
		{"cumsum", cum, 1, []int{4096}},
	} {
		for _, N := range v.ns {
			s := psShape{1, v.H, N, 64}
			fwd, bwd := psFlops(v.opts, N, s.h)
			fwd, bwd = fwd*float64(s.B*s.H), bwd*float64(s.B*s.H)
			b.Run(fmt.Sprintf("%s/fwd/%v", v.name, s), func(b *testing.B) {
				benchPass(b, mustNew(b, Polysketch, v.opts), s, false, fwd)
			})
			b.Run(fmt.Sprintf("%s/fwdbwd/%v", v.name, s), func(b *testing.B) {
				benchPass(b, mustNew(b, Polysketch, v.opts), s, true, fwd+bwd)
			})
		}
	}
}

// BenchmarkPolysketchVsFlash runs causal Forward+Backward of polysketch
// (the paper's settings) and of flash attention side by side, one head of
// h = 64, at the context lengths of the project's targets: polysketch
// should win from N = 2048 and by 10× at N = 32768. Compare µs/token (or
// cpu-µs/token on a busy machine) within one run.
func BenchmarkPolysketchVsFlash(b *testing.B) {
	for _, N := range []int{2048, 32768} {
		s := psShape{1, 1, N, 64}
		for _, kind := range []Kind{Polysketch, Flash} {
			b.Run(fmt.Sprintf("%s/%v", kind, s), func(b *testing.B) {
				benchPass(b, mustNew(b, kind, defaultKernelOptions()), s, true, 0)
			})
		}
	}
}
