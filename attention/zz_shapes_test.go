package attention

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/blas"
)

func BenchmarkZZShapes(b *testing.B) {
	N, T := blas.NoTrans, blas.Trans
	for _, c := range []struct {
		name    string
		ta, tb  blas.Transpose
		m, n, k int
	}{
		{"H=PhiKtV", N, N, 528, 64, 256},
		{"H=PhiKtV-transA", T, N, 528, 64, 256},
		{"out=PhiQZ", T, N, 256, 64, 528},
		{"dPhiQ=Zgt", N, T, 528, 256, 64},
		{"sketch", N, T, 64, 256, 64},
		{"lowerABt", N, T, 64, 160, 64},
		{"lowerMul", N, N, 64, 64, 160},
		{"lowerTMul", T, N, 64, 64, 160},
		{"sq512", N, N, 512, 512, 512},
	} {
		b.Run(fmt.Sprint(c.name), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 1))
			a, bb, cc := randSlice(rng, c.m*c.k), randSlice(rng, c.k*c.n), randSlice(rng, c.m*c.n)
			lda, ldb := c.k, c.n
			if c.ta == T {
				lda = c.m
			}
			if c.tb == T {
				ldb = c.k
			}
			cpu := cpuTime()
			for b.Loop() {
				blas.SgemmSerial(c.ta, c.tb, c.m, c.n, c.k, 1, a, lda, bb, ldb, 0, cc, c.n)
			}
			used := cpuTime() - cpu
			b.ReportMetric(2*float64(c.m*c.n*c.k)*float64(b.N)/used.Seconds()/1e9, "GFLOP/cpu-s")
		})
	}
}
