package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/train"
)

// withStdin runs f with stdin reading s.
func withStdin(s string, f func()) {
	old := stdin
	stdin = strings.NewReader(s)
	defer func() { stdin = old }()
	f()
}

func trainTokenizer(t *testing.T, corpus, out string, extra ...string) {
	t.Helper()
	args := append([]string{"tokenizer", "train", "--corpus", corpus, "--vocab-size", "400", "--out", out}, extra...)
	if _, errOut, err := runQuiet(t, args...); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, errOut)
	}
}

func TestTokenizerTrainEncodeDecode(t *testing.T) {
	dir, _ := tinyRun(t)
	corpus := filepath.Join(dir, "corpus.txt")
	out := filepath.Join(dir, "tok")
	trainTokenizer(t, corpus, out, "--workers", "1")
	first, err := os.ReadFile(filepath.Join(out, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "tokenizer_config.json")); err != nil {
		t.Error(err)
	}
	trainTokenizer(t, corpus, out, "--workers", "2", "--force")
	if again, _ := os.ReadFile(filepath.Join(out, "tokenizer.json")); !bytes.Equal(first, again) {
		t.Error("training again with two workers gave another tokenizer.json")
	}

	text := "func f3() int { return 5 } // the quick brown fox\n\xff<|endoftext|>é"
	var ids string
	withStdin(text, func() {
		var err error
		if ids, _, err = runQuiet(t, "tokenizer", "encode", "--tokenizer", out); err != nil {
			t.Fatal(err)
		}
	})
	if !strings.HasPrefix(ids, "[") || strings.Count(ids, ",") >= len(text)/2 {
		t.Errorf("encode = %s: want a JSON array, with fewer tokens than half the %d bytes", ids, len(text))
	}
	withStdin(ids, func() {
		got, _, err := runQuiet(t, "tokenizer", "decode", "--tokenizer", filepath.Join(out, "tokenizer.json"))
		if err != nil || got != text {
			t.Errorf("decode(encode(%q)) = %q, %v", text, got, err)
		}
	})
}

// TestTokenizerErrors checks bad input to tokenizer train, encode and
// decode: one line each, and nothing written.
func TestTokenizerErrors(t *testing.T) {
	dir, _ := tinyRun(t)
	corpus := filepath.Join(dir, "corpus.txt")
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, nil, 0o644)
	binary := filepath.Join(dir, "blob.bin")
	os.WriteFile(binary, bytes.Repeat([]byte{0x89, 'P', 'N', 'G', 0, 0, 0, 13}, 100), 0o644)
	truncated := filepath.Join(dir, "truncated.json")
	trainTokenizer(t, corpus, filepath.Join(dir, "good"))
	good, _ := os.ReadFile(filepath.Join(dir, "good", "tokenizer.json"))
	os.WriteFile(truncated, good[:len(good)/2], 0o644)
	wordpiece := filepath.Join(dir, "wordpiece.json")
	os.WriteFile(wordpiece, bytes.Replace(good, []byte(`"type": "BPE"`), []byte(`"type": "WordPiece"`), 1), 0o644)
	out := filepath.Join(dir, "out")
	for _, tc := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{[]string{"tokenizer", "train", "--corpus", corpus, "--vocab-size", "256", "--out", out}, "", "need at least 257"},
		{[]string{"tokenizer", "train", "--corpus", corpus, "--vocab-size", "300", "--special", "a", "--special", "b", "--vocab-size", "257", "--out", out}, "", "need at least 258"},
		{[]string{"tokenizer", "train", "--corpus", corpus, "--out", out}, "", "--vocab-size is required"},
		{[]string{"tokenizer", "train", "--corpus", corpus, "--vocab-size", "300"}, "", "--out is required"},
		{[]string{"tokenizer", "train", "--corpus", empty, "--vocab-size", "300", "--out", out}, "", "no text"},
		{[]string{"tokenizer", "train", "--corpus", binary, "--vocab-size", "300", "--out", out}, "", "binary"},
		{[]string{"tokenizer", "train", "--corpus", corpus, "--vocab-size", "300", "--out", filepath.Join(dir, "good")}, "", "already exists"},
		{[]string{"tokenizer", "encode"}, "x", "--tokenizer is required"},
		{[]string{"tokenizer", "encode", "--tokenizer", truncated}, "x", "truncated or not JSON"},
		{[]string{"tokenizer", "encode", "--tokenizer", wordpiece}, "x", "model type WordPiece is not supported"},
		{[]string{"tokenizer", "encode", "--tokenizer", filepath.Join(dir, "missing")}, "x", "does not exist"},
		{[]string{"tokenizer", "decode", "--tokenizer", "gpt2"}, "[1, 2", "want a JSON array"},
		{[]string{"tokenizer", "decode", "--tokenizer", "byte"}, "[1, 256]", "token id 256"},
		{[]string{"tokenizer", "frobnicate"}, "", "unknown tokenizer command"},
	} {
		withStdin(tc.stdin, func() {
			_, _, err := runQuiet(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%q: error %v, want one line containing %q", tc.args, err, tc.want)
			}
		})
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%q: wrote %s", tc.args, out)
		}
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "good", "tokenizer.json")); !bytes.Equal(now, good) {
		t.Error("a refused train changed the tokenizer.json already there")
	}
}

// TestTrainTokenizerFile trains a model with a tokenizer.json: the
// checkpoint keeps the file, under its manifest, and eval, generate and
// resume need no flag, while a different tokenizer is refused.
func TestTrainTokenizerFile(t *testing.T) {
	dir, args := tinyRun(t)
	args = append([]string{"train"}, args...)
	tok := filepath.Join(dir, "tok")
	trainTokenizer(t, filepath.Join(dir, "corpus.txt"), tok)
	run := filepath.Join(dir, "run")
	if _, errOut, err := runQuiet(t, append(args, "--tokenizer", tok, "--steps", "4")...); err != nil {
		t.Fatalf("train: %v\n%s", err, errOut)
	}
	ck := filepath.Join(run, train.CheckpointDir)
	saved, err := os.ReadFile(filepath.Join(ck, "tokenizer.json"))
	want, _ := os.ReadFile(filepath.Join(tok, "tokenizer.json"))
	if err != nil || !bytes.Equal(saved, want) {
		t.Fatalf("checkpoint's tokenizer.json: %v; equal to the one trained with: %v", err, bytes.Equal(saved, want))
	}
	c, err := checkpoint.Load(ck)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := tokenizer.Parse(want)
	if err != nil {
		t.Fatal(err)
	}
	if c.Model.Config().Vocab != parsed.VocabSize() || c.State.Tokenizer != parsed.Name() {
		t.Errorf("model vocabulary %d, tokenizer %q; want %d and %s", c.Model.Config().Vocab, c.State.Tokenizer, parsed.VocabSize(), parsed.Name())
	}

	// Naming the same file again when resuming is no change.
	if _, errOut, err := runQuiet(t, append(args, "--resume", "--steps", "5", "--tokenizer", tok)...); err != nil {
		t.Errorf("train --resume --tokenizer (the same): %v\n%s", err, errOut)
	}
	// The tokenizer's file may go: the checkpoint has it.
	os.RemoveAll(tok)
	cache := filepath.Join(dir, "cache")
	if out, errOut, err := runQuiet(t, "eval", "--checkpoint", run, "--batches", "1", "--cache-dir", cache); err != nil || !strings.Contains(out, "loss") {
		t.Errorf("eval: %q, %v\n%s", out, err, errOut)
	}
	if out, _, err := runQuiet(t, "generate", "--checkpoint", run, "--prompt", "func", "--tokens", "3"); err != nil || !strings.HasPrefix(out, "func") {
		t.Errorf("generate: %q, %v", out, err)
	}
	if _, errOut, err := runQuiet(t, append(args, "--resume", "--steps", "6")...); err != nil {
		t.Errorf("train --resume: %v\n%s", err, errOut)
	}
	for _, cmd := range [][]string{
		{"eval", "--checkpoint", run, "--tokenizer", "gpt2"},
		{"generate", "--checkpoint", run, "--tokenizer", "byte"},
	} {
		_, _, err := runQuiet(t, cmd...)
		if err == nil || !strings.Contains(err.Error(), "drop --tokenizer") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error %v, want one line saying to drop --tokenizer", cmd, err)
		}
	}
	_, _, err = runQuiet(t, append(args, "--resume", "--steps", "8", "--tokenizer", "gpt2")...)
	if err == nil || !strings.Contains(err.Error(), `--tokenizer "gpt2"`) {
		t.Errorf("train --resume --tokenizer gpt2: error %v, want one naming the flag", err)
	}

	// An edited tokenizer.json fails the manifest's checksum.
	os.WriteFile(filepath.Join(ck, "tokenizer.json"), bytes.Replace(saved, []byte(`"Ġ"`), []byte(`"x"`), 1), 0o644)
	_, _, err = runQuiet(t, "eval", "--checkpoint", run)
	if err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("eval of a checkpoint with an edited tokenizer.json: error %v, want one naming it", err)
	}
}

// TestTokenizerTrainRecords: a vocabulary fitted to JSON lines (another
// text field, gzip-compressed) is the one fitted to the same documents
// as loose text files.
func TestTokenizerTrainRecords(t *testing.T) {
	dir := t.TempDir()
	docs := []string{"func main() { fmt.Println(\"hello\") }\n", "package tokens\n\nvar x = 42 // the answer\n", "for i := range n { sum += i }\n"}
	loose := filepath.Join(dir, "loose")
	if err := os.Mkdir(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	var lines bytes.Buffer
	for i, d := range docs {
		if err := os.WriteFile(filepath.Join(loose, fmt.Sprintf("%d.txt", i)), []byte(d), 0o644); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]string{"body": d, "text": "not this"})
		lines.Write(append(b, '\n'))
	}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(lines.Bytes())
	w.Close()
	records := filepath.Join(dir, "docs.jsonl.gz")
	if err := os.WriteFile(records, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	trainTokenizer(t, loose, filepath.Join(dir, "a"), "--vocab-size", "300")
	trainTokenizer(t, records, filepath.Join(dir, "b"), "--vocab-size", "300", "--text-field", "body")
	a, errA := os.ReadFile(filepath.Join(dir, "a", "tokenizer.json"))
	b, errB := os.ReadFile(filepath.Join(dir, "b", "tokenizer.json"))
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if !bytes.Equal(a, b) {
		t.Error("the vocabulary fitted to JSON lines differs from the one fitted to the same text in loose files")
	}
}
