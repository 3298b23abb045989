package model

import (
	"fmt"
	"math/rand/v2"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
)

// normalizer is the normalization of a block or of the output: an
// nn.LayerNorm or an nn.RMSNorm (Config.Norm).
type normalizer interface {
	Forward(y, x *tensor.Tensor)
	Backward(dx, dy *tensor.Tensor)
	Params() []*nn.Param
}

// newNorm returns the normalization of c over d features, its parameters
// called name+".gain" (and name+".bias" for a LayerNorm).
func newNorm(c Config, name string, d int) normalizer {
	if c.norm() == NormRMS {
		n := nn.NewRMSNorm(name, d)
		n.Eps = c.normEps()
		return n
	}
	n := nn.NewLayerNorm(name, d, nn.GainBias)
	n.Eps = c.normEps()
	return n
}

// shareNorm returns a normalizer with n's parameters and caches of its own.
func shareNorm(n normalizer) normalizer {
	switch n := n.(type) {
	case *nn.LayerNorm:
		return n.Share()
	case *nn.RMSNorm:
		return n.Share()
	}
	panic(fmt.Sprintf("model: normalizer %T", n))
}

// feedForward is the feed-forward block of a layer: an nn.GLU (GEGLU,
// SwiGLU) or an nn.MLP (Config.FFN).
type feedForward interface {
	Forward(y, x *tensor.Tensor)
	Backward(dx, dy *tensor.Tensor)
	Params() []*nn.Param
}

// newFFN returns the feed-forward block of c, its layers called
// name+".in" and name+".out".
func newFFN(c Config, name string, rng *rand.Rand) feedForward {
	d, hidden := c.Dim, c.HiddenSize()
	switch c.ffn() {
	case FFNGELU:
		return nn.NewMLP(name, d, hidden, nn.GELU, c.FFNBias, rng)
	case FFNSwiGLU:
		g := nn.NewGLU(name, d, hidden, c.FFNBias, rng)
		g.Act = nn.SiLU
		return g
	}
	return nn.NewGLU(name, d, hidden, c.FFNBias, rng)
}

// ffnLinears returns the two dense layers of f.
func ffnLinears(f feedForward) (in, out *nn.Linear) {
	switch f := f.(type) {
	case *nn.GLU:
		return f.In, f.Out
	case *nn.MLP:
		return f.In, f.Out
	}
	panic(fmt.Sprintf("model: feed-forward block %T", f))
}

// shareFFN returns a feed-forward block with f's parameters and state of
// its own.
func shareFFN(f feedForward) feedForward {
	switch f := f.(type) {
	case *nn.GLU:
		return f.Share()
	case *nn.MLP:
		return f.Share()
	}
	panic(fmt.Sprintf("model: feed-forward block %T", f))
}

// layer is one pre-norm Transformer block: an attention sublayer and a
// feed-forward sublayer, each added to the residual stream.
type layer struct {
	ln1    normalizer
	qkv    *nn.Linear    // d → (H + 2·KVH)·h: q, k, v side by side
	qn, kn *nn.LayerNorm // one LayerNorm over each head's h features, for q and (shared) k; nil for softmax
	attn   attention.Mechanism
	sketch []*nn.Param // the mechanism's parameters (learned sketches), renamed into the layer
	out    *nn.Linear  // H·h → d
	ln2    normalizer
	ffn    feedForward
	post   bool // post-LayerNorm (Config.PostNorm)

	// Kept for Backward: the nn layers and the mechanism hold references.
	a1, a2  tensor.Tensor // [B,N,d] outputs of ln1 and ln2, inputs of qkv and ffn
	q, k, v tensor.Tensor // [B,H,N,h] inputs of the mechanism (k and v repeated for their groups)
	ot      tensor.Tensor // [B,N,H·h] attention output, rows again: the input of out
}

// block is the computation of a layer, written once for training
// (layer.forward) and decoding (Batch.Step): the nn layers it runs, which
// are the layer's own in training and copies sharing their parameters in
// decoding, so that decoding leaves the training state alone.
type block struct {
	ln1, ln2 normalizer
	qn, kn   *nn.LayerNorm
	qkv, out *nn.Linear
	ffn      feedForward
	post     bool // normalization after each residual sum (Config.PostNorm)
}

// block returns the layer's own nn layers as a block.
func (l *layer) block() block {
	return block{ln1: l.ln1, qn: l.qn, kn: l.kn, ln2: l.ln2, qkv: l.qkv, out: l.out, ffn: l.ffn, post: l.post}
}

// shared returns a block with the layer's parameters and state of its own.
func (l *layer) shared() block {
	b := block{ln1: shareNorm(l.ln1), ln2: shareNorm(l.ln2), qkv: l.qkv.Share(), out: l.out.Share(), ffn: shareFFN(l.ffn), post: l.post}
	if l.qn != nil {
		b.qn, b.kn = l.qn.Share(), l.qn.Share()
	}
	return b
}

// forward updates the residual stream x (rows of d features) through the
// block:
//
//	x += out(mix(qkv(N₁(x))));  x += FFN(N₂(x))
//
// or with post-normalization (the encoder of BERT and of the thesis's
// §1.2.1)
//
//	x = N₁(x + out(mix(qkv(x))));  x = N₂(x + FFN(x))
//
// a1, qkv, ot, y and a2 receive the intermediate rows: the input of qkv
// (N₁(x), or a copy of x), the projections [rows, (H+2·KVH)·h], the
// attention output [rows, H·h] that mix writes into ot from qkv, the
// sublayer outputs, and the input of the feed-forward block (N₂(x), or the
// first normalization's output). All but the attention acts on each row
// alone. With spans the dense layers run on each span of rows as a product
// of its own, so that a row meets the same matrix kernels however many
// rows share the pass (see Batch); with none, on all rows at once.
func (b block) forward(x, a1, qkv, ot, y, a2 *tensor.Tensor, spans []span, mix func()) {
	_, d := x.Matrix()
	wqkv, wo := b.qkv.Out, b.out.In
	each := func(f func(x, a1, qkv, ot, y, a2 *tensor.Tensor)) {
		if len(spans) == 0 {
			f(x, a1, qkv, ot, y, a2)
			return
		}
		for _, s := range spans {
			lo, hi := s.lo, s.hi
			f(rows(x, lo, hi, d), rows(a1, lo, hi, d), rows(qkv, lo, hi, wqkv), rows(ot, lo, hi, wo), rows(y, lo, hi, d), rows(a2, lo, hi, d))
		}
	}
	each(func(x, a1, qkv, _, _, _ *tensor.Tensor) {
		if b.post {
			copy(a1.Data, x.Data) // qkv keeps its input; x changes below
		} else {
			b.ln1.Forward(a1, x)
		}
		b.qkv.Forward(qkv, a1)
	})
	mix()
	each(func(x, _, _, ot, y, a2 *tensor.Tensor) {
		b.out.Forward(y, ot)
		add(x.Data, y.Data)
		if b.post {
			b.ln1.Forward(a2, x)
			b.ffn.Forward(y, a2)
			copy(x.Data, a2.Data)
			add(x.Data, y.Data)
			b.ln2.Forward(x, x)
			return
		}
		b.ln2.Forward(a2, x)
		b.ffn.Forward(y, a2)
		add(x.Data, y.Data)
	})
}

// heads moves the projections qkv (rows [B·N, (H+2·KVH)·h]) into the heads
// q ([B,H,N,h]), k and v ([B,KVH,N,h], or [B,H,N,h] to repeat each
// key/value head for its group of query heads), normalizes q and k when
// the mechanism wants it, and turns them by RoPE at rope's offset.
func (b block) heads(q, k, v, qkv *tensor.Tensor, rope *nn.RoPE) {
	qc := q.Shape[1] * q.Shape[3]
	kc := (b.qkv.Out - qc) / 2
	p := matrix(qkv, b.qkv.Out)
	qs, ks := p.Slice(0, p.Rows, 0, qc), p.Slice(0, p.Rows, qc, qc+kc)
	if b.qn != nil {
		// The norms read the heads where they lie: their pass is the copy.
		b.qn.ForwardRows(q, headRows("heads", q, qs))
		b.kn.ForwardRows(k, headRows("heads", k, ks))
	} else {
		toHeads(q, qs)
		toHeads(k, ks)
	}
	toHeads(v, p.Slice(0, p.Rows, qc+kc, qc+2*kc))
	if rope != nil {
		rope.Forward(q, q)
		rope.Forward(k, k)
	}
}

// span is the rows [lo, hi) of a pass.
type span struct{ lo, hi int }

// rows returns rows [lo, hi) of t seen as a matrix of cols columns.
func rows(t *tensor.Tensor, lo, hi, cols int) *tensor.Tensor {
	return &tensor.Tensor{Shape: []int{hi - lo, cols}, Data: t.Data[lo*cols : hi*cols]}
}

// params lists the layer's parameters in the order Model.Params documents.
func (l *layer) params() []*nn.Param {
	ps := append(l.ln1.Params(), l.qkv.Params()...)
	if l.qn != nil {
		ps = append(ps, l.qn.Params()...)
	}
	ps = append(ps, l.sketch...)
	ps = append(ps, l.out.Params()...)
	ps = append(ps, l.ln2.Params()...)
	return append(ps, l.ffn.Params()...)
}

func (l *layer) resize(B, N, d, H, h int) {
	for _, t := range []*tensor.Tensor{&l.a1, &l.a2} {
		t.Resize(B, N, d)
	}
	l.ot.Resize(B, N, H*h)
	for _, t := range []*tensor.Tensor{&l.q, &l.k, &l.v} {
		t.Resize(B, H, N, h)
	}
}

// forward updates the residual stream m.x through the layer, layer i of
// m, using m's shared scratch.
func (l *layer) forward(m *Model, i int) {
	b := l.block()
	b.forward(&m.x, &l.a1, &m.qkv, &l.ot, &m.y, &l.a2, nil, func() {
		b.heads(&l.q, &l.k, &l.v, &m.qkv, m.rope)
		l.attn.Forward(&m.o, &l.q, &l.k, &l.v)
		if m.Tap != nil {
			m.Tap(i, &m.qkv, &m.o)
		}
		fromHeads(matrix(&l.ot, l.out.In), &m.o)
	})
}

// backward takes m.x = dL/d(layer output) and leaves dL/d(layer input)
// there, accumulating the parameter gradients.
func (l *layer) backward(m *Model) {
	if l.post {
		// x_out = N₂(a2 + FFN(a2)), a2 = N₁(x_in + out(Attention(…(x_in)))).
		l.ln2.Backward(&m.x, &m.x)
		l.ffn.Backward(&m.y, &m.x)
		add(m.y.Data, m.x.Data)
		l.ln1.Backward(&m.x, &m.y)
	} else {
		// Feed-forward sublayer: x_out = x_mid + FFN(N₂(x_mid)).
		l.ffn.Backward(&m.y, &m.x)
		l.ln2.Backward(&m.y, &m.y)
		add(m.x.Data, m.y.Data)
	}

	// Attention sublayer: x_mid = x_in + out(Attention(…(N₁(x_in)))),
	// or without N₁ (post-normalization). The gradient of the attention
	// output takes the place of its value, which out no longer needs.
	l.out.Backward(&l.ot, &m.x)
	toHeads(&m.o, matrix(&l.ot, l.out.In)) // backward of fromHeads
	l.attn.Backward(&m.dq, &m.dk, &m.dv, &m.o)
	if m.rope != nil {
		m.rope.Backward(&m.dq, &m.dq)
		m.rope.Backward(&m.dk, &m.dk)
	}
	qc := l.out.In
	kc := (l.qkv.Out - qc) / 2
	p := matrix(&m.qkv, l.qkv.Out)
	qs, ks := p.Slice(0, p.Rows, 0, qc), p.Slice(0, p.Rows, qc, qc+kc)
	// The backward of toHeads (or of the norms reading the heads in
	// place); k and v sum their groups.
	switch {
	case l.qn == nil:
		fromHeads(qs, &m.dq)
		fromHeads(ks, &m.dk)
	case kc == qc:
		l.qn.BackwardRows(headRows("backward", &m.dq, qs), &m.dq)
		l.kn.BackwardRows(headRows("backward", &m.dk, ks), &m.dk)
	default: // grouped keys: the heads of a group add up
		l.qn.BackwardRows(headRows("backward", &m.dq, qs), &m.dq)
		l.kn.Backward(&m.dk, &m.dk)
		fromHeads(ks, &m.dk)
	}
	fromHeads(p.Slice(0, p.Rows, qc+kc, qc+2*kc), &m.dv)
	l.qkv.Backward(&m.y, &m.qkv)
	if !l.post {
		l.ln1.Backward(&m.y, &m.y)
	}
	add(m.x.Data, m.y.Data)
}
