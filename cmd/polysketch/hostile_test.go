package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
)

// corpusFile writes a small text corpus and returns its path.
func corpusFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "corpus.txt")
	if err := os.WriteFile(path, []byte(strings.Repeat("func f() int { return 42 } // the quick brown fox\n", 40)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestVocabularyBeyondEmbedding saves a checkpoint whose tokenizer.json
// has 300 tokens and whose embedding has 256 rows, as a checkpoint with
// its tokenizer replaced would: every command that opens it must refuse
// it in one line, info too, rather than panic on the first id past the
// embedding.
func TestVocabularyBeyondEmbedding(t *testing.T) {
	c := tokenizer.NewCounts(nil)
	c.Add([]byte(strings.Repeat("func main() { return the quick brown fox jumps over the lazy dog 0123456789 }\n", 20)))
	tok, err := tokenizer.Train(c, tokenizer.TrainOptions{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 300 {
		t.Fatalf("trained %d tokens, want 300", tok.VocabSize())
	}
	m, err := model.New(model.Config{Vocab: 256, Dim: 16, Layers: 1, Heads: 2, Context: 32, Attention: attention.SoftmaxConfig{}, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "checkpoint")
	if err := checkpoint.Save(dir, &checkpoint.Checkpoint{Model: m, State: checkpoint.State{Tokenizer: tok.Name()}, TokenizerJSON: tok.JSON()}); err != nil {
		t.Fatal(err)
	}
	const want = "has 300 tokens, but its model's embedding only 256 rows"
	for _, args := range [][]string{
		{"eval", "--checkpoint", dir, "--corpus", corpusFile(t), "--cache-dir", t.TempDir()},
		{"generate", "--checkpoint", dir, "--prompt", "the quick brown fox", "--tokens", "3"},
		{"info", dir},
		{"serve", "--checkpoint", dir, "--addr", "127.0.0.1:0"},
	} {
		_, _, err := runQuiet(t, args...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", args[0], err, want)
		}
	}
}

// overflowing saves a checkpoint whose output layer is 3e38 everywhere:
// finite weights, which checkpoint.Load accepts, whose logits overflow.
func overflowing(t *testing.T) string {
	t.Helper()
	_, m := saveTiny(t, "polysketch", 64)
	for _, p := range m.Params() {
		if p.Name == "head.weight" {
			for i := range p.Value.Data {
				p.Value.Data[i] = 3e38
			}
		}
	}
	dir := filepath.Join(t.TempDir(), "checkpoint")
	if err := checkpoint.Save(dir, &checkpoint.Checkpoint{Model: m, State: checkpoint.State{Tokenizer: "byte"}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestOverflowingLogits runs eval, generate and info on a checkpoint whose
// logits are not finite: each must fail saying so, not print a loss of
// NaN or bytes drawn from nothing and exit 0.
func TestOverflowingLogits(t *testing.T) {
	dir := overflowing(t)
	for _, args := range [][]string{
		{"eval", "--checkpoint", dir, "--corpus", corpusFile(t), "--cache-dir", t.TempDir()},
		{"generate", "--checkpoint", dir, "--prompt", "abc", "--tokens", "5"},
		{"generate", "--checkpoint", dir, "--prompt", "abc", "--tokens", "5", "--temperature", "0"},
		{"info", dir},
	} {
		out, _, err := runQuiet(t, args...)
		if err == nil || !strings.Contains(err.Error(), "not finite") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line saying the logits are not finite\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "info" && !regexp.MustCompile(`verified\s+NO: `).MatchString(out) {
			t.Errorf("info: does not say NO:\n%s", out)
		}
	}
}

// TestGenerateSampling checks the sampling flags of generate: bad values
// are refused naming the flag, and --logit-bias and the penalties reach
// the sampler.
func TestGenerateSampling(t *testing.T) {
	dir, _ := saveTiny(t, "polysketch", 64)
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--temperature", "-1"}, "generate: --temperature -1: must be 0 (greedy) or more"},
		{[]string{"--top-p", "1.5"}, "generate: --top-p 1.5: must be in (0, 1]"},
		{[]string{"--top-k", "-2"}, "generate: --top-k -2"},
		{[]string{"--presence-penalty", "2.5"}, "generate: --presence-penalty 2.5: must be between -2 and 2"},
		{[]string{"--frequency-penalty", "-9"}, "generate: --frequency-penalty -9"},
		{[]string{"--logit-bias", "256:1"}, "generate: --logit-bias token 256: not a token of the vocabulary [0, 256)"},
		{[]string{"--logit-bias", "x"}, `invalid value "x" for flag -logit-bias`},
	} {
		_, _, err := runQuiet(t, append([]string{"generate", "--checkpoint", dir, "--prompt", "a", "--tokens", "2"}, tc.flags...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.flags, err, tc.want)
		}
	}
	var bans []string
	for b := range 256 {
		if b != 'q' && b != 'z' {
			bans = append(bans, fmt.Sprintf("%d:-100", b))
		}
	}
	out, errOut, err := runQuiet(t, "generate", "--checkpoint", dir, "--prompt", "a", "--tokens", "30", "--echo=false",
		"--temperature", "2", "--logit-bias", strings.Join(bans, ","), "--presence-penalty", "1")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if text := strings.TrimSuffix(out, "\n"); len(text) != 30 || strings.Trim(text, "qz") != "" {
		t.Errorf("with every byte but q and z banned: %q", text)
	}
}

// TestMaxRecord reads a JSON-lines corpus with a record over a small
// --max-record: the command must refuse it in one line naming the file,
// the line and the flag.
func TestMaxRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "long.jsonl")
	if err := os.WriteFile(path, []byte(`{"text":"short"}`+"\n"+`{"text":"`+strings.Repeat("x", 5000)+`"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := runQuiet(t, "tokenizer", "train", "--corpus", path, "--max-record", "4KiB", "--vocab-size", "300", "--out", t.TempDir())
	want := path + ":2: a record of more than 4 KiB, the record limit: split it into smaller records, or raise --max-record"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%v, want %q", err, want)
	}
	if _, _, err := runQuiet(t, "tokenizer", "train", "--corpus", path, "--vocab-size", "300", "--out", t.TempDir()); err != nil {
		t.Errorf("with the default limit: %v", err)
	}
}

// TestTokenizerPatternBound is the reproduction: a tokenizer.json
// whose pre-tokenizer splits with (a+)+$, and a line of a's ending with !,
// which took `tokenizer encode` forever. It must fail in one line naming
// the pattern.
func TestTokenizerPatternBound(t *testing.T) {
	c := tokenizer.NewCounts(nil)
	c.Add([]byte("aaaa bbbb"))
	base, err := tokenizer.Train(c, tokenizer.TrainOptions{VocabSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	json.Unmarshal(base.JSON(), &f)
	f["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "(a+)+$"}, "behavior": "Isolated"},
		map[string]any{"type": "ByteLevel", "use_regex": false},
	}}
	b, _ := json.Marshal(f)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, tokenizer.FileName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go withStdin(strings.Repeat("a", 28)+"!\n", func() {
		_, _, err := runQuiet(t, "tokenizer", "encode", "--tokenizer", dir)
		done <- err
	})
	select {
	case err := <-done:
		want := `tokenizer encode: pre-tokenizer pattern "(a+)+$" took longer than 1s over one match`
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v, want one line containing %q", err, want)
		}
	case <-time.After(5 * time.Minute):
		t.Fatal("tokenizer encode has not returned after 5 minutes")
	}
}
