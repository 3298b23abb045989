package attention

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/tensor"
)

// benchShape is one benchmark size; tokens are B·N (all heads of a token
// count once).
type benchShape struct{ B, H, N, h int }

func (s benchShape) String() string { return fmt.Sprintf("B=%d,H=%d,N=%d,h=%d", s.B, s.H, s.N, s.h) }

// benchShapes are the sizes of BenchmarkFlash, BenchmarkPolynomial and
// BenchmarkSoftmax; long sizes only for the mechanisms that get there.
func benchShapes(maxN int) []benchShape {
	var shapes []benchShape
	for _, N := range []int{1024, 4096, 16384} {
		if N > maxN {
			break
		}
		for _, H := range []int{1, 4} {
			if N == 16384 && H > 1 {
				continue // a long run; H=1 says enough
			}
			shapes = append(shapes, benchShape{1, H, N, 64})
		}
	}
	return shapes
}

// tileEntries returns the number of score entries the tiled driver computes
// per head, forward and backward, for tiles of br×bc: the FLOPs of a pass
// are 2·h per entry per matrix product (forward two, backward five).
func tileEntries(N, br, bc int, causal bool) (fwd, bwd int64) {
	for i0 := 0; i0 < N; i0 += br {
		rows := min(br, N-i0)
		end := N
		if causal {
			end = i0 + rows
		}
		fwd += int64(rows * end)
	}
	for j0 := 0; j0 < N; j0 += bc {
		cols := min(bc, N-j0)
		start := 0
		if causal {
			start = j0 / br * br
		}
		bwd += int64(cols * (N - start))
	}
	return fwd, bwd
}

// benchMechanism benchmarks Forward alone and Forward+Backward of a
// causal mechanism, reporting µs per token and, when flops is given, the
// rate of the matrix products in GFLOP/s.
func benchMechanism(b *testing.B, kind Kind, opts kernelOptions, shapes []benchShape, flops func(s benchShape) (fwd, bwd float64)) {
	for _, s := range shapes {
		rng := rand.New(rand.NewPCG(1, 2))
		q, k, v := randTensor(rng, 0.3, s.B, s.H, s.N, s.h), randTensor(rng, 0.3, s.B, s.H, s.N, s.h), randTensor(rng, 1, s.B, s.H, s.N, s.h)
		do := randTensor(rng, 1, s.B, s.H, s.N, s.h)
		o, dq, dk, dv := tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...)
		m := mustNew(b, kind, opts)
		for _, pass := range []string{"fwd", "fwdbwd"} {
			b.Run(pass+"/"+s.String(), func(b *testing.B) {
				m.Forward(o, q, k, v) // size the buffers outside the timing
				m.Backward(dq, dk, dv, do)
				cpu := cpuTime()
				for b.Loop() {
					m.Forward(o, q, k, v)
					if pass == "fwdbwd" {
						m.Backward(dq, dk, dv, do)
					}
				}
				per := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(per*1e6/float64(s.B*s.N), "µs/token")
				reportCPU(b, cpu, s.B*s.N)
				if flops != nil {
					f, bw := flops(s)
					if pass == "fwdbwd" {
						f += bw
					}
					b.ReportMetric(f/per/1e9, "GFLOP/s")
				}
			})
		}
	}
}

// reportCPU reports the CPU time per token used since cpu (all threads
// together), which noise from other work on the machine disturbs less
// than the wall clock.
func reportCPU(b *testing.B, cpu time.Duration, tokens int) {
	if used := cpuTime() - cpu; used > 0 {
		b.ReportMetric(used.Seconds()*1e6/float64(b.N)/float64(tokens), "cpu-µs/token")
	}
}

// tiledFlops counts the matrix-product FLOPs of flash and polynomial.
func tiledFlops(causal bool) func(s benchShape) (fwd, bwd float64) {
	return func(s benchShape) (fwd, bwd float64) {
		block := defaultKernelOptions().Block
		f, bw := tileEntries(s.N, block, block, causal)
		heads := float64(s.B * s.H)
		return heads * float64(f) * 2 * 2 * float64(s.h), heads * float64(bw) * 5 * 2 * float64(s.h)
	}
}

// BenchmarkSgemmSerial measures the single-thread speed of the products
// the tiled mechanisms make with the default 256×256 tiles (h = 64), and
// of a large square one: the yardstick of their GFLOP/s.
func BenchmarkSgemmSerial(b *testing.B) {
	for _, c := range []struct {
		name    string
		tB      blas.Transpose
		m, n, k int
	}{
		{"QK^T-tile", blas.Trans, 256, 256, 64},
		{"PV-tile", blas.NoTrans, 256, 64, 256},
		{"square-512", blas.NoTrans, 512, 512, 512},
	} {
		b.Run(c.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 1))
			a, bb, cc := randTensor(rng, 1, c.m, c.k), randTensor(rng, 1, c.k, c.n), tensor.New(c.m, c.n)
			bv := blas.NewGeneral(c.k, c.n, bb.Data)
			if c.tB == blas.Trans {
				bb = randTensor(rng, 1, c.n, c.k)
				bv = blas.NewGeneral(c.n, c.k, bb.Data)
			}
			cpu := cpuTime()
			for b.Loop() {
				blas.SgemmSerial(blas.NoTrans, c.tB, 1, blas.NewGeneral(c.m, c.k, a.Data), bv, 1, blas.NewGeneral(c.m, c.n, cc.Data))
			}
			b.ReportMetric(2*float64(c.m*c.n*c.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			if used := cpuTime() - cpu; used > 0 {
				b.ReportMetric(2*float64(c.m*c.n*c.k)*float64(b.N)/used.Seconds()/1e9, "GFLOP/cpu-s")
			}
		})
	}
}

// BenchmarkTileSize compares tile shapes of the tiled driver on causal
// flash attention, forward and backward, one head with h = 64: the
// measurement behind the default --block. Run it with -cpu 1 and read
// cpu-µs/token when other work shares the machine.
func BenchmarkTileSize(b *testing.B) {
	const h = 64
	for _, N := range []int{1024, 4096} {
		rng := rand.New(rand.NewPCG(1, 2))
		q, k, v := randTensor(rng, 0.3, 1, 1, N, h), randTensor(rng, 0.3, 1, 1, N, h), randTensor(rng, 1, 1, 1, N, h)
		o, dq, dk, dv := tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...)
		for _, br := range []int{32, 64, 128, 256, 512} {
			for _, bc := range []int{32, 64, 128, 256, 512} {
				d := newTiled("flash", true, 0, softmaxWeighting{})
				d.br, d.bc = br, bc
				for _, pass := range []string{"fwd", "bwd"} {
					b.Run(fmt.Sprintf("%s/N=%d/%dx%d", pass, N, br, bc), func(b *testing.B) {
						d.forward(o, q, k, v)
						d.backward(dq, dk, dv, o)
						cpu := cpuTime()
						defer func() { reportCPU(b, cpu, N) }()
						for b.Loop() {
							if pass == "fwd" {
								d.forward(o, q, k, v)
							} else {
								d.backward(dq, dk, dv, o)
							}
						}
					})
				}
			}
		}
	}
}
