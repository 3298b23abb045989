package attention

import (
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

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

// BenchmarkBlockBF16 measures what bf16 would cost each kind of the
// engine's block products (see blockProduct) in the default model's
// mechanism, polysketch with learned sketches and exact local blocks of
// 64 (and of 256): it runs causal Forward and Backward on one head of N =
// 1024, h = 64, once with every product in float32 and once with one kind
// (or all) as bf16 products, and reports the relative error
// ‖x − x*‖/‖x*‖ of the output and the three input gradients against the
// float32 run, the output's against a float64 evaluation of the same
// mechanism (o64_err; the float32 run's own is the fp32 case), and the
// time of Forward and Backward on one thread in ms and as a ratio to
// float32's, best of the loop's runs. The networks case runs the learned
// sketch's own products in bf16, as bf16 models do; all adds every kind
// to it.
//
//	go test -run '^$' -bench BlockBF16 -benchtime 5x ./attention
func BenchmarkBlockBF16(b *testing.B) {
	const N, h = 1024, 64
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	rng := rand.New(rand.NewPCG(3, 16))
	var in [4]*tensor.Tensor // q, k, v, do
	for i := range in {
		in[i] = randTensor(rng, 1, 1, 1, N, h)
	}
	kinds := []struct {
		name  string
		kinds blockProduct
		nets  bool
	}{
		{"fp32", 0, false},
		{"networks", 0, true},
		{"model", blockStateGrads, true}, // what a bf16 model runs (SetPrecision)
		{"scores", blockScores, false},
		{"weighted", blockWeighted, false},
		{"states", blockStates | blockStateGrads, false},
		{"state-grads", blockStateGrads, false},
		{"tensor", blockTensor, false},
		{"all", blockScores | blockWeighted | blockStates | blockStateGrads | blockTensor, true},
	}
	for _, spec := range []string{"polysketch:learned:block=64", "polysketch:learned"} {
		cfg, err := ParseSpec(spec)
		if err != nil {
			b.Fatal(err)
		}
		m, err := New(cfg, Setup{Causal: true, Seed: 5, HeadSize: h})
		if err != nil {
			b.Fatal(err)
		}
		e := m.(*engine)
		var out [2][4]*tensor.Tensor
		for i := range out {
			for j := range out[i] {
				out[i][j] = tensor.New(in[0].Shape...)
			}
		}
		run := func(o [4]*tensor.Tensor, kinds blockProduct, nets bool) time.Duration {
			defer func(k blockProduct) { bf16Blocks = k }(bf16Blocks)
			bf16Blocks = kinds
			p := nn.FP32
			if nets {
				p = nn.BF16
			}
			e.SetPrecision(p)
			e.bf16 = kinds
			for _, pa := range e.Params() {
				pa.Grad.Zero()
			}
			start := time.Now()
			e.Forward(o[0], in[0], in[1], in[2])
			e.Backward(o[1], o[2], o[3], in[3])
			return time.Since(start)
		}
		run(out[0], 0, false)
		ps := paramMap(e.Params())
		ref := refSketched(in[0], in[1], in[2], e.opts, func(x []float64) []float64 {
			next := 0
			return refLearned(x, e.opts.Degree/2, ps, &next)
		}, tuneOf(e))
		for _, k := range kinds {
			b.Run(spec+"/"+k.name, func(b *testing.B) {
				best, base := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
				for b.Loop() { // alternately, so that both see the same machine
					base = min(base, run(out[0], 0, false))
					best = min(best, run(out[1], k.kinds, k.nets))
				}
				for i, name := range []string{"o_err", "dq_err", "dk_err", "dv_err"} {
					b.ReportMetric(relFrob(out[1][i].Data, out[0][i].Data), name)
				}
				var d, n float64
				for i, r := range ref {
					x := float64(out[1][0].Data[i]) - r
					d, n = d+x*x, n+r*r
				}
				b.ReportMetric(math.Sqrt(d/n), "o64_err")
				b.ReportMetric(float64(best.Microseconds())/1e3, "ms")
				b.ReportMetric(float64(best)/float64(base), "time_x")
			})
		}
	}
}
