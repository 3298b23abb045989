package blas

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The tests below call each kernel's micro-kernels directly, so that
// every row count and k remainder of their unrolled code paths runs
// (Sgemm reaches only some of them for a given tile size). Expected
// values are float64 sums, within the bound of blas_test.go.

// closeTo reports whether got is within the rounding error of a k-term
// float32 sum of magnitude mag from the exact want.
func closeTo(got float32, want, mag float64, k int) bool {
	const eps = 1.0 / (1 << 23)
	return math.Abs(float64(got)-want) <= 2*float64(k+2)*eps*mag+1e-30
}

// TestKernelCall checks kernel.call on whole tiles: every k remainder of
// the unrolled loop (k = 0 included), overwriting C (which holds NaNs, so
// reading it would show) and accumulating into it, with C's rows ldc > nr
// apart and the elements between them left alone.
func TestKernelCall(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	cases := []struct {
		alpha, beta float32
		accum       bool
	}{{1, 0, false}, {-0.5, 0, false}, {1, 1, true}, {2, -1.5, true}}
	for _, kn := range kernels() {
		mr, nr := kn.mr, kn.nr
		ldc := nr + 3
		for _, k := range []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 17} {
			for _, cs := range cases {
				a, b := randSlice(rng, max(1, mr*k)), randSlice(rng, max(1, nr*k))
				c := randSlice(rng, mr*ldc)
				for i := range mr {
					for j := range ldc {
						if j >= nr {
							c[i*ldc+j] = sentinel
						} else if !cs.accum {
							c[i*ldc+j] = float32(math.NaN())
						}
					}
				}
				old := append([]float32(nil), c...)
				kn.call(k, &a[0], &b[0], &c[0], ldc, cs.alpha, cs.beta, cs.accum)
				for i := range mr {
					for j := range ldc {
						got := c[i*ldc+j]
						if j >= nr {
							if got != sentinel {
								t.Fatalf("%s k=%d: C[%d,%d] past the tile changed to %v", kn.name, k, i, j, got)
							}
							continue
						}
						var s, mag float64
						for p := range k {
							x := float64(a[p*mr+i]) * float64(b[p*nr+j])
							s += x
							mag += math.Abs(x)
						}
						want := float64(cs.alpha) * s
						mag *= math.Abs(float64(cs.alpha))
						if cs.accum {
							want += float64(cs.beta) * float64(old[i*ldc+j])
							mag += math.Abs(float64(cs.beta) * float64(old[i*ldc+j]))
						}
						if !closeTo(got, want, mag, k) {
							t.Fatalf("%s k=%d alpha=%v beta=%v accum=%v: C[%d,%d] = %v, want %v", kn.name, k, cs.alpha, cs.beta, cs.accum, i, j, got, want)
						}
					}
				}
			}
		}
	}
}

// TestKernelStream checks kernel.stream for every row count up to srows
// in sw-wide tiles and up to wideRows in ww-wide tiles, with A as stored
// and transposed, overwriting and accumulating: rows past rows and
// columns past the tile of C must not change.
func TestKernelStream(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, kn := range kernels() {
		if kn.streamMax == 0 {
			continue
		}
		tiles := [][2]int{{kn.sw, kn.srows}}
		if kn.wideRows > 0 {
			tiles = append(tiles, [2]int{kn.ww, kn.wideRows})
		}
		for _, tile := range tiles {
			w := tile[0]
			for rows := 1; rows <= tile[1]; rows++ {
				for _, k := range []int{1, 2, 5, 17} {
					for _, trans := range []bool{false, true} {
						for _, accum := range []bool{false, true} {
							// A(i, p) = a[i·ars + p·aps], in a matrix with a
							// padded leading dimension.
							lda, ars, aps := k+2, k+2, 1
							if trans {
								lda, ars, aps = rows+2, 1, rows+2
							}
							a := randSlice(rng, (max(rows, k)+2)*lda)
							ldb, ldc := w+5, w+3
							b := randSlice(rng, k*ldb)
							c := randSlice(rng, (kn.srows+1)*ldc)
							if !accum {
								for i := range rows {
									for j := range w {
										c[i*ldc+j] = float32(math.NaN())
									}
								}
							}
							old := append([]float32(nil), c...)
							alpha, beta := float32(1.25), float32(-0.75)
							kn.stream(w, rows, k, a, ars, aps, b, ldb, c, ldc, alpha, beta, accum)
							for i := range kn.srows + 1 {
								for j := range ldc {
									got := c[i*ldc+j]
									if i >= rows || j >= w {
										if math.Float32bits(got) != math.Float32bits(old[i*ldc+j]) {
											t.Fatalf("%s w=%d rows=%d k=%d: C[%d,%d] outside the tile changed", kn.name, w, rows, k, i, j)
										}
										continue
									}
									var s, mag float64
									for p := range k {
										x := float64(a[i*ars+p*aps]) * float64(b[p*ldb+j])
										s += x
										mag += math.Abs(x)
									}
									want, m := float64(alpha)*s, float64(alpha)*mag
									if accum {
										want += float64(beta) * float64(old[i*ldc+j])
										m += math.Abs(float64(beta) * float64(old[i*ldc+j]))
									}
									if !closeTo(got, want, m, k) {
										t.Fatalf("%s w=%d rows=%d k=%d trans=%v accum=%v: C[%d,%d] = %v, want %v", kn.name, w, rows, k, trans, accum, i, j, got, want)
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestKernelDots checks kernel.dots for every row count up to drows and
// every remainder of k by the vector widths.
func TestKernelDots(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	for _, kn := range kernels() {
		if kn.dotsMax == 0 {
			continue
		}
		for rows := 1; rows <= kn.drows; rows++ {
			for _, k := range []int{1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33} {
				lda, ldb := k+3, k+1
				a, b := randSlice(rng, rows*lda), randSlice(rng, dotCols*ldb)
				var out [maxDots]float32
				kn.dots(rows, k, a, lda, b, ldb, &out)
				for i := range rows {
					for j := range dotCols {
						var s, mag float64
						for p := range k {
							x := float64(a[i*lda+p]) * float64(b[j*ldb+p])
							s += x
							mag += math.Abs(x)
						}
						if got := out[i*dotCols+j]; !closeTo(got, s, mag, k) {
							t.Fatalf("%s rows=%d k=%d: out[%d·%d+%d] = %v, want %v", kn.name, rows, k, i, dotCols, j, got, s)
						}
					}
				}
			}
		}
	}
}
