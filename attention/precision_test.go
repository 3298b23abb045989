package attention

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
)

// TestAffineBF16 checks the learned networks' own bf16 products (affine,
// affineBackward) against those of nn.Linear in bf16, whose backward
// pass the nn package checks by finite differences: the same bits.
func TestAffineBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	const rows, in, out = 9, 24, 40
	l := nn.NewLinear("l", in, out, true, rng)
	for i := range l.Bias.Value.Data {
		l.Bias.Value.Data[i] = float32(rng.NormFloat64())
	}
	l.BF16 = nn.NewRounded(l.Weight, true, true)
	x, dy := randTensor(rng, 1, rows, in), randTensor(rng, 1, rows, out)

	y, dx := tensor.New(rows, out), tensor.New(rows, in)
	l.Forward(y, x)
	l.Backward(dx, dy)

	y2, dx2 := make([]float32, rows*out), make([]float32, rows*in)
	dw, db := make([]float32, in*out), make([]float32, out)
	affine(y2, x.Data, rows, l)
	affineBackward(dx2, dy.Data, x.Data, rows, l, nil, dw, db)
	for _, c := range []struct {
		name      string
		got, want []float32
	}{
		{"y", y2, y.Data}, {"dx", dx2, dx.Data}, {"dW", dw, l.Weight.Grad.Data}, {"db", db, l.Bias.Grad.Data},
	} {
		for i := range c.want {
			if math.Float32bits(c.got[i]) != math.Float32bits(c.want[i]) {
				t.Errorf("%s[%d] = %v, nn.Linear gives %v", c.name, i, c.got[i], c.want[i])
				break
			}
		}
	}
}
