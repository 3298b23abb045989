package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// lnInput returns rows of varied mean and scale, as a residual stream has.
func lnInput(rng *rand.Rand, rows, dim int) *tensor.Tensor {
	x := tensor.New(rows, dim)
	for r := range rows {
		mean, scale := rng.NormFloat64(), 0.5+rng.Float64()*2
		for i := range dim {
			x.Data[r*dim+i] = float32(mean + scale*rng.NormFloat64())
		}
	}
	return x
}

func layerNormCase(rng *rand.Rand, s size, affine Affine) *gradCase {
	l := NewLayerNorm("ln", s.dim, affine)
	randomize(rng, l.Params())
	x := lnInput(rng, s.rows, s.dim)
	c := &gradCase{
		params: l.Params(), inputs: []*tensor.Tensor{x},
		dinputs: []*tensor.Tensor{tensor.New(x.Shape...)},
		out:     tensor.New(x.Shape...),
	}
	c.forward = func() { l.Forward(c.out, x) }
	c.backward = func(dy *tensor.Tensor) { l.Backward(c.dinputs[0], dy) }
	return c
}

// sharedLayerNormCase normalizes q and k with one gain and bias (Share):
// out[0] = LN(q), out[1] = LN(k).
func sharedLayerNormCase(rng *rand.Rand, s size) *gradCase {
	lq := NewLayerNorm("qk", s.dim, GainBias)
	randomize(rng, lq.Params())
	lk := lq.Share()
	q, k := lnInput(rng, s.rows, s.dim), lnInput(rng, s.rows, s.dim)
	c := &gradCase{
		params: lq.Params(), inputs: []*tensor.Tensor{q, k},
		dinputs: []*tensor.Tensor{tensor.New(q.Shape...), tensor.New(k.Shape...)},
		out:     tensor.New(2, s.rows, s.dim),
	}
	c.forward = func() {
		lq.Forward(c.out.Index(0), q)
		lk.Forward(c.out.Index(1), k)
	}
	c.backward = func(dy *tensor.Tensor) {
		lq.Backward(c.dinputs[0], dy.Index(0))
		lk.Backward(c.dinputs[1], dy.Index(1))
	}
	return c
}

func TestLayerNormForward(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 1))
	const rows, dim = 4, 16
	l := NewLayerNorm("ln", dim, GainBias)
	randomize(rng, l.Params())
	x := lnInput(rng, rows, dim)
	y := tensor.New(rows, dim)
	l.Forward(y, x)
	for r := range rows {
		var mean, sq float64
		for i := range dim {
			mean += float64(x.Data[r*dim+i])
		}
		mean /= dim
		for i := range dim {
			d := float64(x.Data[r*dim+i]) - mean
			sq += d * d
		}
		std := math.Sqrt(sq/dim + 1e-5)
		for i := range dim {
			want := (float64(x.Data[r*dim+i])-mean)/std*float64(l.Gain.Value.Data[i]) + float64(l.Bias.Value.Data[i])
			if got := float64(y.Data[r*dim+i]); math.Abs(got-want) > 1e-5*(1+math.Abs(want)) {
				t.Errorf("y[%d,%d] = %g, want %g", r, i, got, want)
			}
		}
	}
}

func TestLayerNormInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	l := NewLayerNorm("ln", 8, GainBias)
	randomize(rng, l.Params())
	x := lnInput(rng, 5, 8)
	y := tensor.New(5, 8)
	l.Forward(y, x)
	dy := randTensor(rng, 1, 5, 8)
	dx := tensor.New(5, 8)
	l.Backward(dx, dy)
	gain := l.Gain.Grad.Clone()

	l.Forward(x, x)
	if !bitwiseEqual(x.Data, y.Data) {
		t.Error("Forward with y = x differs")
	}
	l.Gain.Grad.Zero()
	l.Backward(dy, dy)
	if !bitwiseEqual(dy.Data, dx.Data) {
		t.Error("Backward with dx = dy differs")
	}
	if !bitwiseEqual(l.Gain.Grad.Data, gain.Data) {
		t.Error("gain gradient differs when dx = dy")
	}
}

func rmsNormCase(rng *rand.Rand, s size) *gradCase {
	l := NewRMSNorm("norm", s.dim)
	randomize(rng, l.Params())
	x := lnInput(rng, s.rows, s.dim)
	c := &gradCase{
		params: l.Params(), inputs: []*tensor.Tensor{x},
		dinputs: []*tensor.Tensor{tensor.New(x.Shape...)},
		out:     tensor.New(x.Shape...),
	}
	c.forward = func() { l.Forward(c.out, x) }
	c.backward = func(dy *tensor.Tensor) { l.Backward(c.dinputs[0], dy) }
	return c
}

func TestRMSNormForward(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 3))
	const rows, dim = 4, 16
	l := NewRMSNorm("norm", dim)
	l.Eps = 1e-6
	randomize(rng, l.Params())
	x := lnInput(rng, rows, dim)
	y := tensor.New(rows, dim)
	l.Forward(y, x)
	for r := range rows {
		var sq float64
		for i := range dim {
			sq += float64(x.Data[r*dim+i]) * float64(x.Data[r*dim+i])
		}
		rms := math.Sqrt(sq/dim + 1e-6)
		for i := range dim {
			want := float64(x.Data[r*dim+i]) / rms * float64(l.Gain.Value.Data[i])
			if got := float64(y.Data[r*dim+i]); math.Abs(got-want) > 1e-5*(1+math.Abs(want)) {
				t.Errorf("y[%d,%d] = %g, want %g", r, i, got, want)
			}
		}
	}
	// In place, forward and backward, gives the same bits.
	dy := randTensor(rng, 1, rows, dim)
	dx := tensor.New(rows, dim)
	l.Backward(dx, dy)
	gain := l.Gain.Grad.Clone()
	l.Forward(x, x)
	if !bitwiseEqual(x.Data, y.Data) {
		t.Error("Forward with y = x differs")
	}
	l.Gain.Grad.Zero()
	l.Backward(dy, dy)
	if !bitwiseEqual(dy.Data, dx.Data) || !bitwiseEqual(l.Gain.Grad.Data, gain.Data) {
		t.Error("Backward with dx = dy differs")
	}
}
