package nn

import (
	"math/rand/v2"

	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// GLU is the gated feed-forward block of Transformer++ (Shazeer, 2020):
//
//	y = (act(x·W1) ⊙ (x·W3))·W2
//
// act GELU (GEGLU, the Transformer++ of the paper) or SiLU (SwiGLU, Llama's
// gate_proj, up_proj and down_proj as W1, W3 and W2),
// with W1, W3 of shape [Dim, Hidden] and W2 of shape [Hidden, Dim]. W1 and
// W3 are stored side by side as the single Linear In (Dim → 2·Hidden,
// columns [0, Hidden) are W1, the gate, and [Hidden, 2·Hidden) are W3), so
// both products and the input gradient are one matrix multiply each.
type GLU struct {
	Dim, Hidden int
	Act         Activation
	In          *Linear // Dim → 2·Hidden: gate and value projections
	Out         *Linear // Hidden → Dim

	ab  tensor.Tensor // [rows, 2·Hidden], x·[W1 | W3] of the last Forward
	h   tensor.Tensor // [rows, Hidden], act(a)⊙b, the input of Out
	dh  tensor.Tensor // [rows, Hidden], scratch of Backward
	dab tensor.Tensor // [rows, 2·Hidden], scratch of Backward
}

// NewGLU returns a GELU-gated block with hidden size hidden (the paper's
// recipe uses 4·dim; hidden ≤ 0 selects that) whose layers are called
// name+".in" and name+".out", initialized as NewLinear does, with or
// without biases; set Act for another activation.
func NewGLU(name string, dim, hidden int, bias bool, rng *rand.Rand) *GLU {
	if hidden <= 0 {
		hidden = 4 * dim
	}
	return &GLU{
		Dim: dim, Hidden: hidden,
		In:  NewLinear(name+".in", dim, 2*hidden, bias, rng),
		Out: NewLinear(name+".out", hidden, dim, bias, rng),
	}
}

// Params lists the parameters of In and then of Out.
func (g *GLU) Params() []*Param { return append(g.In.Params(), g.Out.Params()...) }

// Share returns a GLU with g's parameters and state of its own.
func (g *GLU) Share() *GLU {
	return &GLU{Dim: g.Dim, Hidden: g.Hidden, Act: g.Act, In: g.In.Share(), Out: g.Out.Share()}
}

// Forward computes y for x of shape [..., Dim] into y with the same shape.
// It keeps a reference to x for Backward, so y must not share storage with x.
func (g *GLU) Forward(y, x *tensor.Tensor) {
	rows := rowsOf("GLU.Forward", "x", x, g.Dim)
	checkRows("GLU.Forward", "y", y, rows, g.Dim)
	H := g.Hidden
	g.ab.Resize(rows, 2*H)
	g.h.Resize(rows, H)
	g.In.Forward(&g.ab, x)
	forRows(rows, 2*H, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			ab, h := g.ab.Data[r*2*H:(r+1)*2*H], g.h.Data[r*H:(r+1)*H]
			g.Act.apply(h, ab[:H])
			vec.Mul(h, h, ab[H:])
		}
	})
	g.Out.Forward(y, &g.h)
}

// Backward takes dy for the y of the last Forward, writes dx (unless nil;
// dx may share storage with dy or x) and accumulates the gradients of In
// and Out. act(a) is recomputed
// rather than kept, to save a [rows, Hidden] buffer.
func (g *GLU) Backward(dx, dy *tensor.Tensor) {
	rows := g.h.Len() / max(g.Hidden, 1)
	checkRows("GLU.Backward", "dy", dy, rows, g.Dim)
	H := g.Hidden
	g.dh.Resize(rows, H)
	g.dab.Resize(rows, 2*H)
	g.Out.Backward(&g.dh, dy)
	forRows(rows, 2*H, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			ab, dh, dab := g.ab.Data[r*2*H:(r+1)*2*H], g.dh.Data[r*H:(r+1)*H], g.dab.Data[r*2*H:(r+1)*2*H]
			a, b, da, db := ab[:H], ab[H:], dab[:H], dab[H:]
			g.Act.apply(db, a)        // db = act(a) for now
			vec.Mul(db, db, dh)       // ∂/∂b = dh⊙act(a)
			vec.Mul(da, dh, b)        // ∂/∂act(a) = dh⊙b
			g.Act.backward(da, a, da) // ∂/∂a
		}
	})
	g.In.Backward(dx, &g.dab)
}
