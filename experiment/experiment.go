// Package experiment reruns the seeds' comparisons of attention mechanisms
// in miniature: each named experiment is a grid of mechanisms × sizes,
// trained as ordinary checkpointed runs (package train) under one
// directory, then summarized in results.jsonl, a markdown table laid out
// like the paper's, and PNG plots.
//
// An experiment directory holds
//
//	experiment.json   the plan: every run's model and training configuration
//	runs/NAME/        one ordinary run each (checkpoint, metrics.jsonl, plots)
//	results.jsonl     one Result per run
//	results.md        the table
//	*.png             the plots
//
// Running an experiment again in its directory resumes it: finished runs
// are kept, an interrupted one continues from its checkpoint. A directory
// whose plan differs from the one asked for is refused, never mixed into.
// Runs are deterministic, so the same plan gives the same table bit for
// bit (the speed experiment's timings aside).
package experiment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/internal/atomicfile"
	"github.com/polysketch/polysketch/internal/field"
	"github.com/polysketch/polysketch/internal/filelock"
	"github.com/polysketch/polysketch/internal/regular"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/train"
)

// Experiment is a named grid of runs and the way its results are shown.
type Experiment struct {
	Name    string
	Summary string // one line: what it reproduces
	// Duration is the running time of the default (not --quick) version
	// as measured on 2 cores, and how.
	Duration string
	kind     kind
	measure  measure // what a task table shows
	grid     func(o Options) []Run
	paper    string // the paper's numbers to compare with, markdown
}

// kind says what a run trains on and what its table shows.
type kind int

const (
	taskKind       kind = iota // a task: exact match
	lmKind                     // the corpus: validation perplexity
	speedKind                  // the corpus: training steps per second
	downstreamKind             // the corpus's perplexity and multiple-choice accuracy (downstream.go)
	linearizeKind              // the corpus: a teacher, its students and the same from scratch (linearize.go)
)

// measure is what a task experiment's table shows of each run.
type measure int

const (
	exactMatch    measure = iota // exact match (003's "perfectly output")
	finalLoss                    // the final test loss (the thesis's measure), and exact match
	tokenAccuracy                // accuracy per answer token (zoology's measure), and exact match
)

// Run is one cell of an experiment's grid: one ordinary training run.
type Run struct {
	Name      string       `json:"name"`      // its directory under runs/
	Mechanism string       `json:"mechanism"` // the mechanism spec
	Row       string       `json:"row"`       // the table's row: the mechanism, and the seed if not the first
	Column    string       `json:"column"`    // the size, as the table heads its column
	Size      int          `json:"size"`      // the size as a number, for plots against it
	Model     model.Config `json:"model"`
	Train     train.Config `json:"train"`
	// FreezeBest names earlier runs of squared polynomials with learned
	// coefficients: this run trains with the coefficients of the one with
	// the lowest final test loss, frozen (the thesis's §5.4). Its model's
	// coefficients are filled in when those runs have finished.
	FreezeBest []string `json:"freeze_best,omitempty"`
	// Teacher, if not empty, makes the run a linearization (train's
	// Linearize) of the run of that name, which comes before it: Model is
	// the student's, Train fine-tuning's recipe and Transfer attention
	// transfer's.
	Teacher  string        `json:"teacher,omitempty"`
	Transfer *train.Config `json:"transfer,omitempty"`
	// Given is the checkpoint of a teacher given to the experiment
	// (Options.Teacher), which the run stands for instead of training.
	Given string `json:"given,omitempty"`

	err error // the mechanism spec's, if it does not parse
}

// Plan is everything that fixes an experiment's results; experiment.json
// holds it.
type Plan struct {
	Experiment string   `json:"experiment"`
	Quick      bool     `json:"quick"`
	Seed       uint64   `json:"seed"`
	Corpus     []string `json:"corpus,omitempty"`
	TextField  string   `json:"text_field,omitempty"`
	Runs       []Run    `json:"runs"`
	// The downstream experiment's models, when given rather than trained,
	// its files of questions, shots and sample size (Options).
	Checkpoints []string `json:"checkpoints,omitempty"`
	Choices     []string `json:"choices,omitempty"`
	Shots       int      `json:"shots,omitempty"`
	Limit       int      `json:"limit,omitempty"`
}

// Options say how to run an experiment.
type Options struct {
	Dir   string // the experiment directory
	Quick bool   // the CI-sized version, seconds long
	// Steps, if positive, replaces every run's number of steps, its
	// warm-up, validations and checkpoints scaled with it: the grid
	// trained longer (or shorter) than its default.
	Steps int
	Seed  uint64 // the seed of every run (the noise rows add one)
	// Corpus is the corpus of the lm and speed experiments: files,
	// directories and globs; empty means the Go source tree.
	Corpus    []string
	TextField string // the field of the corpus's records that holds the text; "" for "text"
	MaxRecord int64  // the record limit of the corpus (data.Corpus.MaxRecord); 0 for the default
	CacheDir  string // tokenized corpora; "" means the default
	// Tokenizer is the vocabulary of the lm and speed experiments' models
	// and corpus; nil means bytes. The task experiments keep their own
	// token ids.
	Tokenizer tokenizer.Tokenizer
	// TaskFile is the task file of the experiment task (see task.ReadFile;
	// byte tokens), whose examples are Context tokens long.
	TaskFile string
	Context  int
	// Precision is the precision every run trains in (train.Config).
	Precision nn.Precision
	// Teacher is the trained softmax checkpoint the linearize experiment
	// linearizes, instead of training one.
	Teacher string
	// Logf, if not nil, is told what happens.
	Logf func(format string, args ...any)
	// Progress, if not nil, is called after every step of every run.
	Progress func(run string, p train.Progress)

	// The downstream experiment: the checkpoints to score (absolute
	// paths; none to train the grid's mechanisms and score those), the
	// files of multiple-choice questions, the shots of its k-shot
	// columns (0 for 0-shot only) and the questions sampled from each
	// file (0 for all).
	Checkpoints []string
	Choices     []string
	Shots       int
	Limit       int
}

// The files of an experiment directory.
const (
	PlanFile    = "experiment.json"
	ResultsFile = "results.jsonl"
	TableFile   = "results.md"
	RunsDir     = "runs"
	lockFile    = ".lock"
)

// List returns the experiments, in the order of the issue.
func List() []*Experiment { return experiments }

// Names returns the experiments' names.
func Names() []string {
	var ns []string
	for _, e := range experiments {
		ns = append(ns, e.Name)
	}
	return ns
}

// Lookup returns the experiment called name, or an error listing them.
func Lookup(name string) (*Experiment, error) {
	for _, e := range experiments {
		if e.Name == name {
			return e, nil
		}
	}
	return nil, fmt.Errorf("unknown experiment %q: choose one of %s", name, strings.Join(Names(), ", "))
}

// Plan returns the plan of e under o, every run's configuration checked.
func (e *Experiment) Plan(o Options) (Plan, error) {
	if e.Name == "task" {
		if o.TaskFile == "" {
			return Plan{}, field.Errorf("experiment task needs a task file (%s)", field.Name("task_file"))
		}
		if o.Context < 1 {
			return Plan{}, field.Invalid("context", o.Context, "must be positive")
		}
	} else if o.TaskFile != "" {
		return Plan{}, field.Errorf("experiment %s takes no task file (%s); the experiment task does", e.Name, field.Name("task_file"))
	}
	if o.Steps < 0 {
		return Plan{}, field.Invalid("steps", o.Steps, "must be positive (or 0 for the default)")
	}
	if err := checkDownstream(e, o); err != nil {
		return Plan{}, err
	}
	if o.Teacher != "" && e.kind != linearizeKind {
		return Plan{}, field.Errorf("experiment %s takes no teacher (%s); the experiment linearize does", e.Name, field.Name("teacher"))
	}
	p := Plan{Experiment: e.Name, Quick: o.Quick, Seed: o.Seed, Runs: e.grid(o)}
	if e.kind == downstreamKind {
		p.Checkpoints, p.Choices, p.Shots, p.Limit = o.Checkpoints, o.Choices, o.Shots, o.Limit
	}
	if o.Steps > 0 {
		scale := func(tc train.Config) train.Config { return withSteps(tc, o.Steps) }
		if e.kind == linearizeKind { // the teacher's steps; its students' in proportion
			scale = func(tc train.Config) train.Config {
				return withSteps(tc, max(1, int(int64(tc.Steps)*int64(o.Steps)/int64(p.Runs[0].Train.Steps))))
			}
		}
		for i := range p.Runs {
			if tr := p.Runs[i].Transfer; tr != nil {
				t := scale(*tr)
				p.Runs[i].Transfer = &t
			}
		}
		for i := len(p.Runs) - 1; i >= 0; i-- { // the teacher last: the others scale by it
			p.Runs[i].Train = scale(p.Runs[i].Train)
		}
	}
	for i := range p.Runs {
		p.Runs[i].Train.Precision = o.Precision
		if tr := p.Runs[i].Transfer; tr != nil {
			tr.Precision = o.Precision
		}
	}
	if e.kind != taskKind {
		p.Corpus, p.TextField = o.Corpus, o.TextField
	}
	if tok := o.Tokenizer; tok != nil && tok.Name() != tokenizer.Byte.Name() {
		if e.kind == taskKind {
			return Plan{}, errors.New("its runs train on their tasks' own token ids; a tokenizer applies to lm and speed")
		}
		for i := range p.Runs {
			p.Runs[i].Train.Tokenizer, p.Runs[i].Model.Vocab = tok.Name(), tok.VocabSize()
			if tr := p.Runs[i].Transfer; tr != nil {
				tr.Tokenizer = tok.Name()
			}
		}
	}
	for _, r := range p.Runs {
		if r.err != nil {
			return p, fmt.Errorf("run %s: %w", r.Name, r.err)
		}
		if err := r.Model.Validate(); err != nil {
			return p, fmt.Errorf("run %s: model: %w", r.Name, err)
		}
		if err := r.Train.Validate(); err != nil {
			return p, fmt.Errorf("run %s: %w", r.Name, err)
		}
		if r.Transfer != nil {
			if err := r.Transfer.Validate(); err != nil {
				return p, fmt.Errorf("run %s: attention transfer: %w", r.Name, err)
			}
		}
	}
	if e.kind == linearizeKind && p.Runs[0].Given != "" && p.Runs[0].Train.Tokenizer != "" {
		s, err := train.Open(p.Runs[0].Given)
		if err != nil {
			return p, err
		}
		if name := s.Tokenizer.Name(); name != p.Runs[0].Train.Tokenizer {
			return p, fmt.Errorf("the teacher %s reads %s tokens, not %s: give its tokenizer", s.Dir, name, p.Runs[0].Train.Tokenizer)
		}
	}
	return p, nil
}

// Run runs (or resumes) e in o.Dir, then writes its results, table and
// plots, and returns the results. If ctx is cancelled, the run under way
// saves a checkpoint and Run returns ctx's error: running it again
// resumes.
func (e *Experiment) Run(ctx context.Context, o Options) ([]Result, error) {
	plan, err := e.Plan(o)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("experiment directory: %w", err)
	}
	lk, err := filelock.TryLock(filepath.Join(o.Dir, lockFile))
	if errors.Is(err, filelock.ErrLocked) {
		return nil, fmt.Errorf("%s is in use by another experiment; wait for it or choose another directory", o.Dir)
	}
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	if err := claim(o.Dir, plan); err != nil {
		return nil, err
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}

	var source *train.Corpus
	if e.kind != taskKind {
		tok := o.Tokenizer
		if tok == nil {
			tok = tokenizer.Byte
		}
		trainTokens, valTokens, err := data.LoadPaths(ctx, o.Corpus, o.TextField, tok, data.Options{CacheDir: o.CacheDir, Logf: logf, MaxRecord: o.MaxRecord})
		if err != nil {
			return nil, fmt.Errorf("corpus: %w", err)
		}
		defer trainTokens.Close()
		defer valTokens.Close()
		source = &train.Corpus{Train: trainTokens, Val: valTokens}
	}
	var results []Result
	for i, r := range plan.Runs {
		logf("run %d of %d: %s (%s, %s)", i+1, len(plan.Runs), r.Name, r.Mechanism, r.Column)
		note := ""
		if len(r.FreezeBest) > 0 {
			if r, note, err = freezeBest(o.Dir, r, results); err != nil {
				return nil, fmt.Errorf("run %s: %w", r.Name, err)
			}
			logf("%s: %s", r.Name, note)
		}
		var res Result
		switch {
		case r.Given != "":
			res, err = givenResult(ctx, o, r, source)
		case r.Teacher != "":
			if err = runLinearized(ctx, o, r, source, logf); err == nil {
				if res, err = result(filepath.Join(o.Dir, RunsDir, r.Name), r); err == nil {
					err = linearizedResult(ctx, o, r, &res, source)
				}
			}
		default:
			if err = runOne(ctx, o, r, source, logf); err == nil {
				res, err = result(filepath.Join(o.Dir, RunsDir, r.Name), r)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", r.Name, err)
		}
		res.Note = note
		results = append(results, res)
	}
	if e.kind == downstreamKind {
		if results, err = e.downstream(ctx, o, plan, results, logf); err != nil {
			return nil, err
		}
	}
	if err := e.report(o.Dir, plan, results, logf); err != nil {
		return nil, err
	}
	return results, nil
}

// claim writes the plan into dir, or checks that the plan already there is
// the same.
func claim(dir string, plan Plan) error {
	want, err := json.MarshalIndent(plan, "", "  ")
	if err != nil {
		return err
	}
	want = append(want, '\n')
	path := filepath.Join(dir, PlanFile)
	have, err := regular.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if entries, _ := os.ReadDir(dir); slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() != lockFile }) {
			return fmt.Errorf("%s is not empty and holds no %s: choose an empty or new directory for the experiment", dir, PlanFile)
		}
		return atomicfile.WriteBytes(path, want)
	case err != nil:
		return fmt.Errorf("experiment directory: %w", err)
	case !bytes.Equal(have, want):
		var old Plan
		what := "another experiment or configuration"
		if json.Unmarshal(have, &old) == nil {
			if d := checkpoint.Diff(old, plan); len(d) > 0 {
				what = strings.Join(d[:min(len(d), 3)], "; ")
			}
		}
		return fmt.Errorf("%s was made by a different configuration (%s): choose another directory, or remove it to start over", dir, what)
	}
	return nil
}

// withSteps returns tc trained for steps steps, its warm-up and the
// intervals it has between validations and checkpoints scaled alike.
func withSteps(tc train.Config, steps int) train.Config {
	scale := func(n int) int {
		if n == 0 {
			return 0 // "only at the end" stays so
		}
		return max(1, int(int64(n)*int64(steps)/int64(tc.Steps)))
	}
	tc.Warmup = int(int64(tc.Warmup) * int64(steps) / int64(tc.Steps))
	tc.EvalEvery, tc.SaveEvery = scale(tc.EvalEvery), scale(tc.SaveEvery)
	tc.Steps = steps
	return tc
}

// freezeBest returns r set to train with the coefficients, frozen, of
// the run of r.FreezeBest with the lowest final test loss among done (the
// first on a tie), read from its checkpoint, and a note saying which.
func freezeBest(dir string, r Run, done []Result) (Run, string, error) {
	var best *Result
	for _, name := range r.FreezeBest {
		i := slices.IndexFunc(done, func(res Result) bool { return res.Run == name })
		if i < 0 {
			return r, "", fmt.Errorf("freezes the best of run %s, which has not finished before it", name)
		}
		if best == nil || done[i].ValLoss < best.ValLoss {
			best = &done[i]
		}
	}
	c, err := checkpoint.LoadModel(filepath.Join(dir, RunsDir, best.Run, train.CheckpointDir))
	if err != nil {
		return r, "", fmt.Errorf("coefficients of run %s: %w", best.Run, err)
	}
	cfg, ok := c.Model.Config().Attention.(attention.SquarePolynomialConfig)
	if !ok {
		return r, "", fmt.Errorf("run %s is no squared polynomial (sqpoly); it has no coefficients to freeze", best.Run)
	}
	var coef []string
	for _, p := range c.Model.Params() {
		if strings.HasSuffix(p.Name, ".attn.coefficients") {
			if coef != nil {
				return r, "", fmt.Errorf("run %s has coefficients in more than one layer; freezing needs one", best.Run)
			}
			for _, a := range p.Value.Data {
				coef = append(coef, strconv.FormatFloat(float64(a), 'g', -1, 32))
			}
		}
	}
	if coef == nil {
		return r, "", fmt.Errorf("run %s: no coefficients in its checkpoint", best.Run)
	}
	cfg.Coefficients, cfg.Frozen = strings.Join(coef, ","), true
	r.Model.Attention = cfg
	return r, fmt.Sprintf("the coefficients of %s (final test loss %.3g), %s", best.Row, best.ValLoss, cfg.Coefficients), nil
}

// runOne trains r to its last step in its directory, resuming from a
// checkpoint there. A run on the corpus trains on source; one on a task,
// on its own task's examples.
func runOne(ctx context.Context, o Options, r Run, source *train.Corpus, logf func(string, ...any)) error {
	run := train.Run{Model: r.Model, Recipe: r.Train, Mode: train.ResumeOrNew}
	if r.Train.Task == nil {
		run.Source = source
	}
	t, err := train.Start(ctx, filepath.Join(o.Dir, RunsDir, r.Name), run)
	if errors.Is(err, train.ErrComplete) {
		return nil
	}
	if err != nil {
		return err
	}
	defer t.Close()
	if t.Resumed {
		logf("%s: resuming at step %d", r.Name, t.Step())
	}
	if o.Progress != nil {
		t.Progress = func(p train.Progress) { o.Progress(r.Name, p) }
	}
	_, err = t.Run(ctx)
	return err
}
