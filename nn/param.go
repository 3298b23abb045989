package nn

import (
	"math/rand/v2"

	"github.com/polysketch/polysketch/tensor"
)

// Param is a trainable tensor with its gradient. Name identifies it in
// checkpoints and optimizer state (for example "blocks.0.ffn.in.weight").
// Decay says whether AdamW's weight decay applies to it: the constructors
// in this package set it for the weight matrices of Linear layers and clear
// it for biases, LayerNorm gains and biases, and embeddings (also when the
// embedding is tied to the output projection), the usual convention.
type Param struct {
	Name  string
	Value *tensor.Tensor
	Grad  *tensor.Tensor
	Decay bool
}

// NewParam returns a zeroed parameter and gradient of the given shape.
func NewParam(name string, decay bool, shape ...int) *Param {
	return &Param{Name: name, Value: tensor.New(shape...), Grad: tensor.New(shape...), Decay: decay}
}

// InitNormal fills the value with independent N(0, std²) samples from rng.
// A nil rng leaves the value as it is: the layers of a model whose
// weights are read from a file skip the draws (model.NewEmpty).
func (p *Param) InitNormal(rng *rand.Rand, std float64) {
	if rng == nil {
		return
	}
	for i := range p.Value.Data {
		p.Value.Data[i] = float32(rng.NormFloat64() * std)
	}
}
