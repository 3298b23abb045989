package nn

import (
	"math/rand/v2"

	"github.com/polysketch/polysketch/tensor"
)

// MLP is the plain two-layer feed-forward block of GPT-2 (c_fc and c_proj):
//
//	y = act(x·W1 + b1)·W2 + b2
//
// with W1 of shape [Dim, Hidden] and W2 of shape [Hidden, Dim].
type MLP struct {
	Dim, Hidden int
	Act         Activation
	In          *Linear // Dim → Hidden
	Out         *Linear // Hidden → Dim

	a  tensor.Tensor // [rows, Hidden], x·W1 + b1 of the last Forward
	h  tensor.Tensor // [rows, Hidden], act(a), the input of Out
	dh tensor.Tensor // [rows, Hidden], scratch of Backward
}

// NewMLP returns an MLP block of activation act whose layers are called
// name+".in" and name+".out", initialized as NewLinear does, with or
// without biases.
func NewMLP(name string, dim, hidden int, act Activation, bias bool, rng *rand.Rand) *MLP {
	return &MLP{
		Dim: dim, Hidden: hidden, Act: act,
		In:  NewLinear(name+".in", dim, hidden, bias, rng),
		Out: NewLinear(name+".out", hidden, dim, bias, rng),
	}
}

// Params lists the parameters of In and then of Out.
func (m *MLP) Params() []*Param { return append(m.In.Params(), m.Out.Params()...) }

// Share returns an MLP with m's parameters and state of its own.
func (m *MLP) Share() *MLP {
	return &MLP{Dim: m.Dim, Hidden: m.Hidden, Act: m.Act, In: m.In.Share(), Out: m.Out.Share()}
}

// Forward computes y for x of shape [..., Dim] into y with the same shape.
// It keeps a reference to x for Backward, so y must not share storage with x.
func (m *MLP) Forward(y, x *tensor.Tensor) {
	rows := rowsOf("MLP.Forward", "x", x, m.Dim)
	checkRows("MLP.Forward", "y", y, rows, m.Dim)
	H := m.Hidden
	m.a.Resize(rows, H)
	m.h.Resize(rows, H)
	m.In.Forward(&m.a, x)
	forRows(rows, H, func(_, lo, hi int) {
		m.Act.apply(m.h.Data[lo*H:hi*H], m.a.Data[lo*H:hi*H])
	})
	m.Out.Forward(y, &m.h)
}

// Backward takes dy for the y of the last Forward, writes dx (unless nil;
// dx may share storage with dy or x) and accumulates the gradients of In
// and Out.
func (m *MLP) Backward(dx, dy *tensor.Tensor) {
	rows := m.h.Len() / max(m.Hidden, 1)
	checkRows("MLP.Backward", "dy", dy, rows, m.Dim)
	H := m.Hidden
	m.dh.Resize(rows, H)
	m.Out.Backward(&m.dh, dy)
	forRows(rows, H, func(_, lo, hi int) {
		m.Act.backward(m.dh.Data[lo*H:hi*H], m.a.Data[lo*H:hi*H], m.dh.Data[lo*H:hi*H])
	})
	m.In.Backward(dx, &m.dh)
}
