package blas

import (
	"math/rand/v2"
	"testing"
)

func BenchmarkTmpNet(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range []struct{ m, k, n int }{{64, 256, 32}, {64, 64, 256}, {64, 32, 256}} {
		a := General{s.m, s.k, s.k, randSlice(rng, s.m*s.k)}
		bp := PackBF16(NoTrans, General{s.k, s.n, s.n, randSlice(rng, s.k*s.n)})
		c := General{s.m, s.n, s.n, make([]float32, s.m*s.n)}
		b.Run("", func(b *testing.B) {
			for b.Loop() {
				GemmBF16Serial(NoTrans, NoTrans, 1, a, bp, 0, c)
			}
			b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
		})
	}
}
