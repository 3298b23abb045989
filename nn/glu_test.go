package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

func gluCase(rng *rand.Rand, s size, bias bool) *gradCase { return gluCaseAct(rng, s, bias, GELU) }

func gluCaseAct(rng *rand.Rand, s size, bias bool, act Activation) *gradCase {
	g := NewGLU("ffn", s.dim, 2*s.dim, bias, rng) // hidden 2·dim keeps the large case quick
	g.Act = act

	randomize(rng, g.Params())
	x := randTensor(rng, 1, 2, s.rows/2, s.dim)
	c := &gradCase{
		params: g.Params(), inputs: []*tensor.Tensor{x},
		dinputs: []*tensor.Tensor{tensor.New(x.Shape...)},
		out:     tensor.New(x.Shape...),
	}
	c.forward = func() { g.Forward(c.out, x) }
	c.backward = func(dy *tensor.Tensor) { g.Backward(c.dinputs[0], dy) }
	return c
}

// gelu is the tanh approximation of GELU (Hendrycks & Gimpel, 2016).
func gelu(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

// silu is x·σ(x).
func silu(x float64) float64 { return x / (1 + math.Exp(-x)) }

// activations are the references of the Activations.
var activations = []struct {
	name string
	act  Activation
	ref  func(float64) float64
}{{"GELU", GELU, gelu}, {"SiLU", SiLU, silu}}

func TestGLUForward(t *testing.T) {
	for _, a := range activations {
		t.Run(a.name, func(t *testing.T) { checkGLUForward(t, a.act, a.ref) })
	}
}

func checkGLUForward(t *testing.T, act Activation, ref func(float64) float64) {
	rng := rand.New(rand.NewPCG(4, 1))
	const rows, dim, hidden = 3, 4, 6
	g := NewGLU("ffn", dim, hidden, true, rng)
	g.Act = act
	randomize(rng, g.Params())
	x := randTensor(rng, 1, rows, dim)
	y := tensor.New(rows, dim)
	g.Forward(y, x)
	w := g.In.Weight.Value.Data // [dim, 2·hidden]: W1 | W3
	for r := range rows {
		h := make([]float64, hidden)
		for j := range hidden {
			a, b := float64(g.In.Bias.Value.Data[j]), float64(g.In.Bias.Value.Data[hidden+j])
			for k := range dim {
				a += float64(x.Data[r*dim+k]) * float64(w[k*2*hidden+j])
				b += float64(x.Data[r*dim+k]) * float64(w[k*2*hidden+hidden+j])
			}
			h[j] = ref(a) * b
		}
		for i := range dim {
			want := float64(g.Out.Bias.Value.Data[i])
			for j := range hidden {
				want += h[j] * float64(g.Out.Weight.Value.Data[j*dim+i])
			}
			if got := float64(y.Data[r*dim+i]); math.Abs(got-want) > 1e-4*(1+math.Abs(want)) {
				t.Errorf("y[%d,%d] = %g, want %g", r, i, got, want)
			}
		}
	}
}

func TestGLUDefaultHidden(t *testing.T) {
	g := NewGLU("ffn", 8, 0, false, rand.New(rand.NewPCG(4, 2)))
	if g.Hidden != 32 || g.In.Out != 64 || g.Out.In != 32 {
		t.Errorf("hidden %d, In.Out %d, Out.In %d; want 32, 64, 32", g.Hidden, g.In.Out, g.Out.In)
	}
	if n := len(g.Params()); n != 2 {
		t.Errorf("%d params without bias, want 2", n)
	}
}

func mlpCase(rng *rand.Rand, s size, bias bool, act Activation) *gradCase {
	m := NewMLP("ffn", s.dim, 3*s.dim, act, bias, rng)
	randomize(rng, m.Params())
	x := randTensor(rng, 1, 2, s.rows/2, s.dim)
	c := &gradCase{
		params: m.Params(), inputs: []*tensor.Tensor{x},
		dinputs: []*tensor.Tensor{tensor.New(x.Shape...)},
		out:     tensor.New(x.Shape...),
	}
	c.forward = func() { m.Forward(c.out, x) }
	c.backward = func(dy *tensor.Tensor) { m.Backward(c.dinputs[0], dy) }
	return c
}

func TestMLPForward(t *testing.T) {
	for _, a := range activations {
		t.Run(a.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(4, 3))
			const rows, dim, hidden = 3, 4, 7
			m := NewMLP("ffn", dim, hidden, a.act, true, rng)
			randomize(rng, m.Params())
			x := randTensor(rng, 1, rows, dim)
			y := tensor.New(rows, dim)
			m.Forward(y, x)
			for r := range rows {
				h := make([]float64, hidden)
				for j := range hidden {
					s := float64(m.In.Bias.Value.Data[j])
					for k := range dim {
						s += float64(x.Data[r*dim+k]) * float64(m.In.Weight.Value.Data[k*hidden+j])
					}
					h[j] = a.ref(s)
				}
				for i := range dim {
					want := float64(m.Out.Bias.Value.Data[i])
					for j := range hidden {
						want += h[j] * float64(m.Out.Weight.Value.Data[j*dim+i])
					}
					if got := float64(y.Data[r*dim+i]); math.Abs(got-want) > 1e-4*(1+math.Abs(want)) {
						t.Errorf("y[%d,%d] = %g, want %g", r, i, got, want)
					}
				}
			}
		})
	}
}
