package train

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data/task"
	"github.com/polysketch/polysketch/model"
)

// savedRun trains the tiny model three steps in a new run directory and
// returns the directory.
func savedRun(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := runTrainer(t, newTrainer(t, dir, tinyTrain()), 3); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	return dir
}

func TestOpen(t *testing.T) {
	dir := savedRun(t)
	ck := filepath.Join(dir, CheckpointDir)
	for _, path := range []string{dir, ck} {
		s, err := Open(path)
		if err != nil {
			t.Fatalf("Open(%s): %v", path, err)
		}
		if s.Dir != ck || s.Tokenizer.Name() != "byte" || s.State.Step != 3 {
			t.Errorf("Open(%s): dir %s, tokenizer %s, step %d; want %s, byte, 3", path, s.Dir, s.Tokenizer.Name(), s.State.Step, ck)
		}
		tc, ok := s.Recipe()
		if !ok || !reflect.DeepEqual(tc, tinyTrain()) {
			t.Errorf("Recipe: %+v, %v; want %+v", tc, ok, tinyTrain())
		}
		if err := s.CheckTokenizer("byte"); err != nil {
			t.Errorf("CheckTokenizer(byte): %v", err)
		}
		if err := s.CheckTokenizer("gpt2"); err == nil || !strings.Contains(err.Error(), "was trained with byte") {
			t.Errorf("CheckTokenizer(gpt2): %v", err)
		}
	}
	if _, err := Open(t.TempDir()); err == nil {
		t.Error("Open of an empty directory: no error")
	}

	// Weights alone: no recipe, and OpenRun refuses them.
	s, _ := Open(dir)
	weightsOnly := t.TempDir()
	if err := checkpoint.Save(filepath.Join(weightsOnly, CheckpointDir), &checkpoint.Checkpoint{Model: s.Model, State: s.State}); err != nil {
		t.Fatal(err)
	}
	w, err := Open(weightsOnly)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Recipe(); ok {
		t.Error("Recipe of weights alone: ok")
	}
	if _, _, err := OpenRun(weightsOnly); err == nil || !strings.Contains(err.Error(), "no training configuration") {
		t.Errorf("OpenRun of weights alone: %v", err)
	}

	// A checkpoint whose state names a tokenizer it does not have.
	s.State.Tokenizer = "no-such-tokenizer"
	bad := t.TempDir()
	if err := checkpoint.Save(bad, s.Checkpoint); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), "no-such-tokenizer") {
		t.Errorf("Open with an unknown tokenizer: %v", err)
	}
}

func TestChanges(t *testing.T) {
	dir := savedRun(t)
	s, saved, err := OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	flash, _ := attention.DefaultConfig("flash")
	tests := []struct {
		name string
		edit func(mc *model.Config, tc *Config)
		want []Change
	}{
		{"nothing", func(*model.Config, *Config) {}, nil},
		{"resumable", func(_ *model.Config, tc *Config) {
			tc.Steps, tc.EvalEvery, tc.EvalBatches, tc.SaveEvery = 99, 7, 3, 5
		}, nil},
		{"recipe", func(_ *model.Config, tc *Config) { tc.LR, tc.Batch = 0.5, tc.Batch+1 }, []Change{
			{"batch", "4", "5"}, {"lr", "0.003", "0.5"}}},
		{"model", func(mc *model.Config, _ *Config) { mc.Dim *= 2 }, []Change{{"dim", "16", "32"}}},
		{"attention option", func(mc *model.Config, _ *Config) {
			mc.Attention, _ = attention.Set(mc.Attention, "block", "4")
		}, []Change{{"block", "8", "4"}}},
		{"mechanism", func(mc *model.Config, _ *Config) { mc.Attention = flash }, []Change{
			{"attention", `"polysketch"`, `"flash"`}}},
	}
	// Values holding the separators of checkpoint.Diff's lines.
	odd := saved
	odd.Corpus = []string{"/d/a vs b: c"}
	mc, given := s.Model.Config(), saved
	given.Corpus = []string{"/d/e"}
	if got, want := s.Changes(odd, mc, given), []Change{{"corpus", `["/d/a vs b: c"]`, `["/d/e"]`}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Changes with a corpus path holding \" vs \": %+v, want %+v", got, want)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mc, tc := s.Model.Config(), saved
			tt.edit(&mc, &tc)
			got := s.Changes(saved, mc, tc)
			if len(tt.want) == 0 && len(got) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Changes: %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestTaskModel(t *testing.T) {
	s := &task.Spec{Name: task.MQAR, Length: 64}
	tests := []struct {
		name                      string
		chosen                    []string
		layers, heads, dim, block int
	}{
		{"nothing chosen: App. F's model, blocks within the examples", nil, 2, 8, 128, 64},
		{"all chosen", []string{"layers", "heads", "dim", "block"}, 4, 2, 32, 256},
		{"heads chosen: 16 per head", []string{"heads"}, 2, 2, 32, 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mc := model.DefaultConfig()
			mc.Layers, mc.Heads, mc.Dim = 4, 2, 32
			mc.Attention, _ = attention.Set(mc.Attention, "block", "256")
			TaskModel(&mc, s, func(f string) bool { return slices.Contains(tt.chosen, f) })
			var block string
			for _, o := range attention.OptionsOf(mc.Attention) {
				if o.Name == "block" {
					block = o.Default
				}
			}
			if mc.Context != 64 || mc.Layers != tt.layers || mc.Heads != tt.heads || mc.Dim != tt.dim || block != strconv.Itoa(tt.block) {
				t.Errorf("context %d, %d layers, %d heads, dim %d, block %s; want 64, %d, %d, %d, %d",
					mc.Context, mc.Layers, mc.Heads, mc.Dim, block, tt.layers, tt.heads, tt.dim, tt.block)
			}
		})
	}
}

func TestDerive(t *testing.T) {
	tests := []struct {
		chosen []string
		minLR  float64
		warmup int
	}{
		{nil, 1e-4, 5},                           // a tenth of the rate; warm-up within a tenth of 50 steps
		{[]string{"min_lr"}, 7e-5, 5},            // kept
		{[]string{"warmup"}, 1e-4, 30},           // kept, though longer than a tenth
		{[]string{"min_lr", "warmup"}, 7e-5, 30}, // both kept
	}
	for _, tt := range tests {
		c := DefaultConfig()
		c.LR, c.MinLR, c.Steps, c.Warmup = 1e-3, 7e-5, 50, 30
		c.Derive(func(f string) bool { return slices.Contains(tt.chosen, f) })
		if c.MinLR != tt.minLR || c.Warmup != tt.warmup {
			t.Errorf("Derive with %q chosen: min_lr %g, warmup %d; want %g, %d", tt.chosen, c.MinLR, c.Warmup, tt.minLR, tt.warmup)
		}
	}
}
