package optim

import (
	"math"
	"testing"

	"github.com/polysketch/polysketch/nn"
)

// grads returns two parameters whose gradients are (3, 4) and (12): global
// norm √(9+16+144) = 13.
func grads() []*nn.Param {
	a, b := nn.NewParam("a", true, 2), nn.NewParam("b", false, 1)
	copy(a.Grad.Data, []float32{3, 4})
	b.Grad.Data[0] = 12
	return []*nn.Param{a, b}
}

func TestClipGradNorm(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxNorm float64
		want    []float32 // gradients after clipping
	}{
		{"clipped", 6.5, []float32{1.5, 2, 6}},
		{"under the limit", 20, []float32{3, 4, 12}},
		{"at the limit", 13, []float32{3, 4, 12}},
		{"disabled", 0, []float32{3, 4, 12}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := grads()
			if norm := ClipGradNorm(ps, tc.maxNorm); norm != 13 {
				t.Errorf("norm = %v, want 13", norm)
			}
			got := []float32{ps[0].Grad.Data[0], ps[0].Grad.Data[1], ps[1].Grad.Data[0]}
			for i := range got {
				if math.Abs(float64(got[i]-tc.want[i])) > 1e-6 {
					t.Errorf("gradients %v, want %v", got, tc.want)
					break
				}
			}
		})
	}
}

func TestClipGradNormNonFinite(t *testing.T) {
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
		ps := grads()
		ps[0].Grad.Data[0] = bad
		norm := ClipGradNorm(ps, 1)
		if !math.IsNaN(norm) && !math.IsInf(norm, 1) {
			t.Errorf("gradient %v: norm %v, want NaN or +Inf", bad, norm)
		}
		if ps[1].Grad.Data[0] != 12 {
			t.Errorf("gradient %v: finite gradients changed to %v", bad, ps[1].Grad.Data[0])
		}
	}
}

func TestScaleAndZeroGrad(t *testing.T) {
	ps := grads()
	ScaleGrads(ps, 0.25)
	if ps[0].Grad.Data[1] != 1 || ps[1].Grad.Data[0] != 3 {
		t.Errorf("after ScaleGrads(0.25): %v %v", ps[0].Grad.Data, ps[1].Grad.Data)
	}
	ZeroGrad(ps)
	if GradNorm(ps) != 0 {
		t.Errorf("after ZeroGrad: %v %v", ps[0].Grad.Data, ps[1].Grad.Data)
	}
}
