package model

import (
	"fmt"

	"github.com/polysketch/polysketch/tensor"
)

// Attention alone. Attention transfer (linearizing a softmax model, see
// package train) trains a layer's new mechanism to reproduce another
// model's attention from that model's own projections, layer by layer:
// AttentionForward runs what lies between a layer's qkv product and its
// output projection (the split into heads, the q/k LayerNorm if the
// mechanism has one, RoPE and the mechanism) on given projections, and
// AttentionBackward takes it back to the parameters on that path, the
// q/k LayerNorm's and the mechanism's own. Nothing else of the model
// runs or changes.

// AttentionForward returns the attention output, [B,H,N,h], of layer i
// for the projections qkv ([B,N,q+2·kv], q, k and v side by side as Tap
// gives them). The output is the model's buffer, overwritten by the next
// call (and by Forward).
func (m *Model) AttentionForward(i int, qkv *tensor.Tensor) *tensor.Tensor {
	if i < 0 || i >= len(m.layers) || qkv.Dims() != 3 || qkv.Shape[2] != m.layers[i].qkv.Out || qkv.Shape[1] > m.cfg.Context {
		panic(fmt.Sprintf("model.AttentionForward: layer %d of %d, projections %v (want [B,N≤%d,%d])", i, len(m.layers), qkv.Shape, m.cfg.Context, m.layers[0].qkv.Out))
	}
	m.resize(qkv.Shape[0], qkv.Shape[1])
	m.haveGrad = false
	l := m.layers[i]
	l.block().heads(&l.q, &l.k, &l.v, qkv, m.rope)
	l.attn.Forward(&m.o, &l.q, &l.k, &l.v)
	return &m.o
}

// AttentionBackward adds the gradient of a loss of the last
// AttentionForward's output, whose gradient do is, to the parameters of
// layer i's attention path: its q/k LayerNorm's and its mechanism's (a
// learned sketch, a temperature). The projections' gradients are dropped.
func (m *Model) AttentionBackward(i int, do *tensor.Tensor) {
	l := m.layers[i]
	if !tensor.SameShape(do, &m.o) {
		panic(fmt.Sprintf("model.AttentionBackward: gradient %v for outputs %v", do.Shape, m.o.Shape))
	}
	l.attn.Backward(&m.dq, &m.dk, &m.dv, do)
	if l.qn == nil {
		return
	}
	if m.rope != nil {
		m.rope.Backward(&m.dq, &m.dq)
		m.rope.Backward(&m.dk, &m.dk)
	}
	l.qn.Backward(&m.dq, &m.dq)
	l.kn.Backward(&m.dk, &m.dk)
}
