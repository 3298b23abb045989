package train

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
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
	straight, err := Start(context.Background(), straightDir, Run{Model: mc, Recipe: tc, Source: &Task{Set: set}})
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
	first, err := Start(context.Background(), dir, Run{Model: mc, Recipe: tc, Source: &Task{Set: set}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runTrainer(t, first, 7); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	// The task rebuilt from the checkpoint's recipe.
	second, err := Start(context.Background(), dir, Run{Mode: Resume, Configure: func(*model.Config, *Config) error { return nil }})
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
	start := func(mc model.Config, tc Config) error {
		_, err := Start(context.Background(), t.TempDir(), Run{Model: mc, Recipe: tc, Source: &Task{Set: set}})
		return err
	}
	bad := mc
	bad.Vocab = 256
	if err := start(bad, tc); err == nil {
		t.Error("model vocabulary 256 for a task of 5 ids: no error")
	}
	bad = mc
	bad.Context = 8
	if err := start(bad, tc); err == nil {
		t.Error("context 8 for examples of 16: no error")
	}
	other := tc
	other.Task = nil
	if err := start(mc, other); err == nil {
		t.Error("no task in the configuration: no error")
	}
}

// TestResumeOtherTask: a task run resumed with another task, or with a
// corpus, is refused, as a corpus run resumed with another corpus or with
// a task is, and nothing is written.
func TestResumeOtherTask(t *testing.T) {
	mc, tc, _ := tinyTask(t)
	tc.Steps, tc.Warmup = 2, 0
	taskRun := t.TempDir()
	tr, err := Start(context.Background(), taskRun, Run{Model: mc, Recipe: tc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runTrainer(t, tr, 1); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	corpusRun := t.TempDir()
	if _, err := runTrainer(t, newTrainer(t, corpusRun, tinyTrain()), 1); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	mqar := *tc.Task
	mqar.Name = task.MQAR
	count := *tc.Task
	count.Count = 3
	tests := []struct {
		name string
		dir  string
		edit func(tc *Config)
		want string
	}{
		{"another task", taskRun, func(tc *Config) { tc.Task = &mqar }, `task.name "mqar" where the checkpoint has "induction-heads"`},
		{"another task option", taskRun, func(tc *Config) { tc.Task = &count }, "task.count 3 where the checkpoint has none"},
		{"a corpus", taskRun, func(tc *Config) { tc.Task = nil }, `task none where the checkpoint has "induction-heads"`},
		{"another corpus", corpusRun, func(tc *Config) { tc.Corpus = []string{"/elsewhere"} }, `corpus ["/elsewhere"] where the checkpoint has null`},
		{"a task", corpusRun, func(tc *Config) { tc.Task = &mqar }, `task "mqar" where the checkpoint has none`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := snapshot(t, tt.dir)
			_, err := Start(context.Background(), tt.dir, Run{Mode: Resume, Configure: func(_ *model.Config, tc *Config) error {
				tt.edit(tc)
				return nil
			}})
			var re *ResumeError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("resume: %v, want a ResumeError containing %q", err, tt.want)
			}
			if after := snapshot(t, tt.dir); after != before {
				t.Error("a refused resume changed the run's files")
			}
		})
	}
}

// TestDistributedTask: a task run on 2 ranks gives bitwise the losses,
// test scores and weights of one process with the same global batch.
func TestDistributedTask(t *testing.T) {
	mc, tc, set := tinyTask(t)
	tc.Steps, tc.Batch, tc.Accum = 6, 2, 2
	one := t.TempDir()
	single, err := Start(context.Background(), one, Run{Model: mc, Recipe: tc, Source: &Task{Set: set}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runTrainer(t, single, 0); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	trs, errs := trainRanks(t, dir, 2, func(int) Run { return Run{Model: mc, Recipe: tc, Source: &Task{Set: set}} }, 0)
	noErrors(t, errs)
	a, b := readMetrics(t, one), readMetrics(t, dir)
	sameRun(t, a, b)
	for i := range a {
		if (a[i].ValExact == nil) != (b[i].ValExact == nil) || a[i].ValExact != nil && *a[i].ValExact != *b[i].ValExact {
			t.Errorf("step %d: exact match differs", a[i].Step)
		}
	}
	for _, tr := range trs {
		sameWeights(t, single.Model, tr.Model)
	}
}
