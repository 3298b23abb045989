package nn

import "github.com/polysketch/polysketch/vec"

// Activation is the nonlinearity of a feed-forward block (GLU, MLP).
type Activation int

const (
	GELU Activation = iota // tanh approximation, x·σ(2u) (GPT-2's gelu_new; the GLU of Transformer++)
	SiLU                   // x·σ(x) (Llama's SwiGLU)
)

// apply writes act(x) into dst (dst may be x).
func (a Activation) apply(dst, x []float32) {
	if a == SiLU {
		vec.SiLU(dst, x)
		return
	}
	vec.GELU(dst, x)
}

// backward writes dx = dy⊙act'(x) (dx may be dy or x).
func (a Activation) backward(dx, x, dy []float32) {
	if a == SiLU {
		vec.SiLUBackward(dx, x, dy)
		return
	}
	vec.GELUBackward(dx, x, dy)
}

// gate writes h = act(a)⊙b, the gated unit of a GLU, in one pass for
// GELU (dst may alias a, not b).
func (a Activation) gate(h, x, b []float32) {
	if a == SiLU {
		vec.SiLU(h, x)
		vec.Mul(h, h, b)
		return
	}
	vec.GELUMul(h, x, b)
}

// gateBackward takes dh for the h of gate and writes dx = act'(x)⊙(dh⊙b)
// and db = act(x)⊙dh, in one pass for GELU (dx and db alias nothing).
func (a Activation) gateBackward(dx, db, x, b, dh []float32) {
	if a == SiLU {
		vec.SiLU(db, x)             // db = act(x) for now
		vec.Mul(db, db, dh)         // ∂/∂b = dh⊙act(x)
		vec.Mul(dx, dh, b)          // ∂/∂act(x) = dh⊙b
		vec.SiLUBackward(dx, x, dx) // ∂/∂x
		return
	}
	vec.GELUMulBackward(dx, db, x, b, dh)
}
