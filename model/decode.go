package model

import (
	"fmt"
	"runtime"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
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
	head     *nn.Linear // the model's; nil when tied
	bias     *nn.Param

	tokens     []int32
	x, a, y    *tensor.Tensor // [B,1,d]
	final      *tensor.Tensor // [B,1,d]
	qkv        *tensor.Tensor // [B,1,3d]
	q, k, v, o *tensor.Tensor // [B,H,1,h], positions along N for RoPE
	q3, k3, v3 *tensor.Tensor // the same as [B,H,h], for attention.Decoder
	o3         *tensor.Tensor
	ab, gated  []float32      // [B, 2·hidden] and [B, hidden]: the GLU's inside
	logits     *tensor.Tensor // [B,V]
}

// decoderLayer is one layer of the model seen by the Decoder: the model's
// linear maps (read only), LayerNorms sharing the model's parameters with
// caches of their own, and the attention state.
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
		cfg: c, batch: B, embScale: m.embScale, head: m.head,
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
		dl := decoderLayer{ln1: l.ln1.Share(), ln2: l.ln2.Share(), qkv: l.qkv, out: l.out, ffn: l.ffn, attn: ad}
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
	dec.ab, dec.gated = make([]float32, B*2*c.HiddenSize()), make([]float32, B*c.HiddenSize())
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
		linear(d.qkv.Data, d.a.Data, l.qkv, B)
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
		linear(d.y.Data, d.o.Data, l.out, B)
		add(d.x.Data, d.y.Data)
		l.ln2.Forward(d.a, d.x)
		d.glu(l.ffn, d.y.Data, d.a.Data)
		add(d.x.Data, d.y.Data)
	}
	d.norm.Forward(d.final, d.x)
	if d.head != nil {
		linear(d.logits.Data, d.final.Data, d.head, B)
	} else {
		tiedLogits(d.logits.Data, d.final.Data, d.embed.Weight.Value.Data, d.bias.Value.Data, B, dm, d.cfg.Vocab)
	}
	d.n++
	return d.logits, nil
}

// Decoding multiplies a few rows (one per sequence) by each weight matrix.
// blas.Sgemm packs the whole matrix first, which for one row costs several
// times the product itself (1×256 by 256×2048: 290 µs against 40 µs for
// the loop below, on the 2-core development machine), so the Decoder
// streams each matrix row by row instead. The model's own nn layers keep
// the training path.

// linear computes y = x·W + b of the Linear l for rows rows of x.
func linear(y, x []float32, l *nn.Linear, rows int) {
	var b []float32
	if l.Bias != nil {
		b = l.Bias.Value.Data
	}
	matVec(y, x, l.Weight.Value.Data, b, rows, l.In, l.Out)
}

// matVec sets y = x·W + bias for the rows×in matrix x and the in×out
// matrix W (bias may be nil), as Σᵢ x[r,i]·W[i,:] in the order of i. Each
// row of W is read once for all rows of x: decoding one token is bound by
// reading the weights from memory. The columns are split between
// goroutines, which cannot change any element.
func matVec(y, x, w, bias []float32, rows, in, out int) {
	chunks := max(1, min(runtime.GOMAXPROCS(0), rows*in*out>>17, out/64))
	parallel.For(chunks, func(c int) {
		lo, hi := c*out/chunks/16*16, (c+1)*out/chunks/16*16
		if c == chunks-1 {
			hi = out
		}
		for r := range rows {
			if bias != nil {
				copy(y[r*out+lo:r*out+hi], bias[lo:hi])
			} else {
				clear(y[r*out+lo : r*out+hi])
			}
		}
		for i := range in {
			wi := w[i*out+lo : i*out+hi]
			for r := range rows {
				vec.Axpy(x[r*in+i], wi, y[r*out+lo:r*out+hi])
			}
		}
	})
}

// tiedLogits sets logits = x·Eᵀ + bias for the rows×d matrix x and the
// vocab×d embedding table E, one dot product per logit, split over the
// vocabulary.
func tiedLogits(logits, x, table, bias []float32, rows, d, vocab int) {
	chunks := max(1, min(runtime.GOMAXPROCS(0), rows*vocab*d>>17, vocab/64))
	parallel.For(chunks, func(c int) {
		for r := range rows {
			xr := x[r*d : (r+1)*d]
			for v := c * vocab / chunks; v < (c+1)*vocab/chunks; v++ {
				logits[r*vocab+v] = vec.Dot(xr, table[v*d:(v+1)*d]) + bias[v]
			}
		}
	})
}

// glu computes the GLU block g of the model, (GELU(x·W₁) ⊙ x·W₃)·W₂, for
// the rows of x into y, with linear.
func (d *Decoder) glu(g *nn.GLU, y, x []float32) {
	B, H := d.batch, g.Hidden
	linear(d.ab, x, g.In, B)
	for b := range B {
		ab, h := d.ab[b*2*H:(b+1)*2*H], d.gated[b*H:(b+1)*H]
		vec.GELU(h, ab[:H])
		vec.Mul(h, h, ab[H:])
	}
	linear(y, d.gated, g.Out, B)
}
