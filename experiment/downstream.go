package experiment

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/internal/field"
	"github.com/polysketch/polysketch/internal/regular"
	"github.com/polysketch/polysketch/multichoice"
	"github.com/polysketch/polysketch/train"
)

// The downstream experiment: 003 Table 1's layout, a model per row and
// beside its validation perplexity, for each multiple-choice file, its
// 0-shot and k-shot accuracy (package multichoice). The models are the
// checkpoints the options name (a teacher, its linearized students, the
// same mechanisms trained from scratch), or without any, the grid's runs,
// trained first.

// ScoresFile holds the downstream experiment's scores, one line a cell as
// each is computed, so that an interrupted experiment resumes.
const ScoresFile = "scores.jsonl"

// Score is one cell of the downstream table: a model's accuracies on one
// file at one number of shots.
type Score struct {
	Model    string  `json:"model"` // the checkpoint directory
	File     string  `json:"file"`
	Shots    int     `json:"shots"`
	Examples int     `json:"examples"`
	Acc      float64 `json:"acc"`
	AccErr   float64 `json:"acc_stderr"`
	AccNorm  float64 `json:"acc_norm"`
	NormErr  float64 `json:"acc_norm_stderr"`
	AccBytes float64 `json:"acc_bytes"`
}

// perplexityBatches bounds the validation windows of each model's
// perplexity: 50 batches of 8.
const perplexityBatches = 50

// downstreamModel is a row of the downstream table.
type downstreamModel struct {
	row, dir, mechanism string
	run                 string // the grid's run it is, if any
}

// checkDownstream checks the downstream experiment's options.
func checkDownstream(e *Experiment, o Options) error {
	if e.kind != downstreamKind {
		if len(o.Choices) > 0 || len(o.Checkpoints) > 0 {
			return field.Errorf("experiment %s takes no %s or %s (files of multiple-choice questions, checkpoints to score); the experiment downstream does", e.Name, field.Name("choices"), field.Name("checkpoints"))
		}
		return nil
	}
	switch {
	case len(o.Choices) == 0:
		return field.Errorf("no %s: experiment downstream needs files of multiple-choice questions (HellaSwag, PIQA, ARC or generic JSON lines or Parquet) to score the models on", field.Name("choices"))
	case o.Shots < 0:
		return field.Invalid("shots", o.Shots, "must not be negative")
	case o.Limit < 0:
		return field.Invalid("limit", o.Limit, "must not be negative")
	}
	for _, c := range o.Checkpoints {
		if !filepath.IsAbs(c) {
			return fmt.Errorf("checkpoint %q: give an absolute path, which the plan records", c)
		}
	}
	return nil
}

// downstream scores the models of the plan (its checkpoints, or the runs
// trained, whose results are rs) and returns a Result per model with its
// perplexity and scores.
func (e *Experiment) downstream(ctx context.Context, o Options, plan Plan, rs []Result, logf func(string, ...any)) ([]Result, error) {
	var models []downstreamModel
	if len(plan.Checkpoints) > 0 {
		names := map[string]int{}
		for _, c := range plan.Checkpoints {
			names[filepath.Base(c)]++
		}
		for _, c := range plan.Checkpoints {
			row := filepath.Base(c)
			if names[row] > 1 {
				row = c
			}
			models = append(models, downstreamModel{row: row, dir: c})
		}
	} else {
		for _, r := range rs {
			models = append(models, downstreamModel{row: r.Row, dir: filepath.Join(o.Dir, RunsDir, r.Run), mechanism: r.Mechanism, run: r.Run})
		}
	}
	var sets []*multichoice.Set
	for _, f := range plan.Choices {
		set, err := multichoice.ReadFile(f, multichoice.Auto)
		if err != nil {
			return nil, err
		}
		sets = append(sets, set)
	}
	done, err := readScores(filepath.Join(o.Dir, ScoresFile))
	if err != nil {
		return nil, err
	}
	shots := []int{0}
	if plan.Shots > 0 {
		shots = append(shots, plan.Shots)
	}
	val := map[string]*data.Tokens{} // the validation split, by tokenizer
	defer func() {
		for _, t := range val {
			t.Close()
		}
	}()
	var out []Result
	for _, dm := range models {
		c, err := train.Open(dm.dir)
		if err == nil {
			err = c.NeedTokenizer() // its perplexity and its choices are read as text
		}
		if err != nil {
			return nil, err
		}
		if recipe, _ := c.Recipe(); recipe.Task != nil {
			return nil, fmt.Errorf("checkpoint %s was trained on a task, not on text", c.Dir)
		}
		res := Result{Run: dm.run, Row: dm.row, Mechanism: dm.mechanism, Column: "downstream", Step: c.State.Step, Tokenizer: c.Tokenizer.Name()}
		if res.Mechanism == "" {
			res.Mechanism = c.Model.Config().Attention.Mechanism()
		}
		tv, ok := val[c.Tokenizer.Name()]
		if !ok {
			_, v, err := data.LoadPaths(ctx, plan.Corpus, plan.TextField, c.Tokenizer, data.Options{CacheDir: o.CacheDir, Logf: logf, MaxRecord: o.MaxRecord})
			if err != nil {
				return nil, fmt.Errorf("corpus: %w", err)
			}
			val[c.Tokenizer.Name()], tv = v, v
		}
		ev, err := train.Evaluate(ctx, c.Model, tv, 8, perplexityBatches)
		if err != nil {
			return nil, fmt.Errorf("perplexity of %s: %w", c.Dir, err)
		}
		res.ValLoss, res.ValPPL = ev.Loss, ev.Perplexity()
		sc, err := multichoice.NewScorer(c.Model, c.Tokenizer)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", c.Dir, err)
		}
		if c.TokenizerConfig != nil {
			sc.Begin = c.TokenizerConfig.Begin
		}
		for _, set := range sets {
			for _, k := range shots {
				key := Score{Model: dm.dir, File: set.Path, Shots: k}
				if i := slices.IndexFunc(done, func(s Score) bool { return s.Model == key.Model && s.File == key.File && s.Shots == key.Shots }); i >= 0 {
					res.Downstream = append(res.Downstream, done[i])
					continue
				}
				logf("%s: %s, %d-shot", dm.row, set.Path, k)
				r, _, err := multichoice.Evaluate(ctx, sc, set, multichoice.Options{Shots: k, Limit: plan.Limit, Seed: plan.Seed})
				if err != nil {
					return nil, fmt.Errorf("%s: %w", dm.row, err)
				}
				s := Score{Model: dm.dir, File: set.Path, Shots: k, Examples: r.Examples,
					Acc: r.Acc.Value, AccErr: r.Acc.StdErr, AccNorm: r.AccNorm.Value, NormErr: r.AccNorm.StdErr, AccBytes: r.AccBytes.Value}
				if err := appendScore(filepath.Join(o.Dir, ScoresFile), s); err != nil {
					return nil, err
				}
				done = append(done, s)
				res.Downstream = append(res.Downstream, s)
			}
		}
		out = append(out, res)
	}
	return out, nil
}

// readScores reads the scores computed so far.
func readScores(path string) ([]Score, error) {
	f, err := regular.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Score
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s Score
		if json.Unmarshal(sc.Bytes(), &s) != nil {
			continue // a line cut by an interruption: computed again
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// appendScore adds a line to the scores file.
func appendScore(path string, s Score) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	f, err := regular.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// taskName is how the table heads a file's columns: its name without
// directory and extensions.
func taskName(path string) string {
	base := filepath.Base(path)
	if i := strings.IndexByte(base, '.'); i > 0 {
		base = base[:i]
	}
	return base
}

// downstreamTokens says in whose tokens the perplexities of rs are: each
// model's, in its own tokenizer's.
func downstreamTokens(rs []Result) string {
	for _, r := range rs {
		if r.Tokenizer != rs[0].Tokenizer {
			return "each model in its own tokens"
		}
	}
	if len(rs) == 0 || rs[0].Tokenizer == "" || rs[0].Tokenizer == tokenizer.Byte.Name() {
		return "bytes"
	}
	return rs[0].Tokenizer + " tokens"
}

// downstreamTable returns the markdown of the downstream experiment: 003
// Table 1's layout, once with acc and once with acc_norm.
func downstreamTable(plan Plan, rs []Result) string {
	var b strings.Builder
	cmd := "polysketch experiment downstream"
	if plan.Quick {
		cmd += " --quick"
	}
	if len(plan.Checkpoints) > 0 {
		cmd += " --checkpoints " + strings.Join(plan.Checkpoints, ",")
	}
	var files []string
	for _, f := range plan.Choices {
		files = append(files, filepath.Base(f))
	}
	fmt.Fprintf(&b, "downstream: validation perplexity (%s) beside multiple-choice accuracy in %% (`%s --choices %s --shots %d --limit %d --seed %d`)\n",
		downstreamTokens(rs), cmd, strings.Join(files, ","), plan.Shots, plan.Limit, plan.Seed)
	shots := []int{0}
	if plan.Shots > 0 {
		shots = append(shots, plan.Shots)
	}
	for _, metric := range []string{"acc", "acc_norm"} {
		fmt.Fprintf(&b, "\n%s:\n\n| model | perplexity |", metric)
		for _, f := range plan.Choices {
			for _, k := range shots {
				fmt.Fprintf(&b, " %s %d-shot |", taskName(f), k)
			}
		}
		b.WriteString("\n|---|---|" + strings.Repeat("---|", len(plan.Choices)*len(shots)) + "\n")
		for _, r := range rs {
			fmt.Fprintf(&b, "| %s | %.3f |", r.Row, r.ValPPL)
			for _, f := range plan.Choices {
				for _, k := range shots {
					i := slices.IndexFunc(r.Downstream, func(s Score) bool { return s.File == f && s.Shots == k })
					if i < 0 {
						b.WriteString(" – |")
						continue
					}
					v := r.Downstream[i].Acc
					if metric == "acc_norm" {
						v = r.Downstream[i].AccNorm
					}
					fmt.Fprintf(&b, " %.1f |", 100*v)
				}
			}
			b.WriteString("\n")
		}
	}
	var n []string
	for _, f := range plan.Choices {
		set, err := multichoice.ReadFile(f, multichoice.Auto)
		if err != nil {
			continue
		}
		var chance float64
		for _, ex := range set.Examples {
			chance += 1 / float64(len(ex.Choices))
		}
		n = append(n, fmt.Sprintf("%s %.1f%%", taskName(f), 100*chance/float64(len(set.Examples))))
	}
	fmt.Fprintf(&b, "\nChance: %s.\n", strings.Join(n, ", "))
	return b.String()
}
