package model

import (
	"errors"
	"fmt"

	"github.com/polysketch/polysketch/attention"
)

// Config describes a model. Checkpoints store it as JSON, under the tags
// below; every field but Seed fixes the shapes or the computation, and no
// parameter depends on Context, so Context may be raised after loading.
type Config struct {
	Vocab   int `json:"vocab"`   // tokens; 256 for bytes
	Dim     int `json:"dim"`     // d_model, the width of the residual stream
	Layers  int `json:"layers"`  // Transformer blocks
	Heads   int `json:"heads"`   // attention heads per block; head size Dim/Heads, even (RoPE)
	Context int `json:"context"` // the longest sequence Forward accepts, and the KV caches' limit
	Hidden  int `json:"hidden"`  // GLU hidden size; 0 means 4·Dim, the paper's expansion

	Attention  attention.Kind       `json:"attention"`   // softmax, flash, polynomial or polysketch
	Degree     int                  `json:"degree"`      // p of polynomial and polysketch attention
	SketchSize int                  `json:"sketch_size"` // r of polysketch
	Block      int                  `json:"block"`       // polysketch block size b; flash and polynomial tile size
	Local      bool                 `json:"local"`       // polysketch: exact (q·k)^p inside each block
	Sketch     attention.SketchKind `json:"sketch"`      // polysketch: gaussian or srht
	Learned    bool                 `json:"learned"`     // polysketch: learned sketches (Algorithm 2), trained with the model
	Remat      bool                 `json:"remat"`       // recompute attention in Backward instead of keeping its state

	// Bidirectional makes an encoder-only model (see NewEncoder): every
	// position attends to every other, with each mechanism's non-causal form.
	Bidirectional bool `json:"bidirectional,omitempty"`

	Tied bool   `json:"tied"` // the output projection is the transposed token embedding
	Seed uint64 `json:"seed"` // initial weights and the random sketches
}

// DefaultConfig returns a small byte-level polysketch model that a 2-core
// CPU trains visibly within minutes: Dim 256 in 4 layers of 4 heads of 64
// (the paper's head size), 4.3M parameters; context 256 cut into 4 blocks
// of 64, so that the block algorithm, its prefix states and the exact
// local blocks all take part; and the paper's attention settings
// otherwise: degree 4, r = 32, local exact blocks, learned sketches (the
// paper's best variant). After 1000 steps of `polysketch train` on the Go
// corpus at peak learning rate 2e-3, learned sketches reached validation
// loss 1.370 against 1.352 for softmax (`polysketch eval --batches 200`);
// at 1e-3 random sketches were 17% behind softmax. At this short context
// the learned networks cost more than attention saves: about 3,600–4,000
// training tokens/s against 8,400 for softmax on the 2-core development
// machine (BenchmarkTrainStep); polysketch pays off from contexts of a few
// thousand (`polysketch bench train`). A few minutes give the hundreds of
// steps in which a byte-level model's loss falls visibly. The output projection is untied by default: with
// tied embeddings the logits must be scaled by 1/√d to start near the
// uniform loss, and that cold start learned markedly slower (validation
// loss 3.67 against 2.85 after 200 steps of `polysketch train` on the Go
// corpus); untying costs only Vocab·Dim parameters (65k for bytes).
func DefaultConfig() Config {
	return Config{
		Vocab: 256, Dim: 256, Layers: 4, Heads: 4, Context: 256,
		Attention: attention.Polysketch, Degree: 4, SketchSize: 32, Block: 64,
		Local: true, Learned: true, Sketch: attention.Gaussian, Seed: 1,
	}
}

// HeadSize returns Dim/Heads.
func (c Config) HeadSize() int { return c.Dim / max(c.Heads, 1) }

// HiddenSize returns the GLU hidden size: Hidden, or 4·Dim when Hidden is 0.
func (c Config) HiddenSize() int {
	if c.Hidden == 0 {
		return 4 * c.Dim
	}
	return c.Hidden
}

// normalized reports whether the attention kind normalizes q and k with a
// LayerNorm (PolySketchFormer Sec. 2.1): polynomial weights (q·k)^p have
// no scale of their own.
func (c Config) normalized() bool {
	return c.Attention == attention.Polynomial || c.Attention == attention.Polysketch
}

// options returns the attention options of layer i: causal, with a sketch
// seed of its own derived from Seed.
func (c Config) options(layer int) attention.Options {
	return attention.Options{
		Causal: !c.Bidirectional, Degree: c.Degree, SketchSize: c.SketchSize, Block: c.Block,
		Local: c.Local, Sketch: c.Sketch, Learned: c.Learned, Remat: c.Remat, Seed: layerSeed(c.Seed, layer),
	}
}

// layerSeed mixes the model seed and a layer index (SplitMix64's
// finalizer), so that layers draw independent sketches.
func layerSeed(seed uint64, layer int) uint64 {
	z := seed + uint64(layer+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Validate reports every problem of the configuration, one line each,
// saying what is wrong and how to fix it.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Vocab < 1 {
		add("vocab %d: need at least 1 token (256 for bytes)", c.Vocab)
	}
	if c.Dim < 1 {
		add("dim %d: must be positive", c.Dim)
	}
	if c.Layers < 1 {
		add("layers %d: must be positive", c.Layers)
	}
	if c.Context < 1 {
		add("context %d: must be positive", c.Context)
	}
	if c.Hidden < 0 {
		add("hidden %d: must be positive, or 0 for 4·dim", c.Hidden)
	}
	switch {
	case c.Heads < 1:
		add("heads %d: must be positive", c.Heads)
	case c.Dim >= 1 && c.Dim%c.Heads != 0:
		add("dim %d is not divisible by heads %d: choose heads dividing dim", c.Dim, c.Heads)
	case c.Dim >= 1 && c.Dim/c.Heads%2 != 0:
		add("head size %d (dim %d / heads %d) is odd: rotary embeddings need an even head size", c.Dim/c.Heads, c.Dim, c.Heads)
	}
	if c.Learned && c.Attention != attention.Polysketch {
		add("learned sketches need polysketch attention, not %s: set learned to false", c.Attention)
	}
	if _, err := attention.New(c.Attention, c.options(0)); err != nil {
		add("attention: %w", err)
	}
	return errors.Join(errs...)
}
