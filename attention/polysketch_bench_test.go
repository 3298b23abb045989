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
func psFlops(o Options, N, h int) (fwd, bwd float64) {
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

// BenchmarkPolysketch measures causal polysketch attention with the
// paper's settings (degree 4, r = 32, b = 256, local exact blocks), one
// head of h = 64, Forward alone and Forward+Backward: µs per token and the
// rate of its useful FLOPs (psFlops). Variants: Remat, CumSum (the
// per-token baseline), and 4 heads.
func BenchmarkPolysketch(b *testing.B) {
	base := DefaultOptions()
	type variant struct {
		name string
		opts Options
		H    int
		ns   []int
	}
	remat, cum, sketched := base, base, base
	remat.Remat = true
	cum.CumSum, cum.Local = true, false
	sketched.Local = false
	for _, v := range []variant{
		{"local", base, 1, []int{1024, 2048, 4096, 16384, 32768, 65536}},
		{"local", base, 4, []int{4096}},
		{"sketched", sketched, 1, []int{4096}},
		{"remat", remat, 1, []int{4096, 65536}},
		{"cumsum", cum, 1, []int{4096}},
	} {
		for _, N := range v.ns {
			s := benchShape{1, v.H, N, 64}
			fwd, bwd := psFlops(v.opts, N, s.h)
			fwd, bwd = fwd*float64(s.B*s.H), bwd*float64(s.B*s.H)
			for _, pass := range []string{"fwd", "fwdbwd"} {
				b.Run(fmt.Sprintf("%s/%s/%v", v.name, pass, s), func(b *testing.B) {
					rng := rand.New(rand.NewPCG(1, 2))
					q, k, vv := randTensor(rng, 0.3, s.B, s.H, s.N, s.h), randTensor(rng, 0.3, s.B, s.H, s.N, s.h), randTensor(rng, 1, s.B, s.H, s.N, s.h)
					do := randTensor(rng, 1, s.B, s.H, s.N, s.h)
					o, dq, dk, dv := tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...)
					m := mustNew(b, Polysketch, v.opts)
					m.Forward(o, q, k, vv)
					m.Backward(dq, dk, dv, do)
					cpu := cpuTime()
					for b.Loop() {
						m.Forward(o, q, k, vv)
						if pass == "fwdbwd" {
							m.Backward(dq, dk, dv, do)
						}
					}
					per := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(per*1e6/float64(s.B*s.N), "µs/token")
					f := fwd
					if pass == "fwdbwd" {
						f += bwd
					}
					b.ReportMetric(f/per/1e9, "GFLOP/s")
					// CPU time, all threads together, is less disturbed by
					// other work on the machine than the wall clock.
					if used := (cpuTime() - cpu).Seconds() / float64(b.N); used > 0 {
						b.ReportMetric(used*1e6/float64(s.B*s.N), "cpu-µs/token")
						b.ReportMetric(f/used/1e9, "GFLOP/cpu-s")
					}
				})
			}
		}
	}
}
