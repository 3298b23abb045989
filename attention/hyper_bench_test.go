package attention

import (
	"math"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// BenchmarkHyper times causal Forward+Backward of HyperAttention (default
// options) beside flash, at B = 1, H = 1, h = 64, in µs per token, and
// reports HyperAttention's error against exact softmax attention (flash's
// output): rel_err = ‖o − o*‖/‖o*‖ and v_err = ‖o − o*‖/‖V‖. The inputs are
// q and k with unit-variance rows scaled by h^(-1/4) times `sharp` (logits
// of standard deviation sharp/√h·… ; sharp = 4 gives weights about as
// peaked as a trained model's) and v ~ N(0, 1).
//
//	go test -run '^$' -bench Hyper -benchtime 1x ./attention
func BenchmarkHyper(b *testing.B) {
	const N, h, sharp = 32768, 64, 4
	q, k, v := hyperInputs(1, 1, 1, N, h)
	for _, x := range []*tensor.Tensor{q, k} {
		for i := range x.Data {
			x.Data[i] *= sharp
		}
	}
	do := v.Clone()
	exact := tensor.New(q.Shape...)
	flash := mustNew(b, Flash, kernelOptions{Causal: true, Block: 256})
	flash.Forward(exact, q, k, v)
	for _, name := range []string{"flash", "hyper", "hyper:sampling=vnorm"} {
		b.Run(name, func(b *testing.B) {
			m := flash
			if name != "flash" {
				m = newHyperTest(b, name, true)
			}
			o, dq, dk, dv := tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...)
			m.Forward(o, q, k, v) // size the buffers outside the timing
			m.Backward(dq, dk, dv, do)
			cpu := cpuTime()
			for b.Loop() {
				m.Forward(o, q, k, v)
				m.Backward(dq, dk, dv, do)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/N, "µs/token")
			reportCPU(b, cpu, N)
			var d, vn float64
			for i := range o.Data {
				e := float64(o.Data[i]) - float64(exact.Data[i])
				d += e * e
				vn += float64(v.Data[i]) * float64(v.Data[i])
			}
			b.ReportMetric(relFrob(o.Data, exact.Data), "rel_err")
			b.ReportMetric(math.Sqrt(d/vn), "v_err")
		})
	}
}
