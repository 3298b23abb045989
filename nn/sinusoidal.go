package nn

import (
	"math"

	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// Sinusoidal adds the fixed position embedding of Vaswani et al. (2017) to
// its input: for position p and feature pair (2i, 2i+1),
//
//	PE[p, 2i] = sin(p·ωᵢ),  PE[p, 2i+1] = cos(p·ωᵢ),  ωᵢ = 10000^(−2i/d).
//
// Inputs have shape [..., N, d] with positions along the second-last
// dimension; the token at index n has position Offset+n, as in RoPE. It has
// no parameters, and its backward pass is the identity.
type Sinusoidal struct {
	Offset int // position of index 0 along N

	dim       int
	pe        []float32 // [positions, dim], grown as positions are needed
	positions int
}

// NewSinusoidal returns the position embedding for feature size dim.
func NewSinusoidal(dim int) *Sinusoidal { return &Sinusoidal{dim: dim} }

// table makes sure pe covers positions [0, n); entries are computed one by
// one in float64, independently of how the table grew.
func (s *Sinusoidal) table(n int) {
	if n <= s.positions {
		return
	}
	n = max(n, 2*s.positions)
	d := s.dim
	s.pe = tensor.Grow(s.pe, n*d)
	for j := 0; j < d; j += 2 {
		omega := math.Pow(10000, -float64(j)/float64(d))
		for p := range n {
			sn, cs := math.Sincos(float64(p) * omega)
			s.pe[p*d+j] = float32(sn)
			if j+1 < d {
				s.pe[p*d+j+1] = float32(cs)
			}
		}
	}
	s.positions = n
}

// Forward writes y = x + PE (same shape; y may be x).
func (s *Sinusoidal) Forward(y, x *tensor.Tensor) {
	d := s.dim
	rows := rowsOf("Sinusoidal.Forward", "x", x, d)
	checkRows("Sinusoidal.Forward", "y", y, rows, d)
	if x.Dims() < 2 {
		panic("nn.Sinusoidal.Forward: input shape has no position dimension")
	}
	if s.Offset < 0 {
		panic("nn.Sinusoidal.Forward: negative offset")
	}
	n := x.Dim(-2)
	s.table(s.Offset + n)
	forRows(rows, d, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			p := s.Offset + r%n
			vec.Add(y.Data[r*d:(r+1)*d], x.Data[r*d:(r+1)*d], s.pe[p*d:(p+1)*d])
		}
	})
}

// Backward writes dx = dy (nothing to do when they share storage).
func (s *Sinusoidal) Backward(dx, dy *tensor.Tensor) {
	rows := rowsOf("Sinusoidal.Backward", "dy", dy, s.dim)
	checkRows("Sinusoidal.Backward", "dx", dx, rows, s.dim)
	if len(dx.Data) > 0 && &dx.Data[0] != &dy.Data[0] {
		copy(dx.Data, dy.Data)
	}
}
