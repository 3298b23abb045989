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
