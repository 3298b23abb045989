package vec

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// bench runs the kernel that setup returns at lengths 64, 1024 and 65536,
// on the AVX2 and the portable kernels side by side, reporting the bytes
// the kernel reads and writes per element as MB/s, and the CPU time per
// call and per element as cpu-ns/op and cpu-ns/elem.
func bench(b *testing.B, bytesPerElem int, setup func(n int, rng *rand.Rand) func()) {
	benchImpls(b, []impl{implAVX2, implGo}, bytesPerElem, setup)
}

// bench512 is bench for the kernels that have an AVX-512 version too.
func bench512(b *testing.B, bytesPerElem int, setup func(n int, rng *rand.Rand) func()) {
	benchImpls(b, []impl{implAVX512, implAVX2, implGo}, bytesPerElem, setup)
}

func benchImpls(b *testing.B, which []impl, bytesPerElem int, setup func(n int, rng *rand.Rand) func()) {
	saved := use
	defer func() { use = saved }()
	have := impls()
	for _, n := range []int{64, 1024, 65536} {
		for _, im := range which {
			if !slices.Contains(have, im) {
				continue
			}
			b.Run(fmt.Sprintf("n=%d/%s", n, im), func(b *testing.B) {
				use = im
				run := setup(n, rand.New(rand.NewPCG(1, uint64(n))))
				b.SetBytes(int64(bytesPerElem * n))
				c0 := cpuTime()
				for b.Loop() {
					run()
				}
				if c0 >= 0 {
					perOp := float64(cpuTime()-c0) / float64(b.N)
					b.ReportMetric(perOp, "cpu-ns/op")
					b.ReportMetric(perOp/float64(n), "cpu-ns/elem")
				}
			})
		}
	}
}

var sink float32

func BenchmarkDot(b *testing.B) {
	bench(b, 8, func(n int, rng *rand.Rand) func() {
		x, y := fill(rng, make([]float32, n), -1, 1), fill(rng, make([]float32, n), -1, 1)
		return func() { sink = Dot(x, y) }
	})
}

func BenchmarkAxpy(b *testing.B) {
	bench(b, 12, func(n int, rng *rand.Rand) func() {
		x, y := fill(rng, make([]float32, n), -1, 1), fill(rng, make([]float32, n), -1, 1)
		return func() { Axpy(1e-3, x, y) }
	})
}

func BenchmarkScale(b *testing.B) {
	bench(b, 8, func(n int, rng *rand.Rand) func() {
		x := fill(rng, make([]float32, n), -1, 1)
		return func() { Scale(1, x) }
	})
}

func BenchmarkMul(b *testing.B) {
	bench512(b, 12, func(n int, rng *rand.Rand) func() {
		x, y, z := fill(rng, make([]float32, n), -1, 1), fill(rng, make([]float32, n), -1, 1), make([]float32, n)
		return func() { Mul(z, x, y) }
	})
}

func BenchmarkAdd(b *testing.B) {
	bench512(b, 12, func(n int, rng *rand.Rand) func() {
		x, y, z := fill(rng, make([]float32, n), -1, 1), fill(rng, make([]float32, n), -1, 1), make([]float32, n)
		return func() { Add(z, x, y) }
	})
}

func BenchmarkSum(b *testing.B) {
	bench(b, 4, func(n int, rng *rand.Rand) func() {
		x := fill(rng, make([]float32, n), -1, 1)
		return func() { sink = Sum(x) }
	})
}

func BenchmarkMax(b *testing.B) {
	bench(b, 4, func(n int, rng *rand.Rand) func() {
		x := fill(rng, make([]float32, n), -1, 1)
		return func() { sink = Max(x) }
	})
}

func BenchmarkExp(b *testing.B) {
	bench(b, 8, func(n int, rng *rand.Rand) func() {
		x, y := fill(rng, make([]float32, n), -10, 10), make([]float32, n)
		return func() { Exp(y, x) }
	})
}

func BenchmarkTanh(b *testing.B) {
	bench(b, 8, func(n int, rng *rand.Rand) func() {
		x, y := fill(rng, make([]float32, n), -3, 3), make([]float32, n)
		return func() { Tanh(y, x) }
	})
}

func BenchmarkGELU(b *testing.B) {
	bench512(b, 8, func(n int, rng *rand.Rand) func() {
		x, y := fill(rng, make([]float32, n), -5, 5), make([]float32, n)
		return func() { GELU(y, x) }
	})
}

func BenchmarkGELUBackward(b *testing.B) {
	bench512(b, 12, func(n int, rng *rand.Rand) func() {
		x, dy, dx := fill(rng, make([]float32, n), -5, 5), fill(rng, make([]float32, n), -1, 1), make([]float32, n)
		return func() { GELUBackward(dx, x, dy) }
	})
}

func BenchmarkSoftmax(b *testing.B) {
	bench(b, 8, func(n int, rng *rand.Rand) func() {
		x, y := fill(rng, make([]float32, n), -10, 10), make([]float32, n)
		return func() {
			copy(y, x)
			Softmax(y)
		}
	})
}

func BenchmarkSoftmaxBackward(b *testing.B) {
	bench(b, 12, func(n int, rng *rand.Rand) func() {
		y, dy, dx := fill(rng, make([]float32, n), 0, 1), fill(rng, make([]float32, n), -1, 1), make([]float32, n)
		return func() { SoftmaxBackward(dx, y, dy) }
	})
}

func BenchmarkLogSumExp(b *testing.B) {
	bench(b, 4, func(n int, rng *rand.Rand) func() {
		x := fill(rng, make([]float32, n), -10, 10)
		return func() { sink = LogSumExp(x) }
	})
}

func BenchmarkMeanVar(b *testing.B) {
	bench(b, 4, func(n int, rng *rand.Rand) func() {
		x := fill(rng, make([]float32, n), -1, 3)
		return func() { sink, _ = MeanVar(x) }
	})
}

func BenchmarkLayerNorm(b *testing.B) {
	bench(b, 16, func(n int, rng *rand.Rand) func() {
		x, g, bias, y := fill(rng, make([]float32, n), -1, 3), fill(rng, make([]float32, n), 0.5, 1.5), fill(rng, make([]float32, n), -1, 1), make([]float32, n)
		return func() { sink, _ = LayerNorm(y, x, g, bias, 1e-5) }
	})
}

// BenchmarkLayerNormRows runs LayerNormRows and LayerNormBackwardRows on
// a chunk of the learned sketch networks' rows (64 rows of 64 and of 256
// floats); on the avx2 path that is LayerNorm and LayerNormBackward row
// by row.
func BenchmarkLayerNormRows(b *testing.B) {
	saved := use
	defer func() { use = saved }()
	const rows = 64
	for _, pass := range []string{"forward", "backward"} {
		for _, n := range []int{64, 256} {
			for _, im := range []impl{implAVX512, implAVX2, implGo} {
				if !slices.Contains(impls(), im) {
					continue
				}
				b.Run(fmt.Sprintf("%s/n=%d/%s", pass, n, im), func(b *testing.B) {
					use = im
					rng := rand.New(rand.NewPCG(1, uint64(n)))
					x, y := fill(rng, make([]float32, rows*n), -1, 3), make([]float32, rows*n)
					g, bias := fill(rng, make([]float32, n), 0.5, 1.5), fill(rng, make([]float32, n), -1, 1)
					mean, rstd := make([]float32, rows), make([]float32, rows)
					LayerNormRows(y, x, n, g, bias, mean, rstd, 1e-5)
					dy := fill(rng, make([]float32, rows*n), -1, 1)
					dg, db := make([]float32, n), make([]float32, n)
					for b.Loop() {
						if pass == "forward" {
							LayerNormRows(y, x, n, g, bias, mean, rstd, 1e-5)
						} else {
							LayerNormBackwardRows(y, n, dg, db, x, n, g, dy, mean, rstd)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
				})
			}
		}
	}
}

func BenchmarkLayerNormBackward(b *testing.B) {
	bench(b, 36, func(n int, rng *rand.Rand) func() {
		x, g, dy := fill(rng, make([]float32, n), -1, 3), fill(rng, make([]float32, n), 0.5, 1.5), fill(rng, make([]float32, n), -1, 1)
		dx, dg, db := make([]float32, n), make([]float32, n), make([]float32, n)
		mean, rstd := LayerNorm(make([]float32, n), x, g, make([]float32, n), 1e-5)
		return func() {
			clear(dx) // keep the accumulated gradients bounded
			LayerNormBackward(dx, dg, db, x, g, dy, mean, rstd)
		}
	})
}

func BenchmarkBiasGELU(b *testing.B) {
	for _, grad := range []bool{false, true} {
		b.Run(fmt.Sprintf("grad=%v", grad), func(b *testing.B) {
			bench512(b, 8, func(n int, rng *rand.Rand) func() {
				a, h, bias := fill(rng, make([]float32, n), -5, 5), make([]float32, n), fill(rng, make([]float32, min(n, 256)), -1, 1)
				var d []float32
				if grad {
					d = make([]float32, n)
				}
				return func() { BiasGELU(h, d, a, bias) }
			})
		})
	}
}

func BenchmarkGELUMul(b *testing.B) {
	bench512(b, 12, func(n int, rng *rand.Rand) func() {
		a, c, dst := fill(rng, make([]float32, n), -5, 5), fill(rng, make([]float32, n), -1, 1), make([]float32, n)
		return func() { GELUMul(dst, a, c) }
	})
}

func BenchmarkGELUMulBackward(b *testing.B) {
	bench512(b, 20, func(n int, rng *rand.Rand) func() {
		a, c, dy := fill(rng, make([]float32, n), -5, 5), fill(rng, make([]float32, n), -1, 1), fill(rng, make([]float32, n), -1, 1)
		da, db := make([]float32, n), make([]float32, n)
		return func() { GELUMulBackward(da, db, a, c, dy) }
	})
}

func BenchmarkSwapAdd(b *testing.B) {
	bench512(b, 16, func(n int, rng *rand.Rand) func() {
		run, x := fill(rng, make([]float32, n), -1, 1), fill(rng, make([]float32, n), -1, 1)
		return func() { SwapAdd(run, x) }
	})
}

// BenchmarkSymOuter times SymOuter and SymOuterBackward on a block of
// attention's sketches (r = 32 rows of 64 or 256 columns) on each path:
// the AVX-512 kernels, and the Mul, Add and Axpy calls they stand for
// (the other paths). go test -run '^$' -bench SymOuter -cpu 1 ./vec
func BenchmarkSymOuter(b *testing.B) {
	saved := use
	defer func() { use = saved }()
	const r = 32
	f := r * (r + 1) / 2
	for _, n := range []int{64, 256} {
		rng := rand.New(rand.NewPCG(3, uint64(n)))
		m, t := fill(rng, make([]float32, r*n), -2, 2), make([]float32, r*n)
		phi, dphi, dm := make([]float32, f*n), fill(rng, make([]float32, f*n), -1, 1), make([]float32, r*n)
		copy(t, m)
		Scale(1.5, t)
		for _, im := range impls() {
			use = im
			b.Run(fmt.Sprintf("forward/n=%d/%s", n, im), func(b *testing.B) {
				use = im
				for b.Loop() {
					SymOuter(phi, m, t, r, n)
				}
			})
			b.Run(fmt.Sprintf("backward/n=%d/%s", n, im), func(b *testing.B) {
				use = im
				for b.Loop() {
					SymOuterBackward(dm, dphi, m, t, r, n)
				}
			})
		}
	}
}

func BenchmarkSumSquares(b *testing.B) {
	benchImpls(b, []impl{implAVX512, implGo}, 4, func(n int, rng *rand.Rand) func() {
		x := fill(rng, make([]float32, n), -1, 1)
		return func() { sink = float32(SumSquares(x)) }
	})
}

func BenchmarkAdamW(b *testing.B) {
	benchImpls(b, []impl{implAVX512, implGo}, 28, func(n int, rng *rand.Rand) func() {
		w, g := fill(rng, make([]float32, n), -1, 1), fill(rng, make([]float32, n), -0.1, 0.1)
		m, v := fill(rng, make([]float32, n), -0.01, 0.01), fill(rng, make([]float32, n), 0, 1e-4)
		return func() { AdamW(w, g, m, v, 0.9, 0.95, 1e-3, 3, 1e-8, 1e-4) }
	})
}

// BenchmarkAddRows measures the sums over 64 rows that a bias gradient of
// the sketch networks takes (32 and 256 wide), by AddRows and by Add a row
// at a time, which it replaced.
func BenchmarkAddRows(b *testing.B) {
	const rows = 64
	for _, n := range []int{32, 256} {
		rng := rand.New(rand.NewPCG(2, uint64(n)))
		m, dst := fill(rng, make([]float32, rows*n), -1, 1), make([]float32, n)
		for _, how := range []string{"AddRows", "Add"} {
			b.Run(fmt.Sprintf("n=%d/%s", n, how), func(b *testing.B) {
				for b.Loop() {
					if how == "AddRows" {
						AddRows(dst, m, n, rows)
						continue
					}
					for i := range rows {
						Add(dst, dst, m[i*n:(i+1)*n])
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
			})
		}
	}
}
