package vec

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestExpScale: ExpScale is Exp of the scaled values, and its sum Sum of
// them, bit for bit, on every path, every length and both alignments,
// with special values.
func TestExpScale(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			src := fill(rng, a.slice(n), -3, 5) // weights of one magnitude: their sum shows its order
			specials := []float32{0, inf, ninf, nan, 3e38, -3e38}
			for i := range src {
				if rng.IntN(8) == 0 {
					src[i] = specials[rng.IntN(len(specials))]
				}
			}
			for _, ms := range [][2]float32{{5, 1.25}, {0, 1}, {-2, 3e38}, {1, 1e-30}} {
				dst := a.slice(n)
				sum := ExpScale(dst, src, ms[0], ms[1])
				if want := Sum(dst); !same(sum, want) && !(sum != sum && want != want) {
					t.Fatalf("m=%v s=%v: ExpScale's sum %v, Sum of its result %v", ms[0], ms[1], sum, want)
				}
				want := make([]float32, n)
				for i, v := range src {
					want[i] = (v - ms[0]) * ms[1]
				}
				Exp(want, want)
				for i := range dst {
					if !same(dst[i], want[i]) {
						t.Fatalf("m=%v s=%v: ExpScale(%v)[%d] = %v, Exp((x-m)·s) = %v", ms[0], ms[1], src[i], i, dst[i], want[i])
					}
				}
			}
			ExpScale(src, src, 1, 2) // in place
		})
	})
}

// TestExpScaleSum: ExpScale's sum is Sum's of its result, bit for bit,
// at every length up to 512 (each remainder after the loops over four
// vectors and one), where the order of the additions shows.
func TestExpScaleSum(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 7))
		for n := range 513 {
			src := fill(rng, make([]float32, n), -3, 5)
			dst := make([]float32, n)
			if sum, want := ExpScale(dst, src, 5, 1.25), Sum(dst); !same(sum, want) {
				t.Fatalf("n=%d: ExpScale's sum %v, Sum of its result %v", n, sum, want)
			}
		}
	})
}

// TestBand compares Band on every path with a loop over the elements: the
// indices and counts exactly, the weight above bit for bit with the
// portable kernel's (whose order of additions it documents) and within
// rounding of a float64 sum in order; dst too short to hold the band
// keeps its first indices and is not written past its end (but may
// be past the indices).
func TestBand(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			x := fill(rng, a.slice(n), -4, 4)
			w := a.slice(n)
			for i := range w { // of many magnitudes, so that the order of additions shows
				w[i] = float32(math.Exp(-40 * rng.Float64()))
			}
			for i := range x {
				switch rng.IntN(16) {
				case 0:
					x[i] = nan
				case 1:
					x[i] = inf
				case 2:
					x[i] = ninf
				case 3:
					x[i] = 1 // on the edge of a range
				}
			}
			for _, r := range [][2]float32{{-1, 1}, {1, 2}, {ninf, inf}, {0.5, 0.5}, {2, -2}, {inf, inf}} {
				lo, hi := r[0], r[1]
				var want []int32
				above, sum := 0, 0.0
				for i, v := range x {
					if v >= hi {
						above++
						sum += float64(w[i])
					} else if v >= lo {
						want = append(want, int32(i))
					}
				}
				_, _, bits := bandGeneric(nil, x, w, lo, hi)
				for _, room := range []int{n, len(want) / 2} {
					buf := make([]int32, room+guards)
					for i := range buf {
						buf[i] = -7
					}
					gn, ga, gw := Band(buf[:room:room], x, w, lo, hi)
					if gn != len(want) || ga != above {
						t.Fatalf("[%v, %v), room %d: %d in the band and %d above, want %d and %d", lo, hi, room, gn, ga, len(want), above)
					}
					k := min(room, gn)
					if !slices.Equal(buf[:k], want[:k]) {
						t.Fatalf("[%v, %v), room %d: indices %v, want %v", lo, hi, room, buf[:k], want[:k])
					}
					for i, v := range buf[room:] {
						if v != -7 {
							t.Fatalf("[%v, %v), room %d: wrote %d at %d, past the end of dst", lo, hi, room, v, room+i)
						}
					}
					if math.Float64bits(gw) != math.Float64bits(bits) {
						t.Fatalf("[%v, %v): weight above %v, the portable kernel's %v", lo, hi, gw, bits)
					}
					if math.Abs(gw-sum) > 1e-12*sum {
						t.Fatalf("[%v, %v): weight above %v, want %v", lo, hi, gw, sum)
					}
				}
			}
		})
	})
}
