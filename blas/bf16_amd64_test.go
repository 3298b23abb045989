//go:build !purego

package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/cpu"
)

func needAVX512BF16(t *testing.T) {
	t.Helper()
	if !cpu.X86.HasAVX512BF16 || !cpu.X86.HasAVX512BW {
		t.Skip("this CPU has no AVX512_BF16 (and AVX512BW): the instruction was not run")
	}
}

// randBF16Bits returns a random bf16 for tests of the arithmetic: any
// sign and exponent, so that products overflow, flush and cancel, and
// now and then a special value.
func randBF16Bits(rng *rand.Rand) uint32 {
	switch rng.IntN(16) {
	case 0:
		return []uint32{0, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x0080, 0x8080, 0x3f80}[rng.IntN(8)]
	case 1, 2, 3: // exponents near the middle: ordinary sums
		return uint32(rng.IntN(2))<<15 | uint32(120+rng.IntN(16))<<7 | uint32(rng.IntN(128))
	}
	e := 1 + rng.IntN(254) // normal: ToBF16 makes no denormals
	return uint32(rng.IntN(2))<<15 | uint32(e)<<7 | uint32(rng.IntN(128))
}

// TestVDPBF16PS checks that dot2 computes what the instruction does, and
// what a step of the FMA kernels does (two VFMADD231PS under MXCSR's
// flush-to-zero and denormals-are-zero), on the cases of TestDot2 and on
// random operands and accumulators over the whole exponent range, near
// the flush threshold included.
func TestVDPBF16PS(t *testing.T) {
	for _, step := range []struct {
		name string
		f    func(acc *float32, a, b *uint32)
	}{{"VDPBF16PS", vdpbf16psVec}, {"the FMA step", fmaStepVec}} {
		t.Run(step.name, func(t *testing.T) { testDot2Step(t, step.name, step.f) })
	}
}

func testDot2Step(t *testing.T, name string, step func(acc *float32, a, b *uint32)) {
	needAVX512BF16(t)
	var acc, want [16]float32
	var a, b [16]uint32
	for _, c := range dot2Cases {
		acc[0], a[0], b[0] = c.acc, c.a, c.b
		step(&acc[0], &a[0], &b[0])
		if math.Float32bits(acc[0]) != math.Float32bits(c.want) {
			t.Errorf("%s: %s gives %v (%#08x), want %v (%#08x)", c.name, name, acc[0], math.Float32bits(acc[0]), c.want, math.Float32bits(c.want))
		}
	}
	rng := rand.New(rand.NewPCG(81, 82))
	n := 200000
	if testing.Short() {
		n = 20000
	}
	for it := 0; it < n/16; it++ {
		for i := range acc {
			switch rng.IntN(4) {
			case 0:
				acc[i] = 0
			case 1: // around 2⁻¹²⁶, where flushing decides
				acc[i] = float32(math.Ldexp(rng.Float64()+0.5, -125)) * float32(1-2*rng.IntN(2))
			default:
				acc[i] = math.Float32frombits(randBF16Bits(rng)<<16 | uint32(rng.IntN(1<<16)))
			}
			a[i] = randBF16Bits(rng) | randBF16Bits(rng)<<16
			b[i] = randBF16Bits(rng) | randBF16Bits(rng)<<16
			if rng.IntN(4) == 0 { // products that nearly cancel acc near 2⁻¹²⁶
				b[i] = 0x3f80 | 0x3f80<<16
				x := toBF16(float32(math.Ldexp(rng.Float64()+1, -126-rng.IntN(3))))
				a[i] = uint32(x) | uint32(x^0x8000)<<16
			}
			want[i] = dot2(acc[i], a[i], b[i])
		}
		got := acc
		step(&got[0], &a[0], &b[0])
		for i := range got {
			g, w := got[i], want[i]
			if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
				t.Fatalf("acc %v (%#08x), a %#08x, b %#08x: %s %v (%#08x), dot2 %v (%#08x)",
					acc[i], math.Float32bits(acc[i]), a[i], b[i], name, g, math.Float32bits(g), w, math.Float32bits(w))
			}
		}
	}
}

// TestVCVTNE2PS2BF16 checks that toBF16 rounds as the instruction does,
// on the cases of TestToBF16 and random bit patterns.
func TestVCVTNE2PS2BF16(t *testing.T) {
	needAVX512BF16(t)
	rng := rand.New(rand.NewPCG(83, 84))
	special := []uint32{0x3f808000, 0x3f818000, 0x7f7fffff, 0x7f800001, 0xff810000, 0x00000001, 0x807fffff, 0x0080ffff, 0x7fffffff}
	var lo, hi [16]float32
	var dst [16]uint32
	for it := 0; it < 2000; it++ {
		for i := range lo {
			lo[i] = math.Float32frombits(rng.Uint32())
			hi[i] = math.Float32frombits(rng.Uint32())
			if it == 0 && i < len(special) {
				lo[i] = math.Float32frombits(special[i])
			}
		}
		vcvtne2ps2bf16Vec(&dst[0], &lo[0], &hi[0])
		for i := range 32 {
			src := lo[:]
			if i >= 16 {
				src = hi[:]
			}
			got := BF16(dst[i/2] >> (16 * (i % 2)))
			if want := toBF16(src[i%16]); got != want {
				t.Fatalf("%#08x: VCVTNE2PS2BF16 %#04x, toBF16 %#04x", math.Float32bits(src[i%16]), got, want)
			}
		}
	}
}

// BenchmarkPeak measures bare loops of VDPBF16PS and of float32 FMAs on
// zmm registers (ymm where the CPU lacks AVX-512) on one thread: what the
// units reach with no memory traffic, for comparison with the GEMM rates.
func BenchmarkPeak(b *testing.B) {
	if name, flops, loop := peakFMA(); loop != nil {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				loop()
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
		})
	}
	b.Run("vdpbf16ps", func(b *testing.B) {
		if !cpu.X86.HasAVX512BF16 {
			b.Skip("this CPU has no AVX512_BF16")
		}
		for b.Loop() {
			vdpbf16psLoop(1000)
		}
		b.ReportMetric(24*1000*64*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
	})
}

// BenchmarkPeakAMX measures a bare loop of TDPBF16PS on one thread (four
// independent accumulator tiles, 16·16·32·2 flops per instruction): what
// the tiles reach with no memory traffic.
func BenchmarkPeakAMX(b *testing.B) {
	if !cpu.X86.HasAMXBF16 || !cpu.X86.HasAMXTile {
		b.Skip("this CPU has no AMX (amx_bf16, amx_tile): the TDPBF16PS loop was not run")
	}
	if !amxPermitted() {
		b.Skip("the OS refused the AMX tiles")
	}
	for b.Loop() {
		tdpbf16psLoop(&amxConfig[0], 1000)
	}
	b.ReportMetric(4*1000*16*16*32*2*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
}

// BenchmarkPeakCores runs the bare loops of BenchmarkPeak and
// BenchmarkPeakAMX on one goroutine and then on GOMAXPROCS at once, and
// reports the rate of all of them together (GFLOPS) and, as core-%, what
// each core keeps of the rate it reaches alone: below 100 where a server
// lowers its clock with more cores busy, the ceiling of any speedup on
// them, whatever the software does.
//
//	go test -run '^$' -bench PeakCores -cpu 16 ./blas
func BenchmarkPeakCores(b *testing.B) {
	type loop struct {
		name  string
		flops float64 // one call's
		run   func()
	}
	var loops []loop
	if name, flops, f := peakFMA(); f != nil {
		loops = append(loops, loop{name, flops, f})
	}
	if f := peakAMXLoop(); f != nil {
		loops = append(loops, loop{"tdpbf16ps", peakAMXFlops, f})
	}
	// rate times calls calls of run on each of p goroutines, the best of
	// five, and returns the flops a second of all of them.
	rate := func(run func(), flops float64, p, calls int) float64 {
		best := time.Hour
		for range 5 {
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range p {
				wg.Go(func() {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					<-start
					for range calls {
						run()
					}
				})
			}
			t0 := time.Now()
			close(start)
			wg.Wait()
			best = min(best, time.Since(t0))
		}
		return flops * float64(p*calls) / best.Seconds()
	}
	for _, l := range loops {
		b.Run(l.name, func(b *testing.B) {
			p := runtime.GOMAXPROCS(0)
			var one, all float64
			for b.Loop() {
				one = rate(l.run, l.flops, 1, 2000)
				all = rate(l.run, l.flops, p, 2000)
			}
			b.ReportMetric(all/1e9, "GFLOPS")
			b.ReportMetric(100*all/(float64(p)*one), "core-%")
		})
	}
}

// BenchmarkTilesAMX times the tile kernel alone (tilesAMX), operands
// already packed and in the caches, for a row block of 32 rows by 1 to
// 16 strips over 1 to 32 chunks of k, each way a call ends: C stored
// whole (direct), partial sums stored, and partial sums loaded and
// stored. It reports GFLOPS and the fraction of the bare TDPBF16PS loop
// timed in the same run: what the kernel reaches before A is converted
// and C leaves the caches. The sketch networks' products have 1 or 2
// chunks, or one strip; a k block of a large product has 8 chunks.
// Each timing is of 16 calls, the shortest of which take 100 ns.
// go test -run '^$' -bench TilesAMX -cpu 1 ./blas
func BenchmarkTilesAMX(b *testing.B) {
	const calls = 16
	if !cpu.X86.HasAMXBF16 || !cpu.X86.HasAMXTile || !amxPermitted() {
		b.Skip("no AMX tiles here (amx_bf16, amx_tile, or the OS refused them)")
	}
	peak := peakAMXLoop()
	modes := []struct {
		name string
		mode int
	}{{"direct", amxDirect}, {"store", amxStore}, {"load-store", amxLoad | amxStore}}
	for _, chunks := range []int{1, 2, 8, 32} {
		for _, ns := range []int{1, 4, 16} {
			for _, m := range modes {
				a := make([]uint32, chunks*chunkWords)
				bs := chunks * 512
				bb := make([]uint32, ns*bs)
				for i := range a {
					a[i] = 0x3f803f80 // pairs of 1s
				}
				for i := range bb {
					bb[i] = 0x3f803f80
				}
				acc := make([]float32, ns*1024)
				c := make([]float32, 32*32*ns)
				tmp := make([]float32, 1024)
				var cv amxConvert
				b.Run(fmt.Sprintf("chunks=%d/strips=%d/%s", chunks, ns, m.name), func(b *testing.B) {
					best, loop := time.Hour, time.Hour
					for b.Loop() {
						t0 := time.Now()
						for range calls {
							tilesAMX(a, bb, bs, ns, chunks, acc, m.mode, c, 32*ns, 32, 1, 0, colMask(32), tmp, &cv)
						}
						best = min(best, time.Since(t0)/calls)
						t0 = time.Now()
						peak()
						loop = min(loop, time.Since(t0))
					}
					gflops := 2 * 32 * 32 * 32 * float64(chunks*ns) / best.Seconds() / 1e9
					b.ReportMetric(gflops, "GFLOPS")
					b.ReportMetric(100*gflops/(peakAMXFlops/loop.Seconds()/1e9), "loop-%")
				})
			}
		}
	}
}

// TestTDPBF16PS checks that amxEmulated, the model of TDPBF16PS that
// the tests on CPUs without AMX run, computes what the AMX kernel does,
// bit for bit: operands whose sums round differently in each order of
// addition (so that the order the model claims is the instruction's),
// and operands over the whole exponent range with zeros, Infs and NaNs
// (so that sums overflow, flush and meet Inf of either sign); partial
// sums loaded and stored; ragged rows, strips and column masks; alpha
// and beta, and NaNs in C at beta 0.
func TestTDPBF16PS(t *testing.T) {
	if !cpu.X86.HasAMXBF16 || !cpu.X86.HasAMXTile {
		t.Skip("this CPU has no AMX (amx_bf16, amx_tile): the instruction was not run (TestGemmBF16Tiles runs the tile driver on amxEmulated)")
	}
	if !amxPermitted() {
		t.Skip("the OS refused the AMX tiles")
	}
	rng := rand.New(rand.NewPCG(85, 86))
	mid := func() uint32 { // exponents 2⁻⁷..2⁸: sums that round
		return uint32(rng.IntN(2))<<15 | uint32(120+rng.IntN(16))<<7 | uint32(rng.IntN(128))
	}
	n := 400
	if testing.Short() {
		n = 80
	}
	for it := 0; it < n; it++ {
		gen := mid
		if it%2 == 1 {
			gen = func() uint32 { return randBF16Bits(rng) }
		}
		chunks, nstrips, rows := 1+rng.IntN(4), 1+rng.IntN(3), 1+rng.IntN(amxBlock)
		cols := 1 + rng.IntN(nrBF16)
		a := make([]uint32, chunks*chunkWords)
		for i := range a {
			a[i] = gen() | gen()<<16
		}
		bs := (chunks + rng.IntN(2)) * chunkWords
		b := make([]uint32, nstrips*bs)
		for i := range b {
			b[i] = gen() | gen()<<16
		}
		mode := []int{0, amxStore, amxLoad | amxStore, amxLoad}[rng.IntN(4)]
		alpha, beta := float32(1), float32(0)
		switch rng.IntN(3) {
		case 0:
			alpha, beta = -0.75, 1.5
			mode |= amxBeta
		case 1:
			if rng.IntN(2) == 0 {
				rows, cols = amxBlock, nrBF16
			}
			if rows == amxBlock {
				mode |= amxDirect
			}
		}
		acc := make([]float32, nstrips*1024)
		for i := range acc {
			acc[i] = math.Float32frombits(gen()<<16 | uint32(rng.IntN(1<<16)))
		}
		ldc := nstrips*nrBF16 + 3
		c := make([]float32, amxBlock*ldc)
		for i := range c {
			c[i] = float32(rng.NormFloat64())
			if beta == 0 {
				c[i] = float32(math.NaN())
			}
		}
		want, wantAcc := append([]float32(nil), c...), append([]float32(nil), acc...)
		got, gotAcc := append([]float32(nil), c...), append([]float32(nil), acc...)
		mask := colMask(cols)
		tmp := make([]float32, amxBlock*nrBF16)
		amxEmulated(a, b, bs, nstrips, chunks, wantAcc, mode, want, ldc, rows, alpha, beta, mask, tmp, nil)
		// What the kernel converts for the next calls (a block of more
		// than 16 rows converts): a next block of A, 32 rows of 1 to 6
		// chunks from a matrix with more columns than that; or pairs of
		// B's rows, 1 to 40 pairs of 1 to 5 strips from a larger B, into
		// strips of 16 or more pair rows (amxEmulated converts both as
		// the Go packing does).
		var cv amxConvert
		var next, wantNext []uint32
		kind := "the next block of A"
		if rows > amxBlock/2 {
			if rng.IntN(2) == 0 {
				cc := 1 + rng.IntN(6)
				src := General{Rows: 40, Cols: 32*cc + 40, Stride: 32*cc + 45}
				src.Data = randSlice(rng, src.Rows*src.Stride)
				i0, c0 := rng.IntN(9), rng.IntN(2)
				next = make([]uint32, cc*chunkWords)
				cv.set(src, i0, c0, c0+cc, next, 1+rng.IntN(4))
			} else {
				kind = "B's pairs"
				pairs, ns := 1+rng.IntN(40), 1+rng.IntN(5)
				src := General{Rows: 2*pairs + 5, Cols: nrBF16*ns + 7, Stride: nrBF16*ns + 9}
				src.Data = randSlice(rng, src.Rows*src.Stride)
				for i := range src.Data {
					if rng.IntN(50) == 0 { // rounding's special values too
						src.Data[i] = []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0x1p-140}[rng.IntN(4)]
					}
				}
				k0, j0, stride := rng.IntN(5), rng.IntN(7), nrBF16*(pairs+rng.IntN(3))
				next = make([]uint32, ns*stride)
				cv.setPairs(src.Slice(k0, k0+2*pairs, j0, j0+nrBF16*ns), next, stride)
			}
			wantNext = append([]uint32(nil), next...)
			wantCv := cv
			wantCv.dst = wantNext
			amxEmulated(a, b, bs, nstrips, chunks, append([]float32(nil), acc...), mode, append([]float32(nil), c...), ldc, rows, alpha, beta, mask, tmp, &wantCv)
		}
		tilesAMX(a, b, bs, nstrips, chunks, gotAcc, mode, got, ldc, rows, alpha, beta, mask, tmp, &cv)
		if cv.state[0] != 0 {
			t.Fatalf("case %d: the kernel returned with %s unconverted", it, kind)
		}
		for i := range next {
			if next[i] != wantNext[i] {
				t.Fatalf("case %d: %s converted by the kernel: word %d is %#08x, the Go packing %#08x", it, kind, i, next[i], wantNext[i])
			}
		}
		what := fmt.Sprintf("case %d (%d chunks, %d strips, %d rows, %d columns in the last strip, mode %#x, alpha %v, beta %v)", it, chunks, nstrips, rows, cols, mode, alpha, beta)
		for i := range got {
			g, w := got[i], want[i]
			if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w && i/ldc < rows && i%ldc < (nstrips-1)*nrBF16+cols) {
				t.Fatalf("%s: C[%d,%d] = %v (%#08x), model %v (%#08x)", what, i/ldc, i%ldc, g, math.Float32bits(g), w, math.Float32bits(w))
			}
		}
		for i := range gotAcc {
			g, w := gotAcc[i], wantAcc[i]
			if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
				t.Fatalf("%s: partial sum %d = %v (%#08x), model %v (%#08x)", what, i, g, math.Float32bits(g), w, math.Float32bits(w))
			}
		}
	}
}

// amxBF16Name is the amx kernel's name, for the benchmarks that compare
// it with the bare loop.
const amxBF16Name = "amx"

// peakFMA returns the bare float32 FMA loop of the widest vectors this
// CPU has (1000 turns of 24 FMAs), its name and the flops of one call, or
// a nil loop where it has neither AVX-512 nor AVX2 with FMA.
func peakFMA() (name string, flops float64, loop func()) {
	switch {
	case cpu.X86.HasAVX512F:
		return "vfmadd231ps", 24 * 1000 * 32, func() { vfmaddLoop(1000) }
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return "vfmadd231ps-ymm", 24 * 1000 * 16, func() { vfmaddLoopAVX2(1000) }
	}
	return "", 0, nil
}

// peakAMXFlops is the flops of one peakAMXLoop call.
const peakAMXFlops = 4 * 1000 * 16 * 16 * 32 * 2

// peakAMXLoop returns BenchmarkPeakAMX's loop (4000 TDPBF16PS, on tiles
// that hold no data, as a bare loop measures the unit), or nil where the
// CPU or the OS lacks AMX.
func peakAMXLoop() func() {
	if !cpu.X86.HasAMXBF16 || !cpu.X86.HasAMXTile || !amxPermitted() {
		return nil
	}
	return func() { tdpbf16psLoop(&amxConfig[0], 1000) }
}

// TestCPUVendor checks the vendor that picks the kernel order (isAMD)
// against the one Linux reports.
func TestCPUVendor(t *testing.T) {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip("no /proc/cpuinfo to compare with")
	}
	_, rest, ok := strings.Cut(string(info), "vendor_id")
	if !ok {
		t.Skip("/proc/cpuinfo names no vendor_id")
	}
	line, _, _ := strings.Cut(rest, "\n")
	want := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), ":"))
	if got := vendor(); got != want {
		t.Errorf("vendor() = %q, Linux says %q", got, want)
	}
	if amd := want == "AuthenticAMD" || want == "HygonGenuine"; isAMD() != amd {
		t.Errorf("isAMD() = %v on %q", isAMD(), want)
	}
}

// roundings lists the roundings of roundBF16s this CPU runs.
func roundings() map[string]func(dst, src []float32) {
	rs := map[string]func(dst, src []float32){"roundBF16s": roundBF16s}
	if cpu.X86.HasAVX2 {
		rs["roundBF16AVX2"] = func(dst, src []float32) { roundBlocks(roundBF16AVX2, dst, src) }
	}
	if cpu.X86.HasAVX512F {
		rs["roundBF16AVX512"] = func(dst, src []float32) { roundBlocks(roundBF16AVX512, dst, src) }
	}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16 {
		rs["roundBF16CVT"] = func(dst, src []float32) { roundBlocks(roundBF16CVT, dst, src) }
	}
	return rs
}

// isAMDForTest is isAMD, for the portable tests.
func isAMDForTest() bool { return isAMD() }
