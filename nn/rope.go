package nn

import (
	"fmt"
	"math"

	"github.com/polysketch/polysketch/tensor"
)

// RoPE is the rotary position embedding (Su et al., 2021) of one head
// size: it rotates the pair (x[i], x[i+h/2]) of a head vector at position p
// by the angle p·θᵢ, θᵢ = base^(−2i/h) with base 10000 unless the
// frequencies are given (NewRoPEFrequencies: another base, or scaled as
// Llama 3's are), so that the dot product of a rotated query and key
// depends only on their relative position. It has no parameters; Backward
// applies the inverse rotation.
//
// Inputs have shape [..., N, h], positions running along the second-last
// dimension: [B,H,N,h] for attention heads, or [B,N,h] (reshape a [B·N,h]
// matrix first, or its positions run on across sequences). The token at
// index n has position Offset+n, so decoding one token at position t with
// Offset = t gives exactly the rows of a full-sequence Forward.
//
// The pairs are the two halves of the head vector (as in GPT-NeoX and
// LLaMA) rather than adjacent coordinates (as in the paper of Su et al.);
// the two are the same up to a fixed permutation of the head's coordinates,
// which the learned projections absorb.
type RoPE struct {
	Offset int // position of index 0 along N

	head      int
	freqs     []float64 // θᵢ, [head/2]
	cos, sin  []float32 // [positions, head/2], grown as positions are needed
	positions int
	fwdOffset int // Offset of the last Forward, for Backward
}

// NewRoPE returns a RoPE for head vectors of even size head, with base
// 10000.
func NewRoPE(head int) *RoPE {
	if head <= 0 || head%2 != 0 {
		panic(fmt.Sprintf("nn.NewRoPE: head size %d must be even and positive", head))
	}
	return NewRoPEFrequencies(RoPEFrequencies(head, 10000))
}

// NewRoPEFrequencies returns a RoPE for head vectors of size 2·len(freqs)
// that turns pair i by p·freqs[i] at position p.
func NewRoPEFrequencies(freqs []float64) *RoPE {
	if len(freqs) == 0 {
		panic("nn.NewRoPEFrequencies: no frequencies")
	}
	return &RoPE{head: 2 * len(freqs), freqs: freqs}
}

// RoPEFrequencies returns the angular frequencies θᵢ = base^(−2i/head) of
// the head/2 pairs of a head, i = 0 … head/2−1.
func RoPEFrequencies(head int, base float64) []float64 {
	freqs := make([]float64, head/2)
	for i := range freqs {
		freqs[i] = math.Pow(base, -2*float64(i)/float64(head))
	}
	return freqs
}

// Share returns a RoPE of the same frequencies with tables of its own, for
// another goroutine.
func (r *RoPE) Share() *RoPE { return &RoPE{head: r.head, freqs: r.freqs} }

// table makes sure the cos/sin tables cover positions [0, n). Every entry is
// computed on its own in float64, so the tables' values do not depend on
// how they grew.
func (r *RoPE) table(n int) {
	if n <= r.positions {
		return
	}
	n = max(n, 2*r.positions) // grow geometrically when decoding token by token
	half := r.head / 2
	r.cos = tensor.Grow(r.cos, n*half)
	r.sin = tensor.Grow(r.sin, n*half)
	for i, theta := range r.freqs {
		for p := range n {
			s, c := math.Sincos(float64(p) * theta)
			r.cos[p*half+i], r.sin[p*half+i] = float32(c), float32(s)
		}
	}
	r.positions = n
}

// Forward writes the rotated x into y (same shape; y may be x).
func (r *RoPE) Forward(y, x *tensor.Tensor) {
	r.fwdOffset = r.Offset
	r.rotate("RoPE.Forward", y, x, r.Offset, 1)
}

// Backward writes dx, the rotation of dy back by the angles of the last
// Forward (dx may be dy).
func (r *RoPE) Backward(dx, dy *tensor.Tensor) {
	r.rotate("RoPE.Backward", dx, dy, r.fwdOffset, -1)
}

// rotate turns every row of x by the angles of its position times sign (±1).
func (r *RoPE) rotate(op string, y, x *tensor.Tensor, offset int, sign float32) {
	h, half := r.head, r.head/2
	rows := rowsOf(op, "input", x, h)
	checkRows(op, "output", y, rows, h)
	if x.Dims() < 2 {
		panic(fmt.Sprintf("nn.%s: input shape %v has no position dimension", op, x.Shape))
	}
	n := x.Dim(-2)
	if offset < 0 {
		panic(fmt.Sprintf("nn.%s: negative offset %d", op, offset))
	}
	r.table(offset + n)
	forRows(rows, h, func(_, lo, hi int) {
		for row := lo; row < hi; row++ {
			p := offset + row%n
			c, s := r.cos[p*half:(p+1)*half], r.sin[p*half:(p+1)*half]
			xr, yr := x.Data[row*h:(row+1)*h], y.Data[row*h:(row+1)*h]
			x1, x2, y1, y2 := xr[:half], xr[half:], yr[:half], yr[half:]
			for i := range half {
				a, b, si := x1[i], x2[i], sign*s[i]
				y1[i] = a*c[i] - b*si
				y2[i] = a*si + b*c[i]
			}
		}
	})
}
