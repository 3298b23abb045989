package multichoice

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
)

// words makes English-like text of about n bytes, drawn with rng.
func words(rng *rand.Rand, n int) string {
	vocab := strings.Fields("the a man woman dog is are was running slowly toward kitchen table with his her hands " +
		"then picks up puts down bowl of water and starts to wash dishes carefully while talking camera " +
		"outside garden grass ball throws catches jumps over fence into pool swims back laughing")
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocab[rng.IntN(len(vocab))])
	}
	return b.String() + "."
}

// question returns a HellaSwag-shaped question: a context of about 240
// bytes and four endings of 90 to 120, after shots solved examples of
// the same shape.
func question(shots int) (context string, endings []string) {
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for range shots {
		b.WriteString(words(rng, 240) + " " + words(rng, 110) + "\n\n")
	}
	b.WriteString(words(rng, 240))
	for _, n := range []int{100, 120, 90, 110} {
		endings = append(endings, " "+words(rng, n))
	}
	return b.String(), endings
}

// BenchmarkScore times the scoring of a HellaSwag-shaped question (four
// endings) by model.DefaultConfig (polysketch, 4 layers of 256), 0-shot
// and 5-shot, with byte and GPT-2 tokens. The units of the target
// (scoring four endings may cost at most 1.5 of one pass over the
// context and the longest ending): "forward" is Model.Forward over the
// context and the longest ending (all positions' logits, the training
// path), "one" is a Scorer reading them once (the decoding path, logits
// of the ending's positions only). "shared" scores the four endings from
// one reading of the context, "separate" reads the context again for
// each (the four concatenations scored separately, in the same batched
// steps).
//
//	go test -run '^$' -bench Score ./multichoice
func BenchmarkScore(b *testing.B) {
	gpt2, err := tokenizer.Lookup("gpt2")
	if err != nil {
		b.Fatal(err)
	}
	for _, tok := range []tokenizer.Tokenizer{tokenizer.Byte, gpt2} {
		c := model.DefaultConfig()
		c.Vocab = tok.VocabSize()
		c.Context = 4096 // for Forward over 5-shot prompts; positions are not learned
		m, err := model.New(c)
		if err != nil {
			b.Fatal(err)
		}
		for _, shots := range []int{0, 5} {
			ctx, endings := question(shots)
			longest := endings[1]
			ctxTokens := len(tokensOf(b, tok, nil, ctx))
			longestTokens := len(tokensOf(b, tok, nil, ctx+longest)) - ctxTokens
			report := func(b *testing.B) {
				b.ReportMetric(float64(ctxTokens), "context-tokens")
				b.ReportMetric(float64(longestTokens), "longest-ending-tokens")
			}
			b.Run(fmt.Sprintf("%s/shots=%d/forward", tok.Name(), shots), func(b *testing.B) {
				in := tokensOf(b, tok, nil, ctx+longest)
				in = in[:len(in)-1]
				for b.Loop() {
					m.Forward(in, 1, len(in))
				}
				report(b)
			})
			for _, mode := range []string{"one", "shared", "separate"} {
				name := fmt.Sprintf("%s/shots=%d/%s", tok.Name(), shots, mode)
				b.Run(name, func(b *testing.B) {
					sc, err := NewScorer(m, tok)
					if err != nil {
						b.Fatal(err)
					}
					sc.Separate = mode == "separate"
					conts := endings
					if mode == "one" {
						conts = []string{longest}
					}
					if _, err := sc.Score(ctx, conts); err != nil {
						b.Fatal(err)
					}
					for b.Loop() {
						if _, err := sc.Score(ctx, conts); err != nil {
							b.Fatal(err)
						}
					}
					report(b)
				})
			}
		}
	}
}
