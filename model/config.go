package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/polysketch/polysketch/attention"
)

// Config describes a model. Checkpoints store it as JSON (see
// MarshalJSON); every field but Seed fixes the shapes or the computation,
// and no parameter depends on Context, so Context may be raised after
// loading.
type Config struct {
	Vocab   int // tokens; 256 for bytes
	Dim     int // d_model, the width of the residual stream
	Layers  int // Transformer blocks
	Heads   int // attention heads per block; head size Dim/Heads, even (RoPE)
	Context int // the longest sequence Forward accepts, and the KV caches' limit
	Hidden  int // GLU hidden size; 0 means 4·Dim, the paper's expansion

	// Attention is the mechanism of every layer and its options, one of
	// the attention package's registered Config types.
	Attention attention.Config

	Tied bool   // the output projection is the transposed token embedding
	Seed uint64 // initial weights and the random sketches

	// Bidirectional makes an encoder: every position attends to every
	// other (each mechanism's non-causal form), and the logits at a
	// position classify that position (a per-position head) instead of
	// predicting the next token; there is no decoder. An encoder may also
	// take PostNorm and Positions, as the thesis's encoder (§1.2.1) does.
	Bidirectional bool
	// PostNorm puts each LayerNorm after its residual sum (BERT's
	// post-LayerNorm) instead of before the sublayer.
	PostNorm bool
	// Positions is how positions enter: "rope" (or empty: sinusoidal
	// embeddings added to the tokens and rotary embeddings of q and k, the
	// default), "sinusoidal" (added only) or "learned" (a trained table of
	// Context rows, added).
	Positions string
}

// The ways positions enter the model (Config.Positions).
const (
	PositionsRoPE       = "rope"
	PositionsSinusoidal = "sinusoidal"
	PositionsLearned    = "learned"
)

// positions returns Positions with the default filled in.
func (c Config) positions() string {
	if c.Positions == "" {
		return PositionsRoPE
	}
	return c.Positions
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
		Attention: attention.PolysketchConfig{
			Degree: 4, SketchSize: 32, Block: 64, Local: true, Learned: true, Sketch: attention.Gaussian,
		},
		Seed: 1,
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

// Properties returns the properties of the attention mechanism.
func (c Config) Properties() attention.Properties { return attention.PropertiesOf(c.Attention) }

// setup returns the attention setup of layer i: causal, with a seed of
// its own derived from Seed, for Heads heads of HeadSize.
func (c Config) setup(layer int) attention.Setup {
	return attention.Setup{Causal: !c.Bidirectional, Seed: layerSeed(c.Seed, layer), HeadSize: c.HeadSize(), Heads: c.Heads}
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
	switch c.positions() {
	case PositionsRoPE:
	case PositionsSinusoidal, PositionsLearned:
		if !c.Bidirectional {
			add("positions %q: an option of encoder models (bidirectional); decoders use rope", c.Positions)
		}
	default:
		add("positions %q: use %s, %s or %s", c.Positions, PositionsRoPE, PositionsSinusoidal, PositionsLearned)
	}
	if c.PostNorm && !c.Bidirectional {
		add("post_norm: an option of encoder models (bidirectional); decoders are pre-LayerNorm")
	}
	if c.Attention == nil {
		add("no attention mechanism: set one of %s", strings.Join(attention.Names(), ", "))
	} else if _, err := attention.Lookup(c.Attention.Mechanism()); err != nil {
		add("attention: %w", err)
	} else if err := c.Attention.Validate(); err != nil {
		add("%s attention: %w", c.Attention.Mechanism(), err)
	}
	return errors.Join(errs...)
}

// configJSON is Config as checkpoints store it: the mechanism by name and
// its options in an object of their own.
type configJSON struct {
	Vocab            int             `json:"vocab"`
	Dim              int             `json:"dim"`
	Layers           int             `json:"layers"`
	Heads            int             `json:"heads"`
	Context          int             `json:"context"`
	Hidden           int             `json:"hidden"`
	Attention        string          `json:"attention"`
	AttentionOptions json.RawMessage `json:"attention_options,omitempty"`
	Tied             bool            `json:"tied"`
	Seed             uint64          `json:"seed"`
	Bidirectional    bool            `json:"bidirectional,omitempty"`
	PostNorm         bool            `json:"post_norm,omitempty"`
	Positions        string          `json:"positions,omitempty"`
}

// legacyOptions are the attention options that configurations written
// before the attention registry kept beside the model's fields, for every
// mechanism alike.
var legacyOptions = []string{"degree", "sketch_size", "block", "local", "sketch", "learned", "remat"}

// MarshalJSON writes c as {"vocab": …, "attention": "polysketch",
// "attention_options": {"degree": 4, …}, "tied": …, "seed": …}.
func (c Config) MarshalJSON() ([]byte, error) {
	j := configJSON{Vocab: c.Vocab, Dim: c.Dim, Layers: c.Layers, Heads: c.Heads, Context: c.Context,
		Hidden: c.Hidden, Tied: c.Tied, Seed: c.Seed, Bidirectional: c.Bidirectional, PostNorm: c.PostNorm, Positions: c.Positions}
	if c.Attention != nil {
		opts, err := attention.MarshalConfig(c.Attention)
		if err != nil {
			return nil, err
		}
		j.Attention, j.AttentionOptions = c.Attention.Mechanism(), opts
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes, strictly (an unknown field
// or option is an error), and the configurations of checkpoints written
// before the attention registry, whose attention options stood beside the
// model's fields (degree, sketch_size, block, local, sketch, learned,
// remat); of those it keeps the ones the mechanism has.
func (c *Config) UnmarshalJSON(b []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	legacy := map[string]json.RawMessage{}
	for _, k := range legacyOptions {
		if v, ok := fields[k]; ok {
			legacy[k] = v
			delete(fields, k)
		}
	}
	rest, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	var j configJSON
	dec := json.NewDecoder(strings.NewReader(string(rest)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return err
	}
	*c = Config{Vocab: j.Vocab, Dim: j.Dim, Layers: j.Layers, Heads: j.Heads, Context: j.Context,
		Hidden: j.Hidden, Tied: j.Tied, Seed: j.Seed, Bidirectional: j.Bidirectional, PostNorm: j.PostNorm, Positions: j.Positions}
	switch {
	case j.Attention == "":
		return errors.New(`no "attention" mechanism`)
	case j.AttentionOptions != nil && len(legacy) > 0:
		return errors.New(`attention options both in "attention_options" and beside the model's fields`)
	case j.AttentionOptions != nil:
		c.Attention, err = attention.UnmarshalConfig(j.Attention, j.AttentionOptions, false)
	default:
		old, _ := json.Marshal(legacy)
		c.Attention, err = attention.UnmarshalConfig(j.Attention, old, true)
	}
	return err
}
