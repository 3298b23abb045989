package attention

import (
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// BenchmarkSquarePoly times sqpoly beside polynomial attention, the same
// tiled driver with a cheaper weighting, forward and forward+backward (the
// coefficients' gradient included), h = 64, causal.
func BenchmarkSquarePoly(b *testing.B) {
	for _, spec := range []string{"polynomial:degree=4", "sqpoly:degree=3", "sqpoly:degree=6"} {
		for _, N := range []int{1024, 4096} {
			rng := rand.New(rand.NewPCG(1, 2))
			q, k, v := randTensor(rng, 1, 1, 1, N, 64), randTensor(rng, 1, 1, 1, N, 64), randTensor(rng, 1, 1, 1, N, 64)
			normalizeRows(q, 1)
			normalizeRows(k, 1)
			o, dq, dk, dv := tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...)
			m := newSquarePoly(b, spec, true, 1)
			for _, pass := range []string{"fwd", "fwdbwd"} {
				b.Run(pass+"/"+spec+"/"+benchShape{1, 1, N, 64}.String(), func(b *testing.B) {
					m.Forward(o, q, k, v)
					m.Backward(dq, dk, dv, v)
					for b.Loop() {
						m.Forward(o, q, k, v)
						if pass == "fwdbwd" {
							m.Backward(dq, dk, dv, v)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*N), "µs/token")
				})
			}
		}
	}
}
