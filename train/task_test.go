package train

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/data/task"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
)

// tinyTask is a short induction-heads task and a softmax model for it.
func tinyTask(t *testing.T) (model.Config, Config, *task.Set) {
	t.Helper()
	spec := task.Spec{Name: task.InductionHeads, Length: 16, Vocab: 4, Test: 32, Seed: 1}
	set, err := task.New(spec, tokenizer.Byte)
	if err != nil {
		t.Fatal(err)
	}
	mc := model.Config{Vocab: set.Vocab(), Dim: 16, Layers: 2, Heads: 2, Context: 16, Attention: attention.SoftmaxConfig{}, Seed: 1}
	tc := tinyTrain()
	tc.Task = &spec
	tc.SaveEvery = 5
	return mc, tc, set
}

func TestTaskRun(t *testing.T) {
	mc, tc, set := tinyTask(t)
	straightDir := t.TempDir()
	straight, err := NewTask(straightDir, mc, tc, set)
	if err != nil {
		t.Fatal(err)
	}
	res, err := runTrainer(t, straight, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Val == nil || res.Val.Task == nil || res.Val.Task.Examples != 32 || res.Val.Task.Tokens != 32 {
		t.Fatalf("final validation %+v: want the scores of 32 test examples of one answer each", res.Val)
	}
	ms := readMetrics(t, straightDir)
	scored := 0
	for _, m := range ms {
		if m.ValAccuracy != nil {
			scored++
			if *m.ValAccuracy < 0 || *m.ValAccuracy > 1 || *m.ValExact != *m.ValAccuracy {
				// one answer per example: exact match is accuracy
				t.Errorf("step %d: accuracy %v, exact %v", m.Step, *m.ValAccuracy, *m.ValExact)
			}
		}
		if m.Tokens != int64(m.Step*tc.Batch*16) {
			t.Errorf("step %d: %d tokens, want %d", m.Step, m.Tokens, m.Step*tc.Batch*16)
		}
	}
	if scored != tc.Steps/tc.EvalEvery {
		t.Errorf("%d validations, want %d", scored, tc.Steps/tc.EvalEvery)
	}
	if _, err := os.Stat(filepath.Join(straightDir, AccuracyPlotFile)); err != nil {
		t.Errorf("no accuracy plot: %v", err)
	}
	// The first loss is near ln 5 (uniform over the vocabulary) on the
	// one answer position, not over the 16 positions.
	if ms[0].Loss < 1 || ms[0].Loss > 2.5 {
		t.Errorf("first loss %v, want about ln 5 = %.2f", ms[0].Loss, math.Log(5))
	}

	// Interrupt and resume: the same run, bit for bit.
	dir := t.TempDir()
	first, err := NewTask(dir, mc, tc, set)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runTrainer(t, first, 7); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	c, saved, err := LoadCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := task.New(*saved.Task, tokenizer.Byte)
	if err != nil {
		t.Fatal(err)
	}
	second, err := ResumeTask(dir, c, saved, again)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runTrainer(t, second, 0); err != nil {
		t.Fatal(err)
	}
	a, b := readMetrics(t, straightDir), readMetrics(t, dir)
	sameRun(t, a, b)
	for i := range a {
		if (a[i].ValExact == nil) != (b[i].ValExact == nil) || a[i].ValExact != nil && *a[i].ValExact != *b[i].ValExact {
			t.Errorf("step %d: exact match differs", a[i].Step)
		}
	}
	sameWeights(t, straight.Model, second.Model)
}

func TestTaskErrors(t *testing.T) {
	mc, tc, set := tinyTask(t)
	bad := mc
	bad.Vocab = 256
	if _, err := NewTask(t.TempDir(), bad, tc, set); err == nil {
		t.Error("model vocabulary 256 for a task of 5 ids: no error")
	}
	bad = mc
	bad.Context = 8
	if _, err := NewTask(t.TempDir(), bad, tc, set); err == nil {
		t.Error("context 8 for examples of 16: no error")
	}
	other := tc
	other.Task = nil
	if _, err := NewTask(t.TempDir(), mc, other, set); err == nil {
		t.Error("no task in the configuration: no error")
	}
}
