package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/experiment"
	"github.com/polysketch/polysketch/train"
)

func TestExperimentCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "exp")
	stdout, _, err := runQuiet(t, "experiment", "induction-heads", "--quick", "--dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "| mechanism | N=16 | N=32 |") {
		t.Errorf("output %q holds no table", stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "results.jsonl")); err != nil {
		t.Error(err)
	}
	// Again: every run is complete, so the same table comes back at once.
	again, _, err := runQuiet(t, "experiment", "induction-heads", "--quick", "--dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	table := func(s string) string { return s[:strings.Index(s, "written in")] }
	if table(again) != table(stdout) {
		t.Errorf("rerun gives another table:\n%s\n%s", stdout, again)
	}
	_, _, err = runQuiet(t, "experiment", "induction-heads", "--quick", "--seed", "2", "--dir", dir)
	if err == nil || !strings.Contains(err.Error(), "different configuration") {
		t.Errorf("another seed in the same directory: %v", err)
	}
}

func TestExperimentErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"experiment"}, "name one of selective-copy"},
		{[]string{"experiment", "copy"}, `unknown experiment "copy": choose one of selective-copy`},
		{[]string{"experiment", "--quick", "mqar"}, "name the experiment before the flags"},
		{[]string{"experiment", "mqar", "--lr", "3"}, "flag provided but not defined: -lr"},
		{[]string{"experiment", "mqar", "--quick", "--steps", "-2"}, "--steps -2: must be positive"},
		{[]string{"experiment", "task", "--quick"}, "needs a task file (--task)"},
		{[]string{"experiment", "mqar", "--quick", "--task", "x.jsonl"}, "takes no task file"},
		{[]string{"experiment", "downstream", "--quick"}, "no --choices: experiment downstream needs files of multiple-choice questions"},
		{[]string{"experiment", "lm", "--quick", "--choices", "q.jsonl"}, "takes no --choices or --checkpoints"},
		{[]string{"experiment", "downstream", "--quick", "--choices", "q.jsonl", "--shots", "-1"}, "--shots -1: must not be negative"},
		{[]string{"experiment", "downstream", "--quick", "--choices", "q.jsonl", "--limit", "-1"}, "--limit -1: must not be negative"},
	}
	for _, tt := range tests {
		_, _, err := runQuiet(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line containing %q", tt.args, err, tt.want)
		}
	}
	out, _, err := runQuiet(t, "experiment", "-h")
	if err == nil || !strings.Contains(out, "reversal") || !strings.Contains(out, "minutes") {
		t.Errorf("-h: %v\n%s", err, out)
	}
}

// TestExperimentRunLocked: a run that an experiment is training is locked
// as a train's is: train on its directory is refused while the
// experiment trains it, and resumes it once the experiment is done.
func TestExperimentRunLocked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "exp")
	e, err := experiment.Lookup("induction-heads")
	if err != nil {
		t.Fatal(err)
	}
	var runDir string
	var refused error
	o := experiment.Options{Dir: dir, Quick: true, Seed: 1, Progress: func(run string, p train.Progress) {
		if runDir == "" {
			runDir = filepath.Join(dir, experiment.RunsDir, run)
			_, _, refused = runQuiet(t, "train", "--out", runDir, "--resume", "--steps", "1000")
		}
	}}
	if _, err := e.Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("train: %s is in use by another polysketch train (lock %s held)", runDir, filepath.Join(runDir, train.LockFile))
	if refused == nil || !strings.Contains(refused.Error(), want) {
		t.Errorf("train on a run the experiment trains: %v, want %q", refused, want)
	}
	_, recipe, err := train.OpenRun(runDir)
	if err != nil {
		t.Fatal(err)
	}
	steps := strconv.Itoa(recipe.Steps + 1)
	if _, _, err := runQuiet(t, "train", "--out", runDir, "--resume", "--steps", steps); err != nil {
		t.Errorf("train on the run once the experiment is done: %v", err)
	}
}
