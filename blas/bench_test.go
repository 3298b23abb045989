package blas

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// benchShapes are the square sizes and the attention-shaped products
// (m×k×n) that bench gemm also reports.
var benchShapes = [][3]int{ // m, k, n
	{256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024}, {2048, 2048, 2048},
	{256, 64, 256}, {256, 1024, 64}, {1024, 256, 64}, {4096, 64, 4096},
}

func randSlice(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}

// BenchmarkSgemm measures C = A·B on GOMAXPROCS threads for every
// implementation, and for the package's own code with each kernel this CPU
// runs (go-KERNEL).
func BenchmarkSgemm(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	defer func(k *kernel) { active = k }(active)
	for _, s := range benchShapes {
		m, k, n := s[0], s[1], s[2]
		a, bb, c := randSlice(rng, m*k), randSlice(rng, k*n), make([]float32, m*n)
		run := func(name string, f sgemmFunc) {
			b.Run(fmt.Sprintf("%s/%dx%dx%d", name, m, k, n), func(b *testing.B) {
				for b.Loop() {
					f(NoTrans, NoTrans, m, n, k, 1, a, k, bb, n, 0, c, n)
				}
				b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
			})
		}
		for _, impl := range Impls()[1:] {
			run(impl.Name, loose(impl.Sgemm))
		}
		for _, kn := range kernels() {
			active = kn
			run("go-"+kn.name, sgemm)
		}
	}
}

// BenchmarkSgemmSerial measures the single-goroutine path on the
// tile-sized products attention runs from its own workers, per transpose
// form and kernel.
func BenchmarkSgemmSerial(b *testing.B) {
	rng := rand.New(rand.NewPCG(2, 2))
	defer func(k *kernel) { active = k }(active)
	for _, kn := range kernels() {
		active = kn
		for _, tr := range transposes {
			for _, s := range [][3]int{{64, 64, 64}, {128, 64, 128}, {256, 64, 256}, {256, 256, 64}} {
				m, k, n := s[0], s[1], s[2]
				a, bb, c := randSlice(rng, m*k), randSlice(rng, k*n), make([]float32, m*n)
				lda, ldb := k, n
				if tr[0] == Trans {
					lda = m
				}
				if tr[1] == Trans {
					ldb = k
				}
				b.Run(fmt.Sprintf("%s/%c%c/%dx%dx%d", kn.name, tr[0], tr[1], m, k, n), func(b *testing.B) {
					for b.Loop() {
						sgemmSerial(tr[0], tr[1], m, n, k, 1, a, lda, bb, ldb, 0, c, n)
					}
					b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
				})
			}
		}
	}
}

// BenchmarkSgemmSmall measures products with few rows of C (m×k times
// k×n, as when decoding a few tokens through a weight matrix) and, with n
// and m exchanged (cols), few columns, on GOMAXPROCS threads, with each
// kernel this CPU runs: without packing (direct), as Sgemm does up to
// kernel.small rows or columns, and packed, for the thresholds.
func BenchmarkSgemmSmall(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 3))
	defer func(k *kernel) { active = k }(active)
	ms := []int{1, 4, 16, 32}
	shapes := [][2]int{{256, 2048}, {2048, 256}, {256, 256}} // k, n
	for _, kn := range kernels() {
		pk := *kn
		pk.streamMax, pk.dotsMax, pk.narrowN = 0, 0, 0
		for _, path := range []*kernel{kn, &pk} {
			name := "direct"
			if path == &pk {
				name = "packed"
			}
			active = path
			for _, tr := range [][2]Transpose{{NoTrans, NoTrans}, {NoTrans, Trans}} {
				for _, cols := range []bool{false, true} {
					for _, s := range shapes {
						k, n := s[0], s[1]
						bb := randSlice(rng, k*n)
						for _, m := range ms {
							m, n, form := m, n, "rows"
							if cols {
								m, n, form = n, m, "cols"
							}
							ldb := n
							if tr[1] == Trans {
								ldb = k
							}
							a, c := randSlice(rng, m*k), make([]float32, m*n)
							b.Run(fmt.Sprintf("%s/%s/%c%c/%s/%dx%dx%d", kn.name, name, tr[0], tr[1], form, m, k, n), func(b *testing.B) {
								for b.Loop() {
									sgemm(tr[0], tr[1], m, n, k, 1, a, k, bb, ldb, 0, c, n)
								}
								b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
							})
						}
					}
				}
			}
		}
	}
}

// BenchmarkSgemmNarrow compares the stream kernel over many rows with
// packing (streamTall in small.go) on one thread, for op(B) = B narrow and
// short enough to stay in cache: the shapes (m×k×n) of the learned-sketch
// networks on chunks of 256 rows (h = 64, r = 32: layers 64→256, 256→32,
// 32→256; their weight gradients as TN and input gradients as NT), and of
// a model's output projection and GLU down-projection on 2048 rows.
func BenchmarkSgemmNarrow(b *testing.B) {
	rng := rand.New(rand.NewPCG(4, 4))
	defer func(k *kernel) { active = k }(active)
	shapes := []struct {
		tA, tB  Transpose
		m, k, n int
	}{
		{NoTrans, NoTrans, 256, 64, 256}, {NoTrans, NoTrans, 256, 256, 32}, {NoTrans, NoTrans, 256, 32, 256},
		{Trans, NoTrans, 64, 256, 256}, {Trans, NoTrans, 256, 256, 32},
		{NoTrans, Trans, 256, 256, 64}, {NoTrans, Trans, 256, 256, 32}, {NoTrans, Trans, 256, 32, 256},
		{NoTrans, NoTrans, 2048, 256, 256}, {NoTrans, NoTrans, 2048, 1024, 256}, {NoTrans, Trans, 2048, 768, 256},
	}
	for _, kn := range kernels() {
		pk := *kn
		pk.narrowN = 0
		for _, path := range []*kernel{kn, &pk} {
			name := "direct"
			if path == &pk {
				name = "packed"
			}
			active = path
			for _, s := range shapes {
				a, bb, c := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n), make([]float32, s.m*s.n)
				lda, ldb := s.k, s.n
				if s.tA == Trans {
					lda = s.m
				}
				if s.tB == Trans {
					ldb = s.k
				}
				b.Run(fmt.Sprintf("%s/%s/%c%c/%dx%dx%d", kn.name, name, s.tA, s.tB, s.m, s.k, s.n), func(b *testing.B) {
					for b.Loop() {
						sgemmSerial(s.tA, s.tB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 1, c, s.n)
					}
					b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
				})
			}
		}
	}
}

// BenchmarkSgemv times products of one row by the weight matrices of a
// 4-layer Transformer of width 256 (q/k/v, output, GLU in and out: 16.8
// MB, more than any L2), one after another as a decoding step of one
// token runs them, by Sgemm and SgemmSerial, with and without the wide
// tiles of one-row products. It reports the rate at which the weights
// are read.
func BenchmarkSgemv(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 5))
	defer func(k *kernel) { active = k }(active)
	type mat struct {
		k, n int
		w    []float32
	}
	var mats []mat
	bytes := 0
	for range 4 {
		for _, s := range [][2]int{{256, 768}, {256, 256}, {256, 2048}, {1024, 256}} {
			mats = append(mats, mat{s[0], s[1], randSlice(rng, s[0]*s[1])})
			bytes += 4 * s[0] * s[1]
		}
	}
	x, y := randSlice(rng, 1024), make([]float32, 2048)
	for _, kn := range kernels() {
		narrow := *kn
		narrow.wideRows = 0
		for _, path := range []*kernel{kn, &narrow} {
			tiles := "wide"
			if path == &narrow {
				tiles = "narrow"
			}
			for _, serial := range []bool{true, false} {
				name := "parallel"
				if serial {
					name = "serial"
				}
				b.Run(fmt.Sprintf("%s/%s/%s", kn.name, tiles, name), func(b *testing.B) {
					active = path
					for b.Loop() {
						for _, m := range mats {
							if serial {
								sgemmSerial(NoTrans, NoTrans, 1, m.n, m.k, 1, x, m.k, m.w, m.n, 0, y, m.n)
							} else {
								sgemm(NoTrans, NoTrans, 1, m.n, m.k, 1, x, m.k, m.w, m.n, 0, y, m.n)
							}
						}
					}
					b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
				})
			}
		}
	}
}

// BenchmarkSgemmSplit times, on each of modelShapes in float32, the
// serial path, the parallel one run on one goroutine, and the parallel
// one on GOMAXPROCS threads, taking turns: what splitting a product into
// items costs by itself (packing and cache use), apart from threads, and
// what the threads then gain ("threads-x", against serial). Run it on one
// thread for the first, on more for the second:
// go test -run '^$' -bench SgemmSplit -cpu 1,2 ./blas
func BenchmarkSgemmSplit(b *testing.B) {
	rng := rand.New(rand.NewPCG(12, 12))
	for _, s := range modelShapes {
		ar, ac := stored(s.tA, s.m, s.k)
		a := randSlice(rng, ar*ac)
		bb := randSlice(rng, s.k*s.n)
		c := make([]float32, s.m*s.n)
		beta := float32(0)
		if !s.packed {
			beta = 1
		}
		g := gemm{kn: active, tA: s.tA, tB: NoTrans, m: s.m, n: s.n, k: s.k, alpha: 1, a: a, lda: ac, b: bb, ldb: s.n, beta: beta, c: c, ldc: s.n}
		flops := 2 * float64(s.m) * float64(s.n) * float64(s.k)
		b.Run(fmt.Sprintf("%s/%c/%dx%dx%d", s.name, s.tA, s.m, s.k, s.n), func(b *testing.B) {
			threads := runtime.GOMAXPROCS(0)
			serial, split, all := time.Hour, time.Hour, time.Hour
			for b.Loop() {
				t0 := time.Now()
				g.serial()
				serial = min(serial, time.Since(t0))
				t0 = time.Now()
				g.parallel(1)
				split = min(split, time.Since(t0))
				if threads > 1 {
					t0 = time.Now()
					g.parallel(threads)
					all = min(all, time.Since(t0))
				}
			}
			b.ReportMetric(flops/serial.Seconds()/1e9, "serial-GFLOPS")
			b.ReportMetric(flops/split.Seconds()/1e9, "split-GFLOPS")
			if threads > 1 {
				b.ReportMetric(flops/all.Seconds()/1e9, "threads-GFLOPS")
				b.ReportMetric(serial.Seconds()/all.Seconds(), "threads-x")
			}
		})
	}
}
