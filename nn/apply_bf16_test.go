package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/tensor"
)

// TestLinearApplyBF16 checks Apply and ApplyBackward with bf16 copies of
// the weights (the products of attention's learned sketch networks in
// bf16) against Forward and Backward in bf16, whose backward pass the
// gradient checks cover: the same bits.
func TestLinearApplyBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	const rows, in, out = 9, 24, 40
	l := NewLinear("l", in, out, true, rng)
	for i := range l.Bias.Value.Data {
		l.Bias.Value.Data[i] = float32(rng.NormFloat64())
	}
	l.BF16 = NewRounded(l.Weight, true, true)
	x, dy := tensor.New(rows, in), tensor.New(rows, out)
	for _, d := range [][]float32{x.Data, dy.Data} {
		for i := range d {
			d[i] = float32(rng.NormFloat64())
		}
	}

	y, dx := tensor.New(rows, out), tensor.New(rows, in)
	l.Forward(y, x)
	l.Backward(dx, dy)

	y2, dx2 := make([]float32, rows*out), make([]float32, rows*in)
	dw, db := make([]float32, in*out), make([]float32, out)
	l.Apply(blas.NewGeneral(rows, out, y2), blas.NewGeneral(rows, in, x.Data))
	// wT is not read in bf16: the copy of Wᵀ is.
	l.ApplyBackward(blas.NewGeneral(rows, in, dx2), blas.NewGeneral(rows, out, dy.Data), blas.NewGeneral(rows, in, x.Data), blas.NewGeneral(out, in, nil), blas.NewGeneral(in, out, dw), db)
	for _, c := range []struct {
		name      string
		got, want []float32
	}{
		{"y", y2, y.Data}, {"dx", dx2, dx.Data}, {"dW", dw, l.Weight.Grad.Data}, {"db", db, l.Bias.Grad.Data},
	} {
		for i := range c.want {
			if math.Float32bits(c.got[i]) != math.Float32bits(c.want[i]) {
				t.Errorf("%s[%d] = %v, Forward/Backward give %v", c.name, i, c.got[i], c.want[i])
				break
			}
		}
	}
}
