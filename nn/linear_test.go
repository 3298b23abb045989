package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// linearCase maps [2, rows/2, dim] to [2, rows/2, dim+3] (In ≠ Out catches
// transposed strides), with products at precision p.
func linearCase(rng *rand.Rand, s size, bias bool, p Precision) *gradCase {
	in, out := s.dim, s.dim+3
	l := NewLinear("lin", in, out, bias, rng)
	randomize(rng, l.Params())
	x := randTensor(rng, 1, 2, s.rows/2, in)
	c := &gradCase{
		params: l.Params(), inputs: []*tensor.Tensor{x},
		dinputs: []*tensor.Tensor{tensor.New(x.Shape...)},
		out:     tensor.New(2, s.rows/2, out),
		bf16:    p == BF16,
	}
	c.forward = func() { l.Forward(c.out, x) }
	if p == BF16 {
		l.BF16 = NewRounded(l.Weight, true, true)
		c.forward = func() {
			l.BF16.Round(l.Weight) // the finite differences change W
			l.Forward(c.out, x)
		}
	}
	c.backward = func(dy *tensor.Tensor) { l.Backward(c.dinputs[0], dy) }
	return c
}

func TestLinearForward(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	const rows, in, out = 5, 4, 3
	l := NewLinear("lin", in, out, true, rng)
	randomize(rng, l.Params())
	x := randTensor(rng, 1, rows, in)
	y := tensor.New(rows, out)
	y.Fill(float32(math.NaN())) // Forward must not read y
	l.Forward(y, x)
	for r := range rows {
		for j := range out {
			want := float64(l.Bias.Value.Data[j])
			for k := range in {
				want += float64(x.Data[r*in+k]) * float64(l.Weight.Value.Data[k*out+j])
			}
			if got := float64(y.Data[r*out+j]); math.Abs(got-want) > 1e-5 {
				t.Errorf("y[%d,%d] = %g, want %g", r, j, got, want)
			}
		}
	}
}

func TestLinearBackwardWithoutInputGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	l := NewLinear("lin", 4, 3, true, rng)
	x := randTensor(rng, 1, 5, 4)
	y := tensor.New(5, 3)
	dy := randTensor(rng, 1, 5, 3)
	l.Forward(y, x)
	l.Backward(nil, dy)
	want := Linear{In: 4, Out: 3, Weight: NewParam("w", true, 4, 3), Bias: NewParam("b", false, 3)}
	want.Weight.Value.CopyFrom(l.Weight.Value)
	want.Forward(y, x)
	want.Backward(tensor.New(5, 4), dy)
	if !bitwiseEqual(l.Weight.Grad.Data, want.Weight.Grad.Data) || !bitwiseEqual(l.Bias.Grad.Data, want.Bias.Grad.Data) {
		t.Error("parameter gradients differ when dx is nil")
	}
}

func TestLinearShapePanics(t *testing.T) {
	l := NewLinear("lin", 4, 3, false, rand.New(rand.NewPCG(1, 3)))
	for _, tc := range []struct {
		name string
		y, x *tensor.Tensor
	}{
		{"wrong input width", tensor.New(2, 3), tensor.New(2, 5)},
		{"wrong output width", tensor.New(2, 4), tensor.New(2, 4)},
		{"wrong rows", tensor.New(3, 3), tensor.New(2, 4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			l.Forward(tc.y, tc.x)
		})
	}
}
