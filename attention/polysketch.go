package attention

import "github.com/polysketch/polysketch/tensor"

// STUB: replaced by the real implementation.
type polysketchAttn struct{ opts Options }

func newPolysketch(o Options) Mechanism { return &polysketchAttn{opts: o} }

func (a *polysketchAttn) Kind() Kind                             { return Polysketch }
func (a *polysketchAttn) Forward(o, q, k, v *tensor.Tensor)      { panic("not implemented") }
func (a *polysketchAttn) Backward(dq, dk, dv, do *tensor.Tensor) { panic("not implemented") }
