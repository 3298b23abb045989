package serve

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/multichoice"
)

// forwardLogprobs is the reference for prompt logprobs: log-softmax in
// float64 of the logits of the model's Forward over the whole prompt,
// for every token but the first.
func forwardLogprobs(m *model.Model, ids []int32) []float64 {
	V := m.Config().Vocab
	logits := m.Forward(ids, 1, len(ids))
	out := make([]float64, len(ids)-1)
	for k := range out {
		row := logits.Data[k*V : (k+1)*V]
		top := math.Inf(-1)
		for _, l := range row {
			top = math.Max(top, float64(l))
		}
		var sum float64
		for _, l := range row {
			sum += math.Exp(float64(l) - top)
		}
		out[k] = float64(row[ids[k+1]]) - top - math.Log(sum)
	}
	return out
}

// echoConfigs are a polysketch and a softmax model (a KV cache) of
// context 256, for prompts of several chunks that Forward can read whole.
func echoConfigs() map[string]model.Config {
	ps := testConfig()
	ps.Context = 256
	sm := ps
	sm.Attention = attention.SoftmaxConfig{}
	return map[string]model.Config{"polysketch": ps, "softmax": sm}
}

// TestEchoLogprobs checks the log-probabilities of the prompt's own
// tokens that echo with logprobs returns, as OpenAI's completions API and
// vLLM do: the first token with null for its logprob and alternatives,
// the others against a float64 reference from Forward over the whole
// prompt, read here in chunks of 32; with max_tokens 0, with tokens
// generated after the prompt (whose entries follow, unchanged), with
// several prompts, with the prompt as token ids, streamed, and after the
// prefix cache holds the prompt's state.
func TestEchoLogprobs(t *testing.T) {
	for name, cfg := range echoConfigs() {
		t.Run(name, func(t *testing.T) {
			m := testModel(t, cfg)
			_, ts := newTest(t, Options{PrefillChunk: 16, StepRows: 32, CacheMemory: 1 << 24}, m)
			prompts := []string{
				strings.Repeat("func main() { fmt.Println(\"héllo\") }\n", 4)[:150],
				"x",
				"if err != nil {\n\treturn err\n}",
			}
			var whole [][]byte
			for _, p := range prompts {
				whole = append(whole, []byte(p))
			}
			check := func(what string, lp *logprobs, prompt string) {
				t.Helper()
				ids := byteIDs(prompt)
				want := forwardLogprobs(m, ids)
				if lp == nil || len(lp.Tokens) < len(ids) {
					t.Fatalf("%s: logprobs %+v, want at least the %d prompt tokens", what, lp, len(ids))
				}
				if lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil || lp.TextOffset[0] != 0 {
					t.Errorf("%s: first entry %v %v %d, want null, null, 0", what, lp.TokenLogprobs[0], lp.TopLogprobs[0], lp.TextOffset[0])
				}
				for k, id := range ids {
					if lp.Tokens[k] != tokenName([]byte{byte(id)}) || lp.TextOffset[k] != k {
						t.Errorf("%s: entry %d: token %q at %d, want %q at %d", what, k, lp.Tokens[k], lp.TextOffset[k], tokenName([]byte{byte(id)}), k)
					}
					if k == 0 {
						continue
					}
					got := lp.TokenLogprobs[k]
					if got == nil || math.Abs(*got-want[k-1]) > 2e-4 {
						t.Errorf("%s: token %d: logprob %v, reference %v", what, k, got, want[k-1])
						continue
					}
					top := lp.TopLogprobs[k]
					best := math.Inf(-1)
					for _, v := range top {
						best = math.Max(best, v)
					}
					if len(top) != 2 || best < *got {
						t.Errorf("%s: token %d: top logprobs %v, want the 2 best, at least %v", what, k, top, *got)
					}
				}
			}

			body := func(prompt any, max int, extra string) string {
				b, _ := json.Marshal(prompt)
				return fmt.Sprintf(`{"prompt":%s,"max_tokens":%d,"echo":true,"logprobs":2,"temperature":0%s}`, b, max, extra)
			}
			zero := complete(t, ts.URL, body(prompts, 0, ""))
			if len(zero.Choices) != len(prompts) {
				t.Fatalf("%d choices for %d prompts", len(zero.Choices), len(prompts))
			}
			for i, c := range zero.Choices {
				if c.Text != prompts[i] || *c.FinishReason != "length" || len(c.Logprobs.Tokens) != len(prompts[i]) {
					t.Errorf("prompt %d, max_tokens 0: text %q, finish %s, %d entries", i, c.Text, *c.FinishReason, len(c.Logprobs.Tokens))
				}
				check(fmt.Sprintf("prompt %d, max_tokens 0", i), c.Logprobs, prompts[i])
			}
			if zero.Usage.PromptTokens != len(prompts[0])+len(prompts[1])+len(prompts[2]) || zero.Usage.CompletionTokens != 0 {
				t.Errorf("usage %+v", zero.Usage)
			}

			// The same prompts alone, as token ids, with tokens generated after.
			for i, p := range prompts {
				gen := complete(t, ts.URL, body(p, 5, `,"stop":"never"`)).Choices[0]
				a, _ := json.Marshal(gen.Logprobs.TokenLogprobs[:len(p)])
				b, _ := json.Marshal(zero.Choices[i].Logprobs.TokenLogprobs)
				if string(a) != string(b) {
					t.Errorf("prompt %d: the prompt's logprobs with 5 tokens generated after differ from those with none", i)
				}
				if n := len(gen.Logprobs.Tokens); n != len(p)+5 || gen.Logprobs.TextOffset[len(p)] != len(p) || gen.Logprobs.TokenLogprobs[len(p)] == nil {
					t.Errorf("prompt %d: %d entries, want %d: the prompt's, then the 5 generated from offset %d", i, n, len(p)+5, len(p))
				}
				ids := complete(t, ts.URL, body(byteIDs(p), 0, "")).Choices[0]
				c, _ := json.Marshal(ids.Logprobs)
				d, _ := json.Marshal(zero.Choices[i].Logprobs)
				if ids.Text != p || string(c) != string(d) {
					t.Errorf("prompt %d as token ids: text %q, logprobs differ: %v", i, ids.Text, string(c) != string(d))
				}
			}
			ids := complete(t, ts.URL, body([][]int32{byteIDs(string(whole[1])), byteIDs(string(whole[2]))}, 0, ""))
			if len(ids.Choices) != 2 || ids.Choices[1].Text != prompts[2] {
				t.Errorf("two prompts of token ids: %+v", ids.Choices)
			}

			// Streamed: the same entries, chunk after chunk.
			var all logprobs
			for _, c := range streamed(t, ts.URL, "/v1/completions", body(prompts[0], 0, `,"stream":true`)) {
				for _, ch := range c.Choices {
					if ch.Logprobs != nil {
						all.add(ch.Logprobs)
					}
				}
			}
			a, _ := json.Marshal(all)
			b, _ := json.Marshal(zero.Choices[0].Logprobs)
			if string(a) != string(b) {
				t.Errorf("streamed prompt logprobs\n%s\nwhole\n%s", a, b)
			}

			// A request that leaves the prompt's state in the prefix cache,
			// then echo: every token is read again for its logits.
			complete(t, ts.URL, fmt.Sprintf(`{"prompt":%q,"max_tokens":2}`, prompts[0]))
			again := complete(t, ts.URL, body(prompts[0], 0, ""))
			c, _ := json.Marshal(again.Choices[0].Logprobs)
			if string(c) != string(b) {
				t.Error("echo after the prefix cache kept the prompt's state: the logprobs differ")
			}
			// Echo requests read in chunks of their own: they leave no
			// state in the cache.
			fresh := strings.Repeat("package main // echoed only\n", 4)
			complete(t, ts.URL, body(fresh, 0, ""))
			plain := complete(t, ts.URL, fmt.Sprintf(`{"prompt":%q,"max_tokens":1}`, fresh))
			if n := plain.Usage.PromptTokensDetails.CachedTokens; n != 0 {
				t.Errorf("a prompt only echoed before resumed from %d cached tokens", n)
			}
		})
	}
}

// TestEchoMatchesScorer sends the requests lm-evaluation-harness's
// local-completions model sends to score a choice (the context and the
// choice as token ids, max_tokens 1, echo, logprobs 1) and checks that
// the sum of token_logprobs over the choice's tokens (the harness's
// [ctxlen:-1]) equals the log-likelihood eval --choices computes for
// it, within float32 rounding.
func TestEchoMatchesScorer(t *testing.T) {
	for name, cfg := range echoConfigs() {
		t.Run(name, func(t *testing.T) {
			m := testModel(t, cfg)
			_, ts := newTest(t, Options{}, m)
			set, err := multichoice.ReadFile("../multichoice/testdata/hellaswag.jsonl", multichoice.Auto)
			if err != nil {
				t.Fatal(err)
			}
			sc, err := multichoice.NewScorer(m, tokenizer.Byte)
			if err != nil {
				t.Fatal(err)
			}
			for _, ex := range set.Examples {
				ctx, conts := multichoice.Prompt(ex, nil), multichoice.Continuations(ex)
				want, err := sc.Score(ctx, conts)
				if err != nil {
					t.Fatal(err)
				}
				ctxIDs := byteIDs(ctx)
				var prompts [][]int32
				for _, c := range conts {
					prompts = append(prompts, append(slices.Clone(ctxIDs), byteIDs(c)...))
				}
				b, _ := json.Marshal(prompts)
				resp := complete(t, ts.URL, fmt.Sprintf(`{"model":"test","prompt":%s,"temperature":0,"max_tokens":1,"logprobs":1,"seed":1234,"echo":true}`, b))
				for j, ch := range resp.Choices {
					lps := ch.Logprobs.TokenLogprobs
					var sum float64
					for _, v := range lps[len(ctxIDs) : len(lps)-1] {
						sum += *v
					}
					if d := math.Abs(sum - want.LogLik[j]); d > 1e-4*float64(want.Tokens[j]) {
						t.Errorf("line %d, choice %d: echo's log-likelihood %.6f, eval's %.6f", ex.Line, j, sum, want.LogLik[j])
					}
				}
			}
		})
	}
}

// TestEchoBegin checks the echo of a prompt after the tokens the server
// puts before it (a beginning-of-sequence token): listed first, with a
// null logprob, at offset 0, taking no room in the echoed text; a prompt
// of token ids is read as it is, with none put before it.
func TestEchoBegin(t *testing.T) {
	url := newConfigTest(t, &tokenizer.Config{Begin: []int32{2}})
	c := complete(t, url, `{"prompt":"abc","max_tokens":0,"echo":true,"logprobs":1}`).Choices[0]
	lp := c.Logprobs
	if c.Text != "abc" || len(lp.Tokens) != 4 || lp.Tokens[0] != "\x02" || lp.TokenLogprobs[0] != nil || lp.TokenLogprobs[1] == nil {
		t.Fatalf("echo after Begin: text %q, logprobs %+v", c.Text, lp)
	}
	if want := []int{0, 0, 1, 2}; fmt.Sprint(lp.TextOffset) != fmt.Sprint(want) {
		t.Errorf("offsets %v, want %v: Begin is not in the text", lp.TextOffset, want)
	}
	ids := complete(t, url, `{"prompt":[97,98,99],"max_tokens":0,"echo":true,"logprobs":1}`).Choices[0]
	if len(ids.Logprobs.Tokens) != 3 || fmt.Sprint(ids.Logprobs.TextOffset) != "[0 1 2]" {
		t.Errorf("token ids: %+v, want the 3 tokens as given", ids.Logprobs)
	}
}

// TestTextOffsetsPiece checks echo's offsets for a tokenizer of the
// SentencePiece kind, whose encoding puts a ▁ before the text that the
// text does not have: every token's offset is where its own characters
// start in the text ("a 世界 b", the characters missing from the
// vocabulary as their UTF-8 bytes), after Begin's <s> and for token ids
// given as they are.
func TestTextOffsetsPiece(t *testing.T) {
	tok, err := tokenizer.Open("../data/tokenizer/testdata/piece.json")
	if err != nil {
		t.Fatal(err)
	}
	text := "a 世界 b"
	ids, err := tok.Encode(t.Context(), []int32{1}, []byte(text)) // <s>, then the text
	if err != nil {
		t.Fatal(err)
	}
	// <s>, "▁a", "▁", the 3 + 3 bytes of 世界, "▁b": "a" at 0, the space
	// at 1, the bytes at 2-7, the space before b at 8.
	want := []int{0, 0, 1, 2, 3, 4, 5, 6, 7, 8}
	if got := textOffsets(tok, ids, 1); !slices.Equal(got, want) {
		t.Errorf("after <s>: offsets %v, want %v", got, want)
	}
	raw, _ := json.Marshal(ids[1:])
	texts, _, apiErr := promptOf(raw, tok)
	if apiErr != nil || texts[0] != text {
		t.Errorf("token ids: text %q (%v), want %q", texts, apiErr, text)
	}
	if got := textOffsets(tok, ids[1:], 0); !slices.Equal(got, want[1:]) {
		t.Errorf("token ids: offsets %v, want %v", got, want[1:])
	}
}
