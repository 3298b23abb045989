package train

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/model"
)

// TestStartModes checks what each Mode does with a directory that holds
// a run, or none, and that every refusal leaves the directory as it was.
func TestStartModes(t *testing.T) {
	tc := tinyTrain()
	tc.Steps, tc.Warmup = 3, 0
	done := t.TempDir()
	if _, err := runTrainer(t, newTrainer(t, done, tc), 0); err != nil {
		t.Fatal(err)
	}
	stopped := t.TempDir()
	if _, err := runTrainer(t, newTrainer(t, stopped, tc), 1); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "new")
	tests := []struct {
		name  string
		dir   string
		mode  Mode
		stage string
		err   error  // nil: starts
		want  string // in the error
		step  int    // where a run starts
	}{
		{"new in a new directory", empty, New, "", nil, "", 0},
		{"new over a run", stopped, New, "", ErrExists, "already holds a run", 0},
		{"resume nothing", empty, Resume, "", ErrNoRun, "holds no run to resume", 0},
		{"resume", stopped, Resume, "", nil, "", 1},
		{"resume a complete run", done, Resume, "", ErrComplete, "is complete at step 3 of 3", 0},
		{"resume or new, a run", stopped, ResumeOrNew, "", nil, "", 1},
		{"resume or new, none", empty, ResumeOrNew, "", nil, "", 0},
		{"replace", stopped, Replace, "", nil, "", 0},
		{"resume another stage", stopped, Resume, "transfer", nil, `holds a checkpoint of stage "", not of stage "transfer"`, 0},
		{"a new stage after another", stopped, ResumeOrNew, "transfer", nil, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := snapshot(t, tt.dir)
			train, val := tinyData(t)
			tr, err := Start(context.Background(), tt.dir, Run{Model: tinyModel(), Recipe: tc, Mode: tt.mode, Stage: tt.stage, Source: &Corpus{Train: train, Val: val}})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Start: %v", err)
			case tt.want != "":
				if err == nil || !strings.Contains(err.Error(), tt.want) || tt.err != nil && !errors.Is(err, tt.err) {
					t.Fatalf("Start: %v, want an error containing %q (%v)", err, tt.want, tt.err)
				}
				if after := snapshot(t, tt.dir); after != before {
					t.Error("a refused Start changed the directory")
				}
				if _, err := os.Stat(empty); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a refused Start left %s", empty)
				}
				return
			}
			defer os.RemoveAll(empty)
			defer tr.Close()
			if tr.Step() != tt.step || tr.Resumed != (tt.step > 0) {
				t.Errorf("started at step %d (resumed %v), want %d", tr.Step(), tr.Resumed, tt.step)
			}
		})
	}
}

// TestStartLocked: while a trainer has a run open, Start on its directory
// fails with ErrLocked, whatever its Mode, and changes nothing; once the
// trainer is closed, it resumes.
func TestStartLocked(t *testing.T) {
	dir := t.TempDir()
	tc := tinyTrain()
	tc.Steps, tc.Warmup = 2, 0
	first := newTrainer(t, dir, tc)
	if _, err := first.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	for _, mode := range []Mode{New, Resume, Replace, ResumeOrNew} {
		_, err := Start(context.Background(), dir, Run{Model: tinyModel(), Recipe: tc, Mode: mode})
		if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), filepath.Join(dir, LockFile)) {
			t.Errorf("mode %d on a locked run: %v, want ErrLocked naming the lock", mode, err)
		}
	}
	if after := snapshot(t, dir); after != before {
		t.Error("a refused Start changed the run")
	}
	first.Close()
	tr, err := resume(t, dir, func(tc *Config) { tc.Steps = 3 })
	if err != nil {
		t.Fatalf("resume once the lock is free: %v", err)
	}
	tr.Close()
}

// TestStartTidy: a Start that fails before it writes anything removes
// the directories it made, and leaves one it did not make.
func TestStartTidy(t *testing.T) {
	bad := tinyModel()
	bad.Heads = 3
	fresh := filepath.Join(t.TempDir(), "new")
	if _, err := startNew(t, filepath.Join(fresh, "run"), bad, tinyTrain()); err == nil {
		t.Fatal("3 heads of a width of 16 started")
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed Start left %s: %v", fresh, err)
	}
	mine := t.TempDir()
	if _, err := startNew(t, mine, bad, tinyTrain()); err == nil {
		t.Fatal("3 heads of a width of 16 started")
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("a failed Start removed the directory it did not make: %v", err)
	}
}

// TestStartResumeRules: a resumed run given Model and Recipe (no
// Configure) may change what Resumable allows, and nothing else.
func TestStartResumeRules(t *testing.T) {
	dir := t.TempDir()
	tc := tinyTrain()
	if _, err := runTrainer(t, newTrainer(t, dir, tc), 2); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	train, val := tinyData(t)
	longer := tc
	longer.Steps, longer.EvalEvery = 30, 3
	tr, err := Start(context.Background(), dir, Run{Model: tinyModel(), Recipe: longer, Mode: Resume, Source: &Corpus{Train: train, Val: val}})
	if err != nil {
		t.Fatalf("resume with more steps: %v", err)
	}
	tr.Close()
	wider := tinyModel()
	wider.Dim = 32
	other := tc
	other.Batch = 2
	for _, c := range []struct {
		mc   model.Config
		tc   Config
		want string
	}{
		{wider, tc, "dim 32 where the checkpoint has 16"},
		{tinyModel(), other, "batch 2 where the checkpoint has 4"},
	} {
		_, err := Start(context.Background(), dir, Run{Model: c.mc, Recipe: c.tc, Mode: Resume, Source: &Corpus{Train: train, Val: val}})
		var re *ResumeError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("resume: %v, want a ResumeError containing %q", err, c.want)
		}
	}
}
