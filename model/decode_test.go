package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
)

// decodeTol bounds the difference between decoded (token by token or
// prefilled) and full-forward logits, relative to the largest logit;
// measured differences are below 6e-7.
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
			if N > 13 && c.cfg.Properties().ContextLimit {
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
	c := tiny("polysketch")
	m := mustNew(t, c)
	perturb(m, 7)
	tokens := randomTokens(rand.New(rand.NewPCG(5, N)), B*N, c.Vocab)
	want := m.Forward(tokens, B, N).Clone()
	for _, f := range []func(c *attention.PolysketchConfig){
		func(c *attention.PolysketchConfig) { c.Block = 3 },
		func(c *attention.PolysketchConfig) { c.Block = 5 },
		func(c *attention.PolysketchConfig) { c.Local = false },
	} {
		c2 := with(c, f)
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
	for _, kind := range attention.Names() {
		c := tiny(kind)
		c.Context = 5
		m := mustNew(t, c)
		dec, err := m.NewDecoder(1)
		if err != nil {
			t.Fatal(err)
		}
		wantLimit := c.Context
		if !c.Properties().ContextLimit {
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
	m := mustNew(t, tiny("polysketch"))
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
	c := tiny("polynomial")
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

// recorded is the logits of some positions of B sequences, [B,N,V], with
// which positions were recorded.
type recorded struct {
	logits *tensor.Tensor
	at     []bool // [N]
}

func newRecorded(B, N, V int) recorded {
	return recorded{tensor.New(B, N, V), make([]bool, N)}
}

// put records the logits ([B,V]) of position n.
func (r recorded) put(n int, logits *tensor.Tensor) {
	B, N, V := r.logits.Shape[0], r.logits.Shape[1], r.logits.Shape[2]
	for b := range B {
		copy(r.logits.Data[(b*N+n)*V:(b*N+n+1)*V], logits.Data[b*V:(b+1)*V])
	}
	r.at[n] = true
}

// worst returns max |r−want| over the recorded positions, relative to
// the largest |want| of the whole sequence, and the position where it
// occurs; -1 if nothing was recorded.
func (r recorded) worst(want *tensor.Tensor) (float64, int) {
	B, N, V := want.Shape[0], want.Shape[1], want.Shape[2]
	var scale float64
	for _, x := range want.Data {
		scale = math.Max(scale, math.Abs(float64(x)))
	}
	w, at := 0.0, -1
	for b := range B {
		for n := range N {
			if !r.at[n] {
				continue
			}
			for i := (b*N + n) * V; i < (b*N+n+1)*V; i++ {
				if d := math.Abs(float64(r.logits.Data[i])-float64(want.Data[i])) / scale; d > w || at < 0 {
					w, at = d, n
				}
			}
		}
	}
	return w, at
}

// prompt returns positions [lo, hi) of each of the B sequences of tokens
// ([B,N]) as a [B, hi−lo] prompt.
func prompt(tokens []int32, B, N, lo, hi int) []int32 {
	var p []int32
	for b := range B {
		p = append(p, tokens[b*N+lo:b*N+hi]...)
	}
	return p
}

// TestPrefill prefills a prompt, then steps through the rest of the
// sequence, and compares the logits of the prompt's last position and of
// every step with Forward over the whole sequence and with decoding token
// by token, for every mechanism; with passes of 1 to 256 positions, so
// that polysketch's blocks of 4 (or 5) are crossed by passes, end mid-pass
// and start mid-pass; and prompts of 1 token to the whole sequence.
func TestPrefill(t *testing.T) {
	const B = 2
	for _, c := range testCases() {
		for _, N := range []int{13, 37} {
			if N > 13 && c.cfg.Properties().ContextLimit {
				continue
			}
			t.Run(fmt.Sprintf("%s/N%d", c.name, N), func(t *testing.T) {
				V := c.cfg.Vocab
				m := mustNew(t, c.cfg)
				perturb(m, 7)
				tokens := randomTokens(rand.New(rand.NewPCG(5, uint64(N))), B*N, V)
				want := m.Forward(tokens, B, N).Clone()
				dec, err := m.NewDecoder(B)
				if err != nil {
					t.Fatal(err)
				}
				single := decodeLogits(t, dec, tokens, B, N, V)
				for _, chunk := range []int{1, 3, 4, 5, 8, 256} {
					for _, P := range []int{1, 6, 11, N} {
						dec.Reset()
						dec.chunk = chunk
						got := newRecorded(B, N, V)
						logits, err := dec.Prefill(prompt(tokens, B, N, 0, P))
						if err != nil {
							t.Fatalf("prefill of %d: %v", P, err)
						}
						if dec.Len() != P {
							t.Fatalf("Len() = %d after a prompt of %d", dec.Len(), P)
						}
						got.put(P-1, logits)
						for n := P; n < N; n++ {
							if logits, err = dec.Step(prompt(tokens, B, N, n, n+1)); err != nil {
								t.Fatalf("step at %d after a prompt of %d: %v", n, P, err)
							}
							got.put(n, logits)
						}
						if d, n := got.worst(want); d > decodeTol {
							t.Errorf("passes of %d, prompt of %d: logits at position %d differ from Forward by %.3g of the largest logit, want ≤ %g", chunk, P, n, d, decodeTol)
						}
						if d, n := got.worst(single); d > decodeTol {
							t.Errorf("passes of %d, prompt of %d: logits at position %d differ from token-by-token decoding by %.3g, want ≤ %g", chunk, P, n, d, decodeTol)
						}
					}
				}
			})
		}
	}
}

// TestPrefillPieces prefills a sequence in pieces of changing lengths,
// each cut into passes of 4 positions, and compares the logits at the end
// of every piece with Forward; a second run after Reset must give the
// same bits.
func TestPrefillPieces(t *testing.T) {
	const B, N = 2, 37
	pieces := []int{3, 1, 5, 9, 2}
	for _, c := range testCases() {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Context = N
			V := cfg.Vocab
			m := mustNew(t, cfg)
			perturb(m, 7)
			tokens := randomTokens(rand.New(rand.NewPCG(6, N)), B*N, V)
			want := m.Forward(tokens, B, N).Clone()
			dec, err := m.NewDecoder(B)
			if err != nil {
				t.Fatal(err)
			}
			dec.chunk = 4
			run := func() recorded {
				dec.Reset()
				got := newRecorded(B, N, V)
				for at, i := 0, 0; at < N; i++ {
					n := min(pieces[i%len(pieces)], N-at)
					logits, err := dec.Prefill(prompt(tokens, B, N, at, at+n))
					if err != nil {
						t.Fatalf("piece [%d, %d): %v", at, at+n, err)
					}
					at += n
					got.put(at-1, logits)
				}
				return got
			}
			got := run()
			if d, n := got.worst(want); d > decodeTol {
				t.Errorf("logits at position %d differ from Forward by %.3g of the largest logit, want ≤ %g", n, d, decodeTol)
			}
			again := run()
			for i := range got.logits.Data {
				if again.logits.Data[i] != got.logits.Data[i] {
					t.Fatalf("after Reset, logit %d is %v, first time %v", i, again.logits.Data[i], got.logits.Data[i])
				}
			}
		})
	}
}

// TestPrefillDeterminism requires prefilled logits to be bitwise identical
// for every GOMAXPROCS of parallel.TestThreads, on a model large enough for the parallel
// paths (GEMM tiles, heads of the attention decoders) to engage.
func TestPrefillDeterminism(t *testing.T) {
	const B, N = 2, 100
	for _, kind := range attention.Names() {
		t.Run(kind, func(t *testing.T) {
			spec := kind
			if kind == "polysketch" {
				spec += ":learned"
			}
			c := Config{Vocab: 256, Dim: 64, Layers: 2, Heads: 4, Context: N, Attention: small(spec, 16), Seed: 3}
			m := mustNew(t, c)
			tokens := randomTokens(rand.New(rand.NewPCG(4, 4)), B*N, c.Vocab)
			run := func(procs int) []float32 {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				dec, err := m.NewDecoder(B)
				if err != nil {
					t.Fatal(err)
				}
				logits, err := dec.Prefill(tokens)
				if err != nil {
					t.Fatal(err)
				}
				return logits.Data
			}
			want := run(1)
			for _, procs := range parallel.TestThreads[1:] {
				got := run(procs)
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("GOMAXPROCS=%d: logit %d is %v, with 1 thread %v", procs, i, got[i], want[i])
					}
				}
			}
		})
	}
}

// TestPrefillLimit: KV-cache decoders take prompts up to Context and no
// further, consuming nothing from a prompt that does not fit; polysketch
// takes any length.
func TestPrefillLimit(t *testing.T) {
	for _, kind := range attention.Names() {
		c := tiny(kind)
		c.Context = 5
		m := mustNew(t, c)
		dec, err := m.NewDecoder(1)
		if err != nil {
			t.Fatal(err)
		}
		long := make([]int32, 3*c.Context)
		_, err = dec.Prefill(long)
		limited := c.Properties().ContextLimit
		if (err != nil) != limited {
			t.Errorf("%s: prefill of %d positions with context %d: error %v", kind, len(long), c.Context, err)
		}
		if !limited {
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "shorten the prompt") {
			t.Errorf("%s: error %q does not say how to fix it", kind, err)
		}
		if dec.Len() != 0 {
			t.Errorf("%s: a rejected prompt moved the position to %d", kind, dec.Len())
		}
		if _, err := dec.Prefill(long[:3]); err != nil {
			t.Fatalf("%s: prompt of 3: %v", kind, err)
		}
		if _, err := dec.Prefill(long[:3]); err == nil {
			t.Errorf("%s: 3 more positions after 3 with context 5: no error", kind)
		}
		if _, err := dec.Prefill(long[:2]); err != nil {
			t.Errorf("%s: 2 more positions after 3 with context 5: %v", kind, err)
		}
		if _, err := dec.Step(long[:1]); err == nil {
			t.Errorf("%s: step past a full context: no error", kind)
		}
	}
}

func TestPrefillErrors(t *testing.T) {
	m := mustNew(t, tiny("polysketch"))
	dec, err := m.NewDecoder(2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tokens := range [][]int32{nil, {1}, {1, 2, 3}, {1, 2, 3, 11}, {-1, 0}} {
		if _, err := dec.Prefill(tokens); err == nil {
			t.Errorf("Prefill(%v): no error", tokens)
		}
	}
	if dec.Len() != 0 {
		t.Errorf("failed prefills advanced the position to %d", dec.Len())
	}
}

// BenchmarkPrefill times the prompt of DefaultConfig's full context (256
// tokens, one sequence) consumed by Prefill and, for comparison, by a Step
// per token, reporting prompt tokens per second: for DefaultConfig
// (polysketch with learned sketches), with random sketches, and with
// flash attention.
func BenchmarkPrefill(b *testing.B) {
	const N = 256
	for _, v := range []struct {
		name string
		cfg  attention.Config
	}{
		{"polysketch/learned", DefaultConfig().Attention},
		{"polysketch/random", with(DefaultConfig(), func(a *attention.PolysketchConfig) { a.Learned = false }).Attention},
		{"flash", attention.FlashConfig{Block: 256}},
	} {
		c := DefaultConfig()
		c.Attention = v.cfg
		m := mustNew(b, c)
		tokens := randomTokens(rand.New(rand.NewPCG(1, 1)), N, c.Vocab)
		dec, err := m.NewDecoder(1)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(v.name+"/prefill", func(b *testing.B) {
			for b.Loop() {
				dec.Reset()
				if _, err := dec.Prefill(tokens); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*N)/b.Elapsed().Seconds(), "tokens/s")
		})
		b.Run(v.name+"/step", func(b *testing.B) {
			for b.Loop() {
				dec.Reset()
				for _, tok := range tokens {
					if _, err := dec.Step([]int32{tok}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N*N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
