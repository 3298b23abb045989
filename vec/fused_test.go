package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// fusedCase is a fused function and the sequence it stands for, on inputs
// x (a column of every element), and random others of the same length.
type fusedCase struct {
	name  string
	fused func(x, o1, o2 []float32) [][]float32
	seq   func(x, o1, o2 []float32) [][]float32
}

var fusedCases = []fusedCase{
	{"BiasGELU",
		func(x, b, _ []float32) [][]float32 {
			h := make([]float32, len(x))
			BiasGELU(h, nil, x, b[:len(x)/rowsOf(len(x))])
			return [][]float32{h}
		},
		func(x, b, _ []float32) [][]float32 {
			w := len(x) / rowsOf(len(x))
			h := make([]float32, len(x))
			for lo := 0; lo < len(x); lo += w {
				Add(h[lo:lo+w], x[lo:lo+w], b[:w])
			}
			GELU(h, h)
			return [][]float32{h}
		}},
	{"BiasGELU/grad",
		func(x, b, _ []float32) [][]float32 {
			h, d := make([]float32, len(x)), append([]float32(nil), x...)
			BiasGELU(h, d, d, b[:len(x)/rowsOf(len(x))]) // d aliasing a
			return [][]float32{h, d}
		},
		func(x, b, _ []float32) [][]float32 {
			w := len(x) / rowsOf(len(x))
			s := make([]float32, len(x))
			for lo := 0; lo < len(x); lo += w {
				Add(s[lo:lo+w], x[lo:lo+w], b[:w])
			}
			h, d, one := make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x))
			for i := range one {
				one[i] = 1
			}
			GELU(h, s)
			GELUBackward(d, s, one)
			return [][]float32{h, d}
		}},
	{"GELUMul",
		func(x, b, _ []float32) [][]float32 {
			dst := make([]float32, len(x))
			GELUMul(dst, x, b)
			return [][]float32{dst}
		},
		func(x, b, _ []float32) [][]float32 {
			dst := make([]float32, len(x))
			GELU(dst, x)
			Mul(dst, dst, b)
			return [][]float32{dst}
		}},
	{"GELUMulBackward",
		func(x, b, dy []float32) [][]float32 {
			da, db := make([]float32, len(x)), make([]float32, len(x))
			GELUMulBackward(da, db, x, b, dy)
			return [][]float32{da, db}
		},
		func(x, b, dy []float32) [][]float32 {
			da, db := make([]float32, len(x)), make([]float32, len(x))
			GELU(db, x)
			Mul(db, db, dy)
			Mul(da, dy, b)
			GELUBackward(da, x, da)
			return [][]float32{da, db}
		}},
}

// rowsOf is the number of rows the bias cases cut n elements into: rows
// of a width that is not a multiple of a vector, where n allows.
func rowsOf(n int) int {
	for _, r := range []int{3, 2} {
		if n%r == 0 {
			return r
		}
	}
	return 1
}

// checkFused compares the outputs of c's fused function and its sequence
// bit for bit.
func checkFused(t *testing.T, c fusedCase, x, o1, o2 []float32) {
	t.Helper()
	got, want := c.fused(x, o1, o2), c.seq(x, o1, o2)
	for k := range want {
		for i := range want[k] {
			if !same(got[k][i], want[k][i]) {
				t.Fatalf("%s: output %d, element %d (x = %g, %g, %g): %g (%#x), the sequence gives %g (%#x)",
					c.name, k, i, x[i], o1[i], o2[i], got[k][i], math.Float32bits(got[k][i]), want[k][i], math.Float32bits(want[k][i]))
			}
		}
	}
}

// TestFusedExhaustive checks that each fused function gives the bits of
// the sequence it stands for, on each path, with x running through
// blocks of 2¹⁶ float32 inputs sharing their high 16 bits (every 4099th
// block, or all with -exhaustive) and the other inputs random, among them
// NaNs, infinities and zeros.
func TestFusedExhaustive(t *testing.T) {
	stride := 4099
	if *exhaustive {
		stride = 1
	}
	paths(t, func(t *testing.T) {
		for _, c := range fusedCases {
			t.Run(c.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(1, 2))
				// 2¹⁶ + 2 elements: three rows of a width that is no
				// multiple of 16.
				x := make([]float32, 1<<16+2)
				o1, o2 := make([]float32, len(x)), make([]float32, len(x))
				specials := []float32{0, float32(math.Copysign(0, -1)), inf, ninf, nan, 1e-40, 1e30}
				for i := range o1 {
					o1[i], o2[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
					if rng.IntN(64) == 0 {
						o1[i] = specials[rng.IntN(len(specials))]
					}
					if rng.IntN(64) == 0 {
						o2[i] = specials[rng.IntN(len(specials))]
					}
				}
				for hi := 0; hi < 1<<16; hi += stride {
					for lo := range 1 << 16 {
						x[lo] = math.Float32frombits(uint32(hi)<<16 | uint32(lo))
					}
					x[1<<16], x[1<<16+1] = float32(rng.NormFloat64()), nan
					checkFused(t, c, x, o1, o2)
				}
			})
		}
	})
}

// TestFusedLengths checks the fused functions against their sequences at
// every length and alignment, and that they write nothing past their
// outputs.
func TestFusedLengths(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			x, o1, o2 := a.slice(n), a.slice(n), a.slice(n)
			fill(rng, x, -8, 8)
			fill(rng, o1, -3, 3)
			fill(rng, o2, -3, 3)
			for _, c := range fusedCases {
				checkFused(t, c, x, o1, o2)
			}
			// In place, as the callers run them.
			h, d, b := a.slice(n), a.slice(n), a.slice(min(n, 1))
			copy(d, x)
			if n > 0 {
				fill(rng, b, -1, 1)
				wh, wd := c0(fusedCases[1].seq(x, repeat(b, n), nil))
				BiasGELU(h, d, d, repeat(b, n)[:1])
				if !bitwiseSame(h, wh) || !bitwiseSame(d, wd) {
					t.Fatalf("BiasGELU in place differs from the sequence")
				}
			}
		})
	})
}

func c0(out [][]float32) (h, d []float32) { return out[0], out[1] }

func repeat(b []float32, n int) []float32 {
	r := make([]float32, n)
	for i := range r {
		r[i] = b[0]
	}
	return r
}

func bitwiseSame(a, b []float32) bool {
	for i := range a {
		if !same(a[i], b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// TestSwapAdd checks SwapAdd against the copies and Add it replaces, as an
// exclusive prefix sum runs them, at every length and alignment.
func TestSwapAdd(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			run, x := a.slice(n), a.slice(n)
			fill(rng, run, -4, 4)
			fill(rng, x, -4, 4)
			if n > 2 {
				x[1], run[2] = nan, inf
			}
			wantX := append([]float32(nil), run...)
			wantRun := make([]float32, n)
			Add(wantRun, run, x)
			SwapAdd(run, x)
			if !bitwiseSame(run, wantRun) || !bitwiseSame(x, wantX) {
				t.Fatalf("SwapAdd: run %v x %v, want %v and %v", run, x, wantRun, wantX)
			}
		})
	})
}

// TestSymOuter checks SymOuter and SymOuterBackward against the Mul, Add
// and Axpy calls they replace, bit for bit, on each path, for rows of
// every length and alignment (n) and several r, with NaNs, infinities and
// signed zeros among the inputs, and that they write nothing past their
// outputs.
func TestSymOuter(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			for _, r := range []int{0, 1, 2, 5, 32} {
				f := r * (r + 1) / 2
				m, tt, dphi, dm := a.slice(r*n), a.slice(r*n), a.slice(f*n), a.slice(r*n)
				fill(rng, m, -3, 3)
				fill(rng, dphi, -3, 3)
				fill(rng, dm, -3, 3)
				if r*n > 3 {
					m[1], m[2], dphi[3], dm[0] = nan, inf, ninf, float32(math.Copysign(0, -1))
				}
				if n > 1 {
					// NaNs meet in column 1, m's, dm's and dphi's, whose
					// payloads tell which operand an operation kept.
					for c := range r {
						m[c*n+1], dm[c*n+1] = nan, math.Float32frombits(0x7fc01234)
					}
					for i := range f {
						dphi[i*n+1] = math.Float32frombits(0x7fc05678)
					}
				}
				if n > 2 {
					// And in column 2 dphi's off the diagonal, one
					// payload a row, with dm's: each sum meets two NaNs
					// of its own, and no product on the diagonal hides
					// them.
					i := 0
					for c := range r {
						i++ // (c, c)
						for d := c + 1; d < r; d++ {
							dphi[i*n+2] = math.Float32frombits(0x7fc00100 + uint32(i))
							i++
						}
					}
					for c := range r {
						dm[c*n+2] = math.Float32frombits(0x7fc01234)
					}
				}
				if n > 4 && r > 1 {
					// In column 3 a NaN in m's first row meets dphi's
					// of its pairs in the products for the rows after
					// it, in column 4 one in m's last row those of the
					// rows before it.
					pair := func(c, d int) int { return c*r - c*(c-1)/2 + d - c }
					m[3], m[(r-1)*n+4] = nan, nan
					for d := 1; d < r; d++ {
						dphi[pair(0, d)*n+3] = math.Float32frombits(0x7fc00200 + uint32(d))
						dphi[pair(d-1, r-1)*n+4] = math.Float32frombits(0x7fc00300 + uint32(d))
					}
				}
				copy(tt, m)
				Scale(math.Sqrt2, tt)
				if n > 1 {
					for c := range r {
						tt[c*n+1] = math.Float32frombits(0x7fc0abcd) // beside m's NaNs
					}
				}
				phi := a.slice(f * n)
				want := make([]float32, f*n)
				symOuterSeq(want, m, tt, r, n)
				SymOuter(phi, m, tt, r, n)
				if !bitwiseSame(phi, want) {
					t.Fatalf("r=%d: SymOuter %v, want %v", r, phi, want)
				}
				wantDm := append([]float32(nil), dm...)
				symOuterBackwardSeq(wantDm, dphi, m, tt, make([]float32, n), r, n)
				SymOuterBackward(dm, dphi, m, tt, r, n)
				if !bitwiseSame(dm, wantDm) {
					t.Fatalf("r=%d: SymOuterBackward %v, want %v", r, dm, wantDm)
				}
			}
		})
	})
}

// TestFusedPanics checks that lengths that do not fit panic naming the
// function.
func TestFusedPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"BiasGELU":   func() { BiasGELU(make([]float32, 6), nil, make([]float32, 6), make([]float32, 4)) },
		"BiasGELU d": func() { BiasGELU(make([]float32, 6), make([]float32, 5), make([]float32, 6), make([]float32, 3)) },
		"GELUMul":    func() { GELUMul(make([]float32, 3), make([]float32, 3), make([]float32, 2)) },
		"GELUMulBackward": func() {
			GELUMulBackward(make([]float32, 3), make([]float32, 3), make([]float32, 3), make([]float32, 3), make([]float32, 4))
		},
		"SwapAdd":    func() { SwapAdd(make([]float32, 3), make([]float32, 2)) },
		"SymOuter":   func() { SymOuter(make([]float32, 5), make([]float32, 4), make([]float32, 4), 2, 2) },
		"SymOuter r": func() { SymOuter(nil, nil, nil, -1, 2) },
		"SymOuterBackward": func() {
			SymOuterBackward(make([]float32, 3), make([]float32, 6), make([]float32, 4), make([]float32, 4), 2, 2)
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r, _ := recover().(string); len(r) < 4 || r[:4] != "vec." {
					t.Errorf("panic %q, want one naming the function", r)
				}
			}()
			f()
		})
	}
}

// TestStandardize checks Standardize, StandardizeGrads and StandardizeDx
// against the passes of nn.LayerNorm they replace (Axpy, Scale, Mul, Add,
// Sum, Dot), bit for bit, on each path, at every length and alignment, in
// place where the callers run them so, with and without a gain and a bias,
// NaNs and infinities among the inputs.
func TestStandardize(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			x, gain, bias, dy := a.slice(n), a.slice(n), a.slice(n), a.slice(n)
			fill(rng, x, -3, 3)
			fill(rng, gain, 0.5, 1.5)
			fill(rng, bias, -1, 1)
			fill(rng, dy, -1, 1)
			if n > 5 {
				x[2], dy[3], gain[4], x[5] = nan, inf, ninf, float32(math.Copysign(0, -1))
			}
			one := make([]float32, n)
			for i := range one {
				one[i] = 1
			}
			mean, rstd := float32(rng.NormFloat64()), float32(0.5+rng.Float64())
			for _, affine := range []string{"gain+bias", "gain", "none"} {
				g, b := gain, bias
				switch affine {
				case "gain":
					b = nil
				case "none":
					g, b = nil, nil
				}
				// Forward, y = x in place.
				wantXh, wantY := append([]float32(nil), x...), make([]float32, n)
				Axpy(-mean, one, wantXh)
				Scale(rstd, wantXh)
				if g == nil {
					copy(wantY, wantXh)
				} else {
					Mul(wantY, wantXh, g)
					if b != nil {
						Add(wantY, wantY, b)
					}
				}
				y, xh := append([]float32(nil), x...), a.slice(n)
				Standardize(y, xh, y, g, b, mean, rstd)
				if !bitwiseSame(xh, wantXh) || !bitwiseSame(y, wantY) {
					t.Fatalf("%s: Standardize differs from the passes it replaces", affine)
				}

				// Backward, g = dy in place.
				pg, pb := fill(rng, make([]float32, n), -1, 1), fill(rng, make([]float32, n), -1, 1)
				wantPg, wantPb, wantG := append([]float32(nil), pg...), append([]float32(nil), pb...), make([]float32, n)
				tmp := make([]float32, n)
				Mul(tmp, dy, xh)
				Add(wantPg, wantPg, tmp)
				Add(wantPb, wantPb, dy)
				if g == nil {
					copy(wantG, dy)
				} else {
					Mul(wantG, dy, g)
				}
				gotG := append([]float32(nil), dy...)
				StandardizeGrads(pg, pb, gotG, gotG, xh, g)
				if !bitwiseSame(pg, wantPg) || !bitwiseSame(pb, wantPb) || !bitwiseSame(gotG, wantG) {
					t.Fatalf("%s: StandardizeGrads differs from the passes it replaces", affine)
				}
				c2, c1 := float32(rng.NormFloat64()), float32(rng.NormFloat64())
				Scale(rstd, wantG)
				Axpy(c2, xh, wantG)
				Axpy(c1, one, wantG)
				StandardizeDx(gotG, xh, rstd, c2, c1)
				if !bitwiseSame(gotG, wantG) {
					t.Fatalf("%s: StandardizeDx differs from the passes it replaces", affine)
				}
			}
		})
	})
}
