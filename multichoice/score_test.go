package multichoice

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
)

// testModel returns a small model of the given attention, its weights
// drawn from seed: untrained, so its choices differ by chance, but
// clearly.
func testModel(t testing.TB, attn attention.Config, vocab, context int) *model.Model {
	t.Helper()
	m, err := model.New(model.Config{
		Vocab: vocab, Dim: 32, Layers: 2, Heads: 2, Context: context, Hidden: 64,
		Attention: attn, Seed: 11,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var polysketch = attention.PolysketchConfig{Degree: 4, SketchSize: 8, Block: 16, Local: true, Learned: true, Sketch: attention.Gaussian}

// referenceScores computes what Score must give, independently of it: the
// harness's tokenization written out again, the model's logits of each
// context + continuation by Forward over the whole input (as the harness
// runs one sequence per choice), the log-softmax in float64. A limit
// drops context tokens from the start so that the context and the
// longest continuation fit, as Score documents.
func referenceScores(t *testing.T, m *model.Model, tok tokenizer.Tokenizer, ctxText string, conts []string, limit int) []float64 {
	t.Helper()
	trimmed := strings.TrimRight(ctxText, " \n\t")
	space := ctxText[len(trimmed):]
	ctx := tokensOf(t, tok, nil, trimmed)
	var toks [][]int32
	longest := 0
	for _, c := range conts {
		whole := tokensOf(t, tok, nil, trimmed+space+c)
		toks = append(toks, whole[len(ctx):])
		longest = max(longest, len(whole)-len(ctx))
	}
	if limit > 0 && len(ctx)+longest-1 > limit {
		ctx = ctx[len(ctx)+longest-1-limit:]
	}
	V := m.Config().Vocab
	var out []float64
	for _, c := range toks {
		in := append(append([]int32(nil), ctx...), c[:len(c)-1]...)
		logits := m.Forward(in, 1, len(in))
		var ll float64
		for k, t := range c {
			row := logits.Data[(len(ctx)-1+k)*V : (len(ctx)+k)*V]
			top := math.Inf(-1)
			for _, l := range row {
				top = math.Max(top, float64(l))
			}
			var sum float64
			for _, l := range row {
				sum += math.Exp(float64(l) - top)
			}
			ll += float64(row[t]) - top - math.Log(sum)
		}
		out = append(out, ll)
	}
	return out
}

// TestEvaluateMatchesReference evaluates the hand-written file of each
// format, 0- and 2-shot, with the context shared and read separately,
// and checks every log-likelihood against referenceScores, and the
// accuracies and their standard errors against those computed here from
// the reference log-likelihoods.
func TestEvaluateMatchesReference(t *testing.T) {
	gpt2, err := tokenizer.Lookup("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		attn     attention.Config
		tok      tokenizer.Tokenizer
		context  int
		limit    int // the KV cache's
		files    []string
		separate bool
	}{
		{"polysketch/byte", polysketch, tokenizer.Byte, 512, 0, []string{"hellaswag.jsonl", "piqa.parquet", "arc.jsonl", "generic.jsonl"}, false},
		{"polysketch/byte/separate", polysketch, tokenizer.Byte, 512, 0, []string{"piqa.jsonl", "arc.parquet"}, true},
		{"polysketch/gpt2", polysketch, gpt2, 256, 0, []string{"hellaswag.parquet", "generic.jsonl"}, false},
		// A KV cache of 96 positions: the 2-shot prompts lose their start.
		{"softmax/byte/truncated", attention.SoftmaxConfig{}, tokenizer.Byte, 96, 96, []string{"piqa.jsonl", "generic.jsonl"}, false},
		{"hyper/byte", hyper(t), tokenizer.Byte, 512, 512, []string{"arc.jsonl"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vocab := max(256, tc.tok.VocabSize())
			m := testModel(t, tc.attn, vocab, tc.context)
			sc, err := NewScorer(m, tc.tok)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := tc.attn.(attention.HyperConfig); ok != sc.Separate {
				t.Fatalf("Separate %v for %T: want it set for the mechanisms whose state cannot be copied", sc.Separate, tc.attn)
			}
			if tc.separate {
				sc.Separate = true
			}
			if got := model.ContextLimit(m.Config()); got != tc.limit {
				t.Fatalf("context limit %d, want %d", got, tc.limit)
			}
			dropped := false
			for _, file := range tc.files {
				set, err := ReadFile(filepath.Join("testdata", file), Auto)
				if err != nil {
					t.Fatal(err)
				}
				for _, shots := range []int{0, 2} {
					o := Options{Shots: shots, Seed: 5}
					res, samples, err := Evaluate(context.Background(), sc, set, o)
					if err != nil {
						t.Fatalf("%s, %d shots: %v", file, shots, err)
					}
					var acc, norm []float64
					for i, ex := range set.Examples {
						sh, _ := Shots{K: shots, Pool: set.Examples, Seed: 5}.Draw(ex)
						want := referenceScores(t, m, tc.tok, Prompt(ex, sh), Continuations(ex), tc.limit)
						got := samples[i]
						for j := range want {
							// Chunked decoding against one Forward: float32 rounding of
							// the logits, summed over a continuation's tokens.
							if d := math.Abs(got.LogLik[j] - want[j]); d > 2e-4*float64(got.Tokens[j]) {
								t.Errorf("%s:%d, %d shots, choice %d: log-likelihood %.6f, reference %.6f", file, ex.Line, shots, j, got.LogLik[j], want[j])
							}
						}
						dropped = dropped || got.Dropped > 0
						best, bestNorm := 0, 0
						for j := range want {
							if want[j] > want[best] {
								best = j
							}
							if want[j]/float64(len([]rune(ex.Choices[j]))) > want[bestNorm]/float64(len([]rune(ex.Choices[bestNorm]))) {
								bestNorm = j
							}
						}
						acc, norm = append(acc, b2f(best == ex.Label)), append(norm, b2f(bestNorm == ex.Label))
					}
					for _, c := range []struct {
						name string
						got  Metric
						want []float64
					}{{"acc", res.Acc, acc}, {"acc_norm", res.AccNorm, norm}} {
						mean, se := meanAndStderr(c.want)
						if c.got.Value != mean || math.Abs(c.got.StdErr-se) > 1e-12 {
							t.Errorf("%s, %d shots: %s %v ± %v, reference %v ± %v", file, shots, c.name, c.got.Value, c.got.StdErr, mean, se)
						}
					}
				}
			}
			if tc.limit > 0 && tc.limit < 200 && !dropped {
				t.Errorf("no context was truncated to the limit %d", tc.limit)
			}
		})
	}
}

// hyper returns HyperAttention's default configuration, whose decoding
// state cannot be copied: its Scorer reads the context for each choice.
func hyper(t *testing.T) attention.Config {
	c, err := attention.DefaultConfig("hyper")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// meanAndStderr is the harness's mean and mean_stderr, written out.
func meanAndStderr(xs []float64) (float64, float64) {
	var s float64
	for _, x := range xs {
		s += x
	}
	mu := s / float64(len(xs))
	var v float64
	for _, x := range xs {
		v += (x - mu) * (x - mu)
	}
	return mu, math.Sqrt(v/float64(len(xs)-1)) / math.Sqrt(float64(len(xs)))
}

// TestScoreEdges checks the harness's tokenization at the edges:
// whitespace that ends a context moves to its continuations (with GPT-2's
// tokens, " Paris" is one token, "Paris" after a token " " another); an
// empty context stands for the end-of-text token, or is refused by a
// tokenizer without one.
func TestScoreEdges(t *testing.T) {
	gpt2, err := tokenizer.Lookup("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	m := testModel(t, polysketch, gpt2.VocabSize(), 64)
	sc, err := NewScorer(m, gpt2)
	if err != nil {
		t.Fatal(err)
	}
	conts := []string{"Paris", "a sandwich"}
	got, err := sc.Score("The capital of France is ", conts)
	if err != nil {
		t.Fatal(err)
	}
	want := referenceScores(t, m, gpt2, "The capital of France is ", conts, 0)
	for j := range want {
		if math.Abs(got.LogLik[j]-want[j]) > 1e-3 {
			t.Errorf("choice %d: log-likelihood %.6f, reference %.6f", j, got.LogLik[j], want[j])
		}
	}
	if got.Tokens[0] != 1 {
		t.Errorf("\" Paris\" after the context: %d tokens, want 1 (the space moved to the continuation)", got.Tokens[0])
	}

	eot, _ := tokenizer.EndOfText(gpt2)
	got, err = sc.Score("", []string{"Hello world", "Goodbye"})
	if err != nil {
		t.Fatal(err)
	}
	for j, c := range []string{"Hello world", "Goodbye"} {
		toks := tokensOf(t, gpt2, []int32{eot}, c)
		logits := m.Forward(toks[:len(toks)-1], 1, len(toks)-1)
		V := m.Config().Vocab
		var ll float64
		for k, tk := range toks[1:] {
			row := logits.Data[k*V : (k+1)*V]
			var sum float64
			for _, l := range row {
				sum += math.Exp(float64(l))
			}
			ll += float64(row[tk]) - math.Log(sum)
		}
		if math.Abs(got.LogLik[j]-ll) > 1e-3 {
			t.Errorf("empty context, choice %q: log-likelihood %.6f, reference %.6f", c, got.LogLik[j], ll)
		}
	}

	byteScorer, err := NewScorer(testModel(t, polysketch, 256, 64), tokenizer.Byte)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := byteScorer.Score(" ", []string{"a", "b"}); err == nil || !strings.Contains(err.Error(), "no end-of-text token") {
		t.Errorf("empty context with the byte tokenizer: %v", err)
	}

	// A beginning-of-sequence token before every context, and standing
	// for an empty one.
	byteScorer.Begin = []int32{2}
	bm := byteScorer.m
	for _, ctx := range []string{"The sky is", ""} {
		got, err := byteScorer.Score(ctx, []string{" blue", " green"})
		if err != nil {
			t.Fatal(err)
		}
		for j, c := range []string{" blue", " green"} {
			in := tokensOf(t, tokenizer.Byte, []int32{2}, ctx+c)
			logits := bm.Forward(in[:len(in)-1], 1, len(in)-1)
			V := bm.Config().Vocab
			var ll float64
			for k := 1 + len(ctx); k < len(in); k++ {
				row := logits.Data[(k-1)*V : k*V]
				var sum float64
				for _, l := range row {
					sum += math.Exp(float64(l))
				}
				ll += float64(row[in[k]]) - math.Log(sum)
			}
			if math.Abs(got.LogLik[j]-ll) > 1e-3 {
				t.Errorf("context %q after Begin, choice %q: log-likelihood %.6f, reference %.6f", ctx, c, got.LogLik[j], ll)
			}
		}
	}
}

// tokensOf appends the tokens of text to dst; the tokenizers of the tests
// never fail.
func tokensOf(t testing.TB, tok tokenizer.Tokenizer, dst []int32, text string) []int32 {
	t.Helper()
	ids, err := tok.Encode(context.Background(), dst, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestScoreOverflow scores with a model whose output layer overflows
// (every weight 3e38, finite): Score must fail saying so, not return
// log-likelihoods of NaN that compare as neither better nor worse.
func TestScoreOverflow(t *testing.T) {
	m := testModel(t, polysketch, 256, 64)
	for _, p := range m.Params() {
		if p.Name == "head.weight" {
			for i := range p.Value.Data {
				p.Value.Data[i] = 3e38
			}
		}
	}
	for _, separate := range []bool{false, true} {
		sc, err := NewScorer(m, tokenizer.Byte)
		if err != nil {
			t.Fatal(err)
		}
		sc.Separate = separate
		if _, err := sc.Score("The sky is", []string{" blue", " green"}); err == nil || !strings.Contains(err.Error(), "not finite") {
			t.Errorf("separate %v: %v, want an error saying the logits are not finite", separate, err)
		}
	}
}
