package blas

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestPackGather checks the transposing packer, with and without the
// assembly 8×8 transposes, against its definition.
func TestPackGather(t *testing.T) {
	simds := []bool{false}
	if active.asm != 0 {
		simds = append(simds, true)
	}
	rng := rand.New(rand.NewPCG(13, 14))
	for _, simd := range simds {
		for _, w := range []int{4, 6, 8, 14, 16, 32} {
			for _, n := range []int{1, 3, 7, 8, 9, 13, 14, 16, 31, 32} {
				if n > w {
					continue
				}
				for _, kb := range []int{1, 7, 8, 9, 16, 37} {
					ld := kb + 3
					src := randSlice(rng, n*ld)
					dst := randSlice(rng, w*kb) // garbage to be overwritten
					packGather(dst, w, src, ld, n, kb, simd)
					for p := 0; p < kb; p++ {
						for i := 0; i < w; i++ {
							want := float32(0)
							if i < n {
								want = src[i*ld+p]
							}
							if got := dst[p*w+i]; got != want {
								t.Fatalf("simd=%v w=%d n=%d kb=%d: dst[%d·w+%d] = %v, want %v", simd, w, n, kb, p, i, got, want)
							}
						}
					}
				}
			}
		}
	}
}

func BenchmarkPackA(b *testing.B) {
	for _, tr := range []Transpose{NoTrans, Trans} {
		b.Run(fmt.Sprintf("%s/%c", active.name, tr), func(b *testing.B) {
			m, k := 168, 1024
			g := gemm{kn: active, tA: tr, m: m, k: k, a: make([]float32, m*k), lda: k}
			if tr == Trans {
				g.lda = m
			}
			dst := make([]float32, ceilDiv(m, active.mr)*active.mr*256)
			for b.Loop() {
				g.packA(dst, 0, m, 0, 256)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(m*256), "ns/elem")
		})
	}
}
