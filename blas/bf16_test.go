package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/internal/parallel"
)

// TestToBF16 checks the rounding on values whose expected bits were
// worked out by hand: ties both ways, the carry into the exponent and up
// to Inf, NaNs (made quiet, sign kept), Inf, and denormals (to zero).
func TestToBF16(t *testing.T) {
	cases := []struct {
		in   uint32
		want BF16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0xbfc00000, 0xbfc0}, // -1.5
		{0x3f807fff, 0x3f80}, // just under half an ulp: down
		{0x3f808000, 0x3f80}, // tie, kept part even: down
		{0x3f818000, 0x3f82}, // tie, kept part odd: up
		{0x3f808001, 0x3f81}, // just over half: up
		{0x3fffffff, 0x4000}, // carry into the exponent: 2
		{0x7f7f7fff, 0x7f7f}, // under half: stays finite
		{0x7f7fffff, 0x7f80}, // the largest float32 rounds to Inf
		{0x7f800000, 0x7f80}, // +Inf
		{0xff800000, 0xff80}, // -Inf
		{0x7fc00000, 0x7fc0}, // quiet NaN
		{0x7f800001, 0x7fc0}, // signalling NaN, payload in the dropped bits: made quiet
		{0xff810000, 0xffc1}, // negative NaN keeps sign and payload
		{0x00000000, 0x0000}, // +0
		{0x80000000, 0x8000}, // -0
		{0x00000001, 0x0000}, // smallest denormal: +0
		{0x807fffff, 0x8000}, // largest denormal, negative: -0
		{0x00800000, 0x0080}, // smallest normal stays
		{0x0080ffff, 0x0081}, // smallest normal range, over half: up
	}
	src := make([]float32, len(cases))
	for i, c := range cases {
		src[i] = math.Float32frombits(c.in)
	}
	dst := make([]BF16, len(src)+1)
	dst[len(src)] = 0x1234
	ToBF16(dst, src)
	for i, c := range cases {
		if dst[i] != c.want {
			t.Errorf("ToBF16(%#08x) = %#04x, want %#04x", c.in, dst[i], c.want)
		}
	}
	if dst[len(src)] != 0x1234 {
		t.Errorf("ToBF16 wrote past len(src)")
	}
	if got := BF16(0xc0a0).Float32(); got != -5 {
		t.Errorf("BF16(0xc0a0).Float32() = %v, want -5", got)
	}
}

func bf16Bits(f float32) uint32 { return uint32(toBF16(f)) }

func bf16Pair(lo, hi float32) uint32 { return bf16Bits(lo) | bf16Bits(hi)<<16 }

// dot2Cases are VDPBF16PS steps whose results show the order and the
// rounding of the instruction, the expected sums worked out by hand
// (TestDot2 checks dot2 on them, TestVDPBF16PS the instruction).
var dot2Cases = []struct {
	name string
	acc  float32
	a, b uint32
	want float32
}{
	// 1 + 2²⁴ ties to 2²⁴, then + 1 ties again: the high pair comes
	// first. Low first would give 1+1+2²⁴ = 2²⁴+2 exactly.
	{"high half first", 1, bf16Pair(1, 0x1p24), bf16Pair(1, 1), 0x1p24},
	// 2⁻⁶³·2⁻⁶³ = 2⁻¹²⁶ is the smallest normal; half of it flushes.
	{"smallest normal", 0, bf16Pair(0, 0x1p-63), bf16Pair(0, 0x1p-63), 0x1p-126},
	{"denormal flushed", 0, bf16Pair(0x1p-63, 0), bf16Pair(0x1p-64, 0), 0},
	{"negative denormal flushed", 0, bf16Pair(-0x1p-63, 0), bf16Pair(0x1p-64, 0), float32(math.Copysign(0, -1))},
	// The product is exact: 1.0078125² = 1 + 2⁻⁶ + 2⁻¹⁴ needs 15 bits.
	{"exact product", 0, bf16Pair(0, 1.0078125), bf16Pair(0, 1.0078125), 1 + 0x1p-6 + 0x1p-14},
	// One rounding per product: 2²⁴ + (1+2⁻⁷)·1 = 2²⁴+1.0078125
	// rounds up to 2²⁴+2 (over half an ulp).
	{"fused", 0x1p24, bf16Pair(0, 1.0078125), bf16Pair(0, 1), 0x1p24 + 2},
	// 2⁻¹²⁶+2⁻¹⁴⁹ - 5·2⁻¹⁵¹ = 2⁻¹²⁶ - 2⁻¹⁵¹ lies halfway between the
	// largest 24-bit value below 2⁻¹²⁶ (odd) and 2⁻¹²⁶: rounded as with an
	// unbounded exponent it ties up to the normal 2⁻¹²⁶, so it is not
	// flushed; 6·2⁻¹⁵¹ less rounds below and flushes.
	{"rounds up to the smallest normal", 0x1p-126 + 0x1p-149, bf16Pair(0, -1.25*0x1p-75), bf16Pair(0, 0x1p-74), 0x1p-126},
	{"rounds below the smallest normal", 0x1p-126 + 0x1p-149, bf16Pair(0, -1.5*0x1p-75), bf16Pair(0, 0x1p-74), 0},
	// A denormal accumulator is read as zero of its sign: -0 - x + x = +0
	// (without that, -2⁻¹⁴⁰ - x + x would flush to -0).
	{"denormal accumulator", -0x1p-140, bf16Pair(0x1p-120, -0x1p-120), bf16Pair(1, 1), 0},
	{"overflow to Inf", 0x1p127, bf16Pair(0, 0x1p127), bf16Pair(0, 1), float32(math.Inf(1))},
}

func TestDot2(t *testing.T) {
	for _, c := range dot2Cases {
		got := dot2(c.acc, c.a, c.b)
		if math.Float32bits(got) != math.Float32bits(c.want) {
			t.Errorf("%s: dot2 = %v (%#08x), want %v (%#08x)", c.name, got, math.Float32bits(got), c.want, math.Float32bits(c.want))
		}
	}
}

// eachBF16Kernel runs f with each bf16 kernel this CPU has active.
func eachBF16Kernel(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	defer func(k *bf16Kernel) { activeBF16 = k }(activeBF16)
	for _, kn := range bf16Kernels() {
		activeBF16 = kn
		t.Run(kn.name, f)
	}
}

// views returns p's operands as General views.
func (p *problem) views() (a, b, c General) {
	ar, ac := stored(p.tA, p.m, p.k)
	br, bc := stored(p.tB, p.k, p.n)
	return General{ar, ac, p.lda, p.a}, General{br, bc, p.ldb, p.b}, General{p.m, p.n, p.ldc, p.c}
}

// roundBF16 returns x rounded to bf16, as a float32.
func roundBF16(x float32) float32 { return toBF16(x).Float32() }

// checkBF16 compares got (C after the product) with a float64 product of
// p's operands rounded to bf16. The error bound: each element is a sum
// of k exact products (bf16 products are exact in float32's 24 bits),
// added one at a time with one rounding each (relative error at most
// u = 2⁻²⁴ of the partial sum), then alpha·sum, beta·c and their sum
// rounded once each. That is at most k+3 roundings, and the standard
// bound on such a sum is γ(k+3)·(|alpha|·Σ|a·b| + |beta·c|), with γ(n) =
// n·u/(1−n·u) ≤ 2n·u while n·u ≤ 1/2. Flushing results below 2⁻¹²⁶ to
// zero adds at most 2⁻¹²⁶ per step, (k+1)·2⁻¹²⁶ in all.
func (p *problem) checkBF16(t *testing.T, got []float32) {
	t.Helper()
	const u = 0x1p-24
	bad := 0
	for i := 0; i < p.m; i++ {
		for j := 0; j < p.ldc; j++ {
			g := got[i*p.ldc+j]
			if j >= p.n {
				if g != sentinel {
					t.Errorf("%v: C[%d,%d] outside the view changed to %v", p, i, j, g)
					bad++
				}
				continue
			}
			var s, mag float64
			for q := 0; q < p.k; q++ {
				x := float64(roundBF16(p.at(p.a, p.tA, p.lda, i, q))) * float64(roundBF16(p.at(p.b, p.tB, p.ldb, q, j)))
				s += x
				mag += math.Abs(x)
			}
			want := float64(p.alpha) * s
			mag *= math.Abs(float64(p.alpha))
			if p.beta != 0 {
				old := float64(p.c[i*p.ldc+j])
				want += float64(p.beta) * old
				mag += math.Abs(float64(p.beta) * old)
			}
			tol := 2*float64(p.k+3)*u*mag + float64(p.k+1)*0x1p-126
			if d := math.Abs(float64(g) - want); !(d <= tol) {
				t.Errorf("%v: C[%d,%d] = %v, want %v (tolerance %.3g)", p, i, j, g, want, tol)
				bad++
			}
			if bad > 10 {
				t.FailNow()
			}
		}
	}
}

// at returns op(x)[i, j] for an operand stored with leading dimension ld.
func (p *problem) at(x []float32, tr Transpose, ld, i, j int) float32 {
	if tr == Trans {
		return x[j*ld+i]
	}
	return x[i*ld+j]
}

// bf16Shapes are ragged in every dimension: rows around the tile heights
// (4, 12, 14, 16), columns around the strip width 32, odd and even k.
var bf16Shapes = [][3]int{
	{1, 1, 1}, {1, 33, 7}, {3, 31, 2}, {5, 64, 9}, {13, 17, 40}, {17, 65, 33},
	{2, 100, 64}, {29, 70, 31}, {33, 96, 128}, {50, 40, 3}, {1, 300, 257},
	{1, 128, 37}, // one row by whole groups of 4 strips: AMX's wide code
}

func TestGemmBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 62))
	eachBF16Kernel(t, func(t *testing.T) {
		for _, sh := range bf16Shapes {
			for _, tr := range transposes {
				for _, ab := range [][2]float32{{1, 0}, {1, 1}, {-0.75, 0}, {1.5, -0.5}} {
					for _, pad := range []int{0, 3} {
						p := newProblem(rng, tr[0], tr[1], sh[0], sh[1], sh[2], ab[0], ab[1], pad)
						a, b, c := p.views()
						c.Data = append([]float32(nil), p.c...)
						GemmBF16(p.tA, p.tB, p.alpha, a, b, p.beta, c)
						p.checkBF16(t, c.Data)
					}
				}
			}
		}
	})
}

// TestGemmBF16Large covers products that split over goroutines and
// several row blocks, with a k long enough for rounding to accumulate.
func TestGemmBF16Large(t *testing.T) {
	if testing.Short() {
		t.Skip("slow with the reference in float64; -short runs TestGemmBF16")
	}
	rng := rand.New(rand.NewPCG(63, 64))
	eachBF16Kernel(t, func(t *testing.T) {
		for _, tr := range transposes {
			p := newProblem(rng, tr[0], tr[1], 203, 257, 1031, 0.5, 1, 2)
			a, b, c := p.views()
			c.Data = append([]float32(nil), p.c...)
			GemmBF16(p.tA, p.tB, p.alpha, a, b, p.beta, c)
			p.checkBF16(t, c.Data)
		}
	})
}

// TestGemmBF16Trivial checks the products without multiplications: C is
// scaled by beta (zeroed over NaNs when beta is 0) and A, B not read.
func TestGemmBF16Trivial(t *testing.T) {
	nan := float32(math.NaN())
	for _, beta := range []float32{0, 1, 2} {
		c := General{2, 3, 3, []float32{1, 2, 3, 4, 5, 6}}
		if beta == 0 {
			for i := range c.Data {
				c.Data[i] = nan
			}
		}
		a := General{2, 0, 1, nil}
		b := General{0, 3, 3, nil}
		GemmBF16(NoTrans, NoTrans, 1, a, b, beta, c)
		for i, v := range c.Data {
			want := beta * float32(i+1)
			if v != want {
				t.Errorf("k=0 beta=%v: C[%d] = %v, want %v", beta, i, v, want)
			}
		}
		// alpha 0: A and B hold NaNs that must not be read.
		c = General{2, 3, 3, []float32{1, 2, 3, 4, 5, 6}}
		a = General{2, 2, 2, []float32{nan, nan, nan, nan}}
		b = General{2, 3, 3, []float32{nan, nan, nan, nan, nan, nan}}
		GemmBF16(NoTrans, NoTrans, 0, a, b, beta, c)
		for i, v := range c.Data {
			if want := beta * float32(i+1); v != want {
				t.Errorf("alpha=0 beta=%v: C[%d] = %v, want %v", beta, i, v, want)
			}
		}
	}
}

// TestPackedBF16 checks that a packed B gives the bits of the same B
// given as a General, and that Update repacks in place, without
// allocating, to what PackBF16 makes of the new values.
func TestPackedBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(65, 66))
	eachBF16Kernel(t, func(t *testing.T) {
		for _, sh := range bf16Shapes {
			for _, tr := range transposes {
				p := newProblem(rng, tr[0], tr[1], sh[0], sh[1], sh[2], 1.25, 0.5, 1)
				a, b, c := p.views()
				want := General{c.Rows, c.Cols, c.Stride, append([]float32(nil), p.c...)}
				GemmBF16(p.tA, p.tB, p.alpha, a, b, p.beta, want)

				// Pack other values first, then update to B's.
				other := General{b.Rows, b.Cols, b.Stride, make([]float32, len(b.Data))}
				for i := range other.Data {
					other.Data[i] = float32(rng.NormFloat64())
				}
				pb := PackBF16(p.tB, other)
				if pb.Rows() != p.k || pb.Cols() != p.n {
					t.Fatalf("%v: packed is %d×%d, want %d×%d", p, pb.Rows(), pb.Cols(), p.k, p.n)
				}
				if min := 2 * p.k * p.n; pb.Bytes() < min {
					t.Fatalf("%v: Bytes() = %d < %d", p, pb.Bytes(), min)
				}
				// Under the race detector sync.Pool drops buffers on
				// purpose (see TestSgemmSerialAllocs).
				allocs := testing.AllocsPerRun(2, func() { pb.Update(p.tB, b) })
				if allocs != 0 && !raceEnabled {
					t.Errorf("%v: Update allocates %v times", p, allocs)
				}
				fresh := PackBF16(p.tB, b)
				for i := range fresh.data {
					if fresh.data[i] != pb.data[i] {
						t.Fatalf("%v: updated word %d = %#x, packed afresh %#x", p, i, pb.data[i], fresh.data[i])
					}
				}
				sameBits(t, p.String()+" updated sgemm copy", pb.f32.Data, fresh.f32.Data)
				got := General{c.Rows, c.Cols, c.Stride, append([]float32(nil), p.c...)}
				GemmBF16(p.tA, NoTrans, p.alpha, a, pb, p.beta, got)
				sameBits(t, p.String()+" packed B", got.Data, want.Data)
			}
		}
	})
}

// sameBits fails t unless got and want hold the same bits (any NaN
// matching any NaN).
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		g, w := got[i], want[i]
		if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
			t.Fatalf("%s: element %d = %v (%#08x), want %v (%#08x)", what, i, g, math.Float32bits(g), w, math.Float32bits(w))
		}
	}
}

// TestGemmBF16Determinism checks that results do not depend on
// GOMAXPROCS, and that GemmBF16Serial gives GemmBF16's bits, for B as
// given and packed, on shapes split by rows, by rows and columns, and
// decoding shapes (one or two rows by a packed weight, split by columns).
func TestGemmBF16Determinism(t *testing.T) {
	rng := rand.New(rand.NewPCG(67, 68))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	eachBF16Kernel(t, func(t *testing.T) {
		for _, tr := range transposes {
			for _, s := range [][3]int{{157, 203, 300}, {20, 900, 300}, {1, 1100, 512}, {2, 700, 1000}} {
				p := newProblem(rng, tr[0], tr[1], s[0], s[1], s[2], 1.5, 0.25, 1)
				a, b, c0 := p.views()
				c := c0
				c.Data = append([]float32(nil), p.c...)
				pb := PackBF16(p.tB, b)
				for i, bo := range []Operand{b, pb} {
					tB := p.tB
					if bo == Operand(pb) {
						tB = NoTrans
					}
					want := append([]float32(nil), p.c...)
					GemmBF16Serial(p.tA, tB, p.alpha, a, bo, p.beta, General{c.Rows, c.Cols, c.Stride, want})
					for _, procs := range parallel.TestThreads {
						runtime.GOMAXPROCS(procs)
						c.Data = append([]float32(nil), p.c...)
						GemmBF16(p.tA, tB, p.alpha, a, bo, p.beta, c)
						sameBits(t, fmt.Sprintf("%v GOMAXPROCS=%d packed=%t", p, procs, i == 1), c.Data, want)
					}
				}
			}
		}
	})
}

// TestRowBlockBF16 checks that each row of a product of up to
// RowBlockBF16 rows has the bits of the row computed alone, with B as a
// General and packed.
func TestRowBlockBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(69, 70))
	eachBF16Kernel(t, func(t *testing.T) {
		for _, n := range []int{1, 31, 96, 256, 1000} { // 256: whole groups of 4 strips (AMX's wide code)
			rows := RowBlockBF16(n)
			if rows < 1 {
				t.Fatalf("RowBlockBF16(%d) = %d", n, rows)
			}
			for _, tr := range transposes {
				p := newProblem(rng, tr[0], tr[1], rows, n, 257, 1, 0, 0)
				a, b, c := p.views()
				pb := PackBF16(p.tB, b)
				for _, bop := range []Operand{b, pb} {
					tB := p.tB
					if bop == Operand(pb) {
						tB = NoTrans
					}
					all := c
					all.Data = make([]float32, len(c.Data))
					GemmBF16(p.tA, tB, 1, a, bop, 0, all)
					for i := 0; i < rows; i++ {
						// Row i alone: op(A)'s row i as a 1×k view.
						ai := General{1, p.k, p.k, make([]float32, p.k)}
						for q := 0; q < p.k; q++ {
							ai.Data[q] = p.at(p.a, p.tA, p.lda, i, q)
						}
						ci := General{1, n, n, make([]float32, n)}
						GemmBF16(NoTrans, tB, 1, ai, bop, 0, ci)
						sameBits(t, fmt.Sprintf("%v row %d of %d (%T)", p, i, rows, bop), ci.Data, all.Data[i*n:(i+1)*n])
					}
				}
			}
		}
	})
}

func TestGemmBF16SerialAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers")
	}
	rng := rand.New(rand.NewPCG(71, 72))
	eachBF16Kernel(t, func(t *testing.T) {
		for _, tr := range transposes {
			p := newProblem(rng, tr[0], tr[1], 67, 131, 64, 1, 1, 0)
			a, b, c := p.views()
			pb := PackBF16(p.tB, b)
			for _, bop := range []Operand{b, pb} {
				tB := p.tB
				if bop == Operand(pb) {
					tB = NoTrans
				}
				n := testing.AllocsPerRun(10, func() { GemmBF16Serial(p.tA, tB, 1, a, bop, 1, c) })
				if n != 0 {
					t.Errorf("%v (%T): %v allocations per call, want 0", p, bop, n)
				}
			}
		}
	})
}

// TestGemmBF16BadInput checks that bad shapes panic with a message
// naming what is wrong.
func TestGemmBF16BadInput(t *testing.T) {
	a := General{2, 3, 3, make([]float32, 6)}
	b := General{3, 4, 4, make([]float32, 12)}
	c := General{2, 4, 4, make([]float32, 8)}
	pb := PackBF16(NoTrans, b)
	cases := []struct {
		name, want string
		f          func()
	}{
		{"inner", "inner or outer", func() { GemmBF16(NoTrans, Trans, 1, a, b, 0, c) }},
		{"rows", "want 2 rows", func() { GemmBF16(Trans, NoTrans, 1, a, b, 0, c) }},
		{"short c", "len(Data)=7", func() { GemmBF16(NoTrans, NoTrans, 1, a, b, 0, General{2, 4, 4, make([]float32, 7)}) }},
		{"stride", "Stride=2 < 3", func() { GemmBF16(NoTrans, NoTrans, 1, General{2, 3, 2, make([]float32, 6)}, b, 0, c) }},
		{"negative", "negative", func() { GemmBF16(NoTrans, NoTrans, 1, General{-1, 3, 3, nil}, b, 0, c) }},
		{"transpose", "bad tA", func() { GemmBF16('x', NoTrans, 1, a, b, 0, c) }},
		{"packed A", "only b may be packed", func() { GemmBF16(NoTrans, NoTrans, 1, pb, b, 0, c) }},
		{"packed transposed", "tB=T with a packed b", func() { GemmBF16(NoTrans, Trans, 1, a, pb, 0, c) }},
		{"nil packed", "nil *PackedBF16", func() { GemmBF16(NoTrans, NoTrans, 1, a, (*PackedBF16)(nil), 0, c) }},
		{"update shape", "want the packed 3×4", func() { pb.Update(Trans, b) }},
		{"ToBF16", "len(dst)=1 < len(src)=2", func() { ToBF16(make([]BF16, 1), make([]float32, 2)) }},
	}
	for _, cs := range cases {
		func() {
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if r == nil || !strings.Contains(msg, cs.want) {
					t.Errorf("%s: panic %v, want one containing %q", cs.name, r, cs.want)
				}
			}()
			cs.f()
		}()
	}
}

func TestKernelBF16(t *testing.T) {
	switch KernelBF16() {
	case "go", "sgemm", "avx512fma", "avx512bf16", "amx":
	default:
		t.Errorf("KernelBF16() = %q", KernelBF16())
	}
	// The code each shape takes, kernel by kernel.
	defer func(k *bf16Kernel) { activeBF16 = k }(activeBF16)
	want := map[string][3]string{ // 1 row, RowBlockBF16 rows, one more
		"go":         {"go", "go", "go"},
		"sgemm":      {"sgemm", "sgemm", "sgemm"},
		"avx512bf16": {"avx512bf16", "avx512bf16", "avx512bf16"},
		"avx512fma":  {"avx512bf16", "avx512fma", "avx512fma"},
		"amx":        {"amx", "amx", "amx"},
	}
	for _, kn := range bf16Kernels() {
		activeBF16 = kn
		// Faster than float32: AMX tiles, and VDPBF16PS on AMD alone.
		if got, want := FasterBF16(), kn.name == "amx" || kn.name == "avx512bf16" && isAMDForTest(); got != want {
			t.Errorf("%s: FasterBF16() = %t, want %t", kn.name, got, want)
		}
		for i, m := range []int{1, rowBlockBF16, rowBlockBF16 + 1} {
			if got := KernelBF16For(m, 256, 256); got != want[kn.name][i] {
				t.Errorf("%s: KernelBF16For(%d, 256, 256) = %q, want %q", kn.name, m, got, want[kn.name][i])
			}
		}
	}
}

// wildBF16 fills s with operands whose magnitudes span 2⁻⁷⁰ to 2^maxExp
// with NaNs, Infs, zeros and denormals among them. At maxExp 70 products
// overflow float32; at 50 no sum of fewer than 2¹⁰ of them does.
func wildBF16(rng *rand.Rand, s []float32, maxExp int) {
	for i := range s {
		switch rng.IntN(64) {
		case 0:
			s[i] = float32(math.Inf(1 - 2*rng.IntN(2)))
		case 1:
			s[i] = float32(math.NaN())
		case 2:
			s[i] = math.Float32frombits(uint32(rng.IntN(1 << 23))) // denormal
		case 3:
			s[i] = 0
		default:
			s[i] = float32(math.Ldexp(rng.NormFloat64(), rng.IntN(maxExp+71)-70))
		}
	}
}

// agreeShapes are bf16Shapes and some that take more than one AMX chunk
// and strip, of more than RowBlockBF16 rows, and one row by whole groups
// of 4 strips (AMX's wide code), whole chunks of k and a partial last one.
var agreeShapes = append(bf16Shapes, [3]int{3, 512, 100}, [3]int{2, 257, 64}, [3]int{40, 300, 77}, [3]int{70, 65, 100},
	[3]int{1, 256, 512}, [3]int{1, 384, 101})

// sgemmShapes take the paths of Sgemm that agreeShapes do not: few
// columns, narrow B, few rows, split by k.
var sgemmShapes = [][3]int{{300, 4, 64}, {500, 64, 200}, {8, 700, 300}, {64, 300, 2000}, {400, 96, 96}}

// eachAgreeCase runs f on the products of TestBF16KernelsAgree,
// TestBF16SpecialValues and TestGemmBF16Sgemm: C of each shape computed
// by each kernel of ks in turn, with B as a General and then packed, on
// operands made by wildBF16 up to 2^maxExp.
func eachAgreeCase(t *testing.T, shapes [][3]int, ks []*bf16Kernel, maxExp int, f func(p *problem, kn *bf16Kernel, bop Operand, got []float32)) {
	t.Helper()
	rng := rand.New(rand.NewPCG(73, 74))
	defer func(k *bf16Kernel) { activeBF16 = k }(activeBF16)
	for _, sh := range shapes {
		for _, tr := range transposes {
			for _, ab := range [][2]float32{{1, 0}, {-0.75, 1.5}} {
				p := newProblem(rng, tr[0], tr[1], sh[0], sh[1], sh[2], ab[0], ab[1], 1)
				wildBF16(rng, p.a, maxExp)
				wildBF16(rng, p.b, maxExp)
				a, b, c := p.views()
				for _, kn := range ks {
					activeBF16 = kn
					for _, bop := range []Operand{b, PackBF16(p.tB, b)} {
						tB := p.tB
						if _, ok := bop.(*PackedBF16); ok {
							tB = NoTrans
						}
						got := append([]float32(nil), c.Data...)
						GemmBF16(p.tA, tB, p.alpha, a, bop, p.beta, General{c.Rows, c.Cols, c.Stride, got})
						f(p, kn, bop, got)
					}
				}
			}
		}
	}
}

// TestBF16KernelsAgree checks that every kernel this CPU runs computes
// each product in the order of addition it claims, bit for bit, on
// operands that make sums cancel, flush and overflow, NaNs and Infs
// among them: the portable kernel's bits (dot2's order), or for products
// on a kernel with tiles, the bits of the
// portable kernel on emulated tiles (TDPBF16PS's order; TestTDPBF16PS
// checks the model against the instruction). Kernels of different orders
// differ in last bits and, where partial sums overflow, in special
// values; TestBF16SpecialValues checks what they share.
func TestBF16KernelsAgree(t *testing.T) {
	emu := emulatedTiles()
	asm, _ := asmBF16Kernels()
	ks := append([]*bf16Kernel{goBF16, emu}, asm...)
	var want, wantTiles []float32
	eachAgreeCase(t, agreeShapes, ks, 70, func(p *problem, kn *bf16Kernel, bop Operand, got []float32) {
		if _, general := bop.(General); general {
			switch kn {
			case goBF16:
				want = got
				return
			case emu:
				wantTiles = got
			}
		}
		ref, order := want, goBF16.name
		if kn.tiles != nil {
			ref, order = wantTiles, emu.name
		}
		sameBits(t, fmt.Sprintf("%v: %s (%T) vs %s", p, kn.name, bop, order), got, ref)
	})
}

// TestBF16SpecialValues checks that all kernels, on tiles, off and
// sgemm, agree on which elements of C are NaN, +Inf, -Inf or finite when no
// partial sum overflows: NaN and Inf operands, Inf·0 and Inf−Inf then
// decide alike in any order of addition.
func TestBF16SpecialValues(t *testing.T) {
	asm, _ := asmBF16Kernels()
	ks := append([]*bf16Kernel{goBF16, emulatedTiles(), sgemmBF16}, asm...)
	class := func(x float32) string {
		switch {
		case x != x:
			return "NaN"
		case math.IsInf(float64(x), 1):
			return "+Inf"
		case math.IsInf(float64(x), -1):
			return "-Inf"
		}
		return "finite"
	}
	var want []float32
	specials := 0
	eachAgreeCase(t, agreeShapes, ks, 50, func(p *problem, kn *bf16Kernel, bop Operand, got []float32) {
		if _, general := bop.(General); general && kn == goBF16 {
			want = got
			for _, x := range got {
				if class(x) != "finite" {
					specials++
				}
			}
			return
		}
		for i := range want {
			if g, w := class(got[i]), class(want[i]); g != w {
				t.Fatalf("%v: %s (%T): C[%d,%d] = %v (%s), go %v (%s)", p, kn.name, bop, i/p.ldc, i%p.ldc, got[i], g, want[i], w)
			}
		}
	})
	if specials == 0 {
		t.Error("no product had a special value in C: the operands test nothing")
	}
}

// TestBF16TinySums checks that every kernel but sgemm flushes sums below 2⁻¹²⁶ to
// zero at every step, as the instructions do, decoding's wide codes too:
// products of about 2⁻¹⁴⁰, so that every partial sum is tiny, give zeros
// of the signs their kernel's order of addition gives them (the portable
// kernel's, or on tiles the emulated tiles').
func TestBF16TinySums(t *testing.T) {
	rng := rand.New(rand.NewPCG(77, 78))
	defer func(k *bf16Kernel) { activeBF16 = k }(activeBF16)
	tiny := func(s []float32) {
		for i := range s {
			s[i] = float32(math.Ldexp((rng.Float64()+0.5)*float64(1-2*rng.IntN(2)), -70))
		}
	}
	emu := emulatedTiles()
	for _, sh := range [][3]int{{1, 256, 64}, {1, 128, 37}, {1, 200, 50}, {2, 96, 64}, {16, 64, 40}, {40, 33, 70}} {
		p := newProblem(rng, NoTrans, NoTrans, sh[0], sh[1], sh[2], 1, 0, 0)
		tiny(p.a)
		tiny(p.b)
		a, b, c := p.views()
		pb := PackBF16(NoTrans, b)
		run := func(kn *bf16Kernel, bop Operand) []float32 {
			activeBF16 = kn
			got := make([]float32, len(c.Data))
			GemmBF16(NoTrans, NoTrans, 1, a, bop, 0, General{c.Rows, c.Cols, c.Stride, got})
			return got
		}
		want, wantTiles := run(goBF16, b), run(emu, b)
		for _, kn := range bf16Kernels() {
			if kn.sgemm {
				continue // Sgemm does not flush (TestGemmBF16Sgemm checks its bits)
			}
			for _, bop := range []Operand{b, pb} {
				got := run(kn, bop)
				ref := want
				if kn.tiles != nil {
					ref = wantTiles
				}
				what := fmt.Sprintf("%v: %s (%T)", p, kn.name, bop)
				for i, x := range got {
					if x != 0 {
						t.Fatalf("%s: element %d = %v, want a zero: every partial sum is below 2⁻¹²⁶", what, i, x)
					}
				}
				sameBits(t, what, got, ref)
			}
		}
	}
}

// TestRoundBF16s checks the roundings of the sgemm kernel's operands
// (each this CPU runs, see roundings) against toBF16, element by element, on
// every run length up to 70 and random bits, with each kind of special
// value and the carries of rounding (ties both ways, up to Inf) placed
// among them, in place and not.
func TestRoundBF16s(t *testing.T) {
	rng := rand.New(rand.NewPCG(79, 80))
	edges := []uint32{0, 0x80000000, 1, 0x807fffff, 0x00800000, 0x7f7fffff, 0xff7f8000, 0x7f800000, 0xff800000,
		0x7f800001, 0xffc00000, 0x7fbfffff, 0x3f808000, 0x3f818000, 0x3f80ffff, 0xbf7fffff, 0x7f7f7fff}
	for n := 0; n <= 70; n++ {
		for rep := 0; rep < 20; rep++ {
			src := make([]float32, n)
			for i := range src {
				u := rng.Uint32()
				if rng.IntN(3) == 0 {
					u = edges[rng.IntN(len(edges))]
				}
				src[i] = math.Float32frombits(u)
			}
			for name, round := range roundings() {
				dst := make([]float32, n)
				round(dst, src)
				inPlace := append([]float32(nil), src...)
				round(inPlace, inPlace)
				for i, x := range src {
					want := uint32(toBF16(x)) << 16
					for _, got := range []float32{dst[i], inPlace[i]} {
						if math.Float32bits(got) != want {
							t.Fatalf("n=%d: %s(%#08x) = %#08x, want %#08x", n, name, math.Float32bits(x), math.Float32bits(got), want)
						}
					}
				}
			}
		}
	}
}

// TestGemmBF16Sgemm checks that the sgemm kernel gives, bit for bit,
// Sgemm's product of the operands rounded to bf16 beforehand by toBF16,
// on every path of Sgemm (agreeShapes and sgemmShapes take the packed
// one, serial, split and by k, and the forms of few rows, few columns and
// narrow B), with B
// as a General and packed, operands with NaNs, Infs, denormals and
// overflowing products.
func TestGemmBF16Sgemm(t *testing.T) {
	round := func(g General) General {
		r := make([]float32, len(g.Data))
		for i, x := range g.Data {
			r[i] = roundBF16(x)
		}
		return General{g.Rows, g.Cols, g.Stride, r}
	}
	eachAgreeCase(t, append(agreeShapes[:len(agreeShapes):len(agreeShapes)], sgemmShapes...), []*bf16Kernel{sgemmBF16}, 70, func(p *problem, _ *bf16Kernel, bop Operand, got []float32) {
		a, b, c := p.views()
		want := append([]float32(nil), c.Data...)
		Sgemm(p.tA, p.tB, p.alpha, round(a), round(b), p.beta, General{c.Rows, c.Cols, c.Stride, want})
		sameBits(t, fmt.Sprintf("%v (%T)", p, bop), got, want)
	})
}

// TestPackedBF16OtherKernel checks that a B packed while one kernel was
// in use gives, with another, the bits of the same B as a General: the
// sgemm kernel's rounded copy and the others' pairs read across.
func TestPackedBF16OtherKernel(t *testing.T) {
	rng := rand.New(rand.NewPCG(83, 84))
	defer func(k *bf16Kernel) { activeBF16 = k }(activeBF16)
	for _, sh := range bf16Shapes {
		for _, tr := range transposes {
			p := newProblem(rng, tr[0], tr[1], sh[0], sh[1], sh[2], 1, 0.5, 1)
			a, b, c := p.views()
			for _, pair := range [][2]*bf16Kernel{{goBF16, sgemmBF16}, {sgemmBF16, goBF16}} {
				activeBF16 = pair[0]
				pb := PackBF16(p.tB, b)
				activeBF16 = pair[1]
				want := append([]float32(nil), c.Data...)
				GemmBF16(p.tA, p.tB, p.alpha, a, b, p.beta, General{c.Rows, c.Cols, c.Stride, want})
				got := append([]float32(nil), c.Data...)
				GemmBF16(p.tA, NoTrans, p.alpha, a, pb, p.beta, General{c.Rows, c.Cols, c.Stride, got})
				sameBits(t, fmt.Sprintf("%v packed for %s, used by %s", p, pair[0].name, pair[1].name), got, want)
			}
		}
	}
}
