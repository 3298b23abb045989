package model

// NewEncoder returns an encoder-only model: cfg with Bidirectional set (see
// Config.Bidirectional), the decoder's blocks with every attention layer
// in its non-causal form, and a head that classifies every position. With
// cfg.PostNorm and cfg.Positions = "learned" it is the thesis's encoder of
// the sequence-reversal study (ch. 5, §1.2.1), but for its GLU (the
// Transformer++ feed-forward layer, shared with the decoder) and its
// LayerNorm of the head's input.
//
// An encoder predicts a label per position, not the next token: Loss
// takes targets aligned with the tokens (-1 where nothing is scored). It
// has no Decoder: NewDecoder fails on it.
func NewEncoder(cfg Config) (*Model, error) {
	cfg.Bidirectional = true
	return New(cfg)
}
