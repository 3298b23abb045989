package attention

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
)

// BenchmarkBF16Inputs measures what bf16 inputs would cost each
// mechanism in accuracy: it runs causal Forward and Backward once on q,
// k, v and the output gradient as float32, and once with all four rounded
// to bf16 (what a bf16 product would read), and reports the relative
// error ‖x − x*‖/‖x*‖ of the output and of the three input gradients.
// in_err is that of the rounding itself (q's), the scale to compare with:
// a mechanism that only passes the rounding on reports errors near it.
// The inputs are unit-variance rows, as the model's q/k LayerNorm makes
// them, v and the output gradient N(0, 1); N = 1024, h = 64, one head.
// For a mechanism with dense layers of its own (a Rounder: learned
// sketches), a second case keeps the inputs float32 and runs those
// layers' products in bf16, as the model's bf16 precision does.
//
//	go test -run '^$' -bench BF16Inputs -benchtime 1x ./attention
func BenchmarkBF16Inputs(b *testing.B) {
	const N, h = 1024, 64
	rng := rand.New(rand.NewPCG(3, 16))
	var in [4]*tensor.Tensor // q, k, v, do
	for i := range in {
		in[i] = randTensor(rng, 1, 1, 1, N, h)
	}
	var rounded [4]*tensor.Tensor
	buf := make([]blas.BF16, N*h)
	for i, x := range in {
		rounded[i] = x.Clone()
		blas.ToBF16(buf, x.Data)
		for j, r := range buf {
			rounded[i].Data[j] = r.Float32()
		}
	}
	specs := append(Names(), "polysketch:learned", "polysketch:block=64", "polysketch:learned:block=64")
	for _, c := range bf16Cases(specs) {
		b.Run(c.name, func(b *testing.B) {
			cfg, err := ParseSpec(c.spec)
			if err != nil {
				b.Fatal(err)
			}
			run := func(x [4]*tensor.Tensor, nets nn.Precision) [4]*tensor.Tensor {
				m, err := New(cfg, Setup{Causal: true, Seed: 5, HeadSize: h})
				if err != nil {
					b.Fatal(err)
				}
				if r, ok := m.(Rounder); ok {
					r.SetPrecision(nets)
				}
				var out [4]*tensor.Tensor
				for i := range out {
					out[i] = tensor.New(x[0].Shape...)
				}
				m.Forward(out[0], x[0], x[1], x[2])
				m.Backward(out[1], out[2], out[3], x[3])
				return out
			}
			var want, got [4]*tensor.Tensor
			for b.Loop() {
				if c.nets {
					want, got = run(in, nn.FP32), run(in, nn.BF16)
				} else {
					want, got = run(in, nn.FP32), run(rounded, nn.FP32)
				}
			}
			for i, name := range []string{"o_err", "dq_err", "dk_err", "dv_err"} {
				b.ReportMetric(relFrob(got[i].Data, want[i].Data), name)
			}
			b.ReportMetric(relFrob(rounded[0].Data, in[0].Data), "in_err")
		})
	}
}

// bf16Case is a case of BenchmarkBF16Inputs: spec with bf16 inputs, or
// with its own dense layers in bf16 (nets).
type bf16Case struct {
	name, spec string
	nets       bool
}

// bf16Cases lists the cases of specs: each with bf16 inputs, and the
// learned ones also with bf16 networks.
func bf16Cases(specs []string) []bf16Case {
	var cs []bf16Case
	for _, spec := range specs {
		cs = append(cs, bf16Case{spec, spec, false})
		if strings.Contains(spec, "learned") {
			cs = append(cs, bf16Case{spec + "/bf16-networks", spec, true})
		}
	}
	return cs
}
