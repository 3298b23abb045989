package model

import (
	"errors"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/nn"
)

// SetPrecision chooses the number format of the model's dense products:
// the projections of every layer (q, k, v; attention output; the GLU's
// two), the untied output head, the tied logits, and the networks of
// learned sketches (attention.Rounder). With nn.BF16 they
// round both factors to bfloat16 and accumulate in float32; the
// parameters stay float32 (the master copy the optimizer updates and
// checkpoints save), and SetPrecision makes the bf16 copies of the
// weights that the products read. Call RoundWeights after every change of
// the weights to make them again. The rest of attention, LayerNorms, the
// loss and the embedding lookup stay float32 (see docs/bf16.md for why).
//
// Batches and Decoders take the precision of the model when they are
// made: set it first.
func (m *Model) SetPrecision(p nn.Precision) {
	if m.released {
		panic("model.SetPrecision: the float32 weights were released (ReleaseFP32)")
	}
	m.precision = p
	for _, l := range m.linears() {
		l.BF16 = nil
		if p == nn.BF16 {
			l.BF16 = nn.NewRounded(l.Weight, true, true)
		}
	}
	if m.head == nil {
		m.embed.BF16 = nil
		if p == nn.BF16 {
			m.embed.BF16 = nn.NewRounded(m.embed.Weight, true, true)
		}
	}
	for _, l := range m.layers {
		if r, ok := l.attn.(attention.Rounder); ok {
			r.SetPrecision(p)
		}
	}
}

// Precision returns the precision of the model's dense products.
func (m *Model) Precision() nn.Precision { return m.precision }

// RoundWeights makes the bf16 copies of the weights again from their
// float32 values, in place: in bf16 training, once after every optimizer
// update, so that every micro-batch of a step reads the same copies. It
// does nothing in fp32.
func (m *Model) RoundWeights() {
	if m.precision != nn.BF16 {
		return
	}
	if m.released {
		panic("model.RoundWeights: the float32 weights were released (ReleaseFP32)")
	}
	for _, l := range m.linears() {
		l.BF16.Round(l.Weight)
	}
	if m.head == nil {
		m.embed.BF16.Round(m.embed.Weight)
	}
	for _, l := range m.layers {
		if r, ok := l.attn.(attention.Rounder); ok {
			r.RoundWeights()
		}
	}
}

// ReleaseFP32 turns a bf16 model into one for inference alone: the dense
// weights are kept only as the bf16 copies that x·W reads, their float32
// values and gradients, and the transposed copies of the backward pass,
// are released. The model then runs Forward, Batches and Decoders with
// half the weight bytes per token, but cannot train, round its weights
// again or be saved. The token embedding keeps its float32 table, which
// the lookup reads one row a token. ReleaseFP32 fails on an fp32 model.
func (m *Model) ReleaseFP32() error {
	if m.precision != nn.BF16 {
		return errors.New("release of the float32 weights of a model without bf16 copies (SetPrecision(nn.BF16) first)")
	}
	for _, l := range m.linears() {
		l.BF16.T = nil
		l.Weight.Value.Data, l.Weight.Grad.Data = nil, nil
	}
	if m.head == nil {
		m.embed.BF16.N = nil
	}
	m.released = true
	return nil
}

// linears lists the model's dense layers.
func (m *Model) linears() []*nn.Linear {
	var ls []*nn.Linear
	for _, l := range m.layers {
		in, out := ffnLinears(l.ffn)
		ls = append(ls, l.qkv, l.out, in, out)
	}
	if m.head != nil {
		ls = append(ls, m.head)
	}
	return ls
}
