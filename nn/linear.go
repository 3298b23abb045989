package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// Linear is the affine map y = x·W + b applied to every row of x, with W of
// shape [In, Out] and an optional bias b of length Out.
type Linear struct {
	In, Out int
	Weight  *Param // [In, Out], decayed
	Bias    *Param // [Out], not decayed; nil for a layer without bias
	// BF16, if not nil, makes the products bf16 (see Precision): x·W and
	// dy·Wᵀ read these copies of W instead of its float32 values, and
	// xᵀ·dy rounds x and dy while packing them. Whoever changes W makes
	// the copies again (Rounded.Round).
	BF16 *Rounded

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

// Share returns a Linear with l's parameters and bf16 copies and state of
// its own, to run the layer on other inputs (decoding) without disturbing
// what a Forward kept for Backward.
func (l *Linear) Share() *Linear {
	return &Linear{In: l.In, Out: l.Out, Weight: l.Weight, Bias: l.Bias, BF16: l.BF16}
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
// It keeps a reference to x for Backward. The bias is added to the
// finished product, each element rounded once, fl(x·W) + b.
func (l *Linear) Forward(y, x *tensor.Tensor) {
	rows := rowsOf("Linear.Forward", "x", x, l.In)
	checkRows("Linear.Forward", "y", y, rows, l.Out)
	l.x = x
	yv := blas.NewGeneral(rows, l.Out, y.Data)
	if l.BF16 != nil {
		blas.GemmBF16(blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(rows, l.In, x.Data), l.BF16.form("Linear.Forward", blas.NoTrans), 0, yv)
	} else {
		blas.Sgemm(blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(rows, l.In, x.Data), l.w(), 0, yv)
	}
	if l.Bias != nil {
		forRows(rows, l.Out, func(_, lo, hi int) { l.addBias(yv.Slice(lo, hi, 0, l.Out)) })
	}
}

// addBias adds the bias to every row of y.
func (l *Linear) addBias(y blas.General) {
	b := l.Bias.Value.Data
	for i := 0; i < y.Rows; i++ {
		row := y.Data[i*y.Stride : i*y.Stride+l.Out]
		vec.Add(row, row, b)
	}
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
	var wt *blas.PackedBF16 // the bf16 copy of Wᵀ, checked before any work
	if l.BF16 != nil && dx != nil {
		wt = l.BF16.form("Linear.Backward", blas.Trans)
	}
	// The weight gradient comes first so that dx may reuse the storage of x.
	if l.BF16 != nil {
		blas.GemmBF16(blas.Trans, blas.NoTrans, 1, blas.NewGeneral(rows, l.In, l.x.Data), blas.NewGeneral(rows, l.Out, dy.Data), 1, blas.NewGeneral(l.In, l.Out, l.Weight.Grad.Data))
	} else {
		blas.Sgemm(blas.Trans, blas.NoTrans, 1, blas.NewGeneral(rows, l.In, l.x.Data), blas.NewGeneral(rows, l.Out, dy.Data), 1, blas.NewGeneral(l.In, l.Out, l.Weight.Grad.Data))
	}
	if l.Bias != nil {
		l.partial = addColSums(l.Bias.Grad.Data, dy.Data, rows, l.Out, l.partial)
	}
	if dx != nil {
		checkRows("Linear.Backward", "dx", dx, rows, l.In)
		if l.BF16 != nil {
			blas.GemmBF16(blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(rows, l.Out, dy.Data), wt, 0, blas.NewGeneral(rows, l.In, dx.Data))
			return
		}
		blas.Sgemm(blas.NoTrans, blas.Trans, 1, blas.NewGeneral(rows, l.Out, dy.Data), l.w(), 0, blas.NewGeneral(rows, l.In, dx.Data))
	}
}

// w returns the weight as a view.
func (l *Linear) w() blas.General { return blas.NewGeneral(l.In, l.Out, l.Weight.Value.Data) }

// Apply computes y = x·W + b for the rows of x ([rows × In]) into y
// ([rows × Out]) on the calling goroutine, keeping nothing for a backward
// pass: for callers that run many small layers in parallel and keep their
// own activations, as attention's learned sketches do. It gives the bits
// of Forward.
func (l *Linear) Apply(y, x blas.General) {
	l.checkViews("Linear.Apply", x, y)
	l.product(y, x, "Linear.Apply")
	if l.Bias != nil {
		l.addBias(y)
	}
}

// ApplyGELU is Apply followed by GELU, with the bias added in the same
// pass over y as the activation: it writes h = GELU(x·W + b) ([rows ×
// Out], contiguous) with the bits of Apply and vec.GELU, and leaves in y
// the product without the bias or, with grad, GELU'(x·W + b) (the bits
// of vec.GELUBackward with dy = 1), by which a backward pass multiplies
// h's gradient. y must be contiguous; the layer must have a bias.
func (l *Linear) ApplyGELU(y, h blas.General, x blas.General, grad bool) {
	l.checkViews("Linear.ApplyGELU", x, y)
	if l.Bias == nil || y.Stride != l.Out || h.Stride != l.Out || h.Rows != y.Rows || h.Cols != l.Out {
		panic(fmt.Sprintf("nn.Linear.ApplyGELU: bias %v, y %d×%d (stride %d), h %d×%d (stride %d): want a bias and contiguous views of the same shape", l.Bias != nil, y.Rows, y.Cols, y.Stride, h.Rows, h.Cols, h.Stride))
	}
	l.product(y, x, "Linear.ApplyGELU")
	n := y.Rows * l.Out
	var d []float32
	if grad {
		d = y.Data[:n]
	}
	vec.BiasGELU(h.Data[:n], d, y.Data[:n], l.Bias.Value.Data)
}

// product writes y = x·W on the calling goroutine.
func (l *Linear) product(y, x blas.General, op string) {
	if l.BF16 != nil {
		blas.GemmBF16Serial(blas.NoTrans, blas.NoTrans, 1, x, l.BF16.form(op, blas.NoTrans), 0, y)
		return
	}
	blas.SgemmSerial(blas.NoTrans, blas.NoTrans, 1, x, l.w(), 0, y)
}

// ApplyBackward takes dy for the y = x·W + b of Apply, adds xᵀ·dy to dw
// ([In × Out]) and the column sums of dy to db (row by row, in order; nil
// without bias), and writes dx = dy·Wᵀ (dx may not overlap x or dy), on
// the calling goroutine. The gradients go to the caller's buffers, not the
// layer's, so that parallel callers can sum theirs in a fixed order. wT
// ([Out × In]) is a copy of Wᵀ that the caller keeps current: reading it
// makes dy·Wᵀ a plain product, which is faster for few rows. With bf16
// copies of W (l.BF16), the products are bf16 and the copy of Wᵀ is read
// instead of wT.
func (l *Linear) ApplyBackward(dx, dy, x, wT, dw blas.General, db []float32) {
	l.checkViews("Linear.ApplyBackward", x, dy)
	l.checkViews("Linear.ApplyBackward", dx, dy)
	if l.BF16 != nil {
		blas.GemmBF16Serial(blas.Trans, blas.NoTrans, 1, x, dy, 1, dw)
	} else {
		blas.SgemmSerial(blas.Trans, blas.NoTrans, 1, x, dy, 1, dw)
	}
	if l.Bias != nil {
		if len(db) != l.Out {
			panic(fmt.Sprintf("nn.Linear.ApplyBackward: len(db)=%d for a layer of %d outputs", len(db), l.Out))
		}
		vec.AddRows(db, dy.Data, dy.Stride, dy.Rows)
	}
	if l.BF16 != nil {
		blas.GemmBF16Serial(blas.NoTrans, blas.NoTrans, 1, dy, l.BF16.form("Linear.ApplyBackward", blas.Trans), 0, dx)
		return
	}
	blas.SgemmSerial(blas.NoTrans, blas.NoTrans, 1, dy, wT, 0, dx)
}

// checkViews panics unless x ([rows × In]) and y ([rows × Out]) fit l.
func (l *Linear) checkViews(op string, x, y blas.General) {
	if x.Cols != l.In || y.Cols != l.Out || x.Rows != y.Rows {
		panic(fmt.Sprintf("nn.%s: %d×%d and %d×%d views for a %d×%d layer", op, x.Rows, x.Cols, y.Rows, y.Cols, l.In, l.Out))
	}
}
