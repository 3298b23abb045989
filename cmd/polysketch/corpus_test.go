package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/train"
)

// TestTrainJSONLines trains on JSON lines with --text-field beside a
// binary file, which is left out with a note; the checkpoint records the
// field, which eval and a resumed run then use.
func TestTrainJSONLines(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus")
	if err := os.MkdirAll(corpus, 0o755); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "{\"id\": %d, \"body\": \"func f%d() int { return %d } // the quick brown fox\\n\"}\n", i, i%13, i%7)
	}
	if err := os.WriteFile(filepath.Join(corpus, "docs.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(corpus, "logo.png"), []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), 0o644); err != nil {
		t.Fatal(err)
	}
	cache, runDir := filepath.Join(dir, "cache"), filepath.Join(dir, "run")
	args := []string{"train", "--corpus", corpus, "--cache-dir", cache, "--out", runDir,
		"--dim", "16", "--layers", "1", "--heads", "2", "--context", "16", "--block", "8", "--sketch-size", "4",
		"--batch", "4", "--steps", "4", "--eval-every", "0", "--eval-batches", "2"}

	_, _, err := runQuiet(t, args...)
	if want := filepath.Join(corpus, "docs.jsonl") + `:1: no "text" field (fields: "body", "id")`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("train without --text-field: %v, want an error with %q", err, want)
	}
	if checkpoint.Exists(filepath.Join(runDir, train.CheckpointDir)) {
		t.Fatal("a failed run left a checkpoint")
	}

	_, errOut, err := runQuiet(t, append(args, "--text-field", "body")...)
	if err != nil {
		t.Fatalf("train: %v\n%s", err, errOut)
	}
	for _, want := range []string{"1 file, ", "corpus: skipped 1 file of binary data (logo.png)"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("train's log lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "1 files") {
		t.Errorf("train's log says \"1 files\":\n%s", errOut)
	}
	c, err := checkpoint.Load(filepath.Join(runDir, train.CheckpointDir))
	if err != nil {
		t.Fatal(err)
	}
	var tc train.Config
	if err := json.Unmarshal(c.Train, &tc); err != nil || tc.TextField != "body" {
		t.Errorf("checkpoint's training configuration: text field %q, %v; want \"body\"", tc.TextField, err)
	}

	// eval and a resumed run read the field the run was trained on.
	out, errOut, err := runQuiet(t, "eval", "--checkpoint", runDir, "--cache-dir", cache, "--batch", "4", "--batches", "2")
	if err != nil || !strings.Contains(out, "loss") {
		t.Errorf("eval: %v, %q\n%s", err, out, errOut)
	}
	if _, errOut, err := runQuiet(t, "train", "--out", runDir, "--resume", "--steps", "6", "--cache-dir", cache); err != nil {
		t.Errorf("resume: %v\n%s", err, errOut)
	}
	_, _, err = runQuiet(t, "train", "--out", runDir, "--resume", "--steps", "8", "--text-field", "id")
	if want := `--text-field "id" where the checkpoint has "body"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("resume with another field: %v, want %q", err, want)
	}
}
