package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/sample"
	"github.com/polysketch/polysketch/tensor"
)

// saveTiny saves an untrained byte-level model of the given attention and
// context as a checkpoint in a temporary directory, and returns it.
func saveTiny(t *testing.T, kind string, context int) (string, *model.Model) {
	t.Helper()
	a, err := attention.ParseSpec(kind)
	if err != nil {
		t.Fatal(err)
	}
	if ps, ok := a.(attention.PolysketchConfig); ok {
		ps.SketchSize, ps.Block = 4, 8
		a = ps
	}
	c := model.Config{Vocab: 256, Dim: 16, Layers: 2, Heads: 2, Context: context, Attention: a, Seed: 3}
	m, err := model.New(c)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "checkpoint")
	if err := checkpoint.Save(dir, &checkpoint.Checkpoint{Model: m, State: checkpoint.State{Tokenizer: "byte"}}); err != nil {
		t.Fatal(err)
	}
	return dir, m
}

// TestGenerateLimit: with a KV cache, the prompt and all generated tokens
// but the last must fit in the context; a prompt or a --tokens past it is
// a one-line error saying what to change. Polysketch has no limit.
func TestGenerateLimit(t *testing.T) {
	const context = 16
	soft, _ := saveTiny(t, "softmax", context)
	sketch, _ := saveTiny(t, "polysketch", context)
	long := strings.Repeat("x", 3*context)
	for _, c := range []struct {
		dir, prompt, tokens string
		fail                string // part of the error; "" for none
	}{
		{soft, long[:context+1], "0", "shorten it"},
		{soft, long[:10], "8", "use --tokens 7 or fewer"},
		{soft, long[:10], "7", ""},
		{soft, long[:context], "1", ""},
		{sketch, long, "40", ""},
	} {
		out, errOut, err := runQuiet(t, "generate", "--checkpoint", c.dir, "--prompt", c.prompt, "--tokens", c.tokens, "--echo=false")
		switch {
		case c.fail == "" && err != nil:
			t.Errorf("prompt of %d, --tokens %s: %v", len(c.prompt), c.tokens, err)
		case c.fail != "" && (err == nil || !strings.Contains(err.Error(), c.fail) || strings.Contains(err.Error(), "\n")):
			t.Errorf("prompt of %d, --tokens %s: error %v, want one line with %q", len(c.prompt), c.tokens, err, c.fail)
		case c.fail == "":
			if n, _ := strconv.Atoi(c.tokens); len(out) != n+1 || !strings.Contains(errOut, "generated") {
				t.Errorf("prompt of %d, --tokens %s: printed %q, reported %q", len(c.prompt), c.tokens, out, errOut)
			}
		}
	}
}

// TestGenerateAsStepByStep: greedy generation, whose prompt goes through
// Prefill, prints the tokens that feeding the prompt to the model one
// Step per token and then each most likely token back gives; with a
// prompt of several passes of Prefill for polysketch, and the whole
// context for softmax.
func TestGenerateAsStepByStep(t *testing.T) {
	for _, c := range []struct {
		kind   string
		prompt int
	}{{"polysketch", 600}, {"softmax", 48}} {
		const tokens = 17
		dir, m := saveTiny(t, c.kind, 64)
		rng := rand.New(rand.NewPCG(8, 8))
		prompt := make([]byte, c.prompt)
		for i := range prompt {
			prompt[i] = byte(' ' + rng.IntN(95))
		}
		dec, err := m.NewDecoder(1)
		if err != nil {
			t.Fatal(err)
		}
		var logits *tensor.Tensor
		for _, b := range prompt {
			if logits, err = dec.Step([]int32{int32(b)}); err != nil {
				t.Fatal(err)
			}
		}
		greedy := sample.New(sample.Settings{TopP: 1}, nil)
		var want []byte
		for len(want) < tokens {
			next, err := greedy.Next(logits.Data)
			if err != nil {
				t.Fatal(err)
			}
			if want = append(want, byte(next)); len(want) == tokens {
				break // the last token is not fed back: 48+17−1 positions fill softmax's 64
			}
			if logits, err = dec.Step([]int32{int32(next)}); err != nil {
				t.Fatal(err)
			}
		}
		out, errOut, err := runQuiet(t, "generate", "--checkpoint", dir, "--prompt", string(prompt),
			"--tokens", strconv.Itoa(tokens), "--temperature", "0", "--echo=false")
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.kind, err, errOut)
		}
		if out != string(want)+"\n" {
			t.Errorf("%s: generated %q, step by step %q", c.kind, out, want)
		}
	}
}

// TestGenerateStopsAtEOT: a GPT-2 model whose logits favour <|endoftext|>
// stops generating at it by default, printing nothing, and prints it as
// text with --stop-at-eot=false.
func TestGenerateStopsAtEOT(t *testing.T) {
	tok, err := tokenizer.Lookup("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	eot, ok := tokenizer.EndOfText(tok)
	if !ok {
		t.Fatal("gpt2 has no end-of-text token")
	}
	c := model.Config{Vocab: tok.VocabSize(), Dim: 16, Layers: 1, Heads: 2, Context: 32, Seed: 3,
		Attention: attention.PolysketchConfig{Degree: 4, SketchSize: 4, Block: 8, Local: true, Sketch: attention.Gaussian}}
	m, err := model.New(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Params() {
		if p.Name == "head.bias" {
			p.Value.Data[eot] = 100
		}
	}
	dir := filepath.Join(t.TempDir(), "checkpoint")
	if err := checkpoint.Save(dir, &checkpoint.Checkpoint{Model: m, State: checkpoint.State{Tokenizer: "gpt2"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flag, want string
	}{
		{"--stop-at-eot=true", "\n"},
		{"--stop-at-eot=false", strings.Repeat("<|endoftext|>", 3) + "\n"},
	} {
		out, errOut, err := runQuiet(t, "generate", "--checkpoint", dir, "--prompt", "hello", "--tokens", "3", "--echo=false", "--temperature", "0", c.flag)
		if err != nil || out != c.want {
			t.Errorf("%s: printed %q (%v), want %q; stderr %q", c.flag, out, err, c.want, errOut)
		}
	}
}

// TestGenerateImportedSpecials: a checkpoint with an imported model's
// tokenizer files stops at the eos_token_id of its generation_config.json
// (here "\n", 198, which the model favours) and puts the bos_token of its
// tokenizer_config.json before the prompt when add_bos_token says so.
func TestGenerateImportedSpecials(t *testing.T) {
	tok, err := tokenizer.Lookup("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	c := model.Config{Vocab: tok.VocabSize(), Dim: 16, Layers: 1, Heads: 2, Context: 32, Seed: 3,
		Attention: attention.PolysketchConfig{Degree: 4, SketchSize: 4, Block: 8, Local: true, Sketch: attention.Gaussian}}
	m, err := model.New(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Params() {
		if p.Name == "head.bias" {
			p.Value.Data[198] = 100
		}
	}
	dir := filepath.Join(t.TempDir(), "checkpoint")
	if err := checkpoint.Save(dir, &checkpoint.Checkpoint{Model: m, State: checkpoint.State{Tokenizer: "gpt2"}}); err != nil {
		t.Fatal(err)
	}
	gen := func() (string, string) {
		t.Helper()
		out, errOut, err := runQuiet(t, "generate", "--checkpoint", dir, "--prompt", "hello", "--tokens", "3", "--echo=false", "--temperature", "0")
		if err != nil {
			t.Fatalf("generate: %v; stderr %q", err, errOut)
		}
		return out, errOut
	}
	if out, errOut := gen(); out != "\n\n\n\n" || !strings.Contains(errOut, "after a prompt of 1 tokens") {
		t.Fatalf("without the files: printed %q, stderr %q", out, errOut)
	}
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("generation_config.json", `{"bos_token_id": 50256, "eos_token_id": [50256, 198]}`)
	write("tokenizer_config.json", `{"add_bos_token": true, "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}`)
	if out, errOut := gen(); out != "\n" || !strings.Contains(errOut, "generated 0 tokens") || !strings.Contains(errOut, "after a prompt of 2 tokens") {
		t.Errorf("with the files: printed %q, stderr %q; want it to stop at once, after a prompt of <|endoftext|> and hello", out, errOut)
	}
	write("generation_config.json", `{"eos_token_id": [50257]}`)
	if _, errOut, err := runQuiet(t, "generate", "--checkpoint", dir, "--prompt", "hello"); err == nil || !strings.Contains(err.Error(), "generation_config.json: eos_token_id 50257 is outside the vocabulary") {
		t.Errorf("an eos_token_id outside the vocabulary: %v; stderr %q", err, errOut)
	}
}
