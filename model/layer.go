package model

import (
	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
)

// layer is one pre-LayerNorm Transformer++ block: an attention sublayer and
// a GLU sublayer, each added to the residual stream.
type layer struct {
	ln1    *nn.LayerNorm
	qkv    *nn.Linear    // d → 3d: q, k, v side by side
	qn, kn *nn.LayerNorm // one LayerNorm over each head's h features, for q and (shared) k; nil for softmax
	attn   attention.Mechanism
	sketch []*nn.Param // the mechanism's parameters (learned sketches), renamed into the layer
	out    *nn.Linear  // d → d
	ln2    *nn.LayerNorm
	ffn    *nn.GLU
	post   bool // post-LayerNorm (Config.PostNorm)

	// Kept for Backward: the nn layers and the mechanism hold references.
	a1, a2  tensor.Tensor // [B,N,d] outputs of ln1 and ln2, inputs of qkv and ffn
	q, k, v tensor.Tensor // [B,H,N,h] inputs of the mechanism
	ot      tensor.Tensor // [B,N,d] attention output, rows again: the input of out
}

// block is the computation of a layer, written once for training
// (layer.forward) and decoding (Batch.Step): the nn layers it runs, which
// are the layer's own in training and copies sharing their parameters in
// decoding, so that decoding leaves the training state alone.
type block struct {
	ln1, qn, kn, ln2 *nn.LayerNorm
	qkv, out         *nn.Linear
	ffn              *nn.GLU
	post             bool // LayerNorm after each residual sum (Config.PostNorm)
}

// block returns the layer's own nn layers as a block.
func (l *layer) block() block {
	return block{ln1: l.ln1, qn: l.qn, kn: l.kn, ln2: l.ln2, qkv: l.qkv, out: l.out, ffn: l.ffn, post: l.post}
}

// shared returns a block with the layer's parameters and state of its own.
func (l *layer) shared() block {
	b := block{ln1: l.ln1.Share(), ln2: l.ln2.Share(), qkv: shareLinear(l.qkv), out: shareLinear(l.out), post: l.post}
	b.ffn = &nn.GLU{Dim: l.ffn.Dim, Hidden: l.ffn.Hidden, In: shareLinear(l.ffn.In), Out: shareLinear(l.ffn.Out)}
	if l.qn != nil {
		b.qn, b.kn = l.qn.Share(), l.qn.Share()
	}
	return b
}

// forward updates the residual stream x (rows of d features) through the
// block:
//
//	x += out(mix(qkv(LN₁(x))));  x += GLU(LN₂(x))
//
// or with post-LayerNorm (the encoder of BERT and of the thesis's §1.2.1)
//
//	x = LN₁(x + out(mix(qkv(x))));  x = LN₂(x + GLU(x))
//
// a1, qkv, ot, y and a2 receive the intermediate rows: the input of qkv
// (LN₁(x), or a copy of x), the projections [rows,3d], the attention
// output [rows,d] that mix writes into ot from qkv, the sublayer outputs,
// and the input of the GLU (LN₂(x), or the first LayerNorm's output). All
// but the attention acts on each row alone. With spans the dense layers
// run on each span of rows as a product of its own, so that a row meets
// the same matrix kernels however many rows share the pass (see Batch);
// with none, on all rows at once.
func (b block) forward(x, a1, qkv, ot, y, a2 *tensor.Tensor, spans []span, mix func()) {
	_, d := x.Matrix()
	each := func(f func(x, a1, qkv, ot, y, a2 *tensor.Tensor)) {
		if len(spans) == 0 {
			f(x, a1, qkv, ot, y, a2)
			return
		}
		for _, s := range spans {
			lo, hi := s.lo, s.hi
			f(rows(x, lo, hi, d), rows(a1, lo, hi, d), rows(qkv, lo, hi, 3*d), rows(ot, lo, hi, d), rows(y, lo, hi, d), rows(a2, lo, hi, d))
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

// heads moves the projections qkv (rows [B·N, 3d]) into the heads q, k, v
// ([B,H,N,h]), normalizes q and k when the mechanism wants it, and turns
// them by RoPE at rope's offset.
func (b block) heads(q, k, v, qkv *tensor.Tensor, rope *nn.RoPE) {
	d := q.Shape[1] * q.Shape[3]
	p := matrix(qkv, 3*d)
	toHeads(q, p.Slice(0, p.Rows, 0, d))
	toHeads(k, p.Slice(0, p.Rows, d, 2*d))
	toHeads(v, p.Slice(0, p.Rows, 2*d, 3*d))
	if b.qn != nil {
		b.qn.Forward(q, q)
		b.kn.Forward(k, k)
	}
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
	for _, t := range []*tensor.Tensor{&l.a1, &l.a2, &l.ot} {
		t.Resize(B, N, d)
	}
	for _, t := range []*tensor.Tensor{&l.q, &l.k, &l.v} {
		t.Resize(B, H, N, h)
	}
}

// forward updates the residual stream m.x through the layer, layer i of
// m, using m's shared scratch.
func (l *layer) forward(m *Model, i int) {
	d := m.cfg.Dim
	b := l.block()
	b.forward(&m.x, &l.a1, &m.qkv, &l.ot, &m.y, &l.a2, nil, func() {
		b.heads(&l.q, &l.k, &l.v, &m.qkv, m.rope)
		l.attn.Forward(&m.o, &l.q, &l.k, &l.v)
		if m.Tap != nil {
			m.Tap(i, &m.qkv, &m.o)
		}
		fromHeads(matrix(&l.ot, d), &m.o)
	})
}

// backward takes m.x = dL/d(layer output) and leaves dL/d(layer input)
// there, accumulating the parameter gradients.
func (l *layer) backward(m *Model) {
	d := m.cfg.Dim
	if l.post {
		// x_out = LN₂(a2 + GLU(a2)), a2 = LN₁(x_in + out(Attention(…(x_in)))).
		l.ln2.Backward(&m.x, &m.x)
		l.ffn.Backward(&m.y, &m.x)
		add(m.y.Data, m.x.Data)
		l.ln1.Backward(&m.x, &m.y)
	} else {
		// GLU sublayer: x_out = x_mid + GLU(LN₂(x_mid)).
		l.ffn.Backward(&m.y, &m.x)
		l.ln2.Backward(&m.y, &m.y)
		add(m.x.Data, m.y.Data)
	}

	// Attention sublayer: x_mid = x_in + out(Attention(…(LN₁(x_in)))),
	// or without LN₁ (post-LayerNorm).
	l.out.Backward(&m.y, &m.x)
	toHeads(&m.o, matrix(&m.y, d)) // backward of fromHeads
	l.attn.Backward(&m.dq, &m.dk, &m.dv, &m.o)
	if m.rope != nil {
		m.rope.Backward(&m.dq, &m.dq)
		m.rope.Backward(&m.dk, &m.dk)
	}
	if l.qn != nil {
		l.qn.Backward(&m.dq, &m.dq)
		l.kn.Backward(&m.dk, &m.dk)
	}
	p := matrix(&m.qkv, 3*d)
	fromHeads(p.Slice(0, p.Rows, 0, d), &m.dq) // backward of toHeads
	fromHeads(p.Slice(0, p.Rows, d, 2*d), &m.dk)
	fromHeads(p.Slice(0, p.Rows, 2*d, 3*d), &m.dv)
	l.qkv.Backward(&m.y, &m.qkv)
	if !l.post {
		l.ln1.Backward(&m.y, &m.y)
	}
	add(m.x.Data, m.y.Data)
}
