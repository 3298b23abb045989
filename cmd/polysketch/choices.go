package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/polysketch/polysketch/internal/atomicfile"
	"github.com/polysketch/polysketch/multichoice"
	"github.com/polysketch/polysketch/train"
)

// choiceFlags are eval's flags for multiple-choice questions.
type choiceFlags struct {
	files     []string
	format    string
	shots     int
	shotsFrom string
	limit     int
	seed      uint64
	samples   string
	separate  bool
}

func (f *choiceFlags) register(fs *flag.FlagSet) {
	fs.Var(&listFlag{list: &f.files}, "choices", "multiple-choice questions to score instead of the perplexity: files of JSON lines (.jsonl) or Parquet (.parquet), comma-separated or repeated")
	fs.StringVar(&f.format, "format", "auto", "--choices: the files' format: auto (by their fields), hellaswag, piqa, arc or generic")
	fs.IntVar(&f.shots, "shots", 0, "--choices: solved examples before each question (k-shot)")
	fs.StringVar(&f.shotsFrom, "shots-from", "", "--choices: the file the shots are drawn from, in the same format (a training split; default: the file evaluated, never the question itself)")
	fs.IntVar(&f.limit, "limit", 0, "--choices: score a sample of this many questions of each file, drawn with --seed (0: all)")
	fs.Uint64Var(&f.seed, "seed", 1, "--choices: seed of the --limit sample and of the shots")
	fs.StringVar(&f.samples, "log-samples", "", "--choices: write each question's log-likelihoods and picks to this file, as JSON lines")
	fs.BoolVar(&f.separate, "separate", false, "--choices: read the context again for each choice instead of continuing each from a copy of its state (slower; the baseline of the sharing)")
}

// choiceResult is a line of eval --choices --json.
type choiceResult struct {
	Checkpoint     string   `json:"checkpoint"`
	Step           int      `json:"step"`
	File           string   `json:"file"`
	Format         string   `json:"format"`
	Shots          int      `json:"shots"`
	Examples       int      `json:"examples"`
	Acc            float64  `json:"acc"`
	AccStderr      *float64 `json:"acc_stderr"`
	AccNorm        float64  `json:"acc_norm"`
	AccNormStderr  *float64 `json:"acc_norm_stderr"`
	AccBytes       float64  `json:"acc_bytes"`
	AccBytesStderr *float64 `json:"acc_bytes_stderr"`
	Seconds        float64  `json:"seconds"`
}

// finite returns &x, or nil (null in JSON) for NaN.
func finite(x float64) *float64 {
	if math.IsNaN(x) {
		return nil
	}
	return &x
}

// evalChoices scores checkpoint c on the multiple-choice files of f.
func evalChoices(stdout io.Writer, c *train.Saved, f choiceFlags, asJSON bool) error {
	if recipe, _ := c.Recipe(); recipe.Task != nil {
		return fmt.Errorf("eval: checkpoint %s was trained on the task %s, with token ids of its own, not on text: --choices needs a language model", c.Dir, recipe.Task.Name)
	}
	format, err := multichoice.ParseFormat(f.format)
	if err != nil {
		return usageError{fmt.Errorf("eval: --format: %w", err)}
	}
	switch {
	case f.shots < 0:
		return usageError{fmt.Errorf("eval: --shots %d: must not be negative", f.shots)}
	case f.limit < 0:
		return usageError{fmt.Errorf("eval: --limit %d: must not be negative", f.limit)}
	case f.shotsFrom != "" && f.shots == 0:
		return usageError{errors.New("eval: --shots-from: a flag of --shots, which is 0: give both, or neither")}
	}
	var shots *multichoice.Set
	if f.shotsFrom != "" {
		if shots, err = multichoice.ReadFile(f.shotsFrom, format); err != nil {
			return fmt.Errorf("eval: --shots-from: %w", err)
		}
	}
	var sets []*multichoice.Set
	for _, path := range f.files {
		set, err := multichoice.ReadFile(path, format)
		if err != nil {
			return fmt.Errorf("eval: --choices: %w", err)
		}
		// Solved questions of one task before a question of another
		// would score neither.
		if shots != nil && shots.Format != set.Format {
			return fmt.Errorf("eval: --shots-from %s is of the %s format, --choices %s of the %s format: draw the shots from a file of the questions' own task, or evaluate the files one at a time", shots.Path, shots.Format, set.Path, set.Format)
		}
		sets = append(sets, set)
	}
	var pool []multichoice.Example
	if shots != nil {
		pool = shots.Examples
	}
	sc, err := multichoice.NewScorer(c.Model, c.Tokenizer)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	if f.separate {
		sc.Separate = true
	}
	if c.TokenizerConfig != nil {
		sc.Begin = c.TokenizerConfig.Begin // as generate and serve start a prompt
	}
	var logged bytes.Buffer // --log-samples, written whole at the end
	ctx, stop := interruptible()
	defer stop()
	p := newProgress(stderr, 1)
	var results []choiceResult
	for _, set := range sets {
		var done, total atomic.Int64
		stopTicker := p.ticker(func() string {
			return fmt.Sprintf("%s: %d of %d questions", set.Path, done.Load(), total.Load())
		})
		o := multichoice.Options{Shots: f.shots, ShotPool: pool, Limit: f.limit, Seed: f.seed,
			Progress: func(d, t int) { done.Store(int64(d)); total.Store(int64(t)) }}
		start := time.Now()
		res, samples, err := multichoice.Evaluate(ctx, sc, set, o)
		stopTicker()
		if errors.Is(err, context.Canceled) {
			return errors.New("eval: interrupted")
		}
		if err != nil {
			return fmt.Errorf("eval: %w", err)
		}
		if f.samples != "" {
			for _, s := range samples {
				line := struct {
					File  string `json:"file"`
					Shots int    `json:"shots"`
					multichoice.Sample
				}{set.Path, f.shots, s}
				if err := writeJSONLine(&logged, line); err != nil {
					return fmt.Errorf("eval: --log-samples: %w", err)
				}
			}
		}
		results = append(results, choiceResult{
			Checkpoint: c.Dir, Step: c.State.Step, File: set.Path, Format: string(set.Format), Shots: f.shots, Examples: res.Examples,
			Acc: res.Acc.Value, AccStderr: finite(res.Acc.StdErr), AccNorm: res.AccNorm.Value, AccNormStderr: finite(res.AccNorm.StdErr),
			AccBytes: res.AccBytes.Value, AccBytesStderr: finite(res.AccBytes.StdErr), Seconds: time.Now().Sub(start).Seconds(),
		})
	}
	if f.samples != "" {
		// Atomically: an evaluation that fails leaves a file there as it was.
		if err := atomicfile.Write(f.samples, func(w io.Writer) error { _, err := w.Write(logged.Bytes()); return err }); err != nil {
			return fmt.Errorf("eval: --log-samples: %w", err)
		}
	}
	if asJSON {
		for _, r := range results {
			if err := writeJSONLine(stdout, r); err != nil {
				return err
			}
		}
		return nil
	}
	fmt.Fprintf(stdout, "checkpoint %s (step %d), %s tokens, %d-shot\n", c.Dir, c.State.Step, c.Tokenizer.Name(), f.shots)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "file\tformat\tquestions\tacc %\tacc_norm %\tchance %\tseconds")
	for i, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.1f\t%.1f\n", r.File, r.Format, r.Examples,
			percent(r.Acc, r.AccStderr), percent(r.AccNorm, r.AccNormStderr), 100*chance(sets[i]), r.Seconds)
	}
	return tw.Flush()
}

// percent shows an accuracy and its standard error in percent.
func percent(v float64, se *float64) string {
	if se == nil {
		return fmt.Sprintf("%.1f", 100*v)
	}
	return fmt.Sprintf("%.1f ± %.1f", 100*v, 100**se)
}

// chance is the accuracy of picking a choice at random: the mean of
// 1/choices over the questions.
func chance(set *multichoice.Set) float64 {
	var s float64
	for _, ex := range set.Examples {
		s += 1 / float64(len(ex.Choices))
	}
	return s / float64(len(set.Examples))
}

// choiceOnly lists the flags that apply to --choices alone, and the
// perplexity's, for the check that the two are not mixed.
var (
	choiceOnly     = []string{"format", "shots", "shots-from", "limit", "seed", "log-samples", "separate"}
	perplexityOnly = []string{"corpus", "text-field", "cache-dir", "split", "batch", "batches", "task"}
)

// checkChoiceFlags refuses a mix of --choices and the perplexity's flags.
func checkChoiceFlags(fs *flag.FlagSet, choices bool) error {
	var bad []string
	fs.Visit(func(fl *flag.Flag) {
		switch {
		case choices && slices.Contains(perplexityOnly, fl.Name):
			bad = append(bad, "--"+fl.Name)
		case !choices && slices.Contains(choiceOnly, fl.Name):
			bad = append(bad, "--"+fl.Name)
		}
	})
	if len(bad) == 0 {
		return nil
	}
	if choices {
		return usageError{fmt.Errorf("eval: %s: a flag of the perplexity, not of --choices: drop it", strings.Join(bad, ", "))}
	}
	return usageError{fmt.Errorf("eval: %s: a flag of --choices, which is not given", strings.Join(bad, ", "))}
}
