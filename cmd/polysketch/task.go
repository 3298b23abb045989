package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data/task"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/train"
)

const taskHelp = `
Tasks: --task trains on a synthetic task instead of a corpus:
  selective-copy   copy the data tokens scattered among noise, in order,
                   at the markers that end the sequence (S4/Mamba)
  induction-heads  after the second special token, the token that followed
                   the first (PolySketchFormer App. F.2)
  mqar             multi-query associative recall: the value of each key
                   queried again later (zoology)
  reversal         the digits before a separator, reversed (thesis ch. 5);
                   with --bidirectional, an encoder-only model labels each
                   of the digits alone with its mirror image, as in the thesis
or on a task file of JSON lines {"input": [ids], "target": [ids]} or
{"input": "text", "target": "text"} (encoded by --tokenizer), trained to
produce the target after the input; its last --task-test lines are the test
set. Examples are --context tokens long (if not given, a task's own default,
or as long as a task file's longest example). Loss, accuracy and exact match count the answer positions
only; validations score the held-out test examples, which training never
draws, and the run draws accuracy.png. Unless given, a task run's model is
003 App. F's: 2 layers of 8 heads of 16 (--dim 128). eval scores a task
checkpoint on its test examples, or, with --task FILE, on the examples of
another task file.
`

// taskOptions are the flags that choose and shape a task.
type taskOptions struct {
	name                      string
	vocab, count, train, test int
	bidirectional             bool
}

func taskFlags(fs *flag.FlagSet, o *taskOptions) {
	fs.StringVar(&o.name, "task", o.name, "train on a task instead of a corpus: "+strings.Join(task.Names(), ", ")+", or a JSON-lines task file")
	fs.IntVar(&o.vocab, "task-vocab", o.vocab, "task alphabet: all ids (selective-copy, mqar), the random tokens (induction-heads) or the digits (reversal); 0: the task's default")
	fs.IntVar(&o.count, "task-count", o.count, "tokens to copy (selective-copy), key-value pairs (mqar) or digits (reversal); 0: the task's default")
	fs.IntVar(&o.train, "task-train", o.train, "distinct training examples, drawn over and over; 0: a fresh one every draw")
	fs.BoolVar(&o.bidirectional, "bidirectional", o.bidirectional, "an encoder-only model (bidirectional attention, a label per position) on the task's encoder form: reversal only, the digits alone")
	fs.IntVar(&o.test, "task-test", o.test, "held-out test examples; 0: the task's default (512; a tenth of a file)")
}

// taskSpec returns the task of the options with defaults filled in:
// length is the context if given (0 if not: a task file's longest
// example, read with the tokenizer named tok), seed the run's seed. It
// returns nil if no task was chosen.
func (o taskOptions) spec(length int, seed uint64, tok string) (*task.Spec, error) {
	if o.name == "" {
		return nil, nil
	}
	s, err := task.Default(o.name)
	if err != nil {
		if !slices.Contains(task.Names(), o.name) && isFile(o.name) {
			abs, err := filepath.Abs(o.name)
			if err != nil {
				return nil, err
			}
			s = task.Spec{Name: task.File, Path: abs}
		} else {
			return nil, fmt.Errorf("--task: %w", err)
		}
	}
	if length > 0 {
		s.Length = length
	} else if s.Name == task.File {
		t, err := tokenizer.Open(tok)
		if err != nil {
			return nil, fmt.Errorf("--tokenizer: %w", err)
		}
		if s.Length, err = task.FileLength(s.Path, t); err != nil {
			return nil, fmt.Errorf("--task: %w", err)
		}
	}
	for _, f := range []struct {
		dst *int
		v   int
	}{{&s.Vocab, o.vocab}, {&s.Count, o.count}, {&s.Train, o.train}, {&s.Test, o.test}} {
		if f.v != 0 {
			*f.dst = f.v
		}
	}
	s.Bidirectional = o.bidirectional
	switch {
	case s.Name != task.Reversal:
	case o.bidirectional && length == 0:
		s.Length = s.Count
	case o.bidirectional && o.count == 0:
		s.Count = length
	case o.count == 0 && length > 0:
		s.Count = length / 2 // the digits that fit
	}
	s.Seed = seed
	if s.Name == task.File && s.Test == 0 {
		n, err := countLines(s.Path)
		if err != nil {
			return nil, err
		}
		s.Test = max(1, n/10)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("--task: %s", oneLine(err))
	}
	return &s, nil
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// countLines counts the lines of a file that are not blank.
func countLines(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("--task: %w", err)
	}
	n := 0
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n, nil
}

// setTask applies --task to a new run's configurations: the task spec in
// tc, and the task model's defaults for flags not given.
func setTask(mc *model.Config, tc *train.Config, o taskOptions, set map[string]bool) error {
	length := 0
	if set["context"] {
		length = mc.Context
	}
	s, err := o.spec(length, tc.Seed, tc.Tokenizer)
	if s == nil || err != nil {
		return err
	}
	if len(tc.Corpus) > 0 {
		return fmt.Errorf("--corpus and --task: train on one or the other")
	}
	tc.Task = s
	mc.Context, mc.Bidirectional = s.Length, s.Bidirectional
	if !set["layers"] {
		mc.Layers = 2
	}
	if !set["heads"] {
		mc.Heads = 8
	}
	if !set["dim"] {
		mc.Dim = 16 * mc.Heads
	}
	if !set["block"] {
		for _, opt := range attention.OptionsOf(mc.Attention) {
			if b, err := strconv.Atoi(opt.Default); opt.Name == "block" && err == nil && b > mc.Context {
				mc.Attention, _ = attention.Set(mc.Attention, "block", strconv.Itoa(mc.Context))
			}
		}
	}
	return nil
}

// checkResumedTask refuses task flags given with --resume that differ from
// the task the run was trained on.
func checkResumedTask(saved *task.Spec, o taskOptions, given map[string]bool) error {
	asked := false
	for _, f := range []string{"task", "task-vocab", "task-count", "task-train", "task-test", "bidirectional"} {
		asked = asked || given[f]
	}
	if !asked {
		return nil
	}
	if saved == nil {
		return fmt.Errorf("train: --resume: the run was trained on a corpus, not a task; drop --task, or start a new run with --force")
	}
	if !given["bidirectional"] {
		o.bidirectional = saved.Bidirectional
	}
	if !given["task"] {
		o.name = saved.Name
		if saved.Name == task.File {
			o.name = saved.Path
		}
	}
	s, err := o.spec(saved.Length, saved.Seed, "")
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if d := checkpoint.Diff(saved, s); len(d) > 0 {
		return fmt.Errorf("train: --resume: task %s where the checkpoint has another (%s): a resumed run keeps its task; drop those flags, or start a new run with --force",
			s.Name, strings.Join(d, ", "))
	}
	return nil
}

// newTaskTrainer makes (or resumes from c) the trainer of a task run.
func newTaskTrainer(out string, mc model.Config, tc train.Config, set *task.Set, c *checkpoint.Checkpoint) (*train.Trainer, error) {
	if c != nil {
		return train.ResumeTask(out, c, tc, set)
	}
	return train.NewTask(out, mc, tc, set)
}

// taskSet builds the task of tc, if any, and sets the model's vocabulary
// to the task's.
func taskSet(mc *model.Config, tc train.Config, tok tokenizer.Tokenizer) (*task.Set, error) {
	if tc.Task == nil {
		return nil, nil
	}
	set, err := task.New(*tc.Task, tok)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	mc.Vocab = set.Vocab()
	return set, nil
}

// taskDesc describes a task for the log.
func taskDesc(set *task.Set) string {
	if set == nil {
		return ""
	}
	s := set.Spec
	what := s.Name
	if s.Name == task.File {
		what = s.Path
	}
	train := "fresh training examples"
	if s.Train > 0 {
		train = fmt.Sprintf("%d training examples", s.Train)
	}
	return fmt.Sprintf("task %s (%d token ids, %s, %d held out for testing)", what, set.Vocab(), train, len(set.Test))
}

// taskEvalResult is eval's --json output for a task checkpoint.
type taskEvalResult struct {
	Checkpoint string `json:"checkpoint"`
	Step       int    `json:"step"`
	Task       string `json:"task"`
	task.Metrics
}

// evalTask scores a task checkpoint on its task's held-out test examples,
// or, if file is not "", on all the examples of that task file.
func evalTask(stdout io.Writer, c *train.Saved, spec task.Spec, file string, batch int, asJSON bool) error {
	dir, tok := c.Dir, c.Tokenizer
	var set *task.Set
	var err error
	if file != "" {
		set, err = task.NewTest(spec, file, tok)
	} else {
		set, err = task.New(spec, tok)
	}
	if err != nil {
		return fmt.Errorf("eval: checkpoint %s: %w", dir, err)
	}
	spec = set.Spec
	if set.Vocab() != c.Model.Config().Vocab {
		return fmt.Errorf("eval: checkpoint %s: its model has %d token ids, its task %d", dir, c.Model.Config().Vocab, set.Vocab())
	}
	ctx, stop := interruptible()
	defer stop()
	e, err := train.EvaluateTask(ctx, c.Model, set, batch)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	r := taskEvalResult{Checkpoint: dir, Step: c.State.Step, Task: spec.Name, Metrics: *e.Task}
	if spec.Name == task.File {
		r.Task = spec.Path
	}
	if asJSON {
		return writeJSONLine(stdout, r)
	}
	_, err = fmt.Fprintf(stdout, "checkpoint %s (step %d) on the %d test examples of task %s: loss %.4f nats per answer token, accuracy %.4f, exact match %.4f\n",
		dir, r.Step, r.Examples, r.Task, r.Loss, r.Accuracy, r.Exact)
	return err
}
