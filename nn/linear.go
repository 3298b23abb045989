package nn

import (
	"math"
	"math/rand/v2"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/tensor"
)

// Linear is the affine map y = x·W + b applied to every row of x, with W of
// shape [In, Out] and an optional bias b of length Out.
type Linear struct {
	In, Out int
	Weight  *Param // [In, Out], decayed
	Bias    *Param // [Out], not decayed; nil for a layer without bias

	x       *tensor.Tensor // input of the last Forward, by reference
	partial []float32      // row-block sums of the bias gradient
}

// NewLinear returns a Linear layer whose parameters are called
// name+".weight" and name+".bias". W is drawn from N(0, 1/In), which keeps
// the output variance equal to the input variance for unit-variance inputs
// (such as the output of a LayerNorm); the bias starts at zero. Use
// Param.InitNormal to choose another scale, for example a smaller one for
// the projections that feed the residual stream.
func NewLinear(name string, in, out int, bias bool, rng *rand.Rand) *Linear {
	l := &Linear{In: in, Out: out, Weight: NewParam(name+".weight", true, in, out)}
	l.Weight.InitNormal(rng, 1/math.Sqrt(float64(in)))
	if bias {
		l.Bias = NewParam(name+".bias", false, out)
	}
	return l
}

// Params lists the weight and, if present, the bias.
func (l *Linear) Params() []*Param {
	if l.Bias == nil {
		return []*Param{l.Weight}
	}
	return []*Param{l.Weight, l.Bias}
}

// Forward computes y = x·W + b for x of shape [..., In] into y of shape
// [..., Out] with the same number of rows; y must not share storage with x.
// It keeps a reference to x for Backward.
func (l *Linear) Forward(y, x *tensor.Tensor) {
	rows := rowsOf("Linear.Forward", "x", x, l.In)
	checkRows("Linear.Forward", "y", y, rows, l.Out)
	l.x = x
	beta := float32(0)
	if l.Bias != nil {
		// Start from the bias and let the product accumulate onto it.
		b := l.Bias.Value.Data
		forRows(rows, l.Out, func(_, lo, hi int) {
			for r := lo; r < hi; r++ {
				copy(y.Data[r*l.Out:(r+1)*l.Out], b)
			}
		})
		beta = 1
	}
	blas.Sgemm(blas.NoTrans, blas.NoTrans, 1, blas.General{Rows: rows, Cols: l.In, Stride: l.In, Data: x.Data}, blas.General{Rows: l.In, Cols: l.Out, Stride: l.Out, Data: l.Weight.Value.Data}, beta, blas.General{Rows: rows, Cols: l.Out, Stride: l.Out, Data: y.Data})
}

// Backward takes dy, the gradient of the loss with respect to the y of the
// last Forward, writes dx = dy·Wᵀ (unless dx is nil) and adds xᵀ·dy to the
// weight gradient and the column sums of dy to the bias gradient. dx may
// share storage with the x of Forward (which is then overwritten), not with dy.
func (l *Linear) Backward(dx, dy *tensor.Tensor) {
	rows := rowsOf("Linear.Backward", "dy", dy, l.Out)
	if l.x == nil {
		panic("nn.Linear.Backward: called before Forward")
	}
	checkRows("Linear.Backward", "dy", dy, l.x.Len()/l.In, l.Out)
	// The weight gradient comes first so that dx may reuse the storage of x.
	blas.Sgemm(blas.Trans, blas.NoTrans, 1, blas.General{Rows: rows, Cols: l.In, Stride: l.In, Data: l.x.Data}, blas.General{Rows: rows, Cols: l.Out, Stride: l.Out, Data: dy.Data}, 1, blas.General{Rows: l.In, Cols: l.Out, Stride: l.Out, Data: l.Weight.Grad.Data})
	if l.Bias != nil {
		l.partial = addColSums(l.Bias.Grad.Data, dy.Data, rows, l.Out, l.partial)
	}
	if dx != nil {
		checkRows("Linear.Backward", "dx", dx, rows, l.In)
		blas.Sgemm(blas.NoTrans, blas.Trans, 1, blas.General{Rows: rows, Cols: l.Out, Stride: l.Out, Data: dy.Data}, blas.General{Rows: l.In, Cols: l.Out, Stride: l.Out, Data: l.Weight.Value.Data}, 0, blas.General{Rows: rows, Cols: l.In, Stride: l.In, Data: dx.Data})
	}
}
