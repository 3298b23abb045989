package nn

import (
	"math"

	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// Affine selects the learned parameters of a LayerNorm.
type Affine int

const (
	GainBias Affine = iota // y = x̂⊙g + b, the standard layer normalization
	GainOnly               // y = x̂⊙g
	NoAffine               // y = x̂, parameter-free (e.g. for q and k of polynomial attention)
)

// LayerNorm normalizes every row of its input to zero mean and unit
// variance, x̂ = (x − mean)/√(var + Eps) with the biased variance, then
// applies the learned gain and bias selected by its Affine mode. The gain
// starts at one and the bias at zero.
type LayerNorm struct {
	Dim  int
	Eps  float32 // added to the variance; NewLayerNorm sets 1e-5
	Gain *Param  // [Dim], not decayed; nil unless GainBias or GainOnly
	Bias *Param  // [Dim], not decayed; nil unless GainBias

	rows    int
	xhat    []float32 // [rows, Dim], normalized input of the last Forward
	rstd    []float32 // [rows], 1/√(var+Eps)
	scratch []float32 // per row block: gain partial, bias partial
}

// NewLayerNorm returns a LayerNorm over the last dimension, of size dim,
// whose parameters are called name+".gain" and name+".bias".
func NewLayerNorm(name string, dim int, affine Affine) *LayerNorm {
	l := &LayerNorm{Dim: dim, Eps: 1e-5}
	if affine == GainBias || affine == GainOnly {
		l.Gain = NewParam(name+".gain", false, dim)
		l.Gain.Value.Fill(1)
	}
	if affine == GainBias {
		l.Bias = NewParam(name+".bias", false, dim)
	}
	return l
}

// Share returns a LayerNorm with the same parameters and Eps but its own
// caches, to normalize a second input with the same gain and bias (for
// example k with the parameters of q). Gradients of both accumulate into the
// shared parameters; list them once.
func (l *LayerNorm) Share() *LayerNorm {
	return &LayerNorm{Dim: l.Dim, Eps: l.Eps, Gain: l.Gain, Bias: l.Bias}
}

// Params lists the gain and bias that exist.
func (l *LayerNorm) Params() []*Param {
	var ps []*Param
	if l.Gain != nil {
		ps = append(ps, l.Gain)
	}
	if l.Bias != nil {
		ps = append(ps, l.Bias)
	}
	return ps
}

// Forward normalizes x of shape [..., Dim] into y of the same number of
// rows; y may be x. It keeps x̂ and 1/σ of every row, not x itself.
func (l *LayerNorm) Forward(y, x *tensor.Tensor) {
	d := l.Dim
	rows := rowsOf("LayerNorm.Forward", "x", x, d)
	checkRows("LayerNorm.Forward", "y", y, rows, d)
	l.forwardRows(y, func(r int) []float32 { return x.Data[r*d : (r+1)*d] }, false)
}

// ForwardRows is Forward for an input whose rows lie apart, such as the
// heads of the model's projections: row r of the input is x(r), Dim
// elements, for each row of y ([..., Dim]); y may hold the rows of x. It
// gives the bits of Forward, copying the input once, as Forward does
// anyway.
func (l *LayerNorm) ForwardRows(y *tensor.Tensor, x func(r int) []float32) {
	l.forwardRows(y, x, true)
}

// rowsAhead is how many rows ahead ForwardRows and BackwardRows prefetch
// rows that lie apart: the hardware prefetchers do not follow rows
// kilobytes apart, and a row's lines come from L3 or memory in about the
// time that the LayerNorm of a few rows takes. BenchmarkLayerNormHeads (q
// heads of 64 in rows of 768), forward and backward on one thread: 169–202
// ns a row without, 124–140 with (2, 8 and 16 rows ahead alike), 88–95
// for contiguous rows.
const rowsAhead = 4

// forwardRows is ForwardRows, prefetching the rows of x ahead if apart.
func (l *LayerNorm) forwardRows(y *tensor.Tensor, x func(r int) []float32, apart bool) {
	d := l.Dim
	rows := rowsOf("LayerNorm.ForwardRows", "y", y, d)
	l.rows = rows
	l.xhat = tensor.Grow(l.xhat, rows*d)
	l.rstd = tensor.Grow(l.rstd, rows)
	forRows(rows, d, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			if apart && r+rowsAhead < hi {
				vec.Prefetch(x(r + rowsAhead)[:d])
			}
			xr, xh, yr := x(r)[:d], l.xhat[r*d:(r+1)*d], y.Data[r*d:(r+1)*d]
			mean, variance := vec.MeanVar(xr)
			rs := float32(1 / math.Sqrt(float64(variance)+float64(l.Eps)))
			l.rstd[r] = rs
			vec.Standardize(yr, xh, xr, l.gain(), l.bias(), mean, rs)
		}
	})
}

// Backward takes dy for the y of the last Forward, writes dx (unless nil;
// dx may be dy) and adds Σ dy⊙x̂ to the gain gradient and Σ dy to the bias
// gradient. With g = dy⊙gain, dx = (g − mean(g) − x̂·mean(g⊙x̂))/σ.
func (l *LayerNorm) Backward(dx, dy *tensor.Tensor) {
	d, rows := l.Dim, l.rows
	checkRows("LayerNorm.Backward", "dy", dy, rows, d)
	if dx == nil {
		l.backwardRows(nil, dy, false)
		return
	}
	checkRows("LayerNorm.Backward", "dx", dx, rows, d)
	l.backwardRows(func(r int) []float32 { return dx.Data[r*d : (r+1)*d] }, dy, false)
}

// BackwardRows is Backward for an input gradient whose rows lie apart:
// row r of dx is dx(r), Dim elements (dx nil: none). dx(r) may be row r
// of dy. It gives the bits of Backward.
func (l *LayerNorm) BackwardRows(dx func(r int) []float32, dy *tensor.Tensor) {
	l.backwardRows(dx, dy, true)
}

// backwardRows is BackwardRows, prefetching the rows of dx ahead if apart.
func (l *LayerNorm) backwardRows(dx func(r int) []float32, dy *tensor.Tensor, apart bool) {
	d, rows := l.Dim, l.rows
	checkRows("LayerNorm.BackwardRows", "dy", dy, rows, d)
	if dx == nil && l.Gain == nil {
		return
	}
	nb := blocks(rows)
	l.scratch = tensor.Grow(l.scratch, nb*2*d)
	inv := 1 / float32(d)
	parallel.For(nb, func(b int) {
		s := l.scratch[b*2*d : (b+1)*2*d]
		pg, pb := s[:d], s[d:2*d]
		clear(pg)
		clear(pb)
		if l.Gain == nil {
			pg = nil
		}
		if l.Bias == nil {
			pb = nil
		}
		end := min((b+1)*reduceRows, rows)
		for r := b * reduceRows; r < end; r++ {
			dyr, xh := dy.Data[r*d:(r+1)*d], l.xhat[r*d:(r+1)*d]
			if apart && dx != nil && r+rowsAhead < end {
				vec.Prefetch(dx(r + rowsAhead)[:d])
			}
			if dx == nil {
				vec.StandardizeGrads(pg, pb, nil, dyr, xh, nil)
				continue
			}
			// The parameter partials, and g = dy⊙gain in dx (which may be
			// dy): dx = (g − mean(g) − x̂·mean(g⊙x̂))/σ.
			g := dx(r)[:d]
			vec.StandardizeGrads(pg, pb, g, dyr, xh, l.gain())
			m1, m2 := vec.Sum(g)*inv, vec.Dot(g, xh)*inv
			rs := l.rstd[r]
			vec.StandardizeDx(g, xh, rs, -rs*m2, -rs*m1)
		}
	})
	if l.Gain != nil {
		vec.AddRows(l.Gain.Grad.Data, l.scratch, 2*d, nb)
	}
	if l.Bias != nil {
		vec.AddRows(l.Bias.Grad.Data, l.scratch[d:], 2*d, nb)
	}
}

// gain and bias return the parameters' values, nil where there are none.
func (l *LayerNorm) gain() []float32 {
	if l.Gain == nil {
		return nil
	}
	return l.Gain.Value.Data
}

func (l *LayerNorm) bias() []float32 {
	if l.Bias == nil {
		return nil
	}
	return l.Bias.Value.Data
}
