package train_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/train"
)

// foxDir returns a new temporary directory holding fox.txt, a few
// kilobytes of text to train on.
func foxDir() string {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	text := strings.Repeat("the quick brown fox jumps over the lazy dog. ", 100)
	if err := os.WriteFile(filepath.Join(dir, "fox.txt"), []byte(text), 0o644); err != nil {
		log.Fatal(err)
	}
	return dir
}

// Train a tiny model on a text file for a few steps, stop it, and resume
// it from its checkpoint.
func Example() {
	dir := foxDir()
	defer os.RemoveAll(dir)
	corpus, err := data.NewCorpus(filepath.Join(dir, "fox.txt"))
	if err != nil {
		log.Fatal(err)
	}
	trainTokens, valTokens, err := data.Load(context.Background(), corpus, tokenizer.Byte, data.Options{CacheDir: filepath.Join(dir, "cache")})
	if err != nil {
		log.Fatal(err)
	}
	defer trainTokens.Close()
	defer valTokens.Close()

	mc := model.DefaultConfig()
	mc.Dim, mc.Layers, mc.Heads, mc.Context = 32, 1, 2, 32
	mc.Attention, err = attention.ParseSpec("polysketch:learned:block=16:sketch-size=8")
	if err != nil {
		log.Fatal(err)
	}
	tc := train.DefaultConfig()
	tc.Batch, tc.Steps, tc.Warmup, tc.EvalEvery, tc.EvalBatches = 4, 10, 2, 5, 1
	run := filepath.Join(dir, "run")

	source := &train.Corpus{Train: trainTokens, Val: valTokens}
	t, err := train.Start(context.Background(), run, train.Run{Model: mc, Recipe: tc, Source: source})
	if err != nil {
		log.Fatal(err)
	}
	// Stop after 4 steps, as Ctrl-C would: Run saves a checkpoint.
	ctx, cancel := context.WithCancel(context.Background())
	t.Progress = func(p train.Progress) {
		if p.Step == 4 {
			cancel()
		}
	}
	res, err := t.Run(ctx)
	t.Close()
	fmt.Println("stopped at step", res.Step, errors.Is(err, context.Canceled))

	// Resume: the model and recipe are the checkpoint's.
	t, err = train.Start(context.Background(), run, train.Run{Model: mc, Recipe: tc, Source: source, Mode: train.Resume})
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	res, err = t.Run(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	ms, _, _ := train.ReadMetrics(filepath.Join(run, train.MetricsFile))
	fmt.Println("finished at step", res.Step, "with", len(ms), "lines of metrics, validated:", res.Val != nil)
	// Output:
	// stopped at step 4 true
	// finished at step 10 with 10 lines of metrics, validated: true
}

// A resumed run keeps its model and recipe: Changes lists what a new
// configuration would change that Resumable does not allow.
func ExampleSaved_Changes() {
	dir := foxDir()
	defer os.RemoveAll(dir)
	trainTokens, valTokens, err := data.LoadPaths(context.Background(), []string{filepath.Join(dir, "fox.txt")}, "", tokenizer.Byte, data.Options{CacheDir: filepath.Join(dir, "cache")})
	if err != nil {
		log.Fatal(err)
	}
	defer trainTokens.Close()
	defer valTokens.Close()
	mc := model.DefaultConfig()
	mc.Dim, mc.Layers, mc.Heads, mc.Context = 16, 1, 2, 16
	tc := train.DefaultConfig()
	tc.Batch, tc.Steps, tc.Warmup, tc.EvalEvery, tc.EvalBatches = 2, 2, 0, 2, 1
	run := filepath.Join(dir, "run")
	t, err := train.Start(context.Background(), run, train.Run{Model: mc, Recipe: tc, Source: &train.Corpus{Train: trainTokens, Val: valTokens}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := t.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	t.Close()

	// Open the run to resume it for 8 more steps, at another peak rate.
	saved, recipe, err := train.OpenRun(run)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("step", saved.State.Step, "of", recipe.Steps, "with the", saved.Tokenizer.Name(), "tokenizer")
	more := recipe
	more.Steps, more.LR = 10, 1e-3
	for _, c := range saved.Changes(recipe, saved.Model.Config(), more) {
		fmt.Printf("%s: saved %s, given %s\n", c.Field, c.Saved, c.Given)
	}
	// Start applies the same rules, and refuses.
	_, err = train.Start(context.Background(), run, train.Run{Model: saved.Model.Config(), Recipe: more, Mode: train.Resume})
	var refused *train.ResumeError
	fmt.Println(errors.As(err, &refused))
	// Output:
	// step 2 of 2 with the byte tokenizer
	// lr: saved 0.002, given 0.001
	// true
}

// A run of two stages in one directory, as linearization makes: the first
// trains only some parameters (here the attention's learned sketches) on
// an objective of its own, the second starts from the first's weights and
// trains them all on next-token loss. Each stage is an ordinary run, with
// checkpoints, resume and its own metrics log; the checkpoint records its
// stage, so that a stage resumes only itself.
func ExampleRun_stages() {
	dir := foxDir()
	defer os.RemoveAll(dir)
	trainTokens, valTokens, err := data.LoadPaths(context.Background(), []string{filepath.Join(dir, "fox.txt")}, "", tokenizer.Byte, data.Options{CacheDir: filepath.Join(dir, "cache")})
	if err != nil {
		log.Fatal(err)
	}
	defer trainTokens.Close()
	defer valTokens.Close()
	source := &train.Corpus{Train: trainTokens, Val: valTokens}
	mc := model.DefaultConfig()
	mc.Dim, mc.Layers, mc.Heads, mc.Context = 16, 1, 2, 16
	mc.Attention, _ = attention.ParseSpec("polysketch:learned:block=8:sketch-size=4")
	tc := train.DefaultConfig()
	tc.Batch, tc.Steps, tc.Warmup, tc.EvalEvery, tc.EvalBatches = 2, 3, 0, 3, 1
	run := filepath.Join(dir, "run")

	// Stage 1: the sketches alone, on an objective of the caller's (here
	// the next-token loss of the first half of each sequence).
	t, err := train.Start(context.Background(), run, train.Run{
		Model: mc, Recipe: tc, Source: source, Mode: train.ResumeOrNew,
		Stage:     "transfer",
		Trainable: func(p *nn.Param) bool { return strings.Contains(p.Name, ".attn.") },
		Objective: func(m *model.Model, b train.Batch) float64 {
			targets := slices.Clone(b.Targets)
			for i := range targets {
				if i%b.N >= b.N/2 {
					targets[i] = -1 // not predicted
				}
			}
			loss := m.Loss(b.Inputs, targets, b.B, b.N)
			m.Backward()
			return loss
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := t.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	t.Close()

	// Stage 2: every weight, from stage 1's, which Init is given.
	tc.Steps = 2
	t, err = train.Start(context.Background(), run, train.Run{
		Model: mc, Recipe: tc, Source: source, Mode: train.ResumeOrNew,
		Init: func(m *model.Model, prev *checkpoint.Checkpoint) error {
			fmt.Println("stage 2 starts from stage", prev.State.Stage, "at step", prev.State.Step)
			from := prev.Model.Params()
			for i, p := range m.Params() {
				copy(p.Value.Data, from[i].Value.Data)
			}
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := t.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	t.Close()
	for _, f := range []string{train.StageFile(train.MetricsFile, "transfer"), train.MetricsFile} {
		ms, _, _ := train.ReadMetrics(filepath.Join(run, f))
		fmt.Println(f, len(ms), "steps")
	}
	// Output:
	// stage 2 starts from stage transfer at step 3
	// metrics-transfer.jsonl 3 steps
	// metrics.jsonl 2 steps
}

// Linearize a tiny softmax model: train it, then convert it into learned
// PolySketch with softmax local blocks, attention transfer then
// fine-tuning, in one directory.
func ExampleLinearize() {
	dir := foxDir()
	defer os.RemoveAll(dir)
	trainTokens, valTokens, err := data.LoadPaths(context.Background(), []string{filepath.Join(dir, "fox.txt")}, "", tokenizer.Byte, data.Options{CacheDir: filepath.Join(dir, "cache")})
	if err != nil {
		log.Fatal(err)
	}
	defer trainTokens.Close()
	defer valTokens.Close()
	source := &train.Corpus{Train: trainTokens, Val: valTokens}

	// The teacher: softmax attention, 20 steps.
	mc := model.DefaultConfig()
	mc.Dim, mc.Layers, mc.Heads, mc.Context, mc.Attention = 16, 2, 2, 32, attention.SoftmaxConfig{}
	tc := train.DefaultConfig()
	tc.Batch, tc.Steps, tc.Warmup, tc.EvalEvery, tc.EvalBatches = 4, 20, 2, 0, 2
	t, err := train.Start(context.Background(), filepath.Join(dir, "teacher"), train.Run{Model: mc, Recipe: tc, Source: source})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := t.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	t.Close()

	// The student: blocks of 8, 6 steps of transfer and 6 of fine-tuning.
	cfg, err := attention.ParseSpec("polysketch:block=8:sketch-size=4:learned:raw-qk:scale:local-softmax:mix")
	if err != nil {
		log.Fatal(err)
	}
	student, err := train.StudentConfig(t.Model.Config(), cfg, false)
	if err != nil {
		log.Fatal(err)
	}
	transfer, finetune := train.LinearizeRecipes(tc)
	transfer.Steps, transfer.Warmup, finetune.Steps, finetune.Warmup = 6, 0, 6, 0
	finetune.Linearize.Teacher = filepath.Join(dir, "teacher")
	l := &train.Linearize{Teacher: t.Model, Student: student, Transfer: transfer, Finetune: finetune, Source: source}
	res, err := l.Run(context.Background(), filepath.Join(dir, "student"))
	if err != nil {
		log.Fatal(err)
	}
	lower := true
	for i, e := range res.Layers.After {
		lower = lower && e < res.Layers.Before[i]
	}
	fmt.Println("every layer closer to its teacher:", lower)
	fmt.Println("fine-tuned:", res.Finetune.Step, "steps")
	// Output:
	// every layer closer to its teacher: true
	// fine-tuned: 6 steps
}
