package model

import (
	"fmt"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
)

// Decoder is the generation state of a Model for B sequences decoded in
// lockstep: Prefill consumes a prompt of n tokens per sequence, each Step
// one token per sequence, and both return the logits of the next token,
// equal to float tolerance to the logits at the same position of
// Model.Forward over the whole sequence.
//
// Each layer keeps an attention.Decoder: a KV cache for softmax, flash and
// polynomial attention, so that position n costs O(n) and a sequence may
// not exceed Config.Context (Limit); for polysketch, the recurrent state
// of the block algorithm, so that every token costs the same and
// sequences may run past Context (positions beyond it are extrapolated by
// the sinusoidal and rotary embeddings).
//
// A Decoder reads the model's parameters (it shares them, not copies them)
// and its own buffers, so it does not disturb a Forward/Backward pair of
// the model; but do not update the parameters or run the model while a
// Step runs.
type Decoder struct {
	cfg      Config
	batch    int
	limit    int           // positions accepted; 0 for no limit
	n        int           // positions consumed
	chunk    int           // most positions per sequence in one pass through the layers
	embed    *nn.Embedding // shares the model's table
	embScale float32
	pos      *nn.Sinusoidal
	rope     *nn.RoPE
	layers   []decoderLayer
	norm     *nn.LayerNorm
	head     *nn.Linear // shares the model's; nil when tied
	bias     *nn.Param

	// Buffers of one pass of c ≤ chunk positions per sequence, sized for
	// the largest pass so far.
	tokens     []int32       // [B·c], row-major [B,c]
	x, a, y    tensor.Tensor // [B,c,d]
	qkv        tensor.Tensor // [B,c,3d]
	q, k, v, o tensor.Tensor // [B,H,c,h]
	heads      tensor.Tensor // o as rows, [B,c,d]: the input of the output projection
	last       tensor.Tensor // [B,1,d]: the residual stream at each sequence's last position
	final      tensor.Tensor // [B,1,d]: its final LayerNorm
	logits     tensor.Tensor // [B,V]
}

// prefillRows bounds the rows (sequences × positions) of one pass of
// Prefill: enough for the dense layers to run at matrix-matrix speed,
// few enough that the buffers of a pass (about 23·Dim floats per row,
// with a GLU of 4·Dim) stay small however long the prompt.
const prefillRows = 256

// decoderLayer is one layer of the model seen by the Decoder: layers that
// share the model's parameters but keep inputs and caches of their own,
// so that decoding does not disturb the model's Forward/Backward state,
// and the attention state.
type decoderLayer struct {
	ln1, qn, kn, ln2 *nn.LayerNorm
	qkv, out         *nn.Linear
	ffn              *nn.GLU
	attn             attention.Decoder
}

// NewDecoder returns a Decoder for B sequences, at position 0.
func (m *Model) NewDecoder(B int) (*Decoder, error) {
	if B < 1 {
		return nil, fmt.Errorf("decoder for %d sequences: need at least 1", B)
	}
	c := m.cfg
	d, H, h := c.Dim, c.Heads, c.HeadSize()
	dec := &Decoder{
		cfg: c, batch: B, chunk: max(1, prefillRows/B),
		embScale: m.embScale, head: shareLinear(m.head),
		embed: &nn.Embedding{Vocab: c.Vocab, Dim: d, Weight: m.embed.Weight},
		pos:   nn.NewSinusoidal(d),
		rope:  nn.NewRoPE(h),
		norm:  m.norm.Share(),
		bias:  m.bias,
	}
	if c.Properties().ContextLimit {
		dec.limit = c.Context
	}
	for i, l := range m.layers {
		ad, err := attention.NewDecoder(l.attn, B, H, h)
		if err != nil {
			return nil, fmt.Errorf("decoder for layer %d: %w", i, err)
		}
		dl := decoderLayer{ln1: l.ln1.Share(), ln2: l.ln2.Share(), qkv: shareLinear(l.qkv), out: shareLinear(l.out), attn: ad}
		dl.ffn = &nn.GLU{Dim: l.ffn.Dim, Hidden: l.ffn.Hidden, In: shareLinear(l.ffn.In), Out: shareLinear(l.ffn.Out)}
		if l.qn != nil {
			dl.qn, dl.kn = l.qn.Share(), l.qn.Share()
		}
		dec.layers = append(dec.layers, dl)
	}
	dec.last.Resize(B, 1, d)
	dec.final.Resize(B, 1, d)
	dec.logits.Resize(B, c.Vocab)
	return dec, nil
}

// Len returns the number of positions consumed since the start or the
// last Reset: the position of the next token.
func (d *Decoder) Len() int { return d.n }

// Limit returns the number of positions a sequence may have: Context for
// KV-cache mechanisms, 0 (no limit) for polysketch.
func (d *Decoder) Limit() int { return d.limit }

// Reset returns to position 0, for new sequences, keeping the buffers.
func (d *Decoder) Reset() {
	d.n = 0
	for _, l := range d.layers {
		l.attn.Reset()
	}
}

// Step consumes tokens, one per sequence ([B] ids), at position Len() and
// returns the logits of the next token of each sequence, [B,Vocab]. The
// tensor belongs to the Decoder and is overwritten by the next Step or
// Prefill. Step fails, consuming nothing, on a token outside the
// vocabulary, a wrong number of tokens, or a full KV cache
// (Len() == Limit()).
func (d *Decoder) Step(tokens []int32) (*tensor.Tensor, error) {
	if len(tokens) != d.batch {
		return nil, fmt.Errorf("decoder step: %d tokens for %d sequences", len(tokens), d.batch)
	}
	if err := d.check("decoder step", tokens, 1); err != nil {
		return nil, err
	}
	d.pass(tokens, 1, 0, 1)
	return &d.logits, nil
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
	B := d.batch
	if len(tokens) == 0 || len(tokens)%B != 0 {
		return nil, fmt.Errorf("decoder prefill: %d tokens for %d sequences: need the same positive number for each", len(tokens), B)
	}
	n := len(tokens) / B
	if err := d.check("decoder prefill", tokens, n); err != nil {
		return nil, err
	}
	for at := 0; at < n; at += d.chunk {
		d.pass(tokens, n, at, min(d.chunk, n-at))
	}
	return &d.logits, nil
}

// check validates tokens for consuming n positions per sequence.
func (d *Decoder) check(op string, tokens []int32, n int) error {
	for i, t := range tokens {
		if t < 0 || int(t) >= d.cfg.Vocab {
			return fmt.Errorf("%s: token %d at position %d of sequence %d outside the vocabulary [0, %d)", op, t, d.n+i%n, i/n, d.cfg.Vocab)
		}
	}
	if d.limit > 0 && d.n+n > d.limit {
		if n == 1 {
			return fmt.Errorf("%s: position %d reaches the context length %d of this %s model; Reset, or use polysketch attention, whose state does not grow", op, d.n, d.limit, d.cfg.Attention.Mechanism())
		}
		return fmt.Errorf("%s: %d positions from position %d pass the context length %d of this %s model; shorten the prompt, or use polysketch attention, whose state does not grow", op, n, d.n, d.limit, d.cfg.Attention.Mechanism())
	}
	return nil
}

// pass runs positions [at, at+c) of every sequence of tokens ([B,n]) at
// positions Len() … Len()+c−1 through the model, leaving the logits of the
// last in d.logits.
func (d *Decoder) pass(tokens []int32, n, at, c int) {
	dm, B, H, h := d.cfg.Dim, d.batch, d.cfg.Heads, d.cfg.HeadSize()
	d.tokens = d.tokens[:0]
	for b := range B {
		d.tokens = append(d.tokens, tokens[b*n+at:b*n+at+c]...)
	}
	for _, t := range []*tensor.Tensor{&d.x, &d.a, &d.y, &d.heads} {
		t.Resize(B, c, dm)
	}
	d.qkv.Resize(B, c, 3*dm)
	for _, t := range []*tensor.Tensor{&d.q, &d.k, &d.v, &d.o} {
		t.Resize(B, H, c, h)
	}
	d.embed.Forward(&d.x, d.tokens)
	scale(d.embScale, d.x.Data)
	d.pos.Offset = d.n
	d.pos.Forward(&d.x, &d.x)
	d.rope.Offset = d.n
	for _, l := range d.layers {
		l.ln1.Forward(&d.a, &d.x)
		l.qkv.Forward(&d.qkv, &d.a)
		toHeads(d.q.Data, d.qkv.Data, 3*dm, 0, B, H, c, h)
		toHeads(d.k.Data, d.qkv.Data, 3*dm, dm, B, H, c, h)
		toHeads(d.v.Data, d.qkv.Data, 3*dm, 2*dm, B, H, c, h)
		if l.qn != nil {
			l.qn.Forward(&d.q, &d.q)
			l.kn.Forward(&d.k, &d.k)
		}
		d.rope.Forward(&d.q, &d.q)
		d.rope.Forward(&d.k, &d.k)
		l.attn.Step(&d.o, &d.q, &d.k, &d.v)
		fromHeads(d.heads.Data, dm, 0, d.o.Data, B, H, c, h)
		l.out.Forward(&d.y, &d.heads)
		add(d.x.Data, d.y.Data)
		l.ln2.Forward(&d.a, &d.x)
		l.ffn.Forward(&d.y, &d.a)
		add(d.x.Data, d.y.Data)
	}
	d.n += c
	// Only the last position's logits are wanted: the head, a product with
	// Vocab columns, runs on B rows.
	for b := range B {
		copy(d.last.Data[b*dm:(b+1)*dm], d.x.Data[(b*c+c-1)*dm:(b*c+c)*dm])
	}
	d.norm.Forward(&d.final, &d.last)
	if d.head != nil {
		d.head.Forward(&d.logits, &d.final)
	} else {
		d.embed.Logits(&d.logits, &d.final)
		scale(1/d.embScale, d.logits.Data)
		addRows(d.logits.Data, d.bias.Value.Data)
	}
}

// shareLinear returns a Linear with l's parameters and state of its own
// (nil for nil). Decoding runs a few rows through each layer, which
// blas.Sgemm computes without packing the weights.
func shareLinear(l *nn.Linear) *nn.Linear {
	if l == nil {
		return nil
	}
	return &nn.Linear{In: l.In, Out: l.Out, Weight: l.Weight, Bias: l.Bias}
}
