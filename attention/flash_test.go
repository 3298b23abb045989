package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// Flash computes what the softmax reference computes, forward and
// backward, for lengths below, at and across the tile size, with the
// default tile and a small one (many tiles, several key-tile groups).
func TestFlashMatchesSoftmax(t *testing.T) {
	for _, tc := range []struct {
		block, B, H, N int
		scale          float64 // of q and k: 4 gives scores of ±100 and more
	}{
		{256, 3, 2, 1, 1}, {256, 3, 2, 5, 1}, {256, 1, 2, 256, 1}, {256, 1, 2, 257, 1}, {256, 1, 1, 3*256 - 7, 1},
		{16, 2, 1, 16, 1}, {16, 2, 1, 17, 1}, {16, 1, 1, 9*16 + 13, 1}, {16, 3, 3, 50, 1}, {16, 1, 2, 100, 4},
	} {
		for _, causal := range []bool{false, true} {
			opts := defaultKernelOptions()
			opts.Causal, opts.Block = causal, tc.block
			q, k, v := randQKV(8, tc.scale, tc.B, tc.H, tc.N, 16)
			do := randTensor(rand.New(rand.NewPCG(8, 8)), 1, q.Shape...)
			want := make([][]float32, 4)
			for i, x := range slices4(forwardBackward(mustNew(t, Softmax, opts), q, k, v, do)) {
				want[i] = x.Data
			}
			got := slices4(forwardBackward(mustNew(t, Flash, opts), q, k, v, do))
			for i, name := range []string{"o", "dq", "dk", "dv"} {
				// dq and dk vanish for N = 1 (one weight, always 1): judge
				// them against the size of dv, which does not.
				diff := maxRelDiff(got[i].Data, want[i])
				if i > 0 {
					diff = maxAbsDiff(got[i].Data, want[i]) / max(maxAbs(want[i]), maxAbs(want[3]))
				}
				if diff > 2e-5 {
					t.Errorf("%+v causal=%v: flash %s differs from softmax by %.3g (relative)", tc, causal, name, diff)
				}
			}
		}
	}
}

func maxAbsDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

func maxAbs(x []float32) float64 {
	var m float64
	for _, v := range x {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

func TestFlashGradients(t *testing.T) {
	for _, tc := range []struct{ block, B, H, N int }{{256, 2, 2, 37}, {16, 2, 2, 37}, {16, 1, 1, 150}} {
		for _, causal := range []bool{false, true} {
			t.Run(fmt.Sprintf("%+v/causal=%v", tc, causal), func(t *testing.T) {
				opts := defaultKernelOptions()
				opts.Causal, opts.Block = causal, tc.block
				q, k, v := randQKV(9, 1, tc.B, tc.H, tc.N, 8)
				checkGradients(t, mustNew(t, Flash, opts), q, k, v, 1e-2, 1e-2, 20)
			})
		}
	}
}

func TestFlashCausal(t *testing.T) {
	for _, tc := range []struct{ block, N int }{{256, 37}, {256, 3*256 + 5}, {16, 37}} {
		opts := defaultKernelOptions()
		opts.Block = tc.block
		q, k, v := randQKV(10, 1, 1, 2, tc.N, 8)
		checkCausal(t, mustNew(t, Flash, opts), q, k, v)
	}
}

func BenchmarkFlash(b *testing.B) {
	benchMechanism(b, Flash, defaultKernelOptions(), benchShapes(16384), tiledFlops(true))
}
