package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// ids returns n token ids below vocab with repeats, so that Backward must
// sum several rows into one.
func ids(rng *rand.Rand, n, vocab int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.IntN(vocab))
	}
	if n > 2 {
		out[n-1] = out[0]
	}
	return out
}

func embeddingCase(rng *rand.Rand, s size) *gradCase {
	const vocab = 11
	e := NewEmbedding("emb", vocab, s.dim, rng)
	tok := ids(rng, s.rows, vocab)
	c := &gradCase{params: e.Params(), out: tensor.New(s.rows, s.dim)}
	c.forward = func() { e.Forward(c.out, tok) }
	c.backward = func(dy *tensor.Tensor) { e.Backward(dy) }
	return c
}

// tiedCase uses one table for the input lookup and the output projection:
// out = [lookup(ids) | h·Eᵀ] flattened, so the table's gradient sums both.
func tiedCase(rng *rand.Rand, s size) *gradCase { return tiedCaseAt(rng, s, FP32) }

// tiedCaseAt is tiedCase with the products of the projection at
// precision p.
func tiedCaseAt(rng *rand.Rand, s size, p Precision) *gradCase {
	const vocab = 13
	e := NewEmbedding("emb", vocab, s.dim, rng)
	tok := ids(rng, s.rows, vocab)
	h := randTensor(rng, 1, 2, s.rows/2, s.dim)
	na := s.rows * s.dim
	out := tensor.New(na + s.rows*vocab)
	emb := tensor.From(out.Data[:na], s.rows, s.dim)
	logits := tensor.From(out.Data[na:], 2, s.rows/2, vocab)
	c := &gradCase{
		params: e.Params(), inputs: []*tensor.Tensor{h},
		dinputs: []*tensor.Tensor{tensor.New(h.Shape...)},
		out:     out,
		bf16:    p == BF16,
	}
	if p == BF16 {
		e.BF16 = NewRounded(e.Weight, true, true)
	}
	c.forward = func() {
		if e.BF16 != nil {
			e.BF16.Round(e.Weight) // the finite differences change E
		}
		e.Forward(emb, tok)
		e.Logits(logits, h)
	}
	c.backward = func(dy *tensor.Tensor) {
		e.Backward(tensor.From(dy.Data[:na], s.rows, s.dim))
		e.LogitsBackward(c.dinputs[0], tensor.From(dy.Data[na:], 2, s.rows/2, vocab))
	}
	return c
}

func TestEmbeddingForward(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 1))
	e := NewEmbedding("emb", 7, 4, rng)
	tok := []int32{3, 0, 6, 3}
	y := tensor.New(2, 2, 4)
	e.Forward(y, tok)
	for i, id := range tok {
		for j := range 4 {
			if y.Data[i*4+j] != e.Weight.Value.Data[int(id)*4+j] {
				t.Fatalf("row %d (id %d) differs from the table", i, id)
			}
		}
	}
	h := randTensor(rng, 1, 3, 4)
	logits := tensor.New(3, 7)
	e.Logits(logits, h)
	for r := range 3 {
		for v := range 7 {
			var want float64
			for j := range 4 {
				want += float64(h.Data[r*4+j]) * float64(e.Weight.Value.Data[v*4+j])
			}
			if got := float64(logits.Data[r*7+v]); math.Abs(got-want) > 1e-5 {
				t.Errorf("logits[%d,%d] = %g, want %g", r, v, got, want)
			}
		}
	}
}

func TestEmbeddingRejectsBadIDs(t *testing.T) {
	e := NewEmbedding("emb", 5, 2, rand.New(rand.NewPCG(3, 2)))
	for _, id := range []int32{-1, 5} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("id %d: no panic", id)
				}
			}()
			e.Forward(tensor.New(1, 2), []int32{id})
		}()
	}
}
