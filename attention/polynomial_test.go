package attention

import (
	"fmt"
	"math"
	"testing"
)

// polyScale returns the standard deviation of q and k entries that keeps
// (q·k)^p moderate for heads of size h: |q·k| of order one.
func polyScale(h int) float64 { return 1 / math.Sqrt(math.Sqrt(float64(h))) }

func TestPolynomialAgainstFloat64(t *testing.T) {
	for _, p := range []int{2, 4, 6, 8} {
		for _, tc := range []struct{ block, N int }{{256, 1}, {256, 9}, {256, 256}, {256, 300}, {16, 16}, {16, 9*16 + 13}} {
			for _, causal := range []bool{false, true} {
				opts := defaultKernelOptions()
				opts.Causal, opts.Degree, opts.Block = causal, p, tc.block
				q, k, v := randQKV(11, polyScale(16), 2, 1, tc.N, 16)
				o := forward(mustNew(t, Polynomial, opts), q, k, v)
				if diff := maxRelDiff(o.Data, exactAttention(Polynomial, causal, p, q, k, v).Data); diff > 1e-5 {
					t.Errorf("p=%d %+v causal=%v: output differs from the float64 reference by %.3g (relative)", p, tc, causal, diff)
				}
			}
		}
	}
}

func TestPolynomialGradients(t *testing.T) {
	for _, tc := range []struct {
		p, block, B, H, N int
		eps               float64
	}{
		{2, 256, 2, 2, 37, 1e-2},
		{4, 256, 2, 2, 37, 1e-2},
		{8, 256, 2, 2, 37, 3e-3},
		{4, 16, 2, 2, 37, 1e-2},
		{4, 16, 1, 1, 150, 1e-2},
		{8, 16, 1, 1, 150, 3e-3},
	} {
		for _, causal := range []bool{false, true} {
			t.Run(fmt.Sprintf("%+v/causal=%v", tc, causal), func(t *testing.T) {
				opts := defaultKernelOptions()
				opts.Causal, opts.Degree, opts.Block = causal, tc.p, tc.block
				q, k, v := randQKV(12, polyScale(8), tc.B, tc.H, tc.N, 8)
				checkGradients(t, mustNew(t, Polynomial, opts), q, k, v, tc.eps, 1e-2, 20)
			})
		}
	}
}

func TestPolynomialCausal(t *testing.T) {
	for _, tc := range []struct{ block, N int }{{256, 37}, {256, 3*256 + 5}, {16, 37}} {
		opts := defaultKernelOptions()
		opts.Block = tc.block
		q, k, v := randQKV(13, polyScale(8), 1, 2, tc.N, 8)
		checkCausal(t, mustNew(t, Polynomial, opts), q, k, v)
	}
}

func BenchmarkPolynomial(b *testing.B) {
	benchMechanism(b, Polynomial, defaultKernelOptions(), benchShapes(4096), tiledFlops(true))
}
