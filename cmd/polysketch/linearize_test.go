package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/train"
)

// tinyTeacher trains a tiny softmax teacher of context 32 (four blocks of
// 8 for its students) on tinyRun's corpus and returns the temporary
// directory, the teacher's run directory and the flags of a tiny
// linearization of it into out.
func tinyTeacher(t *testing.T) (dir, teacher string, args []string) {
	t.Helper()
	dir, targs := tinyRun(t)
	teacher = filepath.Join(dir, "run")
	targs = append(without(without(targs, "--block"), "--sketch-size"), "--attention", "softmax", "--context", "32", "--steps", "12")
	if _, errOut, err := runQuiet(t, append([]string{"train"}, targs...)...); err != nil {
		t.Fatalf("train: %v\n%s", err, errOut)
	}
	return dir, teacher, []string{"linearize", "--checkpoint", teacher, "--out", filepath.Join(dir, "student"),
		"--cache-dir", filepath.Join(dir, "cache"),
		"--attention", "polysketch:block=8:sketch-size=4:learned:raw-qk:scale:local-softmax:mix",
		"--transfer-steps", "4", "--steps", "4", "--batch", "4", "--eval-every", "2", "--eval-batches", "2", "--distill", "0.5"}
}

// TestLinearize converts a tiny softmax teacher, prints the per-layer
// errors and losses, leaves an ordinary checkpoint that generate and eval
// use, and says a complete linearization is complete.
func TestLinearize(t *testing.T) {
	dir, _, args := tinyTeacher(t)
	student := filepath.Join(dir, "student")
	out, errOut, err := runQuiet(t, args...)
	if err != nil {
		t.Fatalf("linearize: %v\n%s", err, errOut)
	}
	for _, want := range []string{"per-layer relative error on 2 held-out batches: before transfer", "after attention transfer: validation loss", "after fine-tuning: validation loss"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{"per-layer relative error before attention transfer", "step 4/4"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("progress lacks %q:\n%s", want, errOut)
		}
	}
	for _, f := range []string{train.MetricsFile, train.PlotFile, train.StageFile(train.MetricsFile, train.StageTransfer), train.StageFile(train.PlotFile, train.StageTransfer), train.LayersFile} {
		if _, err := os.Stat(filepath.Join(student, f)); err != nil {
			t.Error(err)
		}
	}
	if out, _, err := runQuiet(t, "generate", "--checkpoint", student, "--tokens", "8"); err != nil || out == "" {
		t.Errorf("generate: %v, %q", err, out)
	}
	if _, errOut, err := runQuiet(t, "eval", "--checkpoint", student, "--cache-dir", filepath.Join(dir, "cache"), "--batch", "4", "--batches", "2"); err != nil {
		t.Errorf("eval: %v\n%s", err, errOut)
	}
	if _, _, err := runQuiet(t, "linearize", "--out", student, "--resume", "--cache-dir", filepath.Join(dir, "cache")); err != nil {
		t.Errorf("resume of a complete linearization: %v", err)
	}
}

// TestLinearizeBadInput: what linearize cannot convert is refused in one
// line, with a non-zero exit, writing nothing.
func TestLinearizeBadInput(t *testing.T) {
	dir, teacher, args := tinyTeacher(t)
	set := func(args []string, flag, value string) []string {
		out := append([]string(nil), args...)
		for i := range out {
			if out[i] == flag {
				out[i+1] = value
				return out
			}
		}
		return append(out, flag, value)
	}
	// A polysketch teacher, and one whose tokenizer outgrows its vocabulary.
	_, pargs := tinyRun(t)
	poly := filepath.Join(dir, "poly")
	if _, errOut, err := runQuiet(t, append(append([]string{"train"}, pargs...), "--out", poly, "--steps", "2", "--cache-dir", filepath.Join(dir, "cache"))...); err != nil {
		t.Fatalf("train: %v\n%s", err, errOut)
	}
	small := filepath.Join(dir, "small")
	mc := model.DefaultConfig()
	mc.Vocab, mc.Dim, mc.Layers, mc.Heads, mc.Context = 100, 16, 1, 2, 32
	s, err := train.Open(teacher)
	if err != nil {
		t.Fatal(err)
	}
	mc.Attention = s.Model.Config().Attention
	m, err := model.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.Save(small, &checkpoint.Checkpoint{Model: m, State: checkpoint.State{Tokenizer: "byte"}}); err != nil {
		t.Fatal(err)
	}

	before := snapshotTree(t, teacher)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"teacher not softmax", set(args, "--checkpoint", poly), "the teacher's attention is polysketch, not softmax or flash: linearization converts softmax models (--from-linear converts another)"},
		{"student not linear", set(args, "--attention", "flash"), "student attention flash is not a linear mechanism with a state of constant size: use one of polysketch, elu, performer, sqpolysketch"},
		{"student with a KV cache", set(args, "--attention", "hyper"), "student attention hyper is not a linear mechanism"},
		{"tokens outside the vocabulary", set(args, "--checkpoint", small), "its tokenizer byte has 256 tokens, but its model's embedding only 100 rows"},
		{"out is the teacher's run", set(args, "--out", teacher), "is the teacher's directory: the student would overwrite it"},
		{"out is the teacher's checkpoint", set(args, "--out", filepath.Join(teacher, train.CheckpointDir)), "is the teacher's directory"},
		{"out holds the teacher's checkpoint", set(set(args, "--checkpoint", filepath.Join(teacher, train.CheckpointDir)), "--out", teacher), "is the teacher's directory"},
		{"no out", set(args, "--out", ""), "no --out"},
		{"train", set(args, "--train", "some"), `--train "some": use all or attention`},
		{"resume of nothing", []string{"linearize", "--out", filepath.Join(dir, "student"), "--resume"}, "no linearization in"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := runQuiet(t, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line with %q", err, c.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "student")); !os.IsNotExist(err) {
				t.Errorf("refused linearize made its --out: %v", err)
			}
			if after := snapshotTree(t, teacher); after != before {
				t.Error("refused linearize changed the teacher's directory")
			}
		})
	}
}
