package model

import (
	"fmt"

	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
)

// Decoder is the generation state of a Model for B sequences decoded in
// lockstep: Prefill consumes a prompt of n tokens per sequence, each Step
// one token per sequence, and both return the logits of the next token,
// equal to float tolerance to the logits at the same position of
// Model.Forward over the whole sequence.
//
// A Decoder is B Sequences stepped together by a Batch, always all of
// them, by the same number of tokens (a server, whose sequences join and
// leave between steps, uses Sequences and a Batch directly). Each
// sequence keeps an attention.Decoder per layer: a KV cache for softmax,
// flash and polynomial attention, so that position n costs O(n) and a
// sequence may not exceed Config.Context (Limit); for polysketch, the
// recurrent state of the block algorithm, so that every token costs the
// same and sequences may run past Context (positions beyond it are
// extrapolated by the sinusoidal and rotary embeddings).
//
// A Decoder reads the model's parameters (it shares them, not copies them)
// and its own buffers, so it does not disturb a Forward/Backward pair of
// the model; but do not update the parameters or run the model while a
// Step runs.
type Decoder struct {
	cfg   Config
	seqs  []*Sequence
	batch *Batch
	chunk int // most positions per sequence in one Batch step
	parts [][]int32
}

// prefillRows bounds the rows (sequences × positions) of one pass of
// Prefill: enough for the dense layers to run at matrix-matrix speed,
// few enough that the buffers of a pass (about 23·Dim floats per row,
// with a GLU of 4·Dim) stay small however long the prompt.
const prefillRows = 256

// NewDecoder returns a Decoder for B sequences, at position 0.
func (m *Model) NewDecoder(B int) (*Decoder, error) {
	if B < 1 {
		return nil, fmt.Errorf("decoder for %d sequences: need at least 1", B)
	}
	dec := &Decoder{cfg: m.cfg, batch: m.NewBatch(), chunk: max(1, prefillRows/B), parts: make([][]int32, B)}
	for range B {
		s, err := m.NewSequence()
		if err != nil {
			return nil, fmt.Errorf("decoder: %w", err)
		}
		dec.seqs = append(dec.seqs, s)
	}
	return dec, nil
}

// Len returns the number of positions consumed since the start or the
// last Reset: the position of the next token.
func (d *Decoder) Len() int { return d.seqs[0].Len() }

// Limit returns the number of positions a sequence may have: Context for
// KV-cache mechanisms, 0 (no limit) for polysketch.
func (d *Decoder) Limit() int { return d.seqs[0].Limit() }

// Reset returns to position 0, for new sequences, keeping the buffers.
func (d *Decoder) Reset() {
	for _, s := range d.seqs {
		s.Reset()
	}
}

// Step consumes tokens, one per sequence ([B] ids), at position Len() and
// returns the logits of the next token of each sequence, [B,Vocab]. The
// tensor belongs to the Decoder and is overwritten by the next Step or
// Prefill. Step fails, consuming nothing, on a token outside the
// vocabulary, a wrong number of tokens, or a full KV cache
// (Len() == Limit()).
func (d *Decoder) Step(tokens []int32) (*tensor.Tensor, error) {
	if len(tokens) != len(d.seqs) {
		return nil, fmt.Errorf("decoder step: %d tokens for %d sequences", len(tokens), len(d.seqs))
	}
	if err := d.check("decoder step", tokens, 1); err != nil {
		return nil, err
	}
	return d.pass(tokens, 1, 0, 1), nil
}

// Prefill consumes a prompt of n ≥ 1 tokens per sequence at positions
// Len() … Len()+n−1 and returns the logits of the token after it, [B,Vocab],
// as n Steps would (to float tolerance) but much faster: it runs the
// prompt through the layers in passes of up to 256 rows (sequences ×
// positions), so that every dense layer multiplies matrices rather than
// a vector. tokens holds B·n ids in row-major [B,n] order, sequence b's
// prompt at tokens[b·n : (b+1)·n]. The logits belong to the Decoder, as
// Step's do. Prefill fails, consuming nothing, on a token outside the
// vocabulary, a number of tokens that is not a positive multiple of B, or
// a prompt that does not fit in a KV cache (Len()+n > Limit()).
func (d *Decoder) Prefill(tokens []int32) (*tensor.Tensor, error) {
	B := len(d.seqs)
	if len(tokens) == 0 || len(tokens)%B != 0 {
		return nil, fmt.Errorf("decoder prefill: %d tokens for %d sequences: need the same positive number for each", len(tokens), B)
	}
	n := len(tokens) / B
	if err := d.check("decoder prefill", tokens, n); err != nil {
		return nil, err
	}
	var logits *tensor.Tensor
	for at := 0; at < n; at += d.chunk {
		logits = d.pass(tokens, n, at, min(d.chunk, n-at))
	}
	return logits, nil
}

// check validates tokens for consuming n positions per sequence.
func (d *Decoder) check(op string, tokens []int32, n int) error {
	pos, limit := d.Len(), d.Limit()
	for i, t := range tokens {
		if t < 0 || int(t) >= d.cfg.Vocab {
			return fmt.Errorf("%s: token %d at position %d of sequence %d outside the vocabulary [0, %d)", op, t, pos+i%n, i/n, d.cfg.Vocab)
		}
	}
	if limit > 0 && pos+n > limit {
		if n == 1 {
			return fmt.Errorf("%s: position %d reaches the context length %d of this %s model; Reset%s", op, pos, limit, d.cfg.Attention.Mechanism(), limitAdvice(d.cfg))
		}
		return fmt.Errorf("%s: %d positions from position %d pass the context length %d of this %s model; shorten the prompt%s", op, n, pos, limit, d.cfg.Attention.Mechanism(), limitAdvice(d.cfg))
	}
	return nil
}

// pass runs positions [at, at+c) of every sequence of tokens ([B,n])
// through the model as one Batch step and returns the logits of the last.
func (d *Decoder) pass(tokens []int32, n, at, c int) *tensor.Tensor {
	for b := range d.seqs {
		d.parts[b] = tokens[b*n+at : b*n+at+c]
	}
	logits, err := d.batch.Step(d.seqs, d.parts)
	if err != nil {
		panic("model: decoder pass after its checks: " + err.Error()) // checked above
	}
	return logits
}

// shareLinear returns a Linear with l's parameters and state of its own
// (nil for nil). Decoding runs a few rows through each layer, which
// blas.Sgemm computes without packing the weights.
func shareLinear(l *nn.Linear) *nn.Linear {
	if l == nil {
		return nil
	}
	return l.Share()
}
