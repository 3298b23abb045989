package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/tensor"
)

// decodeTol bounds the difference between decoded and full-forward logits,
// relative to the largest logit; measured differences are below 4e-7.
const decodeTol = 1e-5

// decodeLogits steps a fresh decoder of m through tokens ([B,N]) and
// returns the logits of every step as [B,N,V].
func decodeLogits(t *testing.T, dec *Decoder, tokens []int32, B, N, V int) *tensor.Tensor {
	t.Helper()
	out := tensor.New(B, N, V)
	step := make([]int32, B)
	for n := range N {
		for b := range B {
			step[b] = tokens[b*N+n]
		}
		if dec.Len() != n {
			t.Fatalf("Len() = %d before position %d", dec.Len(), n)
		}
		logits, err := dec.Step(step)
		if err != nil {
			t.Fatalf("position %d: %v", n, err)
		}
		for b := range B {
			copy(out.Data[(b*N+n)*V:(b*N+n+1)*V], logits.Data[b*V:(b+1)*V])
		}
	}
	return out
}

// worst returns max |a−b| relative to max |b|, and the position (index
// along N) where it occurs.
func worst(a, b *tensor.Tensor) (float64, int) {
	N, V := b.Shape[1], b.Shape[2]
	var scale float64
	for _, x := range b.Data {
		scale = math.Max(scale, math.Abs(float64(x)))
	}
	w, at := 0.0, -1
	for i := range b.Data {
		if d := math.Abs(float64(a.Data[i])-float64(b.Data[i])) / scale; d > w || at < 0 {
			w, at = d, i/V%N
		}
	}
	return w, at
}

// TestDecoderMatchesForward decodes sequences token by token and compares
// every step's logits with those of Forward over the whole sequence, for
// every mechanism; polysketch over sequences of 13 and 37 tokens in blocks
// of 4 (or 5), so across many block boundaries and ending mid-block.
func TestDecoderMatchesForward(t *testing.T) {
	const B = 2
	for _, c := range testCases() {
		for _, N := range []int{13, 37} {
			if N > 13 && c.cfg.Attention != attention.Polysketch {
				continue
			}
			t.Run(fmt.Sprintf("%s/N%d", c.name, N), func(t *testing.T) {
				m := mustNew(t, c.cfg)
				perturb(m, 7)
				tokens := randomTokens(rand.New(rand.NewPCG(5, uint64(N))), B*N, c.cfg.Vocab)
				want := m.Forward(tokens, B, N).Clone()
				dec, err := m.NewDecoder(B)
				if err != nil {
					t.Fatal(err)
				}
				got := decodeLogits(t, dec, tokens, B, N, c.cfg.Vocab)
				if d, n := worst(got, want); d > decodeTol {
					t.Errorf("N=%d: decoded logits at position %d differ from Forward by %.3g of the largest logit, want ≤ %g", N, n, d, decodeTol)
				}
				// Reset and decode again: bit for bit the same.
				dec.Reset()
				again := decodeLogits(t, dec, tokens, B, N, c.cfg.Vocab)
				for i := range got.Data {
					if again.Data[i] != got.Data[i] {
						t.Fatalf("after Reset, logit %d is %v, first time %v", i, again.Data[i], got.Data[i])
					}
				}
			})
		}
	}
}

// TestDecoderSharp makes sure decoded logits could tell a polysketch model
// with blocks of 4 from the same weights with blocks of 3 or 5, or with
// sketched local blocks: their logits differ by far more than decodeTol.
func TestDecoderSharp(t *testing.T) {
	const B, N = 2, 13
	c := tiny(attention.Polysketch)
	m := mustNew(t, c)
	perturb(m, 7)
	tokens := randomTokens(rand.New(rand.NewPCG(5, N)), B*N, c.Vocab)
	want := m.Forward(tokens, B, N).Clone()
	for _, f := range []func(c *Config){
		func(c *Config) { c.Block = 3 },
		func(c *Config) { c.Block = 5 },
		func(c *Config) { c.Local = false },
	} {
		c2 := c
		f(&c2)
		m2 := mustNew(t, c2)
		for i, p := range m2.Params() {
			p.Value.CopyFrom(m.Params()[i].Value)
		}
		if d, _ := worst(m2.Forward(tokens, B, N), want); d < 100*decodeTol {
			t.Errorf("%+v: logits differ by only %.3g from the model's", c2, d)
		}
	}
}

// TestDecoderLimit: KV-cache decoders stop at Context; polysketch goes on.
func TestDecoderLimit(t *testing.T) {
	for _, kind := range attention.Kinds {
		c := tiny(kind)
		c.Context = 5
		m := mustNew(t, c)
		dec, err := m.NewDecoder(1)
		if err != nil {
			t.Fatal(err)
		}
		wantLimit := c.Context
		if kind == attention.Polysketch {
			wantLimit = 0
		}
		if dec.Limit() != wantLimit {
			t.Errorf("%s: Limit() = %d, want %d", kind, dec.Limit(), wantLimit)
		}
		for n := range 3 * c.Context {
			_, err := dec.Step([]int32{int32(n % c.Vocab)})
			if full := wantLimit > 0 && n >= wantLimit; full != (err != nil) {
				t.Errorf("%s: step at position %d: error %v", kind, n, err)
				break
			}
		}
	}
}

func TestDecoderErrors(t *testing.T) {
	m := mustNew(t, tiny(attention.Polysketch))
	if _, err := m.NewDecoder(0); err == nil {
		t.Error("NewDecoder(0): no error")
	}
	dec, err := m.NewDecoder(2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tokens := range [][]int32{{1}, {1, 2, 3}, {1, 11}, {-1, 0}} {
		if _, err := dec.Step(tokens); err == nil {
			t.Errorf("Step(%v): no error", tokens)
		}
	}
	if dec.Len() != 0 {
		t.Errorf("failed steps advanced the position to %d", dec.Len())
	}
}

// TestDecoderLeavesModelAlone decodes between Loss and Backward: the
// gradients must be those of Loss alone, bit for bit.
func TestDecoderLeavesModelAlone(t *testing.T) {
	const B, N = 2, 9
	c := tiny(attention.Polynomial)
	rng := rand.New(rand.NewPCG(3, 3))
	tokens, targets := randomTokens(rng, B*N, c.Vocab), randomTokens(rng, B*N, c.Vocab)
	grads := func(decode bool) [][]float32 {
		m := mustNew(t, c)
		m.Loss(tokens, targets, B, N)
		if decode {
			dec, err := m.NewDecoder(B)
			if err != nil {
				t.Fatal(err)
			}
			decodeLogits(t, dec, tokens, B, N, c.Vocab)
		}
		m.Backward()
		var gs [][]float32
		for _, p := range m.Params() {
			gs = append(gs, p.Grad.Data)
		}
		return gs
	}
	want, got := grads(false), grads(true)
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("gradient %d element %d: %v after decoding, %v without", i, j, got[i][j], want[i][j])
			}
		}
	}
}
