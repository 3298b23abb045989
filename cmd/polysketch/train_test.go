package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/internal/filelock"
	"github.com/polysketch/polysketch/train"
)

// runQuiet runs the CLI with args, stdout and stderr going to buffers.
func runQuiet(t *testing.T, args ...string) (stdout, errOut string, err error) {
	t.Helper()
	var out, eout bytes.Buffer
	old := stderr
	stderr = &eout
	defer func() { stderr = old }()
	err = run(args, &out)
	return out.String(), eout.String(), err
}

// tinyRun makes a corpus in a temporary directory and returns the flags
// of a tiny training run on it, writing to out in that directory.
func tinyRun(t *testing.T) (dir string, args []string) {
	t.Helper()
	dir = t.TempDir()
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "func f%d() int { return %d } // the quick brown fox\n", i%13, i%7)
	}
	if err := os.WriteFile(filepath.Join(dir, "corpus.txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, []string{
		"--corpus", filepath.Join(dir, "corpus.txt"), "--cache-dir", filepath.Join(dir, "cache"),
		"--out", filepath.Join(dir, "run"),
		"--dim", "16", "--layers", "1", "--heads", "2", "--context", "16", "--block", "8", "--sketch-size", "4",
		"--batch", "4", "--steps", "10", "--eval-every", "5", "--eval-batches", "2", "--lr", "3e-3",
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func metricsOf(t *testing.T, run string) []train.Metrics {
	t.Helper()
	ms, skipped, err := train.ReadMetrics(filepath.Join(run, train.MetricsFile))
	if err != nil || skipped > 0 {
		t.Fatalf("metrics: %v (%d lines skipped)", err, skipped)
	}
	return ms
}

// TestTrainEvalGenerate runs the three commands one after the other, as a
// user would.
func TestTrainEvalGenerate(t *testing.T) {
	dir, args := tinyRun(t)
	runDir := filepath.Join(dir, "run")
	out, errOut, err := runQuiet(t, append([]string{"train"}, args...)...)
	if err != nil {
		t.Fatalf("train: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, "step 10 of 10: training loss") || !strings.Contains(out, "validation loss") {
		t.Errorf("train printed %q", out)
	}
	for _, want := range []string{"model: polysketch attention (sketch-size=4, block=8, learned=true), 1 layers", "step 1/10", "step 10/10", "step 5: validation loss"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("progress on stderr lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "\r") {
		t.Error("progress rewrites lines on stderr that is not a terminal")
	}
	ms := metricsOf(t, runDir)
	if len(ms) != 10 || ms[9].ValLoss == nil {
		t.Fatalf("metrics log of %d lines, want 10 ending with a validation", len(ms))
	}
	if _, err := os.Stat(filepath.Join(runDir, train.PlotFile)); err != nil {
		t.Error(err)
	}

	// eval on what training validated on gives the same loss, bit for bit.
	out, errOut, err = runQuiet(t, "eval", "--checkpoint", runDir, "--cache-dir", filepath.Join(dir, "cache"), "--batch", "4", "--batches", "2", "--json")
	if err != nil {
		t.Fatalf("eval: %v\n%s", err, errOut)
	}
	var r evalResult
	if err := jsonUnmarshal(out, &r); err != nil {
		t.Fatalf("eval printed %q: %v", out, err)
	}
	if r.Loss != *ms[9].ValLoss || r.Step != 10 || r.Split != "val" || r.Tokens != 2*4*16 {
		t.Errorf("eval: %+v; want the final validation loss %v of step 10 over 128 tokens", r, *ms[9].ValLoss)
	}
	if math.Abs(r.Perplexity-math.Exp(r.Loss)) > 1e-9 || math.Abs(r.BitsPerToken-r.Loss/math.Ln2) > 1e-9 {
		t.Errorf("eval: perplexity %v and bits %v do not match loss %v", r.Perplexity, r.BitsPerToken, r.Loss)
	}
	out, _, err = runQuiet(t, "eval", "--checkpoint", filepath.Join(runDir, "checkpoint"), "--cache-dir", filepath.Join(dir, "cache"), "--corpus", filepath.Join(dir, "corpus.txt"))
	if err != nil || !strings.Contains(out, "split all") || !strings.Contains(out, "perplexity") {
		t.Errorf("eval of a corpus: %v, %q", err, out)
	}

	// generate: the prompt, then the tokens, the same for the same seed.
	gen := func(args ...string) string {
		t.Helper()
		out, errOut, err := runQuiet(t, append([]string{"generate", "--checkpoint", runDir}, args...)...)
		if err != nil {
			t.Fatalf("generate %q: %v\n%s", args, err, errOut)
		}
		if !strings.Contains(errOut, "generated") {
			t.Errorf("generate reports %q on stderr", errOut)
		}
		return out
	}
	a := gen("--prompt", "func f", "--tokens", "30", "--temperature", "1", "--seed", "7")
	if !strings.HasPrefix(a, "func f") || len(a) != len("func f")+30+1 {
		t.Errorf("generate printed %q: want the prompt, 30 bytes and a newline", a)
	}
	if b := gen("--prompt", "func f", "--tokens", "30", "--temperature", "1", "--seed", "7"); b != a {
		t.Errorf("the same seed gave %q and %q", a, b)
	}
	if b := gen("--prompt", "func f", "--tokens", "30", "--temperature", "1", "--seed", "8"); b == a {
		t.Errorf("seeds 7 and 8 both gave %q", a)
	}
	if g := gen("--prompt", "func f", "--tokens", "5", "--echo=false", "--temperature", "0"); len(g) != 6 {
		t.Errorf("--echo=false printed %q, want 5 bytes and a newline", g)
	}
}

// TestTrainResume trains 6 steps, then resumes to 12, and checks that the
// losses are those of 12 steps straight (with a constant learning rate,
// which raising --steps does not change).
func TestTrainResume(t *testing.T) {
	dir, args := tinyRun(t)
	args = append(args, "--warmup", "0", "--min-lr", "3e-3")
	straight := filepath.Join(dir, "straight")
	if _, _, err := runQuiet(t, append(append([]string{"train"}, args...), "--out", straight, "--steps", "12")...); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(dir, "run")
	if _, _, err := runQuiet(t, append(append([]string{"train"}, args...), "--steps", "6")...); err != nil {
		t.Fatal(err)
	}
	out, _, err := runQuiet(t, "train", "--out", runDir, "--resume", "--steps", "12", "--cache-dir", filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "step 12 of 12") {
		t.Errorf("resumed run printed %q", out)
	}
	a, b := metricsOf(t, straight), metricsOf(t, runDir)
	if len(a) != 12 || len(b) != 12 {
		t.Fatalf("%d and %d steps, want 12", len(a), len(b))
	}
	for i := range a {
		if a[i].Loss != b[i].Loss || a[i].GradNorm != b[i].GradNorm {
			t.Errorf("step %d: loss %v norm %v straight, %v and %v resumed", i+1, a[i].Loss, a[i].GradNorm, b[i].Loss, b[i].GradNorm)
		}
	}
	// Done: resuming again has nothing to do.
	out, _, err = runQuiet(t, "train", "--out", runDir, "--resume", "--cache-dir", filepath.Join(dir, "cache"))
	if err != nil || !strings.Contains(out, "complete at step 12 of 12") {
		t.Errorf("resuming a complete run: %v, %q", err, out)
	}
}

// interrupter is a stderr that sends the process SIGINT when it sees a
// progress line: what Ctrl-C does in the middle of training.
type interrupter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	sent bool
}

func (w *interrupter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.sent && bytes.Contains(p, []byte("step 1/")) {
		w.sent = true
		syscall.Kill(os.Getpid(), syscall.SIGINT)
	}
	return w.buf.Write(p)
}

func TestTrainInterrupt(t *testing.T) {
	dir, args := tinyRun(t)
	w := &interrupter{}
	old := stderr
	stderr = w
	defer func() { stderr = old }()
	var out bytes.Buffer
	err := run(append(append([]string{"train"}, args...), "--steps", "100000", "--save-every", "0"), &out)
	if err != nil {
		t.Fatalf("interrupted train: %v", err)
	}
	if !strings.Contains(out.String(), "interrupted at step") || !strings.Contains(out.String(), "--resume") {
		t.Fatalf("interrupted train printed %q", out.String())
	}
	runDir := filepath.Join(dir, "run")
	c, err := checkpoint.Load(filepath.Join(runDir, train.CheckpointDir))
	if err != nil {
		t.Fatal(err)
	}
	ms := metricsOf(t, runDir)
	if c.State.Step < 1 || c.State.Step >= 100000 || len(ms) != c.State.Step {
		t.Errorf("checkpoint at step %d with %d lines of metrics", c.State.Step, len(ms))
	}
	// Stopping released the run's lock.
	l, err := filelock.TryLock(filepath.Join(runDir, train.LockFile))
	if err != nil {
		t.Fatalf("after the interrupted train: %v", err)
	}
	l.Unlock()
}

// TestTrainLocked checks that a train on a run that another train holds
// fails with one line before it reads or writes anything there, whatever
// it was asked to do.
func TestTrainLocked(t *testing.T) {
	dir, args := tinyRun(t)
	runDir := filepath.Join(dir, "run")
	cache := filepath.Join(dir, "cache")
	if _, _, err := runQuiet(t, append(append([]string{"train"}, args...), "--steps", "2")...); err != nil {
		t.Fatal(err)
	}
	// The first run is over, so its lock is free: take it, as a train
	// under way would. A lock through another open file conflicts even
	// within one process.
	lockPath := filepath.Join(runDir, train.LockFile)
	l, err := filelock.TryLock(lockPath)
	if err != nil {
		t.Fatalf("the lock of a finished run: %v", err)
	}
	before := snapshotTree(t, runDir)
	want := fmt.Sprintf("train: %s is in use by another polysketch train (lock %s held); wait for it or choose another --out", runDir, lockPath)
	for _, extra := range [][]string{
		{"--steps", "4"},
		{"--force", "--steps", "4"},
		{"--resume", "--steps", "4"},
	} {
		a := append(append([]string{"train"}, args...), extra...)
		if extra[0] == "--resume" {
			a = append([]string{"train", "--out", runDir, "--cache-dir", cache}, extra...)
		}
		out, errOut, err := runQuiet(t, a...)
		if err == nil || err.Error() != want {
			t.Errorf("train %s on a locked run: %v, want\n%s", extra[0], err, want)
		}
		if out != "" || errOut != "" {
			t.Errorf("train %s on a locked run printed %q and %q", extra[0], out, errOut)
		}
		if after := snapshotTree(t, runDir); after != before {
			t.Errorf("train %s on a locked run changed its files", extra[0])
		}
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runQuiet(t, "train", "--out", runDir, "--resume", "--steps", "3", "--cache-dir", cache); err != nil {
		t.Fatalf("resume once the lock is free: %v", err)
	}
	if ms := metricsOf(t, runDir); len(ms) != 3 {
		t.Errorf("resumed run has %d lines of metrics, want 3", len(ms))
	}
}

// TestTrainLockTidy checks that a train that fails before it writes
// anything leaves no directory behind, and leaves one it did not make.
func TestTrainLockTidy(t *testing.T) {
	dir, args := tinyRun(t)
	fresh := filepath.Join(dir, "new")
	_, _, err := runQuiet(t, append(append([]string{"train"}, args...), "--out", filepath.Join(fresh, "run"), "--heads", "3")...)
	if err == nil {
		t.Fatal("train with 3 heads of a width of 16 succeeded")
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed train left %s: %v", fresh, err)
	}
	mine := t.TempDir()
	if _, _, err := runQuiet(t, append(append([]string{"train"}, args...), "--out", mine, "--heads", "3")...); err == nil {
		t.Fatal("train with 3 heads of a width of 16 succeeded")
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("a failed train removed the --out it did not make: %v", err)
	}
}

// snapshotTree returns the names and contents of the files under dir.
func snapshotTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		fmt.Fprintf(&b, "%s %x\n", path, data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestTrainLearned trains with learned sketches, whose parameters must
// go through the checkpoint like any other, and resumes and samples.
func TestTrainLearned(t *testing.T) {
	dir, args := tinyRun(t)
	runDir := filepath.Join(dir, "run")
	if _, errOut, err := runQuiet(t, append(append([]string{"train"}, args...), "--learned", "--steps", "3")...); err != nil {
		t.Fatalf("train --learned: %v\n%s", err, errOut)
	}
	if _, _, err := runQuiet(t, "train", "--out", runDir, "--resume", "--steps", "5", "--cache-dir", filepath.Join(dir, "cache")); err != nil {
		t.Fatalf("resume: %v", err)
	}
	c, err := checkpoint.Load(filepath.Join(runDir, train.CheckpointDir))
	if err != nil || !c.Model.Config().Attention.(attention.PolysketchConfig).Learned || c.State.Step != 5 {
		t.Fatalf("checkpoint: %v", err)
	}
	if out, _, err := runQuiet(t, "generate", "--checkpoint", runDir, "--tokens", "8"); err != nil || out == "" {
		t.Errorf("generate: %v, %q", err, out)
	}
}

func TestTrainRefusesToOverwrite(t *testing.T) {
	dir, args := tinyRun(t)
	if _, _, err := runQuiet(t, append([]string{"train"}, args...)...); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(dir, "run", train.CheckpointDir)
	before := snapshotDir(t, ck)
	_, _, err := runQuiet(t, append([]string{"train"}, args...)...)
	if err == nil || !strings.Contains(err.Error(), "already holds a run; pass --resume to continue it, or --force") {
		t.Fatalf("second train: %v, want a refusal", err)
	}
	if after := snapshotDir(t, ck); after != before {
		t.Error("refused train changed the checkpoint")
	}
	if _, _, err := runQuiet(t, append(append([]string{"train"}, args...), "--force", "--steps", "3")...); err != nil {
		t.Fatal(err)
	}
	if ms := metricsOf(t, filepath.Join(dir, "run")); len(ms) != 3 {
		t.Errorf("forced run left %d lines of metrics, want its own 3", len(ms))
	}
}

// snapshotDir returns the names and contents of the files in dir.
func snapshotDir(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %x\n", e.Name(), data)
	}
	return b.String()
}

func TestTrainErrors(t *testing.T) {
	dir, args := tinyRun(t)
	empty := filepath.Join(dir, "empty.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A finished run to resume with mismatching flags.
	done := filepath.Join(dir, "done")
	if _, _, err := runQuiet(t, append(append([]string{"train"}, args...), "--out", done, "--steps", "2")...); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	tests := []struct {
		name  string
		extra []string
		want  string
	}{
		{"missing corpus", []string{"--corpus", filepath.Join(dir, "nothere.txt")}, "nothere.txt"},
		{"empty corpus", []string{"--corpus", empty}, "empty.txt"},
		{"unknown attention", []string{"--attention", "linear"}, `unknown attention mechanism "linear": use one of softmax, flash`},
		{"odd degree", []string{"--degree", "3"}, "degree 3"},
		{"heads not dividing dim", []string{"--heads", "3"}, "--dim 16 is not divisible by --heads 3"},
		{"odd head size", []string{"--dim", "15", "--heads", "3"}, "head size 5 (--dim 15 / --heads 3) is odd"},
		{"option of another mechanism", []string{"--attention", "softmax"}, "--block is no option of softmax attention: it has no options"},
		{"option of another mechanism", []string{"--attention", "flash", "--learned"}, "--sketch-size is no option of flash attention: its options are --block"},
		{"invalid option value", []string{"--sketch", "fourier"}, `--sketch "fourier": use "gaussian" or "srht"`},
		{"unknown tokenizer", []string{"--tokenizer", "utf9"}, `unknown tokenizer "utf9"`},
		{"no steps", []string{"--steps", "0"}, "steps 0"},
		{"negative lr", []string{"--lr", "-1"}, "peak learning rate -1"},
		{"bad number", []string{"--batch", "four"}, `invalid value "four" for flag -batch`},
		{"bad seed", []string{"--seed", "-1"}, "non-negative integer"},
		{"context longer than the text", []string{"--context", "100000", "--block", "8"}, "sequence length 100000"},
		{"stray argument", []string{"extra"}, `unexpected argument "extra"`},
		{"resume nothing", []string{"--resume", "--out", filepath.Join(dir, "none")}, "no checkpoint in"},
		{"resume and force", []string{"--resume", "--force"}, "contradict"},
		{"resume with another width", []string{"--out", done, "--resume", "--dim", "32"}, "--dim 32 where the checkpoint has 16"},
		{"resume with another attention", []string{"--out", done, "--resume", "--attention", "softmax"}, `--attention "softmax" where the checkpoint has "polysketch"`},
		{"resume with another batch", []string{"--out", done, "--resume", "--batch", "2"}, "--batch 2 where the checkpoint has 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := append([]string{"train"}, args...)
			if strings.Contains(tc.name, "corpus") {
				a = without(a, "--corpus")
			}
			a = append(a, "--out", t.TempDir())
			if strings.Contains(tc.name, "resume") {
				a = []string{"train", "--cache-dir", cache}
			}
			_, _, err := runQuiet(t, append(a, tc.extra...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

// TestTrainLargerThanMemory checks that a run whose step cannot fit in
// the machine's memory is refused in one line before anything is written.
func TestTrainLargerThanMemory(t *testing.T) {
	if physicalMemory() == 0 {
		t.Skip("this OS does not say how much memory it has (/proc/meminfo): train does not check")
	}
	_, args := tinyRun(t)
	out := filepath.Join(t.TempDir(), "run")
	_, _, err := runQuiet(t, append(append([]string{"train"}, args...), "--out", out, "--context", "1048576", "--batch", "65536")...)
	if err == nil || !strings.Contains(err.Error(), "more than this machine's") || !strings.Contains(err.Error(), "lower --batch") {
		t.Fatalf("error %v, want one saying the step needs more than the machine's memory", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error spans lines: %q", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("--out %s: %v, want nothing written", out, err)
	}
}

// without returns args without the flag name and its value.
func without(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == name {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// TestCorruptCheckpoint checks that every command that reads a checkpoint
// refuses a damaged one with one clear line.
func TestCorruptCheckpoint(t *testing.T) {
	dir, args := tinyRun(t)
	if _, _, err := runQuiet(t, append([]string{"train"}, args...)...); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(dir, "run")
	weights := filepath.Join(runDir, train.CheckpointDir, "model.safetensors")
	b, err := os.ReadFile(weights)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-3] ^= 4
	if err := os.WriteFile(weights, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	for _, args := range [][]string{
		{"eval", "--checkpoint", runDir, "--cache-dir", cache},
		{"generate", "--checkpoint", runDir},
		{"train", "--out", runDir, "--resume", "--steps", "20", "--cache-dir", cache},
	} {
		_, _, err := runQuiet(t, args...)
		if err == nil || !strings.Contains(err.Error(), "model.safetensors: SHA-256 checksum mismatch") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line about the checksum", args[0], err)
		}
	}
	if got, _ := os.ReadFile(weights); !bytes.Equal(got, b) {
		t.Error("a command changed the corrupt checkpoint")
	}
}

func TestEvalGenerateErrors(t *testing.T) {
	dir, args := tinyRun(t)
	softmax := filepath.Join(dir, "softmax")
	if _, _, err := runQuiet(t, append(append([]string{"train"}, without(without(args, "--block"), "--sketch-size")...), "--attention", "softmax", "--out", softmax, "--steps", "2")...); err != nil {
		t.Fatal(err)
	}
	sketch := filepath.Join(dir, "polysketch")
	if _, _, err := runQuiet(t, append(append([]string{"train"}, args...), "--out", sketch, "--steps", "1")...); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"eval", "--checkpoint", filepath.Join(dir, "nothere")}, "no checkpoint"},
		{[]string{"eval", "--checkpoint", softmax, "--split", "test"}, `--split "test"`},
		{[]string{"eval", "--checkpoint", softmax, "--batch", "0"}, "--batch 0"},
		{[]string{"eval", "--checkpoint", softmax, "--corpus", filepath.Join(dir, "nothere.txt")}, "nothere.txt"},
		{[]string{"generate", "--checkpoint", filepath.Join(dir, "nothere")}, "no checkpoint"},
		{[]string{"generate", "--checkpoint", softmax, "--prompt", ""}, "--prompt is empty"},
		{[]string{"generate", "--checkpoint", softmax, "--prompt-ids", ""}, "--prompt-ids is empty"},
		{[]string{"generate", "--checkpoint", softmax, "--prompt-ids", "1,,2"}, `--prompt-ids: "" is not a token id`},
		{[]string{"generate", "--checkpoint", softmax, "--temperature", "-1"}, "--temperature -1"},
		{[]string{"generate", "--checkpoint", softmax, "--top-p", "0"}, "--top-p 0"},
		{[]string{"generate", "--checkpoint", softmax, "--top-k", "-2"}, "--top-k -2"},
		{[]string{"generate", "--checkpoint", softmax, "--tokens", "40"}, "exceed the context length 16 of this softmax model"},
		{[]string{"eval", "--checkpoint", softmax, "--attention", "flash"}, "--attention flash: the checkpoint was trained with softmax attention"},
		{[]string{"generate", "--checkpoint", softmax, "--block", "4"}, "--block is no option of softmax attention"},
		{[]string{"generate", "--checkpoint", sketch, "--block", "4", "--local=false"}, "--block 4 where the checkpoint has 8, --local false where the checkpoint has true"},
		{[]string{"eval", "--checkpoint", sketch, "--sketch-size", "0"}, "--sketch-size 0: must be positive"},
		{[]string{"serve", "--checkpoint", softmax, "--addr", "127.0.0.1:0", "--attention", "flash"}, "--attention flash: the checkpoint was trained with softmax attention"},
		{[]string{"serve", "--checkpoint", sketch, "--addr", "127.0.0.1:0", "--tokenizer", "gpt2"}, "--tokenizer gpt2 is gpt2"},
	}
	for _, tc := range tests {
		_, _, err := runQuiet(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line containing %q", tc.args, err, tc.want)
		}
	}
	// Within its context a softmax model generates, streaming: one write
	// per token, after the prompt and before the final newline.
	var w countingWriter
	old := stderr
	stderr = io.Discard
	err := run([]string{"generate", "--checkpoint", softmax, "--prompt", "func", "--tokens", "12"}, &w)
	stderr = old
	if err != nil || w.buf.Len() != 4+12+1 || w.writes != 1+12+1 {
		t.Errorf("softmax generate: %v, %q in %d writes, want 14", err, w.buf.String(), w.writes)
	}
}

type countingWriter struct {
	buf    bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.buf.Write(p)
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"train", "-h"}, {"eval", "-h"}, {"generate", "-h"}, {"bench", "train", "-h"}} {
		out, _, err := runQuiet(t, args...)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%q: %v, want flag.ErrHelp", args, err)
		}
		if !strings.Contains(out, "usage: polysketch "+strings.Join(args[:len(args)-1], " ")) || !strings.Contains(out, "-") {
			t.Errorf("%q printed %q", args, out)
		}
	}
	out, _, _ := runQuiet(t, "help")
	for _, c := range []string{"train", "eval", "generate"} {
		if !strings.Contains(out, "  "+c) {
			t.Errorf("help lacks %q: %q", c, out)
		}
	}
}

func TestProgressTerminal(t *testing.T) {
	var b bytes.Buffer
	p := &progress{w: &b, terminal: true, every: 10}
	p.update(train.Progress{Metrics: train.Metrics{Step: 1, Loss: 5}, Steps: 4})
	p.logf("a line of its own")
	p.update(train.Progress{Metrics: train.Metrics{Step: 4, Loss: 2}, Steps: 4})
	p.done()
	got := b.String()
	for _, want := range []string{"\r\033[K[======                  ] step 1/4", "\r\033[Ka line of its own\n", "[========================] step 4/4", "loss 2.0000"} {
		if !strings.Contains(got, want) {
			t.Errorf("terminal progress %q lacks %q", got, want)
		}
	}
	if !strings.HasSuffix(got, "\n") {
		t.Errorf("terminal progress %q does not end its line", got)
	}
}

func TestListFlag(t *testing.T) {
	list := []string{"default"}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Var(&listFlag{list: &list}, "corpus", "")
	if err := fs.Parse([]string{"--corpus", "a, b", "--corpus", "c"}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(list, "|") != "a|b|c" {
		t.Errorf("list %q, want a, b, c replacing the default", list)
	}
	fs = flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&listFlag{list: &list}, "corpus", "")
	if err := fs.Parse([]string{"--corpus", ","}); err == nil {
		t.Error("empty list accepted")
	}
}
