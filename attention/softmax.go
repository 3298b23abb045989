package attention

import "github.com/polysketch/polysketch/tensor"

// STUB: replaced by the real implementation.
type softmaxAttn struct{ opts Options }

func newSoftmax(o Options) Mechanism { return &softmaxAttn{opts: o} }

func (a *softmaxAttn) Kind() Kind                             { return Softmax }
func (a *softmaxAttn) Forward(o, q, k, v *tensor.Tensor)      { panic("not implemented") }
func (a *softmaxAttn) Backward(dq, dk, dv, do *tensor.Tensor) { panic("not implemented") }
