package nn

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/tensor"
)

// pad is the number of columns past a view's own in the strided views of
// these tests.
const pad = 2

// strided returns a rows×cols view of t (rows × cols+pad).
func strided(t *tensor.Tensor, rows, cols int) blas.General {
	return blas.General{Rows: rows, Cols: cols, Stride: cols + pad, Data: t.Data}
}

// transposed returns Wᵀ of l, [Out × In].
func transposed(l *Linear) blas.General {
	wT := make([]float32, l.In*l.Out)
	for i := 0; i < l.In; i++ {
		for j := 0; j < l.Out; j++ {
			wT[j*l.In+i] = l.Weight.Value.Data[i*l.Out+j]
		}
	}
	return blas.NewGeneral(l.Out, l.In, wT)
}

// applyCase is linearCase through Apply and ApplyBackward on strided
// views, the gradients going to the layer's own.
func applyCase(rng *rand.Rand, s size, bias bool) *gradCase {
	in, out := s.dim, s.dim+3
	l := NewLinear("lin", in, out, bias, rng)
	randomize(rng, l.Params())
	x := randTensor(rng, 1, s.rows, in+pad)
	c := &gradCase{
		params: l.Params(), inputs: []*tensor.Tensor{x},
		dinputs: []*tensor.Tensor{tensor.New(x.Shape...)},
		out:     tensor.New(s.rows, out+pad),
	}
	c.forward = func() { l.Apply(strided(c.out, s.rows, out), strided(x, s.rows, in)) }
	c.backward = func(dy *tensor.Tensor) {
		c.dinputs[0].Zero() // the padding has no gradient
		var db []float32
		if bias {
			db = l.Bias.Grad.Data
		}
		l.ApplyBackward(strided(c.dinputs[0], s.rows, in), strided(dy, s.rows, out), strided(x, s.rows, in),
			transposed(l), blas.NewGeneral(in, out, l.Weight.Grad.Data), db)
	}
	return c
}

// TestLinearApply checks Apply and ApplyBackward on strided views against
// finite differences, that Apply gives the bits of Forward and writes
// nothing outside y's view, and that ApplyBackward's weight gradient has
// the bits of Backward's.
func TestLinearApply(t *testing.T) {
	for _, bias := range []bool{true, false} {
		rng := rand.New(rand.NewPCG(3, 4))
		c := applyCase(rng, small, bias)
		w := randTensor(rng, 1, c.out.Shape...)
		for _, e := range fdErrors(c, w, c.gradients(w), rng, 24, 1e-2, 1e-2) {
			t.Errorf("bias %v: %s", bias, e)
		}

		rows, in, out := 37, 19, 23
		l := NewLinear("lin", in, out, bias, rng)
		randomize(rng, l.Params())
		x := randTensor(rng, 1, rows, in+pad)
		y := tensor.New(rows, out+pad)
		y.Fill(float32(math.NaN())) // Apply must not read y's view
		for i := 0; i < rows; i++ {
			y.Data[i*(out+pad)+out] = 7 // nor write past it
		}
		l.Apply(strided(y, rows, out), strided(x, rows, in))
		dense := tensor.New(rows, in)
		for i := 0; i < rows; i++ {
			copy(dense.Data[i*in:(i+1)*in], x.Data[i*(in+pad):])
		}
		want := tensor.New(rows, out)
		l.Forward(want, dense)
		for i := 0; i < rows; i++ {
			if y.Data[i*(out+pad)+out] != 7 {
				t.Fatalf("bias %v: Apply wrote past row %d of y's view", bias, i)
			}
			for j := 0; j < out; j++ {
				if g, w := y.Data[i*(out+pad)+j], want.Data[i*out+j]; math.Float32bits(g) != math.Float32bits(w) {
					t.Fatalf("bias %v: Apply y[%d,%d] = %v, Forward gives %v", bias, i, j, g, w)
				}
			}
		}

		dy := randTensor(rng, 1, rows, out)
		l.Weight.Grad.Zero()
		l.Backward(nil, dy)
		wantDW := append([]float32(nil), l.Weight.Grad.Data...)
		dw := make([]float32, in*out)
		var db []float32
		if bias {
			db = make([]float32, out)
		}
		dx := tensor.New(rows, in)
		l.ApplyBackward(blas.NewGeneral(rows, in, dx.Data), blas.NewGeneral(rows, out, dy.Data), strided(x, rows, in), transposed(l), blas.NewGeneral(in, out, dw), db)
		if !bitwiseEqual(dw, wantDW) {
			t.Errorf("bias %v: ApplyBackward's weight gradient differs from Backward's", bias)
		}
	}
}

// TestLinearApplyShapes checks that views that do not fit the layer
// panic with a message naming them.
func TestLinearApplyShapes(t *testing.T) {
	l := NewLinear("lin", 4, 3, true, rand.New(rand.NewPCG(1, 3)))
	for _, tc := range []struct {
		name string
		call func()
	}{
		{"input width", func() { l.Apply(blas.NewGeneral(2, 3, make([]float32, 6)), blas.NewGeneral(2, 5, make([]float32, 10))) }},
		{"rows", func() { l.Apply(blas.NewGeneral(3, 3, make([]float32, 9)), blas.NewGeneral(2, 4, make([]float32, 8))) }},
		{"backward rows", func() {
			l.ApplyBackward(blas.NewGeneral(2, 4, make([]float32, 8)), blas.NewGeneral(3, 3, make([]float32, 9)), blas.NewGeneral(2, 4, make([]float32, 8)),
				blas.NewGeneral(3, 4, make([]float32, 12)), blas.NewGeneral(4, 3, make([]float32, 12)), make([]float32, 3))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if r, _ := recover().(string); r == "" || !strings.Contains(r, "nn.Linear.Apply") {
					t.Errorf("panic %q, want one from nn.Linear.Apply…", r)
				}
			}()
			tc.call()
		})
	}
}
