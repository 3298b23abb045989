package train_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
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

	t, err := train.New(run, mc, tc, trainTokens, valTokens)
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

	c, saved, err := train.LoadCheckpoint(run)
	if err != nil {
		log.Fatal(err)
	}
	t, err = train.Resume(run, c, saved, trainTokens, valTokens)
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
	t, err := train.New(run, mc, tc, trainTokens, valTokens)
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
	// Output:
	// step 2 of 2 with the byte tokenizer
	// lr: saved 0.002, given 0.001
}
