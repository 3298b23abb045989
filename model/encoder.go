package model

// NewEncoder returns an encoder-only model: the decoder's blocks, embedding
// and per-position output head, with every attention layer in its
// bidirectional (non-causal) form, so that each position sees the whole
// sequence, and the head classifies every position. It is the model of the
// thesis's sequence-reversal study (ch. 5), with two differences kept on
// purpose so that the two models share their blocks: the blocks are
// pre-LayerNorm Transformer++ blocks (RoPE, GLU, no biases) rather than
// BERT's post-LayerNorm ones, and positions are sinusoidal plus RoPE.
//
// An encoder predicts a label per position, not the next token: Loss
// takes targets aligned with the tokens (-1 where nothing is scored). It
// has no Decoder: NewDecoder fails on it.
func NewEncoder(cfg Config) (*Model, error) {
	cfg.Bidirectional = true
	return New(cfg)
}
