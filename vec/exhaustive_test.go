package vec

import (
	"flag"
	"math"
	"runtime"
	"sync"
	"testing"
)

var exhaustive = flag.Bool("exhaustive", false, "check GELU and GELUBackward at every float32 input (minutes), not a sample")

// TestGELUExhaustive holds GELU and GELUBackward (with dy = 1) to the error
// bounds of TestGELU and TestGELUBackward at all 2³² float32 inputs, on
// every kernel set: their errors depend on the input only, so this proves
// the bounds rather than sampling them. That takes a few minutes per kernel
// set on two cores, so by default it checks every 4099th block of 2¹⁶
// inputs sharing their high 16 bits (16 blocks, all signs and many
// exponents), and all of them only with -exhaustive.
func TestGELUExhaustive(t *testing.T) {
	stride := 4099
	if *exhaustive {
		stride = 1
	}
	kernels := []struct {
		name     string
		f        func(dst, src []float32)
		ref      func(float64) float64
		c        float64 // the constant term of tol
		tol, abs func(float64) float64
	}{
		{"GELU", GELU, geluRef, 6, geluTol, geluAbs},
		{"GELUBackward", func(dx, x []float32) {
			dy := make([]float32, len(x))
			for i := range dy {
				dy[i] = 1
			}
			GELUBackward(dx, x, dy)
		}, geluDerivRef, 10, geluBackwardTol, geluBackwardAbs},
	}
	paths(t, func(t *testing.T) {
		for _, k := range kernels {
			t.Run(k.name, func(t *testing.T) {
				workers := runtime.GOMAXPROCS(0)
				var (
					mu            sync.Mutex
					worst, worstX float64
					fails         int
					wg            sync.WaitGroup
				)
				for w := range workers {
					wg.Go(func() {
						// Each worker takes every workers-th block of
						// 2¹⁶ inputs sharing their high 16 bits (of those
						// checked).
						xs, got := make([]float32, 1<<16), make([]float32, 1<<16)
						var wst, wstX float64
						var nf int
						for hi := w * stride; hi < 1<<16; hi += workers * stride {
							for lo := range xs {
								xs[lo] = math.Float32frombits(uint32(hi)<<16 | uint32(lo))
							}
							k.f(got, xs)
							for i, x := range xs {
								xv := float64(x)
								want := k.ref(xv)
								if w := float32(want); math.IsNaN(want) || math.IsInf(float64(w), 0) {
									if !same(got[i], w) && !(w != w && got[i] != got[i]) {
										nf++
										if nf <= 3 {
											t.Errorf("%s(%g) = %g, want %g", k.name, x, got[i], w)
										}
									}
									continue
								}
								d := math.Abs(float64(got[i]) - want)
								// Most errors are far below the part of
								// the bound that is cheap to compute.
								abs := k.abs(xv)
								if d <= 0.5*(k.c*eps*math.Abs(want)+abs) {
									continue
								}
								r := d / (k.tol(xv)*math.Abs(want) + abs)
								if r > 1 {
									nf++
									if nf <= 3 {
										t.Errorf("%s(%g) = %g, want %g: error %.3g of the bound", k.name, x, got[i], want, r)
									}
								}
								if r > wst {
									wst, wstX = r, xv
								}
							}
						}
						mu.Lock()
						defer mu.Unlock()
						fails += nf
						if wst > worst {
							worst, worstX = wst, wstX
						}
					})
				}
				wg.Wait()
				if fails > 0 {
					t.Errorf("%s: %d inputs out of bounds", k.name, fails)
				}
				if worst == 0 {
					t.Logf("%s: every error below half the bound", k.name)
				} else {
					t.Logf("%s: largest error %.3f of the bound, at %g", k.name, worst, worstX)
				}
			})
		}
	})
}
