package nn

import (
	"math"

	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// RMSNorm scales every row of its input to unit root mean square,
// x̂ = x/√(mean(x²) + Eps), then multiplies it by a learned gain (Zhang and
// Sennrich, 2019): the norm of Llama, Qwen2 and Mistral, which neither
// centres the row nor adds a bias. The gain starts at one.
type RMSNorm struct {
	Dim  int
	Eps  float32 // added to the mean square; NewRMSNorm sets 1e-5
	Gain *Param  // [Dim], not decayed

	rows    int
	xhat    []float32 // [rows, Dim], normalized input of the last Forward
	rstd    []float32 // [rows], 1/√(mean(x²)+Eps)
	scratch []float32 // per row block: gain partial, a temporary row
}

// NewRMSNorm returns an RMSNorm over the last dimension, of size dim,
// whose gain is called name+".gain".
func NewRMSNorm(name string, dim int) *RMSNorm {
	l := &RMSNorm{Dim: dim, Eps: 1e-5, Gain: NewParam(name+".gain", false, dim)}
	l.Gain.Value.Fill(1)
	return l
}

// Share returns an RMSNorm with the same gain and Eps but its own caches,
// as LayerNorm.Share does.
func (l *RMSNorm) Share() *RMSNorm { return &RMSNorm{Dim: l.Dim, Eps: l.Eps, Gain: l.Gain} }

// Params lists the gain.
func (l *RMSNorm) Params() []*Param { return []*Param{l.Gain} }

// Forward normalizes x of shape [..., Dim] into y of the same number of
// rows; y may be x. It keeps x̂ and 1/rms of every row, not x itself.
func (l *RMSNorm) Forward(y, x *tensor.Tensor) {
	d := l.Dim
	rows := rowsOf("RMSNorm.Forward", "x", x, d)
	checkRows("RMSNorm.Forward", "y", y, rows, d)
	l.rows = rows
	l.xhat = tensor.Grow(l.xhat, rows*d)
	l.rstd = tensor.Grow(l.rstd, rows)
	forRows(rows, d, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, xh, yr := x.Data[r*d:(r+1)*d], l.xhat[r*d:(r+1)*d], y.Data[r*d:(r+1)*d]
			ms := float64(vec.Dot(xr, xr)) / float64(d)
			rs := float32(1 / math.Sqrt(ms+float64(l.Eps)))
			l.rstd[r] = rs
			copy(xh, xr)
			vec.Scale(rs, xh)
			vec.Mul(yr, xh, l.Gain.Value.Data)
		}
	})
}

// Backward takes dy for the y of the last Forward, writes dx (unless nil;
// dx may be dy) and adds Σ dy⊙x̂ to the gain gradient. With g = dy⊙gain,
// dx = (g − x̂·mean(g⊙x̂))/rms.
func (l *RMSNorm) Backward(dx, dy *tensor.Tensor) {
	d, rows := l.Dim, l.rows
	checkRows("RMSNorm.Backward", "dy", dy, rows, d)
	if dx != nil {
		checkRows("RMSNorm.Backward", "dx", dx, rows, d)
	}
	nb := blocks(rows)
	l.scratch = tensor.Grow(l.scratch, nb*2*d)
	inv := 1 / float32(d)
	parallel.For(nb, func(b int) {
		s := l.scratch[b*2*d : (b+1)*2*d]
		pg, tmp := s[:d], s[d:]
		clear(pg)
		for r := b * reduceRows; r < min((b+1)*reduceRows, rows); r++ {
			dyr, xh := dy.Data[r*d:(r+1)*d], l.xhat[r*d:(r+1)*d]
			// The gain's partial first: dx may overwrite dy below.
			vec.Mul(tmp, dyr, xh)
			vec.Add(pg, pg, tmp)
			if dx == nil {
				continue
			}
			g := dx.Data[r*d : (r+1)*d]
			vec.Mul(g, dyr, l.Gain.Value.Data)
			m := vec.Dot(g, xh) * inv
			rs := l.rstd[r]
			vec.Scale(rs, g)
			vec.Axpy(-rs*m, xh, g)
		}
	})
	vec.AddRows(l.Gain.Grad.Data, l.scratch, 2*d, nb)
}
