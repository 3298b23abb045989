package attention

import "github.com/polysketch/polysketch/tensor"

// STUB: replaced by the real implementation.
type polynomialAttn struct{ opts Options }

func newPolynomial(o Options) Mechanism { return &polynomialAttn{opts: o} }

func (a *polynomialAttn) Kind() Kind                             { return Polynomial }
func (a *polynomialAttn) Forward(o, q, k, v *tensor.Tensor)      { panic("not implemented") }
func (a *polynomialAttn) Backward(dq, dk, dv, do *tensor.Tensor) { panic("not implemented") }
