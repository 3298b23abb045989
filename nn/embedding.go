package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// Embedding maps token ids to rows of a [Vocab, Dim] table. The same table
// can serve as the output projection (weight tying): Logits computes
// h·Eᵀ, and its backward pass accumulates into the same gradient as the
// lookup's.
type Embedding struct {
	Vocab, Dim int
	Weight     *Param // [Vocab, Dim], not decayed
	// BF16, if not nil, makes the products of the tied projection bf16
	// (see Precision): h·Eᵀ and dlogits·E read these copies of E, and
	// dlogitsᵀ·h rounds both while packing them. The lookup always
	// copies the float32 rows.
	BF16 *Rounded

	ids []int32        // ids of the last Forward, by reference
	h   *tensor.Tensor // input of the last Logits, by reference
}

// NewEmbedding returns an embedding table called name+".weight", drawn from
// N(0, 1/Dim): rows of unit expected squared norm, so that tied logits of a
// unit-variance (LayerNorm) input start with unit variance. A model that
// wants larger input embeddings scales them itself (or re-initializes the
// table with Param.InitNormal).
func NewEmbedding(name string, vocab, dim int, rng *rand.Rand) *Embedding {
	e := &Embedding{Vocab: vocab, Dim: dim, Weight: NewParam(name+".weight", false, vocab, dim)}
	e.Weight.InitNormal(rng, 1/math.Sqrt(float64(dim)))
	return e
}

// Params lists the table.
func (e *Embedding) Params() []*Param { return []*Param{e.Weight} }

// Forward copies row ids[i] of the table into row i of y, which has
// len(ids) rows of Dim. It keeps a reference to ids for Backward. An id
// outside [0, Vocab) panics.
func (e *Embedding) Forward(y *tensor.Tensor, ids []int32) {
	checkRows("Embedding.Forward", "y", y, len(ids), e.Dim)
	for i, id := range ids {
		if id < 0 || int(id) >= e.Vocab {
			panic(fmt.Sprintf("nn.Embedding.Forward: id %d at position %d outside vocabulary of %d", id, i, e.Vocab))
		}
	}
	e.ids = ids
	d := e.Dim
	forRows(len(ids), d, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			id := int(ids[i])
			copy(y.Data[i*d:(i+1)*d], e.Weight.Value.Data[id*d:(id+1)*d])
		}
	})
}

// embedCols is the width of the column strips that Backward hands to
// separate goroutines.
const embedCols = 64

// Backward adds row i of dy to row ids[i] of the table's gradient, for the
// ids of the last Forward. Tokens are added in order within each strip of
// columns, so repeated ids sum in a fixed order.
func (e *Embedding) Backward(dy *tensor.Tensor) {
	d, ids := e.Dim, e.ids
	checkRows("Embedding.Backward", "dy", dy, len(ids), d)
	g := e.Weight.Grad.Data
	parallel.For((d+embedCols-1)/embedCols, func(s int) {
		lo, hi := s*embedCols, min((s+1)*embedCols, d)
		for i, id := range ids {
			row := int(id) * d
			vec.Add(g[row+lo:row+hi], g[row+lo:row+hi], dy.Data[i*d+lo:i*d+hi])
		}
	})
}

// Logits computes logits = h·Eᵀ for h of shape [..., Dim] into logits of
// shape [..., Vocab] with the same rows: the output projection tied to the
// table. It keeps a reference to h for LogitsBackward.
func (e *Embedding) Logits(logits, h *tensor.Tensor) {
	rows := rowsOf("Embedding.Logits", "h", h, e.Dim)
	checkRows("Embedding.Logits", "logits", logits, rows, e.Vocab)
	e.h = h
	if e.BF16 != nil {
		blas.GemmBF16(blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(rows, e.Dim, h.Data), e.BF16.form("Embedding.Logits", blas.Trans), 0, blas.NewGeneral(rows, e.Vocab, logits.Data))
		return
	}
	blas.Sgemm(blas.NoTrans, blas.Trans, 1, blas.NewGeneral(rows, e.Dim, h.Data), blas.NewGeneral(e.Vocab, e.Dim, e.Weight.Value.Data), 0, blas.NewGeneral(rows, e.Vocab, logits.Data))
}

// LogitsBackward takes dlogits for the logits of the last Logits call,
// writes dh = dlogits·E (unless dh is nil) and adds dlogitsᵀ·h to the
// table's gradient. dh may share storage with h, not with dlogits.
func (e *Embedding) LogitsBackward(dh, dlogits *tensor.Tensor) {
	if e.h == nil {
		panic("nn.Embedding.LogitsBackward: called before Logits")
	}
	rows := e.h.Len() / e.Dim
	checkRows("Embedding.LogitsBackward", "dlogits", dlogits, rows, e.Vocab)
	if e.BF16 != nil {
		blas.GemmBF16(blas.Trans, blas.NoTrans, 1, blas.NewGeneral(rows, e.Vocab, dlogits.Data), blas.NewGeneral(rows, e.Dim, e.h.Data), 1, blas.NewGeneral(e.Vocab, e.Dim, e.Weight.Grad.Data))
	} else {
		blas.Sgemm(blas.Trans, blas.NoTrans, 1, blas.NewGeneral(rows, e.Vocab, dlogits.Data), blas.NewGeneral(rows, e.Dim, e.h.Data), 1, blas.NewGeneral(e.Vocab, e.Dim, e.Weight.Grad.Data))
	}
	if dh != nil {
		checkRows("Embedding.LogitsBackward", "dh", dh, rows, e.Dim)
		if e.BF16 != nil {
			blas.GemmBF16(blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(rows, e.Vocab, dlogits.Data), e.BF16.form("Embedding.LogitsBackward", blas.NoTrans), 0, blas.NewGeneral(rows, e.Dim, dh.Data))
			return
		}
		blas.Sgemm(blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(rows, e.Vocab, dlogits.Data), blas.NewGeneral(e.Vocab, e.Dim, e.Weight.Value.Data), 0, blas.NewGeneral(rows, e.Dim, dh.Data))
	}
}
