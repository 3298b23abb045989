package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

const lnEps = 1e-5

// layerNormRef is LayerNorm in float64.
func layerNormRef(x, gain, bias []float32) []float64 {
	mu, v := meanVarRef(x)
	rstd := 1 / math.Sqrt(v+lnEps)
	y := make([]float64, len(x))
	for i := range x {
		y[i] = (float64(x[i])-mu)*rstd*float64(gain[i]) + float64(bias[i])
	}
	return y
}

func TestLayerNorm(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			x, g, b := fill(rng, a.slice(n), 2, 4), fill(rng, a.slice(n), 0.5, 1.5), fill(rng, a.slice(n), -1, 1)
			dst := a.slice(n)
			want := layerNormRef(x, g, b)
			mean, rstd := LayerNorm(dst, x, g, b, lnEps)
			for i := range dst {
				if math.Abs(float64(dst[i])-want[i]) > 1e-5*(1+math.Abs(want[i])) {
					t.Fatalf("LayerNorm: [%d] = %g, want %g", i, dst[i], want[i])
				}
			}
			if n > 0 {
				wm, wv := meanVarRef(x)
				if math.Abs(float64(mean)-wm) > 1e-6*math.Abs(wm) || math.Abs(float64(rstd)*math.Sqrt(wv+lnEps)-1) > 1e-5 {
					t.Errorf("LayerNorm returned mean %g, rstd %g; want %g, %g", mean, rstd, wm, 1/math.Sqrt(wv+lnEps))
				}
			}
			// In place.
			x2 := append([]float32(nil), x...)
			LayerNorm(x2, x2, g, b, lnEps)
			for i := range x2 {
				if !same(x2[i], dst[i]) {
					t.Fatalf("LayerNorm in place: [%d] = %g, want %g", i, x2[i], dst[i])
				}
			}
		})
	})
}

// TestLayerNormRows checks LayerNormRows bit for bit against LayerNorm row
// by row on each path: widths its kernel takes (multiples of 32) and
// others, rows apart and in place, with rows of specials: NaNs of two
// payloads, infinities, huge and subnormal values, constant rows.
func TestLayerNormRows(t *testing.T) {
	specials := []float32{inf, ninf, nan, math.Float32frombits(0x7fc0abcd), 1e30, -3e38, 1e-40, 0, float32(math.Copysign(0, -1))}
	paths(t, func(t *testing.T) {
		for _, n := range []int{32, 64, 96, 256, 7, 100} {
			for _, pad := range []int{0, 3} {
				t.Run(fmt.Sprintf("n=%d/ldx=%d", n, n+pad), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(n), uint64(pad)))
					const rows = 12
					ldx := n + pad
					x := fill(rng, make([]float32, (rows-1)*ldx+n), -3, 5)
					for i := 0; i < n; i++ {
						x[2*ldx+i] = 0.75   // a constant row: variance 0
						x[3*ldx+i] *= 1e-39 // subnormal
					}
					if n >= 64 { // two NaNs meet in a lane of the sums
						x[ldx+1], x[ldx+33] = nan, math.Float32frombits(0x7fc0abcd)
					}
					for r := 4; r < rows; r++ { // a special or two a row
						x[r*ldx+rng.IntN(n)] = specials[(r-4)%len(specials)]
						x[r*ldx+rng.IntN(n)] = specials[rng.IntN(len(specials))]
					}
					g, b := fill(rng, make([]float32, n), 0.5, 1.5), fill(rng, make([]float32, n), -1, 1)
					dst := make([]float32, rows*n)
					mean, rstd := make([]float32, rows), make([]float32, rows)
					LayerNormRows(dst, x, ldx, g, b, mean, rstd, lnEps)
					want := make([]float32, n)
					for r := range rows {
						wm, ws := LayerNorm(want, x[r*ldx:r*ldx+n], g, b, lnEps)
						if !same(mean[r], wm) || !same(rstd[r], ws) {
							t.Fatalf("row %d: mean, rstd = %g (%#x), %g (%#x); LayerNorm gives %g (%#x), %g (%#x)", r,
								mean[r], math.Float32bits(mean[r]), rstd[r], math.Float32bits(rstd[r]), wm, math.Float32bits(wm), ws, math.Float32bits(ws))
						}
						for i, w := range want {
							if got := dst[r*n+i]; !same(got, w) {
								t.Fatalf("row %d, element %d: %g (%#x); LayerNorm gives %g (%#x)", r, i, got, math.Float32bits(got), w, math.Float32bits(w))
							}
						}
					}
					if pad == 0 { // in place
						LayerNormRows(x, x, ldx, g, b, mean, rstd, lnEps)
						for i := range dst {
							if !same(x[i], dst[i]) {
								t.Fatalf("in place: element %d = %g, want %g", i, x[i], dst[i])
							}
						}
					}
				})
			}
		}
	})
}

// layerNormBackwardRef returns the gradients of Σ dy·LayerNorm(x) in float64.
func layerNormBackwardRef(x, gain, dy []float32) (dx, dgain, dbias []float64) {
	n := len(x)
	mu, v := meanVarRef(x)
	rstd := 1 / math.Sqrt(v+lnEps)
	dx, dgain, dbias = make([]float64, n), make([]float64, n), make([]float64, n)
	var sg, sgx float64
	xh := make([]float64, n)
	for i := range x {
		xh[i] = (float64(x[i]) - mu) * rstd
		g := float64(dy[i]) * float64(gain[i])
		sg += g
		sgx += g * xh[i]
		dgain[i] = float64(dy[i]) * xh[i]
		dbias[i] = float64(dy[i])
	}
	for i := range x {
		dx[i] = rstd * (float64(dy[i])*float64(gain[i]) - sg/float64(n) - xh[i]*sgx/float64(n))
	}
	return dx, dgain, dbias
}

func TestLayerNormBackward(t *testing.T) {
	paths(t, func(t *testing.T) {
		cases(t, func(t *testing.T, n int, a *arena, rng *rand.Rand) {
			x, g, dy := fill(rng, a.slice(n), -1, 3), fill(rng, a.slice(n), 0.5, 1.5), fill(rng, a.slice(n), -1, 1)
			// The gradients add to what is there.
			dx, dg, db := fill(rng, a.slice(n), -1, 1), fill(rng, a.slice(n), -1, 1), fill(rng, a.slice(n), -1, 1)
			dx0, dg0, db0 := append([]float32(nil), dx...), append([]float32(nil), dg...), append([]float32(nil), db...)
			mean, rstd := LayerNorm(make([]float32, n), x, g, make([]float32, n), lnEps)
			LayerNormBackward(dx, dg, db, x, g, dy, mean, rstd)
			wx, wg, wb := layerNormBackwardRef(x, g, dy)
			for i := range x {
				for _, c := range []struct {
					name      string
					got, was  float32
					want, tol float64
				}{
					{"dx", dx[i], dx0[i], wx[i], 1e-5},
					{"dgain", dg[i], dg0[i], wg[i], 1e-6},
					{"dbias", db[i], db0[i], wb[i], 1e-7},
				} {
					if d := float64(c.got) - float64(c.was) - c.want; math.Abs(d) > c.tol*(1+math.Abs(c.want)) {
						t.Fatalf("%s[%d] grew by %g, want %g", c.name, i, float64(c.got)-float64(c.was), c.want)
					}
				}
			}
		})
	})
}

// TestLayerNormBackwardFiniteDiff checks LayerNormBackward against central
// differences of LayerNorm itself: the loss is Σ w[i]·LayerNorm(x)[i].
// TestLayerNormBackwardRows checks LayerNormBackwardRows bit for bit
// against LayerNormBackward row by row on each path, widths its kernel
// takes (multiples of 16) and others, rows apart, with specials among x
// and dy and gradients accumulated on nonzero ones.
func TestLayerNormBackwardRows(t *testing.T) {
	specials := []float32{inf, ninf, nan, math.Float32frombits(0x7fc0abcd), 1e30, -3e38, 1e-40, 0}
	paths(t, func(t *testing.T) {
		for _, n := range []int{16, 64, 80, 256, 7, 40} {
			for _, pad := range []int{0, 5} {
				t.Run(fmt.Sprintf("n=%d/pad=%d", n, pad), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(n), uint64(pad)))
					const rows = 12
					ldx, lddx := n+pad, n+2*pad
					x := fill(rng, make([]float32, (rows-1)*ldx+n), -3, 5)
					dy := fill(rng, make([]float32, rows*n), -1, 1)
					for r := 6; r < rows; r++ {
						x[r*ldx+rng.IntN(n)] = specials[(r-6)%len(specials)]
						dy[r*n+rng.IntN(n)] = specials[rng.IntN(len(specials))]
					}
					if n >= 32 { // two NaNs meet in a lane of the sums
						dy[5*n+1], dy[5*n+17] = nan, math.Float32frombits(0x7fc0abcd)
					}
					g, b := fill(rng, make([]float32, n), 0.5, 1.5), fill(rng, make([]float32, n), -1, 1)
					mean, rstd := make([]float32, rows), make([]float32, rows)
					LayerNormRows(make([]float32, rows*n), x, ldx, g, b, mean, rstd, lnEps)
					dx := fill(rng, make([]float32, (rows-1)*lddx+n), -1, 1)
					dg, db := fill(rng, make([]float32, n), -1, 1), fill(rng, make([]float32, n), -1, 1)
					wdx, wdg, wdb := slices.Clone(dx), slices.Clone(dg), slices.Clone(db)
					LayerNormBackwardRows(dx, lddx, dg, db, x, ldx, g, dy, mean, rstd)
					for r := range rows {
						LayerNormBackward(wdx[r*lddx:r*lddx+n], wdg, wdb, x[r*ldx:r*ldx+n], g, dy[r*n:(r+1)*n], mean[r], rstd[r])
					}
					for _, o := range []struct {
						name      string
						got, want []float32
					}{{"dx", dx, wdx}, {"dgain", dg, wdg}, {"dbias", db, wdb}} {
						for i := range o.want {
							if !same(o.got[i], o.want[i]) {
								t.Fatalf("%s[%d] = %g (%#x); LayerNormBackward gives %g (%#x)", o.name, i, o.got[i], math.Float32bits(o.got[i]), o.want[i], math.Float32bits(o.want[i]))
							}
						}
					}
				})
			}
		}
	})
}

func TestLayerNormBackwardFiniteDiff(t *testing.T) {
	paths(t, func(t *testing.T) {
		for _, n := range []int{1, 2, 7, 9, 33} {
			rng := rand.New(rand.NewPCG(11, uint64(n)))
			x, g, b, w := fill(rng, make([]float32, n), -1, 3), fill(rng, make([]float32, n), 0.5, 1.5), fill(rng, make([]float32, n), -1, 1), fill(rng, make([]float32, n), -1, 1)
			y := make([]float32, n)
			loss := func() float64 {
				LayerNorm(y, x, g, b, lnEps)
				var l float64
				for i := range y {
					l += float64(w[i]) * float64(y[i])
				}
				return l
			}
			dx, dg, db := make([]float32, n), make([]float32, n), make([]float32, n)
			mean, rstd := LayerNorm(y, x, g, b, lnEps)
			LayerNormBackward(dx, dg, db, x, g, w, mean, rstd)
			const h = 1.0 / 64 // exact steps in float32 for these magnitudes
			for _, p := range []struct {
				name string
				v    []float32
				grad []float32
			}{{"x", x, dx}, {"gain", g, dg}, {"bias", b, db}} {
				for i := range p.v {
					v0 := p.v[i]
					var l [4]float64
					for k, s := range []float32{-2, -1, 1, 2} {
						p.v[i] = v0 + s*h
						l[k] = loss()
					}
					p.v[i] = v0
					fd := (l[0] - 8*l[1] + 8*l[2] - l[3]) / (12 * h)
					// Float32 rounding of the loss, about n·ε, divided by
					// h, bounds the agreement.
					tol := 1e-3 + 64*float64(n)*eps/h
					if n == 1 && p.name == "x" {
						tol = 1e-3 // a single element normalizes to 0 whatever x is
					}
					if math.Abs(float64(p.grad[i])-fd) > tol*(1+math.Abs(fd)) {
						t.Errorf("n=%d: d loss/d %s[%d] = %g, finite difference %g", n, p.name, i, p.grad[i], fd)
					}
				}
			}
		}
	})
}

func TestLayerNormPanics(t *testing.T) {
	a, b := make([]float32, 3), make([]float32, 4)
	for _, tt := range []struct {
		f   func()
		msg string
	}{
		{func() { LayerNorm(a, a, a, b, 1e-5) }, "vec.LayerNorm: length mismatch: len(dst)=3, len(x)=3, len(gain)=3, len(bias)=4"},
		{func() { LayerNormRows(a, a, 3, a, a, a[:1], a[:2], 1e-5) }, "vec.LayerNormRows: length mismatch: len(dst)=3, len(x)=3, ldx=3, len(gain)=3, len(bias)=3, len(mean)=1, len(rstd)=2"},
		{func() { LayerNormRows(a, b, 2, a, a, a[:1], a[:1], 1e-5) }, "ldx=2"},
		{func() { LayerNormBackwardRows(a, 3, a, b, a, 3, a, a, a[:1], a[:1]) }, "vec.LayerNormBackwardRows: length mismatch: len(dx)=3, lddx=3, len(dgain)=3, len(dbias)=4"},
		{func() { LayerNormBackward(a, a, a, a, b, a, 0, 1) }, "vec.LayerNormBackward: length mismatch: len(dx)=3, len(dgain)=3, len(dbias)=3, len(x)=3, len(gain)=4, len(dy)=3"},
	} {
		func() {
			defer func() {
				if r, _ := recover().(string); !strings.Contains(r, tt.msg) {
					t.Errorf("panic %q, want %q", r, tt.msg)
				}
			}()
			tt.f()
		}()
	}
}
