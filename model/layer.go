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

	// Kept for Backward: the nn layers and the mechanism hold references.
	a1, a2  tensor.Tensor // [B,N,d] outputs of ln1 and ln2, inputs of qkv and ffn
	q, k, v tensor.Tensor // [B,H,N,h] inputs of the mechanism
	ot      tensor.Tensor // [B,N,d] attention output, rows again: the input of out
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

// forward updates the residual stream m.x through the layer, using m's
// shared scratch.
func (l *layer) forward(m *Model) {
	B, N, H, h, d := m.batch, m.length, m.cfg.Heads, m.cfg.HeadSize(), m.cfg.Dim
	l.ln1.Forward(&l.a1, &m.x)
	l.qkv.Forward(&m.qkv, &l.a1)
	toHeads(l.q.Data, m.qkv.Data, 3*d, 0, B, H, N, h)
	toHeads(l.k.Data, m.qkv.Data, 3*d, d, B, H, N, h)
	toHeads(l.v.Data, m.qkv.Data, 3*d, 2*d, B, H, N, h)
	if l.qn != nil {
		l.qn.Forward(&l.q, &l.q)
		l.kn.Forward(&l.k, &l.k)
	}
	m.rope.Forward(&l.q, &l.q)
	m.rope.Forward(&l.k, &l.k)
	l.attn.Forward(&m.o, &l.q, &l.k, &l.v)
	fromHeads(l.ot.Data, d, 0, m.o.Data, B, H, N, h)
	l.out.Forward(&m.y, &l.ot)
	add(m.x.Data, m.y.Data)

	l.ln2.Forward(&l.a2, &m.x)
	l.ffn.Forward(&m.y, &l.a2)
	add(m.x.Data, m.y.Data)
}

// backward takes m.x = dL/d(layer output) and leaves dL/d(layer input)
// there, accumulating the parameter gradients.
func (l *layer) backward(m *Model) {
	B, N, H, h, d := m.batch, m.length, m.cfg.Heads, m.cfg.HeadSize(), m.cfg.Dim
	// GLU sublayer: x_out = x_mid + GLU(LN₂(x_mid)).
	l.ffn.Backward(&m.y, &m.x)
	l.ln2.Backward(&m.y, &m.y)
	add(m.x.Data, m.y.Data)

	// Attention sublayer: x_mid = x_in + out(Attention(…(LN₁(x_in)))).
	l.out.Backward(&m.y, &m.x)
	toHeads(m.o.Data, m.y.Data, d, 0, B, H, N, h) // backward of fromHeads
	l.attn.Backward(&m.dq, &m.dk, &m.dv, &m.o)
	m.rope.Backward(&m.dq, &m.dq)
	m.rope.Backward(&m.dk, &m.dk)
	if l.qn != nil {
		l.qn.Backward(&m.dq, &m.dq)
		l.kn.Backward(&m.dk, &m.dk)
	}
	fromHeads(m.qkv.Data, 3*d, 0, m.dq.Data, B, H, N, h) // backward of toHeads
	fromHeads(m.qkv.Data, 3*d, d, m.dk.Data, B, H, N, h)
	fromHeads(m.qkv.Data, 3*d, 2*d, m.dv.Data, B, H, N, h)
	l.qkv.Backward(&m.y, &m.qkv)
	l.ln1.Backward(&m.y, &m.y)
	add(m.x.Data, m.y.Data)
}
