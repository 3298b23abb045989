package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/internal/field"
	"github.com/polysketch/polysketch/nn"
)

// Config describes a model. Checkpoints store it as JSON (see
// MarshalJSON); every field but Seed fixes the shapes or the computation,
// and no parameter depends on Context, so Context may be raised after
// loading.
type Config struct {
	Vocab   int // tokens; 256 for bytes
	Dim     int // d_model, the width of the residual stream
	Layers  int // Transformer blocks
	Heads   int // attention (query) heads per block
	Context int // the longest sequence Forward accepts, and the KV caches' limit
	Hidden  int // feed-forward hidden size; 0 means 4·Dim, the paper's expansion

	// KVHeads is the number of key and value heads (grouped-query
	// attention, Ainslie et al. 2023), each serving Heads/KVHeads query
	// heads in order; 0 means Heads.
	KVHeads int
	// HeadDim is the size of every head, even with rotary embeddings; 0
	// means Dim/Heads.
	HeadDim int

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
	// default), "rope-only" (rotary embeddings alone, as Llama, Qwen2 and
	// Mistral have them), "sinusoidal" (added only, encoders) or "learned"
	// (a trained table of Context rows, added, as GPT-2 has it).
	Positions string
	// RoPETheta is the base of the rotary embeddings' frequencies; 0
	// means 10000.
	RoPETheta float64
	// RoPEScaling, unless zero, rescales the rotary frequencies for
	// contexts beyond those a model was trained at.
	RoPEScaling RoPEScaling

	// Norm is the normalization of every block and of the output:
	// "layernorm" (or empty: gain and bias, the default) or "rmsnorm"
	// (a gain alone, no centring; Llama). NormEps is added to the
	// variance (or mean square); 0 means 1e-5. The q/k normalization of
	// the polynomial mechanisms is a LayerNorm in either case.
	Norm    string
	NormEps float64
	// FFN is the feed-forward block: "geglu" (or empty: the GELU-gated
	// GLU of Transformer++, the default), "swiglu" (SiLU-gated; Llama) or
	// "gelu" (a plain two-layer MLP with tanh GELU; GPT-2).
	FFN string
	// Biases of the projections, none by default: QKVBias on q, k and v
	// (Qwen2, GPT-2), OutBias on the attention output, FFNBias on the
	// feed-forward block's layers (GPT-2).
	QKVBias, OutBias, FFNBias bool
	// NoHeadBias drops the bias of the logits (imported models have none).
	NoHeadBias bool
	// EmbedScale multiplies the token embeddings, and divides tied
	// logits; 0 means √Dim (see New), 1 leaves them as they are, as
	// imported models do.
	EmbedScale float64
}

// RoPEScaling is a rescaling of the rotary frequencies θᵢ.
type RoPEScaling struct {
	// Type is "linear" (every θᵢ divided by Factor: position
	// interpolation) or "llama3" (Llama 3.1's: the frequencies whose
	// wavelength exceeds OriginalContext/LowFreqFactor divided by Factor,
	// those below OriginalContext/HighFreqFactor kept, and the ones
	// between interpolated).
	Type            string  `json:"type"`
	Factor          float64 `json:"factor"`
	LowFreqFactor   float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor  float64 `json:"high_freq_factor,omitempty"`
	OriginalContext int     `json:"original_context,omitempty"`
}

// The scalings of rotary frequencies (RoPEScaling.Type).
const (
	ScalingLinear = "linear"
	ScalingLlama3 = "llama3"
)

// The normalizations (Config.Norm) and feed-forward blocks (Config.FFN).
const (
	NormLayer = "layernorm"
	NormRMS   = "rmsnorm"
	FFNGEGLU  = "geglu"
	FFNSwiGLU = "swiglu"
	FFNGELU   = "gelu"
)

// The ways positions enter the model (Config.Positions).
const (
	PositionsRoPE       = "rope"
	PositionsRoPEOnly   = "rope-only"
	PositionsSinusoidal = "sinusoidal"
	PositionsLearned    = "learned"
)

// rotary reports whether q and k are turned by rotary embeddings.
func (c Config) rotary() bool {
	p := c.positions()
	return p == PositionsRoPE || p == PositionsRoPEOnly
}

// sinusoidal reports whether sinusoidal embeddings are added to the tokens.
func (c Config) sinusoidal() bool {
	p := c.positions()
	return p == PositionsRoPE || p == PositionsSinusoidal
}

// norm returns Norm with the default filled in.
func (c Config) norm() string {
	if c.Norm == "" {
		return NormLayer
	}
	return c.Norm
}

// normEps returns NormEps with the default filled in.
func (c Config) normEps() float32 {
	if c.NormEps == 0 {
		return 1e-5
	}
	return float32(c.NormEps)
}

// ffn returns FFN with the default filled in.
func (c Config) ffn() string {
	if c.FFN == "" {
		return FFNGEGLU
	}
	return c.FFN
}

// embedScale returns EmbedScale with the default, √Dim, filled in.
func (c Config) embedScale() float32 {
	if c.EmbedScale == 0 {
		return float32(math.Sqrt(float64(c.Dim)))
	}
	return float32(c.EmbedScale)
}

// KVHeadCount returns the number of key/value heads: KVHeads, or Heads
// when it is 0.
func (c Config) KVHeadCount() int {
	if c.KVHeads == 0 {
		return c.Heads
	}
	return c.KVHeads
}

// QKVSize returns the width of the q, k, v projections together:
// (Heads + 2·KVHeads)·HeadSize.
func (c Config) QKVSize() int { return (c.Heads + 2*c.KVHeadCount()) * c.HeadSize() }

// RoPEFrequencies returns the angular frequencies of the rotary
// embeddings' HeadSize/2 pairs: θᵢ = RoPETheta^(−2i/HeadSize), rescaled
// by RoPEScaling as transformers' rope_init_fn computes them.
func (c Config) RoPEFrequencies() []float64 {
	base := c.RoPETheta
	if base == 0 {
		base = 10000
	}
	freqs := nn.RoPEFrequencies(c.HeadSize(), base)
	s := c.RoPEScaling
	if s.Type == "" {
		return freqs
	}
	for i, f := range freqs {
		switch s.Type {
		case ScalingLinear:
			freqs[i] = f / s.Factor
		case ScalingLlama3:
			// The wavelengths of θ beyond the original context's
			// low-frequency bound are stretched by the factor, those
			// within the high-frequency bound kept, and those between
			// interpolated smoothly.
			old := float64(s.OriginalContext)
			wavelen := 2 * math.Pi / f
			switch {
			case wavelen < old/s.HighFreqFactor:
			case wavelen > old/s.LowFreqFactor:
				freqs[i] = f / s.Factor
			default:
				smooth := (old/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				freqs[i] = (1-smooth)*f/s.Factor + smooth*f
			}
		}
	}
	return freqs
}

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

// HeadSize returns the size of a head: HeadDim, or Dim/Heads.
func (c Config) HeadSize() int {
	if c.HeadDim != 0 {
		return c.HeadDim
	}
	return c.Dim / max(c.Heads, 1)
}

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
	add := func(format string, args ...any) { errs = append(errs, field.Errorf(format, args...)) }
	if c.Vocab < 1 {
		errs = append(errs, field.Invalid("vocab", c.Vocab, "need at least 1 token (256 for bytes)"))
	}
	if c.Dim < 1 {
		errs = append(errs, field.Invalid("dim", c.Dim, "must be positive"))
	}
	if c.Layers < 1 {
		errs = append(errs, field.Invalid("layers", c.Layers, "must be positive"))
	}
	if c.Context < 1 {
		errs = append(errs, field.Invalid("context", c.Context, "must be positive"))
	}
	if c.Hidden < 0 {
		errs = append(errs, field.Invalid("hidden", c.Hidden, "must be positive, or 0 for 4·dim"))
	}
	switch {
	case c.Heads < 1:
		errs = append(errs, field.Invalid("heads", c.Heads, "must be positive"))
	case c.HeadDim < 0:
		errs = append(errs, field.Invalid("head_dim", c.HeadDim, "must be positive, or 0 for dim/heads"))
	case c.HeadDim == 0 && c.Dim >= 1 && c.Dim%c.Heads != 0:
		add("%s %d is not divisible by %s %d: choose heads dividing dim", field.Name("dim"), c.Dim, field.Name("heads"), c.Heads)
	case c.rotary() && c.HeadDim > 0 && c.HeadDim%2 != 0:
		errs = append(errs, field.Invalid("head_dim", c.HeadDim, "odd: rotary embeddings need an even head size"))
	case c.rotary() && c.HeadDim == 0 && c.Dim >= 1 && c.Dim/c.Heads%2 != 0:
		add("head size %d (%s %d / %s %d) is odd: rotary embeddings need an even head size", c.Dim/c.Heads, field.Name("dim"), c.Dim, field.Name("heads"), c.Heads)
	}
	switch {
	case c.KVHeads < 0:
		errs = append(errs, field.Invalid("kv_heads", c.KVHeads, "must be positive, or 0 for heads"))
	case c.KVHeads > 0 && c.Heads >= 1 && c.Heads%c.KVHeads != 0:
		add("%s %d is not a multiple of %s %d: every key/value head serves the same number of query heads", field.Name("heads"), c.Heads, field.Name("kv_heads"), c.KVHeads)
	}
	switch c.positions() {
	case PositionsRoPE, PositionsRoPEOnly, PositionsLearned:
	case PositionsSinusoidal:
		if !c.Bidirectional {
			add("%s %q: an option of encoder models (%s); decoders use rope", field.Name("positions"), c.Positions, field.Name("bidirectional"))
		}
	default:
		errs = append(errs, field.Invalid("positions", c.Positions, "use %s, %s, %s or %s", PositionsRoPE, PositionsRoPEOnly, PositionsSinusoidal, PositionsLearned))
	}
	if c.RoPETheta < 0 || math.IsNaN(c.RoPETheta) || math.IsInf(c.RoPETheta, 0) || c.RoPETheta == 1 {
		errs = append(errs, field.Invalid("rope_theta", c.RoPETheta, "must be a finite base above 0 and other than 1, or 0 for 10000"))
	}
	if s := c.RoPEScaling; s != (RoPEScaling{}) {
		if err := s.validate(); err != nil {
			add("%s: %w", field.Name("rope_scaling"), err)
		}
	}
	if (c.RoPETheta != 0 || c.RoPEScaling != RoPEScaling{}) && !c.rotary() {
		add("%s and %s: options of rotary positions (rope, rope-only), not of %q", field.Name("rope_theta"), field.Name("rope_scaling"), c.Positions)
	}
	switch c.norm() {
	case NormLayer, NormRMS:
	default:
		errs = append(errs, field.Invalid("norm", c.Norm, "use %s or %s", NormLayer, NormRMS))
	}
	if !(c.NormEps >= 0 && c.NormEps < 1) {
		errs = append(errs, field.Invalid("norm_eps", c.NormEps, "must be in [0, 1), 0 for 1e-5"))
	}
	switch c.ffn() {
	case FFNGEGLU, FFNSwiGLU, FFNGELU:
	default:
		errs = append(errs, field.Invalid("ffn", c.FFN, "use %s, %s or %s", FFNGEGLU, FFNSwiGLU, FFNGELU))
	}
	if !(c.EmbedScale >= 0) || math.IsInf(c.EmbedScale, 0) {
		errs = append(errs, field.Invalid("embed_scale", c.EmbedScale, "must be finite and positive, or 0 for √dim"))
	}
	if c.PostNorm && !c.Bidirectional {
		add("%s: an option of encoder models (%s); decoders are pre-LayerNorm", field.Name("post_norm"), field.Name("bidirectional"))
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

// validate checks the scaling's parameters.
func (s RoPEScaling) validate() error {
	if !(s.Factor > 0) || math.IsInf(s.Factor, 0) {
		return fmt.Errorf("factor %g: must be finite and positive", s.Factor)
	}
	switch s.Type {
	case ScalingLinear:
		if s.LowFreqFactor != 0 || s.HighFreqFactor != 0 || s.OriginalContext != 0 {
			return errors.New("low_freq_factor, high_freq_factor and original_context belong to llama3 scaling, not linear")
		}
	case ScalingLlama3:
		if !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) || math.IsInf(s.HighFreqFactor, 0) {
			return fmt.Errorf("low_freq_factor %g and high_freq_factor %g: need 0 < low < high", s.LowFreqFactor, s.HighFreqFactor)
		}
		if s.OriginalContext < 1 {
			return fmt.Errorf("original_context %d: must be positive", s.OriginalContext)
		}
	default:
		return fmt.Errorf("type %q: use %s or %s", s.Type, ScalingLinear, ScalingLlama3)
	}
	return nil
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
	KVHeads          int             `json:"kv_heads,omitempty"`
	HeadDim          int             `json:"head_dim,omitempty"`
	RoPETheta        float64         `json:"rope_theta,omitempty"`
	RoPEScaling      RoPEScaling     `json:"rope_scaling,omitzero"`
	Norm             string          `json:"norm,omitempty"`
	NormEps          float64         `json:"norm_eps,omitempty"`
	FFN              string          `json:"ffn,omitempty"`
	QKVBias          bool            `json:"qkv_bias,omitempty"`
	OutBias          bool            `json:"out_bias,omitempty"`
	FFNBias          bool            `json:"ffn_bias,omitempty"`
	NoHeadBias       bool            `json:"no_head_bias,omitempty"`
	EmbedScale       float64         `json:"embed_scale,omitempty"`
}

// json returns the fields of c that configJSON holds beside the
// attention mechanism.
func (c Config) json() configJSON {
	return configJSON{Vocab: c.Vocab, Dim: c.Dim, Layers: c.Layers, Heads: c.Heads, Context: c.Context,
		Hidden: c.Hidden, Tied: c.Tied, Seed: c.Seed, Bidirectional: c.Bidirectional, PostNorm: c.PostNorm, Positions: c.Positions,
		KVHeads: c.KVHeads, HeadDim: c.HeadDim, RoPETheta: c.RoPETheta, RoPEScaling: c.RoPEScaling, Norm: c.Norm, NormEps: c.NormEps,
		FFN: c.FFN, QKVBias: c.QKVBias, OutBias: c.OutBias, FFNBias: c.FFNBias, NoHeadBias: c.NoHeadBias, EmbedScale: c.EmbedScale}
}

// config returns the Config of j, without its attention mechanism.
func (j configJSON) config() Config {
	return Config{Vocab: j.Vocab, Dim: j.Dim, Layers: j.Layers, Heads: j.Heads, Context: j.Context,
		Hidden: j.Hidden, Tied: j.Tied, Seed: j.Seed, Bidirectional: j.Bidirectional, PostNorm: j.PostNorm, Positions: j.Positions,
		KVHeads: j.KVHeads, HeadDim: j.HeadDim, RoPETheta: j.RoPETheta, RoPEScaling: j.RoPEScaling, Norm: j.Norm, NormEps: j.NormEps,
		FFN: j.FFN, QKVBias: j.QKVBias, OutBias: j.OutBias, FFNBias: j.FFNBias, NoHeadBias: j.NoHeadBias, EmbedScale: j.EmbedScale}
}

// legacyOptions are the attention options that configurations written
// before the attention registry kept beside the model's fields, for every
// mechanism alike.
var legacyOptions = []string{"degree", "sketch_size", "block", "local", "sketch", "learned", "remat"}

// MarshalJSON writes c as {"vocab": …, "attention": "polysketch",
// "attention_options": {"degree": 4, …}, "tied": …, "seed": …}.
func (c Config) MarshalJSON() ([]byte, error) {
	j := c.json()
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
	*c = j.config()
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
