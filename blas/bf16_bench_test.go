package blas

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// bf16BenchShapes (m×k×n) are the targets of the bf16 kernels: a square
// product, the default model's dense layers over 2048 tokens, and
// attention's 256-token blocks of a 64-wide head.
var bf16BenchShapes = [][3]int{
	{1024, 1024, 1024}, {2048, 256, 1024}, {2048, 1024, 256}, {256, 256, 64}, {256, 64, 256},
}

// BenchmarkGemmBF16 measures C = A·B on GOMAXPROCS threads in float32
// (Sgemm, its fastest kernel) and in bf16 with each bf16 kernel this CPU
// runs, B given as a float32 General (rounded as it is packed) and as a
// PackedBF16 (packed once, as a weight), side by side for each shape.
func BenchmarkGemmBF16(b *testing.B) {
	rng := rand.New(rand.NewPCG(9, 9))
	defer func(k *bf16Kernel) { activeBF16 = k }(activeBF16)
	for _, s := range bf16BenchShapes {
		m, k, n := s[0], s[1], s[2]
		a, bb, c := randSlice(rng, m*k), randSlice(rng, k*n), make([]float32, m*n)
		ag, bg, cg := General{m, k, k, a}, General{k, n, n, bb}, General{m, n, n, c}
		flops := 2 * float64(m) * float64(n) * float64(k)
		shape := fmt.Sprintf("%dx%dx%d", m, k, n)
		b.Run("fp32/"+shape, func(b *testing.B) {
			for b.Loop() {
				sgemm(NoTrans, NoTrans, m, n, k, 1, a, k, bb, n, 0, c, n)
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
		})
		for _, kn := range bf16Kernels() {
			activeBF16 = kn
			pb := PackBF16(NoTrans, bg)
			for _, bop := range []Operand{bg, pb} {
				name := "bf16-" + kn.name
				if bop == Operand(pb) {
					name += "-packed"
				}
				b.Run(name+"/"+shape, func(b *testing.B) {
					activeBF16 = kn
					for b.Loop() {
						GemmBF16(NoTrans, NoTrans, 1, ag, bop, 0, cg)
					}
					b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
				})
			}
		}
	}
}

// BenchmarkGemvBF16 measures decoding one token through the default
// model's weights (four layers of 256×768, 256×256, 256×2048 and
// 1024×256, as BenchmarkSgemv): one row times each weight, in float32
// (Sgemm) and in bf16 from PackedBF16 weights, which read half the
// bytes. It reports the rate at which the weights are read (GB/s) and
// the time per token (ns/op).
func BenchmarkGemvBF16(b *testing.B) {
	rng := rand.New(rand.NewPCG(10, 10))
	defer func(k *bf16Kernel) { activeBF16 = k }(activeBF16)
	type mat struct {
		k, n int
		w    []float32
		p    *PackedBF16
	}
	var mats []mat
	for range 4 {
		for _, s := range [][2]int{{256, 768}, {256, 256}, {256, 2048}, {1024, 256}} {
			w := randSlice(rng, s[0]*s[1])
			mats = append(mats, mat{s[0], s[1], w, PackBF16(NoTrans, General{s[0], s[1], s[1], w})})
		}
	}
	x, y := randSlice(rng, 1024), make([]float32, 2048)
	weights := 0
	for _, m := range mats {
		weights += m.k * m.n
	}
	for _, serial := range []bool{true, false} {
		mode := "parallel"
		if serial {
			mode = "serial"
		}
		b.Run("fp32/"+mode, func(b *testing.B) {
			for b.Loop() {
				for _, m := range mats {
					if serial {
						sgemmSerial(NoTrans, NoTrans, 1, m.n, m.k, 1, x, m.k, m.w, m.n, 0, y, m.n)
					} else {
						sgemm(NoTrans, NoTrans, 1, m.n, m.k, 1, x, m.k, m.w, m.n, 0, y, m.n)
					}
				}
			}
			b.ReportMetric(4*float64(weights)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
		for _, kn := range bf16Kernels() {
			b.Run(fmt.Sprintf("bf16-%s/%s", kn.name, mode), func(b *testing.B) {
				activeBF16 = kn
				for i, m := range mats {
					mats[i].p = PackBF16(NoTrans, General{m.k, m.n, m.n, m.w}) // in the kernel's form
				}
				size := 2 // bytes a weight
				if kn.sgemm {
					size = 4 // float32 values rounded to bf16
				}
				for b.Loop() {
					for _, m := range mats {
						xv, yv := General{1, m.k, m.k, x}, General{1, m.n, m.n, y}
						if serial {
							GemmBF16Serial(NoTrans, NoTrans, 1, xv, m.p, 0, yv)
						} else {
							GemmBF16(NoTrans, NoTrans, 1, xv, m.p, 0, yv)
						}
					}
				}
				b.ReportMetric(float64(size*weights)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// BenchmarkGemmBF16Ratio times float32 Sgemm and GemmBF16 (B as a
// General and packed) alternately on each shape and reports the best
// time of each (ms) and the ratios of the best times (×): on a machine
// shared with other work, the least disturbed runs of the two compare
// more fairly than means taken minutes apart.
func BenchmarkGemmBF16Ratio(b *testing.B) {
	rng := rand.New(rand.NewPCG(11, 11))
	for _, s := range bf16BenchShapes {
		m, k, n := s[0], s[1], s[2]
		a, bb, c := randSlice(rng, m*k), randSlice(rng, k*n), make([]float32, m*n)
		ag, bg, cg := General{m, k, k, a}, General{k, n, n, bb}, General{m, n, n, c}
		pb := PackBF16(NoTrans, bg)
		b.Run(fmt.Sprintf("%s/%dx%dx%d", KernelBF16(), m, k, n), func(b *testing.B) {
			best := [3]time.Duration{time.Hour, time.Hour, time.Hour}
			runs := []func(){
				func() { sgemm(NoTrans, NoTrans, m, n, k, 1, a, k, bb, n, 0, c, n) },
				func() { GemmBF16(NoTrans, NoTrans, 1, ag, bg, 0, cg) },
				func() { GemmBF16(NoTrans, NoTrans, 1, ag, pb, 0, cg) },
			}
			for b.Loop() {
				for i, f := range runs {
					// A few calls of each in a row, as a program makes
					// them: the blas helper goroutine spins for a while
					// after a product, which the first call of the next
					// kind may feel.
					for range 4 {
						t0 := time.Now()
						f()
						best[i] = min(best[i], time.Since(t0))
					}
				}
			}
			ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 }
			b.ReportMetric(ms(best[0]), "fp32-ms")
			b.ReportMetric(ms(best[1]), "bf16-ms")
			b.ReportMetric(ms(best[2]), "packed-ms")
			b.ReportMetric(float64(best[0])/float64(best[1]), "bf16-x")
			b.ReportMetric(float64(best[0])/float64(best[2]), "packed-x")
		})
	}
}

// modelShape is a product of a training step of the default model
// (`polysketch bench train --n 1024 --tokens 8192`: 8192 rows of
// activations, d = 256, GLU hidden 1024, byte vocabulary).
type modelShape struct {
	name    string
	tA      Transpose
	m, k, n int
	packed  bool // B is a weight, packed once (else a General, as dy)
}

// modelShapes are the default model's Linear products in a training step:
// forward (x·W, B a packed weight), the input gradient (dy·Wᵀ, the packed
// transpose) and the weight gradient (xᵀ·dy, both operands activations,
// accumulated into it: beta 1); the untied logits are the 256×256 ones,
// and so are the tied logits' (Embedding.Logits and its backward). The
// gpt2 ones are the weight gradients of the GPT-2-small shape (d = 768,
// 4096 tokens a step: bench train --shape gpt2-small), whose many
// columns make the tiles convert B as they go and A once (gemmBF16.packA);
// gpt2-qkv, gpt2-glu-in and gpt2-dx-qkv are its forward products of many
// strips and an input gradient; gpt2-glu-out and gpt2-dx-glu-in are two
// of its products whose long k and B, a packed weight too large for L2,
// make the tiles go k block by k block (tileCall.kBlocks).
var modelShapes = []modelShape{
	{"square", NoTrans, 1024, 1024, 1024, true},
	{"qkv", NoTrans, 8192, 256, 768, true},
	{"proj,logits", NoTrans, 8192, 256, 256, true},
	{"glu-in", NoTrans, 8192, 256, 2048, true},
	{"glu-out", NoTrans, 8192, 1024, 256, true},
	{"dx-qkv", NoTrans, 8192, 768, 256, true},
	{"dx-glu-in", NoTrans, 8192, 2048, 256, true},
	{"dx-glu-out", NoTrans, 8192, 256, 1024, true},
	{"dw-qkv", Trans, 256, 8192, 768, false},
	{"dw-proj,logits", Trans, 256, 8192, 256, false},
	{"dw-glu-in", Trans, 256, 8192, 2048, false},
	{"dw-glu-out", Trans, 1024, 8192, 256, false},
	{"gpt2-dw-qkv", Trans, 768, 4096, 2304, false},
	{"gpt2-dw-glu-in", Trans, 768, 4096, 6144, false},
	{"gpt2-dw-glu-out", Trans, 3072, 4096, 768, false},
	{"gpt2-qkv", NoTrans, 4096, 768, 2304, true},
	{"gpt2-glu-in", NoTrans, 4096, 768, 6144, true},
	{"gpt2-dx-qkv", NoTrans, 4096, 2304, 768, true},
	{"gpt2-glu-out", NoTrans, 4096, 3072, 768, true},
	{"gpt2-dx-glu-in", NoTrans, 4096, 6144, 768, true},
}

// netShapes are the products of the default model's learned sketch
// networks on one chunk of 64 rows (attention.netChunk; h = 64, r = 32,
// hidden 8r = 256): forward l1–l4 (B a packed weight), input gradients
// through l4 and l1, and the weight gradients of l1–l3 (both operands
// activations, beta 1). A training step runs about 115,000 of them.
var netShapes = []modelShape{
	{"net-l1", NoTrans, 64, 64, 256, true},
	{"net-l2,l4", NoTrans, 64, 256, 32, true},
	{"net-l3", NoTrans, 64, 32, 256, true},
	{"net-dx-l1", NoTrans, 64, 256, 64, true},
	{"net-dw-l1", Trans, 64, 64, 256, false},
	{"net-dw-l2", Trans, 256, 64, 32, false},
	{"net-dw-l3", Trans, 32, 64, 256, false},
}

// BenchmarkGemmBF16Kernels times, on each of modelShapes and netShapes, float32 Sgemm
// and GemmBF16 with each bf16 kernel this CPU runs but the portable one,
// taking turns, and reports the best time of each as GFLOPS; where the
// CPU has AMX, also the fraction of the bare TDPBF16PS loop (the best of
// BenchmarkPeakAMX's loop, timed between the products) that the amx
// kernel reaches ("amx-peak-%"). The best of alternating runs compares
// fairly on a machine shared with other work. Run it on one thread for
// the kernels alone: go test -run XXX -bench GemmBF16Kernels -cpu 1 ./blas
func BenchmarkGemmBF16Kernels(b *testing.B) {
	rng := rand.New(rand.NewPCG(12, 12))
	defer func(k *bf16Kernel) { activeBF16 = k }(activeBF16)
	var kernels []*bf16Kernel
	for _, kn := range bf16Kernels() {
		if kn != goBF16 {
			kernels = append(kernels, kn)
		}
	}
	peak := peakAMXLoop()
	for _, s := range append(modelShapes[:len(modelShapes):len(modelShapes)], netShapes...) {
		ar, ac := stored(s.tA, s.m, s.k)
		a := General{ar, ac, ac, randSlice(rng, ar*ac)}
		bg := General{s.k, s.n, s.n, randSlice(rng, s.k*s.n)}
		c := General{s.m, s.n, s.n, make([]float32, s.m*s.n)}
		beta := float32(0)
		if !s.packed {
			beta = 1
		}
		runs := []func(){func() { Sgemm(s.tA, NoTrans, 1, a, bg, beta, c) }}
		names := []string{"fp32"}
		for _, kn := range kernels {
			var bop Operand = bg
			if s.packed {
				activeBF16 = kn // B packed for the kernel, as a model's weights are
				bop = PackBF16(NoTrans, bg)
			}
			runs = append(runs, func() { activeBF16 = kn; GemmBF16(s.tA, NoTrans, 1, a, bop, beta, c) })
			names = append(names, kn.name)
		}
		if peak != nil {
			runs = append(runs, peak)
		}
		flops := 2 * float64(s.m) * float64(s.n) * float64(s.k)
		b.Run(fmt.Sprintf("%s/%c/%dx%dx%d", s.name, s.tA, s.m, s.k, s.n), func(b *testing.B) {
			best := make([]time.Duration, len(runs))
			for i := range best {
				best[i] = time.Hour
			}
			for b.Loop() {
				for i, f := range runs {
					t0 := time.Now()
					f()
					best[i] = min(best[i], time.Since(t0))
				}
			}
			for i, name := range names {
				b.ReportMetric(flops/best[i].Seconds()/1e9, name+"-GFLOPS")
				if name == amxBF16Name && peak != nil {
					peakGFLOPS := peakAMXFlops / best[len(runs)-1].Seconds() / 1e9
					b.ReportMetric(100*flops/best[i].Seconds()/1e9/peakGFLOPS, "amx-peak-%")
				}
			}
		})
	}
}

// BenchmarkRoundBF16s measures the rounding of the sgemm kernel's
// operands, in place, on a run that stays in L1 and one in L2.
func BenchmarkRoundBF16s(b *testing.B) {
	rng := rand.New(rand.NewPCG(13, 13))
	for _, n := range []int{4096, 65536} {
		s := randSlice(rng, n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			for b.Loop() {
				roundBF16s(s, s)
			}
		})
	}
}

// BenchmarkPackStrips measures the packing of a float32 B (k×n as stored)
// into bf16 strips, as a weight gradient packs dy: the sketch networks'
// chunks of 64 rows, an attention block's, and a whole step's.
func BenchmarkPackStrips(b *testing.B) {
	if activeBF16.sgemm {
		b.Skip("the bf16 kernel here is sgemm, which packs float32 strips as Sgemm does, not bf16 pairs")
	}
	rng := rand.New(rand.NewPCG(14, 14))
	for _, s := range []struct{ k, n int }{{64, 32}, {64, 64}, {64, 256}, {8192, 256}} {
		bg := General{s.k, s.n, s.n, randSlice(rng, s.k*s.n)}
		dst := make([]uint32, packedWords(s.k, s.n))
		strips := ceilDiv(s.n, nrBF16)
		b.Run(fmt.Sprintf("%dx%d", s.k, s.n), func(b *testing.B) {
			b.SetBytes(int64(4 * s.k * s.n))
			for b.Loop() {
				packStrips(activeBF16, NoTrans, bg, s.k, s.n, dst, 0, strips, nil)
			}
		})
	}
}
