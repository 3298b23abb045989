package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
)

// BenchmarkEchoLogprobs times the log-probabilities of a prompt of 2000
// tokens over the API (echo, logprobs 1, max_tokens 0: what
// lm-evaluation-harness asks for each choice) against a plain forward
// pass over it: "forward" is Model.Forward over the 2000 tokens (every
// position's logits), "plain" a request that reads the prompt and
// generates one token without logprobs (the server's own pass over it),
// with model.DefaultConfig and byte or GPT-2 tokens. The target: echo in
// under 2× a plain forward pass.
//
//	go test -run '^$' -bench EchoLogprobs ./serve
func BenchmarkEchoLogprobs(b *testing.B) {
	const n = 2000
	gpt2, err := tokenizer.Lookup("gpt2")
	if err != nil {
		b.Fatal(err)
	}
	for _, tok := range []tokenizer.Tokenizer{tokenizer.Byte, gpt2} {
		c := model.DefaultConfig()
		c.Vocab, c.Context = tok.VocabSize(), n
		m, err := model.New(c)
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 1))
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(' ' + rng.IntN(95)) // printable bytes, or GPT-2's tokens of one
		}
		prompt, _ := json.Marshal(ids)
		s := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxLength: 2 * n})
		if err := s.Ready(m, tok); err != nil {
			b.Fatal(err)
		}
		ts := httptest.NewServer(s)
		post := func(b *testing.B, body string) {
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d: %s", resp.StatusCode, out)
			}
		}
		b.Run(fmt.Sprintf("%s/forward", tok.Name()), func(b *testing.B) {
			for b.Loop() {
				m.Forward(ids, 1, n)
			}
		})
		b.Run(fmt.Sprintf("%s/plain", tok.Name()), func(b *testing.B) {
			body := fmt.Sprintf(`{"prompt":%s,"max_tokens":1,"temperature":0}`, prompt)
			for b.Loop() {
				post(b, body)
			}
		})
		b.Run(fmt.Sprintf("%s/echo", tok.Name()), func(b *testing.B) {
			body := fmt.Sprintf(`{"prompt":%s,"max_tokens":0,"echo":true,"logprobs":1}`, prompt)
			for b.Loop() {
				post(b, body)
			}
		})
		ts.Close()
		s.Close()
	}
}
