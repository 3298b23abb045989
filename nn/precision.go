package nn

import (
	"fmt"

	"github.com/polysketch/polysketch/blas"
)

// Precision is the number format of the inputs of a layer's matrix
// products. Products always accumulate in float32, and everything else a
// layer computes (norms, activations, the loss) stays float32.
type Precision uint8

const (
	// FP32 multiplies float32 values (blas.Sgemm).
	FP32 Precision = iota
	// BF16 rounds both factors of a product to bfloat16 and accumulates
	// in float32 (blas.GemmBF16): weights through copies made once per
	// change of the weights (Rounded), activations while they are packed.
	BF16
)

// Precisions lists the names ParsePrecision accepts, in order.
var Precisions = []string{"fp32", "bf16"}

// String returns "fp32" or "bf16".
func (p Precision) String() string {
	if int(p) < len(Precisions) {
		return Precisions[p]
	}
	return fmt.Sprintf("Precision(%d)", uint8(p))
}

// ParsePrecision returns the precision named s ("fp32" or "bf16"; the
// empty string, as in configurations written before precisions existed,
// is fp32).
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "fp32", "":
		return FP32, nil
	case "bf16":
		return BF16, nil
	}
	return FP32, fmt.Errorf("precision %q: want fp32 or bf16", s)
}

// Rounded holds the bfloat16 copies of a weight matrix W that the bf16
// products of a layer read in place of its float32 values: W as stored
// (for x·W), and Wᵀ (for dy·Wᵀ, the input gradient of training). Either is
// nil when no product needs it. The float32 values stay the master copy
// that the optimizer updates; Round makes the copies again from them.
type Rounded struct {
	N *blas.PackedBF16 // op(B) = W
	T *blas.PackedBF16 // op(B) = Wᵀ
}

// NewRounded returns bf16 copies of p's value, a matrix: as stored if
// stored, transposed if transposed.
func NewRounded(p *Param, stored, transposed bool) *Rounded {
	w := matrix(p)
	r := &Rounded{}
	if stored {
		r.N = blas.PackBF16(blas.NoTrans, w)
	}
	if transposed {
		r.T = blas.PackBF16(blas.Trans, w)
	}
	return r
}

// Round makes the copies again from p's current value, in place.
func (r *Rounded) Round(p *Param) {
	w := matrix(p)
	if r.N != nil {
		r.N.Update(blas.NoTrans, w)
	}
	if r.T != nil {
		r.T.Update(blas.Trans, w)
	}
}

// Bytes returns the memory the copies take.
func (r *Rounded) Bytes() int {
	n := 0
	for _, p := range []*blas.PackedBF16{r.N, r.T} {
		if p != nil {
			n += p.Bytes()
		}
	}
	return n
}

// form returns the copy of op(W), panicking when the copies were made
// without it (for inference alone, say).
func (r *Rounded) form(op string, t blas.Transpose) *blas.PackedBF16 {
	p := r.N
	if t == blas.Trans {
		p = r.T
	}
	if p == nil {
		panic(fmt.Sprintf("nn.%s: no bf16 copy of the weight in form %c (the copies were made for another use)", op, t))
	}
	return p
}

// matrix returns the value of a 2-D parameter as a blas.General.
func matrix(p *Param) blas.General {
	if p.Value.Dims() != 2 {
		panic(fmt.Sprintf("nn: bf16 copies of %s of shape %v: want a matrix", p.Name, p.Value.Shape))
	}
	return blas.NewGeneral(p.Value.Shape[0], p.Value.Shape[1], p.Value.Data)
}

// MarshalText returns the precision's name, for configurations in JSON.
func (p Precision) MarshalText() ([]byte, error) {
	if int(p) >= len(Precisions) {
		return nil, fmt.Errorf("precision %d: want fp32 or bf16", uint8(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText parses a name ParsePrecision accepts.
func (p *Precision) UnmarshalText(b []byte) error {
	q, err := ParsePrecision(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}
