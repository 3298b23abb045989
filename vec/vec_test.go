package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The lengths every kernel is tried at: every length up to 70, which takes
// each kernel set through its unrolled loop, its loop over one vector and
// every length of its masked tail (up to 7 lanes of 8 for AVX2, 15 of 16
// for AVX-512), and a few long ones.
var lengths = func() []int {
	var ns []int
	for n := range 71 {
		ns = append(ns, n)
	}
	return append(ns, 255, 1000, 4099)
}()

// eps is the unit roundoff of float32.
const eps = 1.0 / (1 << 24)

var (
	inf  = float32(math.Inf(1))
	nan  = float32(math.NaN())
	ninf = float32(math.Inf(-1))
)

// paths runs f on each set of kernels, whatever POLYSKETCH_NOASM says: the
// portable one, and each assembly set where this CPU and build run it. A
// set they cannot run shows as a skipped subtest that says why.
func paths(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := use
	defer func() { use = saved }()
	have := impls()
	for _, im := range []impl{implGo, implAVX2, implAVX512} {
		t.Run(im.String(), func(t *testing.T) {
			if !slices.Contains(have, im) {
				t.Skipf("%s kernels not tested: they need %s, which this CPU or build (purego, or not amd64) lacks", im, im.needs())
			}
			use = im
			f(t)
		})
	}
}

// needs says what an impl needs to run.
func (i impl) needs() string {
	switch i {
	case implAVX2:
		return "amd64 with AVX2 and FMA"
	case implAVX512:
		return "amd64 with AVX-512F, BMI2, AVX2 and FMA"
	}
	return "nothing"
}

// arena hands out slices at a given offset from a 32-byte boundary (when
// off is 1, every vector load is unaligned) followed by guard elements that
// no kernel may write.
type arena struct {
	bufs [][]float32
	ns   []int
	off  int
}

const guards = 9

func (a *arena) slice(n int) []float32 {
	buf := make([]float32, a.off+n+guards)
	for i := range buf {
		buf[i] = 12345
	}
	a.bufs = append(a.bufs, buf)
	a.ns = append(a.ns, n)
	return buf[a.off : a.off+n : a.off+n]
}

func (a *arena) check(t *testing.T) {
	t.Helper()
	for k, buf := range a.bufs {
		for i, v := range buf {
			if (i < a.off || i >= a.off+a.ns[k]) && v != 12345 {
				t.Fatalf("slice %d: wrote outside the slice at %d (offset %d, length %d)", k, i-a.off, a.off, a.ns[k])
			}
		}
	}
}

// cases runs f for every length and both alignments.
func cases(t *testing.T, f func(t *testing.T, n int, a *arena, rng *rand.Rand)) {
	t.Helper()
	for _, n := range lengths {
		for _, off := range []int{0, 1} {
			t.Run(fmt.Sprintf("n=%d/off=%d", n, off), func(t *testing.T) {
				a := &arena{off: off}
				f(t, n, a, rand.New(rand.NewPCG(uint64(n), uint64(off))))
				a.check(t)
			})
		}
	}
}

func fill(rng *rand.Rand, x []float32, lo, hi float64) []float32 {
	for i := range x {
		x[i] = float32(lo + (hi-lo)*rng.Float64())
	}
	return x
}

func gamma(n int) float64 { return float64(n) * eps / (1 - float64(n)*eps) }

func same(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }

func TestDotSum(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			x, y := fill(rng, a.slice(n), -1, 1), fill(rng, a.slice(n), -1, 1)
			var dot, abs, sum, sumAbs float64
			for i := range x {
				p := float64(x[i]) * float64(y[i])
				dot += p
				abs += math.Abs(p)
				sum += float64(x[i])
				sumAbs += math.Abs(float64(x[i]))
			}
			// Whatever the order of the additions, the error is at most
			// γ_n·Σ|terms|.
			if got := Dot(x, y); math.Abs(float64(got)-dot) > gamma(n+1)*abs {
				t.Errorf("Dot = %g, want %g ± %g", got, dot, gamma(n+1)*abs)
			}
			if got := Sum(x); math.Abs(float64(got)-sum) > gamma(n)*sumAbs {
				t.Errorf("Sum = %g, want %g ± %g", got, sum, gamma(n)*sumAbs)
			}
			// Small integers add exactly, in any order: every element,
			// tails included, must be counted once.
			for i := range x {
				x[i], y[i] = float32(i%7-3), float32(i%5+1)
			}
			var idot, isum float32
			for i := range x {
				idot += x[i] * y[i]
				isum += x[i]
			}
			if got := Dot(x, y); got != idot {
				t.Errorf("Dot of integers = %g, want %g", got, idot)
			}
			if got := Sum(x); got != isum {
				t.Errorf("Sum of integers = %g, want %g", got, isum)
			}
		})
	})
}

// TestReductionsAlignment checks that the order of the additions depends on
// the length only, not on where the slice starts.
func TestReductionsAlignment(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		buf := fill(rng, make([]float32, 1100), -1, 1)
		y := fill(rng, make([]float32, 1100), -1, 1)
		x0 := make([]float32, 1000)
		for off := 1; off < 9; off++ {
			x := buf[off : off+1000]
			copy(x0, x)
			if a, b := Sum(x), Sum(x0); !same(a, b) {
				t.Errorf("offset %d: Sum = %g, at offset 0 %g", off, a, b)
			}
			if a, b := Dot(x, y[:1000]), Dot(x0, y[:1000]); !same(a, b) {
				t.Errorf("offset %d: Dot = %g, at offset 0 %g", off, a, b)
			}
			m1, v1 := MeanVar(x)
			m2, v2 := MeanVar(x0)
			if !same(m1, m2) || !same(v1, v2) {
				t.Errorf("offset %d: MeanVar = %g, %g, at offset 0 %g, %g", off, m1, v1, m2, v2)
			}
		}
	})
}

func TestAxpyScale(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			// A float32, as Axpy gets it: the untyped -1.7 would make
			// the float64 reference use a different alpha.
			const alpha float32 = -1.7
			x, y := fill(rng, a.slice(n), -2, 2), fill(rng, a.slice(n), -2, 2)
			y0 := append([]float32(nil), y...)
			Axpy(alpha, x, y)
			for i := range y {
				// One rounding with FMA, two without.
				want := float64(y0[i]) + float64(alpha)*float64(x[i])
				tol := 2 * eps * (math.Abs(float64(y0[i])) + math.Abs(float64(alpha)*float64(x[i])))
				if math.Abs(float64(y[i])-want) > tol {
					t.Fatalf("Axpy: y[%d] = %g, want %g ± %g", i, y[i], want, tol)
				}
			}
			x0 := append([]float32(nil), x...)
			Scale(alpha, x)
			for i := range x {
				if want := x0[i] * alpha; !same(x[i], want) {
					t.Fatalf("Scale: x[%d] = %g, want %g", i, x[i], want)
				}
			}
		})
	})
}

func TestMulAdd(t *testing.T) {
	ops := []struct {
		name string
		f    func(dst, a, b []float32)
		want func(a, b float32) float32
	}{
		{"Mul", Mul, func(a, b float32) float32 { return a * b }},
		{"Add", Add, func(a, b float32) float32 { return a + b }},
	}
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, ar *arena, rng *rand.Rand) {
			for _, op := range ops {
				a, b, dst := fill(rng, ar.slice(n), -3, 3), fill(rng, ar.slice(n), -3, 3), ar.slice(n)
				want := make([]float32, n)
				for i := range want {
					want[i] = op.want(a[i], b[i])
				}
				check := func(what string, got []float32) {
					for i := range got {
						if !same(got[i], want[i]) {
							t.Fatalf("%s %s: [%d] = %g, want %g", op.name, what, i, got[i], want[i])
						}
					}
				}
				op.f(dst, a, b)
				check("", dst)
				a2, b2 := append([]float32(nil), a...), append([]float32(nil), b...)
				op.f(a2, a2, b2)
				check("dst == a", a2)
				a2 = append(a2[:0], a...)
				op.f(b2, a2, b2)
				check("dst == b", b2)
			}
		})
	})
}

func TestMax(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			x := fill(rng, a.slice(n), -5, -1) // all negative: a zero from a padded lane would show
			want := ninf
			for _, v := range x {
				want = max(want, v)
			}
			if got := Max(x); !same(got, want) {
				t.Errorf("Max = %g, want %g", got, want)
			}
			for i := range x { // the maximum in every position, tails included
				saved := x[i]
				x[i] = 7
				if got := Max(x); got != 7 {
					t.Fatalf("Max with 7 at %d = %g", i, got)
				}
				x[i] = nan
				if got := Max(x); got == got {
					t.Fatalf("Max with NaN at %d = %g, want NaN", i, got)
				}
				x[i] = saved
			}
			for i := range x {
				x[i] = ninf
			}
			if got := Max(x); got != ninf {
				t.Errorf("Max of -Inf = %g", got)
			}
		})
	})
}

// ulps returns the error of got in units in the last place of want.
func ulps(got float32, want float64) float64 {
	w := float32(want)
	u := math.Nextafter32(float32(math.Abs(float64(w))), inf) - float32(math.Abs(float64(w)))
	return math.Abs(float64(got)-want) / float64(u)
}

// unaryCase checks a unary kernel on points against a float64 reference:
// |got - want| ≤ tol(x)·|want| + abs(x), abs covering results in the
// subnormals, where relative accuracy fades. It reports the worst error
// seen in ulps of normal results.
func unaryCase(t *testing.T, name string, f func(dst, src []float32), ref func(float64) float64, tol, abs func(x float64) float64, xs []float32) {
	t.Helper()
	got := make([]float32, len(xs))
	f(got, xs)
	worst, worstX := 0.0, float32(0)
	for i, x := range xs {
		want := ref(float64(x))
		if math.IsNaN(want) || math.IsInf(want, 0) || math.IsInf(float64(float32(want)), 0) {
			if w := float32(want); !same(got[i], w) && !(w != w && got[i] != got[i]) {
				t.Errorf("%s(%g) = %g, want %g", name, x, got[i], w)
			}
			continue
		}
		d := math.Abs(float64(got[i]) - want)
		if d > tol(float64(x))*math.Abs(want)+abs(float64(x)) {
			t.Errorf("%s(%g) = %g, want %g: relative error %.3g > %.3g", name, x, got[i], want, d/math.Abs(want), tol(float64(x)))
		}
		if math.Abs(want) > 0x1p-126 {
			if u := ulps(got[i], want); u > worst {
				worst, worstX = u, x
			}
		}
	}
	t.Logf("%s: worst error %.2f ulp at %g over %d points", name, worst, worstX, len(xs))
}

// grid returns points from lo to hi with the given step, then count random
// points in the same range.
func grid(lo, hi, step float64, count int, rng *rand.Rand) []float32 {
	var xs []float32
	for x := lo; x <= hi; x += step {
		xs = append(xs, float32(x))
	}
	for range count {
		xs = append(xs, float32(lo+(hi-lo)*rng.Float64()))
	}
	return xs
}

func constTol(v float64) func(float64) float64 { return func(float64) float64 { return v } }

// halfSubnormal is the error of rounding a result to the subnormals.
var halfSubnormal = constTol(0x1p-150)

func TestExp(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		// The normal range: relative error below 3e-7.
		unaryCase(t, "Exp", Exp, math.Exp, constTol(3e-7), halfSubnormal, grid(-87.33, 88.72, 1e-3, 100000, rng))
		// Subnormal results: the final scaling rounds once, to within
		// half a subnormal ulp, 2^-150, which unaryCase allows.
		unaryCase(t, "Exp", Exp, math.Exp, constTol(3e-7), halfSubnormal, grid(-104, -87.33, 1e-3, 10000, rng))
		// Special values, and both sides of overflow and underflow.
		specials := []float32{0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, 1, -1, 88.72283, 88.72284, 89, 100, 1e30,
			inf, -103.9, -103.98, -104, -200, -1e30, ninf, nan, math.MaxFloat32, -math.MaxFloat32}
		unaryCase(t, "Exp", Exp, math.Exp, constTol(3e-7), halfSubnormal, specials)
		got := make([]float32, 3)
		Exp(got, []float32{0, -104, ninf})
		if got[0] != 1 || got[1] != 0 || got[2] != 0 {
			t.Errorf("Exp(0, -104, -Inf) = %v, want [1 0 0]", got)
		}
	})
}

func TestTanh(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		xs := grid(-12, 12, 1e-4, 50000, rng)
		xs = append(xs, 0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, 1e-30, 1e-10, 1e-5, -1e-5, 0.624999, 0.625, 0.625001,
			-0.625, 9, 9.1, 20, -20, 100, 1e30, -1e30, inf, ninf, nan)
		unaryCase(t, "Tanh", Tanh, math.Tanh, constTol(3e-7), halfSubnormal, xs)
		got := make([]float32, 1)
		Tanh(got, []float32{float32(math.Copysign(0, -1))})
		if !math.Signbit(float64(got[0])) {
			t.Errorf("Tanh(-0) = %g, want -0", got[0])
		}
	})
}

// geluRef is GELU in float64 in the form x·σ(2u), which, unlike
// ½x(1 + tanh u), keeps its relative accuracy for negative x.
// TestGELUReference checks the two forms agree.
func geluRef(x float64) float64 {
	if math.IsInf(x, -1) {
		return 0
	}
	u := geluC0 * (x + geluC1*x*x*x)
	return x / (1 + math.Exp(-2*u))
}

// geluDerivRef is the derivative of geluRef, from
// d/dx x·σ(2u) = σ + x·σ·(1-σ)·2u', σ = σ(2u), 1-σ = σ(-2u).
func geluDerivRef(x float64) float64 {
	if math.IsInf(x, 1) {
		return 1
	}
	if math.IsInf(x, -1) {
		return 0
	}
	u := geluC0 * (x + geluC1*x*x*x)
	du := geluC0 * (1 + 3*geluC1*x*x)
	s, oms := 1/(1+math.Exp(-2*u)), 1/(1+math.Exp(2*u))
	return s + x*s*oms*2*du
}

func TestGELUReference(t *testing.T) {
	for x := -4.0; x <= 4; x += 0.01 {
		u := geluC0 * (x + geluC1*x*x*x)
		tanhForm := 0.5 * x * (1 + math.Tanh(u))
		if d := math.Abs(geluRef(x) - tanhForm); d > 1e-13*math.Max(1, math.Abs(tanhForm)) && d > 1e-15 {
			t.Fatalf("geluRef(%g) = %g, ½x(1+tanh u) = %g", x, geluRef(x), tanhForm)
		}
		// The derivative of the tanh form, t = tanh u.
		th := math.Tanh(u)
		dTanh := 0.5*(1+th) + 0.5*x*(1-th*th)*geluC0*(1+3*geluC1*x*x)
		if d := math.Abs(geluDerivRef(x) - dTanh); d > 1e-13 {
			t.Fatalf("geluDerivRef(%g) = %g, derivative of the tanh form %g", x, geluDerivRef(x), dTanh)
		}
	}
}

// condTol returns the tolerance for a function with derivative df: its
// condition number κ = |x·f'(x)/f(x)| times the rounding of its argument,
// plus c units of roundoff for the evaluation itself.
func condTol(f, df func(float64) float64, c float64) func(float64) float64 {
	return func(x float64) float64 {
		k := 0.0
		if fx := f(x); fx != 0 {
			k = math.Abs(x * df(x) / fx)
		}
		return (c + 2*k) * eps
	}
}

// The error bounds of GELU and GELUBackward, as unaryCase takes them:
// |got - want| ≤ tol(x)·|want| + abs(x).
var (
	geluTol = condTol(geluRef, geluDerivRef, 6)
	// The condition number of GELU' needs its derivative; a central
	// difference in float64 is plenty for a tolerance.
	geluBackwardTol = condTol(geluDerivRef, func(x float64) float64 {
		return (geluDerivRef(x+1e-6) - geluDerivRef(x-1e-6)) / 2e-6
	}, 10)
)

// geluAbs is the absolute part of GELU's error bound: for x < -10,
// e^-|2u| is subnormal and loses relative precision; x times it has an
// absolute error of about |x|·2^-150.
func geluAbs(x float64) float64 { return 0x1p-149 * (1 + math.Abs(x)) }

// geluBackwardAbs is the absolute part of the error bound of GELU'. GELU' =
// σ + x·2u'·σ(1-σ) is a sum whose terms cancel near x = -0.75, where GELU'
// crosses zero: the rounding of the terms, a few ε times their size, bounds
// the error there. In the far negative tail, as for GELU, e^-|2u| is
// subnormal, and x·2u' multiplies its absolute error.
func geluBackwardAbs(x float64) float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return 0
	}
	u := geluC0 * (x + geluC1*x*x*x)
	s, oms := 1/(1+math.Exp(-2*u)), 1/(1+math.Exp(2*u))
	xdu := math.Abs(x * geluD0 * (1 + 3*geluC1*x*x))
	return 4*eps*(s+xdu*s*oms) + 0x1p-149*(1+xdu)
}

func TestGELU(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 8))
		xs := grid(-12, 12, 1e-4, 50000, rng)
		xs = append(xs, 0, 1e-40, -1e-40, 1e-20, -1e-20, 1e-5, -1e-5, -20, -50, -99, -100, -101, -1e30, ninf, 50, 1e20, 1e30, inf, nan)
		unaryCase(t, "GELU", GELU, geluRef, geluTol, geluAbs, xs)
		got := make([]float32, 2)
		GELU(got, []float32{ninf, -1000})
		if got[0] != 0 || got[1] != 0 {
			t.Errorf("GELU(-Inf, -1000) = %v, want zeros", got)
		}
	})
}

func TestGELUBackward(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(9, 10))
		// Against the float64 derivative: dy = 1.
		xs := grid(-12, 12, 1e-4, 50000, rng)
		xs = append(xs, 0, 1e-30, -1e-30, -20, -99, -100, -101, -1e30, ninf, 50, 99, 100, 101, 1e30, inf, nan)
		dgelu := func(dx, x []float32) {
			ones := make([]float32, len(x))
			for i := range ones {
				ones[i] = 1
			}
			GELUBackward(dx, x, ones)
		}
		unaryCase(t, "GELU'", dgelu, geluDerivRef, geluBackwardTol, geluBackwardAbs, xs)
	})
}

// TestGELULengths checks GELU and GELUBackward against the float64
// references, with the error bounds of TestGELU and TestGELUBackward, at
// every length and alignment, special values included: the unrolled loop,
// the loop over one vector and the masked tail of every kernel set are
// held to the same bounds. It also checks that an element's result does
// not depend on where in the slice it is.
func TestGELULengths(t *testing.T) {
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, -10.2, -10.4, -20, -100, -101, 100, 101, -1e30, 1e30, ninf, inf, nan}
	// Powers of two scale GELU' exactly, so its bound scales with |dy|.
	dys := []float32{1, -1, 2, -2, 4, -4}
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			x, dy, y, dx := fill(rng, a.slice(n), -12, 12), a.slice(n), a.slice(n), a.slice(n)
			for i := range x {
				if rng.IntN(8) == 0 {
					x[i] = specials[rng.IntN(len(specials))]
				}
				dy[i] = dys[rng.IntN(len(dys))]
			}
			GELU(y, x)
			GELUBackward(dx, x, dy)
			one, done := make([]float32, 1), make([]float32, 1)
			for i, v := range x {
				check := func(name string, got float32, want, tol, abs float64) {
					t.Helper()
					if w := float32(want); math.IsNaN(want) || math.IsInf(float64(w), 0) {
						if !same(got, w) && !(w != w && got != got) {
							t.Errorf("%s(%g) = %g at [%d], want %g", name, v, got, i, w)
						}
						return
					}
					if d := math.Abs(float64(got) - want); d > tol*math.Abs(want)+abs {
						t.Errorf("%s(%g) = %g at [%d], want %g: relative error %.3g > %.3g", name, v, got, i, want, d/math.Abs(want), tol)
					}
				}
				xv, d := float64(v), float64(dy[i])
				check("GELU", y[i], geluRef(xv), geluTol(xv), geluAbs(xv))
				check("GELUBackward", dx[i], d*geluDerivRef(xv), geluBackwardTol(xv), math.Abs(d)*geluBackwardAbs(xv))
				GELU(one, x[i:i+1])
				GELUBackward(done, x[i:i+1], dy[i:i+1])
				if !same(one[0], y[i]) || !same(done[0], dx[i]) {
					t.Fatalf("at [%d] of %d: GELU = %g, GELUBackward = %g; alone %g, %g", i, n, y[i], dx[i], one[0], done[0])
				}
			}
		})
	})
}

// TestGELUBackwardFiniteDiff checks GELUBackward against central differences
// of the GELU kernel itself, on both paths.
func TestGELUBackwardFiniteDiff(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			// x on a grid of 1/64 and h = 1/32, so that x ± h and x ± 2h
			// are exact in float32.
			const h = 1.0 / 32
			x, dy, dx := a.slice(n), fill(rng, a.slice(n), -2, 2), a.slice(n)
			for i := range x {
				x[i] = float32(math.Round((rng.Float64()*12-6)*64) / 64)
			}
			GELUBackward(dx, x, dy)
			p := make([]float32, 4*n)
			for i, v := range x {
				p[4*i], p[4*i+1], p[4*i+2], p[4*i+3] = v-2*h, v-h, v+h, v+2*h
			}
			f := make([]float32, len(p))
			GELU(f, p)
			for i := range x {
				fd := (float64(f[4*i]) - 8*float64(f[4*i+1]) + 8*float64(f[4*i+2]) - float64(f[4*i+3])) / (12 * h)
				want := float64(dy[i]) * fd
				// The rounding of f, about 3ε|f|·18/12h, dominates the
				// truncation error, h⁴·f⁽⁵⁾/30.
				tol := math.Abs(float64(dy[i])) * (100*eps*(1+math.Abs(float64(x[i])))/h + 1e-5)
				if math.Abs(float64(dx[i])-want) > tol {
					t.Errorf("GELUBackward at x=%g: %g, finite difference %g ± %g", x[i], dx[i], want, tol)
				}
			}
			// Aliasing: dx may be dy or x.
			want := append([]float32(nil), dx...)
			dy2 := append([]float32(nil), dy...)
			GELUBackward(dy2, x, dy2)
			x2 := append([]float32(nil), x...)
			GELUBackward(x2, x2, dy)
			for i := range want {
				if !same(dy2[i], want[i]) || !same(x2[i], want[i]) {
					t.Fatalf("aliased GELUBackward [%d]: dx=dy gives %g, dx=x gives %g, want %g", i, dy2[i], x2[i], want[i])
				}
			}
		})
	})
}

// TestUnaryLengths checks Exp, Tanh and GELU at every length and alignment,
// in place too, against the single-element results.
func TestUnaryLengths(t *testing.T) {
	kernels := []struct {
		name string
		f    func(dst, src []float32)
	}{{"Exp", Exp}, {"Tanh", Tanh}, {"GELU", GELU}}
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			for _, k := range kernels {
				src, dst := fill(rng, a.slice(n), -10, 10), a.slice(n)
				k.f(dst, src)
				one := make([]float32, 1)
				for i := range src {
					k.f(one, src[i:i+1])
					if !same(dst[i], one[0]) {
						t.Fatalf("%s: [%d] = %g in a slice of %d, %g alone", k.name, i, dst[i], n, one[0])
					}
				}
				k.f(src, src)
				for i := range src {
					if !same(src[i], dst[i]) {
						t.Fatalf("%s in place: [%d] = %g, want %g", k.name, i, src[i], dst[i])
					}
				}
			}
		})
	})
}

func softmaxRef(x []float32) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, float64(v))
	}
	y := make([]float64, len(x))
	var s float64
	for i, v := range x {
		y[i] = math.Exp(float64(v) - m)
		s += y[i]
	}
	for i := range y {
		y[i] /= s
	}
	return y
}

func TestSoftmax(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			x := fill(rng, a.slice(n), -20, 20)
			for i := range x {
				if rng.IntN(4) == 0 {
					x[i] = ninf // masked
				}
			}
			want := softmaxRef(x)
			x0 := append([]float32(nil), x...)
			m := float64(Max(x))
			if math.IsInf(m, -1) { // fully masked, or empty
				want = make([]float64, n)
			}
			Softmax(x)
			var s float64
			for i := range x {
				// exp, the sum and the scaling round; the sum of n terms
				// in float32 is within γ_n of the exact one. And x[i] - max
				// rounds, by up to ε·|x[i] - max|, which exp turns into a
				// relative error.
				tol := (8*eps + gamma(n) + eps*math.Abs(float64(x0[i])-m)) * want[i]
				if math.Abs(float64(x[i])-want[i]) > tol || (want[i] == 0 && x[i] != 0) {
					t.Fatalf("Softmax: [%d] = %g, want %g ± %g", i, x[i], want[i], tol)
				}
				s += float64(x[i])
			}
			if n > 0 && Max(x) > 0 && math.Abs(s-1) > 1e-5 {
				t.Errorf("Softmax sums to %g", s)
			}
		})
	})
}

func TestSoftmaxSpecial(t *testing.T) {
	tests := []struct {
		name string
		x    []float32
		want []float32 // NaN entries mean NaN
	}{
		{"empty", []float32{}, []float32{}},
		{"one", []float32{-3}, []float32{1}},
		{"all masked", []float32{ninf, ninf, ninf}, []float32{0, 0, 0}},
		{"one unmasked", []float32{ninf, 5, ninf}, []float32{0, 1, 0}},
		{"large", []float32{1e30, 1e30}, []float32{0.5, 0.5}},
		{"huge gap", []float32{-1e30, 0}, []float32{0, 1}},
		{"NaN", []float32{1, nan, 2}, []float32{nan, nan, nan}},
		{"+Inf", []float32{1, inf, 2}, []float32{nan, nan, nan}},
	}
	paths(t, func(t *testing.T) {
		for _, tt := range tests {
			x := append([]float32(nil), tt.x...)
			Softmax(x)
			for i := range x {
				if w := tt.want[i]; !(x[i] == w || (w != w && x[i] != x[i])) {
					t.Errorf("%s: Softmax(%v) = %v, want %v", tt.name, tt.x, x, tt.want)
					break
				}
			}
		}
	})
}

func TestSoftmaxBackward(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			x, dy, dx := fill(rng, a.slice(n), -3, 3), fill(rng, a.slice(n), -1, 1), a.slice(n)
			if n > 2 {
				x[1] = ninf // masked
			}
			y := a.slice(n)
			copy(y, x)
			Softmax(y)
			SoftmaxBackward(dx, y, dy)
			// Against float64, and, for the smaller n, against central
			// differences of Softmax on the loss Σ dy·softmax(x).
			var c float64
			for i := range y {
				c += float64(y[i]) * float64(dy[i])
			}
			for i := range dx {
				want := float64(y[i]) * (float64(dy[i]) - c)
				if math.Abs(float64(dx[i])-want) > 1e-6*(float64(y[i])+math.Abs(want)) {
					t.Fatalf("SoftmaxBackward: [%d] = %g, want %g", i, dx[i], want)
				}
			}
			if n > 0 && n <= 33 {
				const h = 1.0 / 256
				p := make([]float32, n)
				loss := func() float64 {
					Softmax(p)
					var l float64
					for i := range p {
						l += float64(dy[i]) * float64(p[i])
					}
					return l
				}
				for i := range x {
					if x[i] == ninf {
						continue
					}
					var l [2]float64
					for k, s := range []float32{-1, 1} {
						copy(p, x)
						p[i] += s * h
						l[k] = loss()
					}
					fd := (l[1] - l[0]) / (2 * h)
					if math.Abs(float64(dx[i])-fd) > 1e-3*(1+math.Abs(fd)) {
						t.Errorf("SoftmaxBackward: [%d] = %g, finite difference %g", i, dx[i], fd)
					}
				}
			}
			// In place: dx may be y or dy.
			y2, dy2 := append([]float32(nil), y...), append([]float32(nil), dy...)
			SoftmaxBackward(y2, y2, dy)
			SoftmaxBackward(dy2, y, dy2)
			for i := range dx {
				if !same(y2[i], dx[i]) || !same(dy2[i], dx[i]) {
					t.Fatalf("SoftmaxBackward in place: [%d] = %g (dx=y), %g (dx=dy), want %g", i, y2[i], dy2[i], dx[i])
				}
			}
		})
	})
}

func TestLogSumExp(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			x := fill(rng, a.slice(n), -30, 30)
			x0 := append([]float32(nil), x...)
			m := math.Inf(-1)
			for _, v := range x {
				m = math.Max(m, float64(v))
			}
			var s float64
			for _, v := range x {
				s += math.Exp(float64(v) - m)
			}
			want := m + math.Log(s)
			got := LogSumExp(x)
			if n == 0 {
				if got != ninf {
					t.Errorf("LogSumExp of nothing = %g, want -Inf", got)
				}
				return
			}
			// The relative error of the sum becomes an absolute one in
			// its logarithm.
			if tol := 8*eps + gamma(n) + eps*math.Abs(want); math.Abs(float64(got)-want) > tol {
				t.Errorf("LogSumExp = %g, want %g ± %g", got, want, tol)
			}
			for i := range x {
				if !same(x[i], x0[i]) {
					t.Fatalf("LogSumExp changed x[%d]", i)
				}
			}
		})
		for _, tt := range []struct {
			x    []float32
			want float32
		}{
			{[]float32{ninf, ninf}, ninf},
			{[]float32{1, inf}, inf},
			{[]float32{nan, 1}, nan},
			{[]float32{0, 0, 0, 0}, float32(math.Log(4))},
			{[]float32{1e30, 1e30}, 1e30},
		} {
			if got := LogSumExp(tt.x); !(got == tt.want || (got != got && tt.want != tt.want)) {
				t.Errorf("LogSumExp(%v) = %g, want %g", tt.x, got, tt.want)
			}
		}
	})
}

func meanVarRef(x []float32) (float64, float64) {
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	mu := s / float64(len(x))
	var q float64
	for _, v := range x {
		q += (float64(v) - mu) * (float64(v) - mu)
	}
	return mu, q / float64(len(x))
}

func TestMeanVar(t *testing.T) {
	paths(t, func(t *testing.T) {
		for _, dist := range []struct {
			name         string
			center, half float64
		}{
			{"centered", 0, 1},
			{"offset", 3, 1},
			// A mean far from zero compared to the spread, as after a
			// residual stream has drifted: one pass of Σx² - (Σx)²/n
			// would lose every digit here.
			{"large offset", 1e4, 1},
		} {
			t.Run(dist.name, func(t *testing.T) {
				cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
					x := fill(rng, a.slice(n), dist.center-dist.half, dist.center+dist.half)
					mean, v := MeanVar(x)
					if n == 0 {
						if mean == mean || v == v {
							t.Errorf("MeanVar of nothing = %g, %g, want NaN, NaN", mean, v)
						}
						return
					}
					wm, wv := meanVarRef(x)
					var dev float64
					for _, v := range x {
						dev += math.Abs(float64(v) - wm)
					}
					if tol := 2*eps*math.Abs(wm) + gamma(n)*dev/float64(n); math.Abs(float64(mean)-wm) > tol {
						t.Errorf("mean = %g, want %g ± %g", mean, wm, tol)
					}
					// Corrected two-pass: the deviations from the float32
					// mean are exact or nearly, so the error is that of
					// summing their squares, ε times a small multiple of
					// the variance, however large the mean.
					tol := 16*eps*wv + gamma(n/4+4)*wv
					if math.Abs(float64(v)-wv) > tol {
						t.Errorf("variance = %g, want %g ± %g (relative error %.3g)", v, wv, tol, math.Abs(float64(v)-wv)/wv)
					}
					if n == 1 && v != 0 {
						t.Errorf("variance of one element = %g", v)
					}
				})
			})
		}
		for _, c := range []float32{0.1, 1e4, -7} {
			x := make([]float32, 1000)
			for i := range x {
				x[i] = c
			}
			mean, v := MeanVar(x)
			if math.Abs(float64(mean-c)) > 4*eps*math.Abs(float64(c)) || v < 0 || v > 1e-12*c*c {
				t.Errorf("MeanVar of 1000 × %g = %g, %g", c, mean, v)
			}
		}
	})
}

func TestPanics(t *testing.T) {
	a, b := make([]float32, 3), make([]float32, 4)
	tests := []struct {
		name string
		f    func()
		msg  string
	}{
		{"Dot", func() { Dot(a, b) }, "vec.Dot: length mismatch: len(x)=3, len(y)=4"},
		{"Axpy", func() { Axpy(1, a, b) }, "vec.Axpy: length mismatch: len(x)=3, len(y)=4"},
		{"Mul", func() { Mul(a, a, b) }, "vec.Mul: length mismatch: len(dst)=3, len(a)=3, len(b)=4"},
		{"Add", func() { Add(b, a, a) }, "vec.Add: length mismatch: len(dst)=4, len(a)=3, len(b)=3"},
		{"Exp", func() { Exp(a, b) }, "vec.Exp: length mismatch: len(dst)=3, len(src)=4"},
		{"Tanh", func() { Tanh(b, a) }, "vec.Tanh: length mismatch: len(dst)=4, len(src)=3"},
		{"GELU", func() { GELU(a, b) }, "vec.GELU: length mismatch: len(dst)=3, len(src)=4"},
		{"GELUBackward", func() { GELUBackward(a, a, b) }, "vec.GELUBackward: length mismatch: len(dx)=3, len(x)=3, len(dy)=4"},
		{"SoftmaxBackward", func() { SoftmaxBackward(a, b, a) }, "vec.SoftmaxBackward: length mismatch: len(dx)=3, len(y)=4, len(dy)=3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, ok := r.(string); !ok || !strings.Contains(s, tt.msg) {
					t.Errorf("panic %v, want %q", r, tt.msg)
				}
			}()
			tt.f()
		})
	}
}

func TestNoAllocs(t *testing.T) {
	x, y := make([]float32, 100), make([]float32, 100)
	z := [3][]float32{make([]float32, 100), make([]float32, 100), make([]float32, 100)}
	paths(t, func(t *testing.T) {
		for _, f := range []struct {
			name string
			f    func()
		}{
			{"Dot", func() { Dot(x, y) }},
			{"Exp", func() { Exp(y, x) }},
			{"Softmax", func() { Softmax(y) }},
			{"MeanVar", func() { MeanVar(x) }},
			{"GELUBackward", func() { GELUBackward(y, x, y) }},
			{"Tanh", func() { Tanh(y, x) }},
			{"LogSumExp", func() { LogSumExp(x) }},
			{"SoftmaxBackward", func() { SoftmaxBackward(y, x, y) }},
			{"LayerNorm", func() { LayerNorm(y, x, x, x, 1e-5) }},
			{"LayerNormBackward", func() { LayerNormBackward(z[0], z[1], z[2], x, x, y, 0, 1) }},
		} {
			if n := testing.AllocsPerRun(10, f.f); n != 0 {
				t.Errorf("%s allocates %v times", f.name, n)
			}
		}
	})
}

func TestNoAsmEnv(t *testing.T) {
	for _, tt := range []struct {
		v    string
		want bool
	}{{"", false}, {"0", false}, {"1", true}} {
		t.Setenv("POLYSKETCH_NOASM", tt.v)
		if got := noAsmEnv(); got != tt.want {
			t.Errorf("POLYSKETCH_NOASM=%q: noAsmEnv() = %v, want %v", tt.v, got, tt.want)
		}
		want := impls()[0]
		if tt.want {
			want = implGo
		}
		if got := choose(); got != want {
			t.Errorf("POLYSKETCH_NOASM=%q: choose() = %v, want %v", tt.v, got, want)
		}
	}
	if s := impls(); s[len(s)-1] != implGo {
		t.Errorf("impls() = %v: the portable kernels must come last", s)
	}
}

// TestSumExp compares SumExp, below the maximum and below another value,
// with the sum computed in float64, on every path.
func TestSumExp(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			x := fill(rng, a.slice(n), -30, 30)
			m := math.Inf(-1)
			for _, v := range x {
				m = math.Max(m, float64(v))
			}
			for _, sub := range []float64{m, 3} {
				var want float64
				for _, v := range x {
					want += math.Exp(float64(v) - sub)
				}
				got := SumExp(x, float32(sub))
				if tol := (8*eps + gamma(n)) * want; math.Abs(float64(got)-want) > tol {
					t.Errorf("SumExp(x, %g) = %g, want %g ± %g", sub, got, want, tol)
				}
			}
		})
	})
}

func TestNonFinite(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, tc := range []struct {
		x    []float32
		want int
	}{
		{nil, -1},
		{[]float32{1, 2, 3}, -1},
		{[]float32{3e38, 3e38, -1}, -1}, // finite, though their sum overflows
		{[]float32{1, inf, nan}, 1},
		{[]float32{1, 2, -inf}, 2},
		{[]float32{nan}, 0},
		{append(make([]float32, 1000), inf, -inf), 1000}, // a sum of NaN
	} {
		if got := NonFinite(tc.x); got != tc.want {
			t.Errorf("NonFinite(%v) = %d, want %d", tc.x[max(0, len(tc.x)-3):], got, tc.want)
		}
	}
}

// siluRef is SiLU in float64, x·σ(x).
func siluRef(x float64) float64 {
	if math.IsInf(x, -1) {
		return 0
	}
	return x / (1 + math.Exp(-x))
}

// siluDerivRef is the derivative of siluRef, σ(x)·(1 + x·σ(-x)).
func siluDerivRef(x float64) float64 {
	if math.IsInf(x, 1) {
		return 1
	}
	if math.IsInf(x, -1) {
		return 0
	}
	s, oms := 1/(1+math.Exp(-x)), 1/(1+math.Exp(x))
	return s * (1 + x*oms)
}

func TestSiLU(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(11, 12))
		xs := grid(-30, 30, 1e-3, 50000, rng)
		xs = append(xs, 0, 1e-40, -1e-40, 1e-20, -1e-20, -50, -99, -100, -101, -104, -150, -1e30, ninf, 50, 1e20, 1e30, inf, nan)
		unaryCase(t, "SiLU", SiLU, siluRef, condTol(siluRef, siluDerivRef, 6), func(x float64) float64 { return 0x1p-149 * (1 + math.Abs(x)) }, xs)
		got := make([]float32, 3)
		SiLU(got, []float32{ninf, -1000, inf})
		if got[0] != 0 || got[1] != 0 || !math.IsInf(float64(got[2]), 1) {
			t.Errorf("SiLU(-Inf, -1000, +Inf) = %v, want [0 0 +Inf]", got)
		}
	})
}

func TestSiLUBackward(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(13, 14))
		xs := grid(-30, 30, 1e-3, 50000, rng)
		xs = append(xs, 0, 1e-30, -1e-30, -50, -99, -100, -101, -150, -1e30, ninf, 50, 99, 100, 101, 1e30, inf, nan)
		dsilu := func(dx, x []float32) {
			ones := make([]float32, len(x))
			for i := range ones {
				ones[i] = 1
			}
			SiLUBackward(dx, x, ones)
		}
		// SiLU' = σ + x·σ·(1−σ) cancels near x = -1.28, where it crosses
		// zero: the rounding of its terms bounds the error there.
		abs := func(x float64) float64 {
			if math.IsInf(x, 0) || math.IsNaN(x) {
				return 0
			}
			s, oms := 1/(1+math.Exp(-x)), 1/(1+math.Exp(x))
			return 4*eps*(s+math.Abs(x)*s*oms) + 0x1p-149*(1+math.Abs(x))
		}
		unaryCase(t, "SiLU'", dsilu, siluDerivRef, condTol(siluDerivRef, func(x float64) float64 {
			return (siluDerivRef(x+1e-6) - siluDerivRef(x-1e-6)) / 2e-6
		}, 10), abs, xs)
	})
}

// TestPrefetch checks that Prefetch takes any slice, empty or ending at
// the end of its array, on every path, and changes nothing.
func TestPrefetch(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			x := fill(rng, a.slice(n), -1, 1)
			want := append([]float32(nil), x...)
			Prefetch(x)
			for i := range x {
				if !same(x[i], want[i]) {
					t.Fatalf("Prefetch changed element %d: %g, was %g", i, x[i], want[i])
				}
			}
		})
	})
}
