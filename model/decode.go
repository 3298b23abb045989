package model

import (
	"fmt"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
)

// Decoder is the generation state of a Model for B sequences decoded in
// lockstep: each Step consumes one token per sequence and returns the
// logits of the next one, equal to float tolerance to the logits at the
// same position of Model.Forward over the whole sequence.
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
	embed    *nn.Embedding // shares the model's table
	embScale float32
	pos      *nn.Sinusoidal
	rope     *nn.RoPE
	layers   []decoderLayer
	norm     *nn.LayerNorm
	head     *nn.Linear // shares the model's; nil when tied
	bias     *nn.Param

	tokens     []int32
	x, a, y    *tensor.Tensor // [B,1,d]
	final      *tensor.Tensor // [B,1,d]
	qkv        *tensor.Tensor // [B,1,3d]
	q, k, v, o *tensor.Tensor // [B,H,1,h], positions along N for RoPE
	q3, k3, v3 *tensor.Tensor // the same as [B,H,h], for attention.Decoder
	o3         *tensor.Tensor
	heads      *tensor.Tensor // o as [B,1,d], the input of the output projection
	logits     *tensor.Tensor // [B,V]
}

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
		cfg: c, batch: B, embScale: m.embScale, head: shareLinear(m.head),
		embed: &nn.Embedding{Vocab: c.Vocab, Dim: d, Weight: m.embed.Weight},
		pos:   nn.NewSinusoidal(d),
		rope:  nn.NewRoPE(h),
		norm:  m.norm.Share(),
		bias:  m.bias,
	}
	if c.Attention != attention.Polysketch {
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
	dec.tokens = make([]int32, B)
	dec.x, dec.a, dec.y, dec.final = tensor.New(B, 1, d), tensor.New(B, 1, d), tensor.New(B, 1, d), tensor.New(B, 1, d)
	dec.qkv = tensor.New(B, 1, 3*d)
	dec.q, dec.k, dec.v, dec.o = tensor.New(B, H, 1, h), tensor.New(B, H, 1, h), tensor.New(B, H, 1, h), tensor.New(B, H, 1, h)
	dec.q3, dec.k3, dec.v3, dec.o3 = dec.q.Reshape(B, H, h), dec.k.Reshape(B, H, h), dec.v.Reshape(B, H, h), dec.o.Reshape(B, H, h)
	dec.heads = dec.o.Reshape(B, 1, d)
	dec.logits = tensor.New(B, c.Vocab)
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
// tensor belongs to the Decoder and is overwritten by the next Step. To
// start from a prompt, step through its tokens and use the logits of the
// last. Step fails on a token outside the vocabulary, a wrong number of
// tokens, or a full KV cache (Len() == Limit()).
func (d *Decoder) Step(tokens []int32) (*tensor.Tensor, error) {
	if len(tokens) != d.batch {
		return nil, fmt.Errorf("decoder step: %d tokens for %d sequences", len(tokens), d.batch)
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= d.cfg.Vocab {
			return nil, fmt.Errorf("decoder step: token %d of sequence %d outside the vocabulary [0, %d)", t, i, d.cfg.Vocab)
		}
	}
	if d.limit > 0 && d.n >= d.limit {
		return nil, fmt.Errorf("decoder step: position %d reaches the context length %d of this %s model; Reset, or use polysketch attention, whose state does not grow", d.n, d.limit, d.cfg.Attention)
	}
	copy(d.tokens, tokens)
	dm, B := d.cfg.Dim, d.batch
	d.embed.Forward(d.x, d.tokens)
	scale(d.embScale, d.x.Data)
	d.pos.Offset = d.n
	d.pos.Forward(d.x, d.x)
	d.rope.Offset = d.n
	for _, l := range d.layers {
		l.ln1.Forward(d.a, d.x)
		l.qkv.Forward(d.qkv, d.a)
		// With one position, [B,H,1,h] is [B,d]: the heads are in place.
		for b := range B {
			row := d.qkv.Data[b*3*dm : (b+1)*3*dm]
			copy(d.q.Data[b*dm:(b+1)*dm], row[:dm])
			copy(d.k.Data[b*dm:(b+1)*dm], row[dm:2*dm])
			copy(d.v.Data[b*dm:(b+1)*dm], row[2*dm:])
		}
		if l.qn != nil {
			l.qn.Forward(d.q, d.q)
			l.kn.Forward(d.k, d.k)
		}
		d.rope.Forward(d.q, d.q)
		d.rope.Forward(d.k, d.k)
		l.attn.Step(d.o3, d.q3, d.k3, d.v3)
		l.out.Forward(d.y, d.heads)
		add(d.x.Data, d.y.Data)
		l.ln2.Forward(d.a, d.x)
		l.ffn.Forward(d.y, d.a)
		add(d.x.Data, d.y.Data)
	}
	d.norm.Forward(d.final, d.x)
	if d.head != nil {
		d.head.Forward(d.logits, d.final)
	} else {
		d.embed.Logits(d.logits, d.final)
		scale(1/d.embScale, d.logits.Data)
		addRows(d.logits.Data, d.bias.Value.Data)
	}
	d.n++
	return d.logits, nil
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
