package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// ropeCase rotates [B=2, H=2, N, h] with a non-zero offset.
func ropeCase(rng *rand.Rand, s size) *gradCase {
	r := NewRoPE(s.dim)
	r.Offset = 3
	x := randTensor(rng, 1, 2, 2, s.rows/2, s.dim)
	c := &gradCase{
		inputs: []*tensor.Tensor{x}, dinputs: []*tensor.Tensor{tensor.New(x.Shape...)},
		out: tensor.New(x.Shape...),
	}
	c.forward = func() { r.Forward(c.out, x) }
	c.backward = func(dy *tensor.Tensor) { r.Backward(c.dinputs[0], dy) }
	return c
}

func sinusoidalCase(rng *rand.Rand, s size) *gradCase {
	p := NewSinusoidal(s.dim)
	p.Offset = 2
	x := randTensor(rng, 1, 2, s.rows/2, s.dim)
	c := &gradCase{
		inputs: []*tensor.Tensor{x}, dinputs: []*tensor.Tensor{tensor.New(x.Shape...)},
		out: tensor.New(x.Shape...),
	}
	c.forward = func() { p.Forward(c.out, x) }
	c.backward = func(dy *tensor.Tensor) { p.Backward(c.dinputs[0], dy) }
	return c
}

func dot64(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

// TestRoPERelative checks the defining property of rotary embeddings: the
// dot product of a query at position m and a key at position n depends only
// on m − n, and rotations keep norms.
func TestRoPERelative(t *testing.T) {
	const h = 16
	rng := rand.New(rand.NewPCG(5, 1))
	q, k := randTensor(rng, 1, 1, h), randTensor(rng, 1, 1, h)
	rot := func(x *tensor.Tensor, pos int) *tensor.Tensor {
		r := NewRoPE(h)
		r.Offset = pos
		y := tensor.New(1, h)
		r.Forward(y, x)
		return y
	}
	for _, tc := range []struct{ m, n, shift int }{{5, 2, 0}, {5, 2, 100}, {0, 7, 31}, {40, 40, 1000}} {
		base := dot64(rot(q, tc.m).Data, rot(k, tc.n).Data)
		moved := dot64(rot(q, tc.m+tc.shift).Data, rot(k, tc.n+tc.shift).Data)
		if math.Abs(base-moved) > 1e-4 {
			t.Errorf("q@%d·k@%d = %g but shifted by %d gives %g", tc.m, tc.n, base, tc.shift, moved)
		}
		if nq, nr := dot64(q.Data, q.Data), dot64(rot(q, tc.m).Data, rot(q, tc.m).Data); math.Abs(nq-nr) > 1e-4*nq {
			t.Errorf("rotation to %d changes |q|² from %g to %g", tc.m, nq, nr)
		}
	}
	// Position 0 is the identity, and a nonzero position is not.
	if y := rot(q, 0); !bitwiseEqual(y.Data, q.Data) {
		t.Error("position 0 is not the identity")
	}
	if y := rot(q, 1); bitwiseEqual(y.Data, q.Data) {
		t.Error("position 1 is the identity")
	}
	// The lowest frequency pair (0, h/2) turns by exactly one radian per position.
	e := tensor.New(1, h)
	e.Data[0] = 1
	y := rot(e, 1)
	if math.Abs(float64(y.Data[0])-math.Cos(1)) > 1e-6 || math.Abs(float64(y.Data[h/2])-math.Sin(1)) > 1e-6 {
		t.Errorf("e0 at position 1 became (%g, %g), want (cos 1, sin 1)", y.Data[0], y.Data[h/2])
	}
}

// TestIncrementalPositions checks that decoding token by token (N = 1 at
// Offset = t) reproduces a full-sequence forward bitwise, for RoPE on
// [B,H,N,h] and Sinusoidal on [B,N,d], including a table that grows.
func TestIncrementalPositions(t *testing.T) {
	const B, H, N, h = 2, 3, 9, 8
	rng := rand.New(rand.NewPCG(5, 2))
	x := randTensor(rng, 1, B, H, N, h)
	full := tensor.New(B, H, N, h)
	NewRoPE(h).Forward(full, x)
	step := NewRoPE(h)
	for pos := range N {
		step.Offset = pos
		for b := range B {
			for hd := range H {
				in := tensor.From(x.Index(b).Index(hd).Data[pos*h:(pos+1)*h], 1, h)
				out := tensor.New(1, h)
				step.Forward(out, in)
				if !bitwiseEqual(out.Data, full.Index(b).Index(hd).Data[pos*h:(pos+1)*h]) {
					t.Fatalf("RoPE: token %d of head (%d,%d) differs from the full forward", pos, b, hd)
				}
			}
		}
	}

	const d = 10
	xs := randTensor(rng, 1, B, N, d)
	fullS := tensor.New(B, N, d)
	NewSinusoidal(d).Forward(fullS, xs)
	stepS := NewSinusoidal(d)
	for pos := range N {
		stepS.Offset = pos
		for b := range B {
			in := tensor.From(xs.Index(b).Data[pos*d:(pos+1)*d], 1, d)
			out := tensor.New(1, d)
			stepS.Forward(out, in)
			if !bitwiseEqual(out.Data, fullS.Index(b).Data[pos*d:(pos+1)*d]) {
				t.Fatalf("Sinusoidal: token %d of batch %d differs from the full forward", pos, b)
			}
		}
	}
}

func TestRoPEInverse(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 3))
	r := NewRoPE(8)
	r.Offset = 17
	x := randTensor(rng, 1, 2, 5, 8)
	y := x.Clone()
	r.Forward(y, y) // in place
	r.Offset = 0    // Backward must use the positions of the last Forward
	r.Backward(y, y)
	for i := range x.Data {
		if math.Abs(float64(x.Data[i]-y.Data[i])) > 1e-6 {
			t.Fatalf("Backward∘Forward changed element %d: %g → %g", i, x.Data[i], y.Data[i])
		}
	}
}

func TestSinusoidalValues(t *testing.T) {
	const d = 6
	p := NewSinusoidal(d)
	p.Offset = 3
	y := tensor.New(4, d)
	p.Forward(y, tensor.New(4, d))
	for n := range 4 {
		pos := float64(3 + n)
		for i := 0; i < d/2; i++ {
			freq := 1 / math.Pow(10000, float64(2*i)/d)
			if got, want := float64(y.Data[n*d+2*i]), math.Sin(pos*freq); math.Abs(got-want) > 1e-6 {
				t.Errorf("PE[%v, %d] = %g, want sin = %g", pos, 2*i, got, want)
			}
			if got, want := float64(y.Data[n*d+2*i+1]), math.Cos(pos*freq); math.Abs(got-want) > 1e-6 {
				t.Errorf("PE[%v, %d] = %g, want cos = %g", pos, 2*i+1, got, want)
			}
		}
	}
}
