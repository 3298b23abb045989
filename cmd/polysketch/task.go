package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/polysketch/polysketch/data/task"
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

// taskFlags defines the flags that choose and shape a task on fs, bound
// to o.
func taskFlags(fs *flag.FlagSet, o *task.Options) {
	fs.StringVar(&o.Name, "task", o.Name, "train on a task instead of a corpus: "+strings.Join(task.Names(), ", ")+", or a JSON-lines task file")
	fs.IntVar(&o.Vocab, "task-vocab", o.Vocab, "task alphabet: all ids (selective-copy, mqar), the random tokens (induction-heads) or the digits (reversal); 0: the task's default")
	fs.IntVar(&o.Count, "task-count", o.Count, "tokens to copy (selective-copy), key-value pairs (mqar) or digits (reversal); 0: the task's default")
	fs.IntVar(&o.Train, "task-train", o.Train, "distinct training examples, drawn over and over; 0: a fresh one every draw")
	fs.BoolVar(&o.Bidirectional, "bidirectional", o.Bidirectional, "an encoder-only model (bidirectional attention, a label per position) on the task's encoder form: reversal only, the digits alone")
	fs.IntVar(&o.Test, "task-test", o.Test, "held-out test examples; 0: the task's default (512; a tenth of a file)")
}

// taskFlagNames are the flags of taskFlags.
var taskFlagNames = []string{"task", "task-vocab", "task-count", "task-train", "task-test", "bidirectional"}

// setTask applies --task to a new run's configurations: the task spec in
// tc, and the task model's defaults for the flags not given.
func setTask(mc *model.Config, tc *train.Config, o task.Options, set map[string]bool) error {
	length := 0
	if set["context"] {
		length = mc.Context
	}
	s, err := o.Spec(length, tc.Seed, tc.Tokenizer)
	if err != nil {
		return fmt.Errorf("--task: %w", err)
	}
	if s == nil {
		return nil
	}
	if len(tc.Corpus) > 0 {
		return fmt.Errorf("--corpus and --task: train on one or the other")
	}
	tc.Task = s
	train.TaskModel(mc, s, func(f string) bool { return set[f] })
	return nil
}

// resumedTask sets the task of a resumed run, tc.Task, to the one o
// names, the task flags given parsed over its options, so that the resume
// rules compare the two: a resumed run keeps its task.
func resumedTask(mc *model.Config, tc *train.Config, o task.Options, given map[string]bool) error {
	if !slices.ContainsFunc(taskFlagNames, func(f string) bool { return given[f] }) {
		return nil
	}
	length, seed := mc.Context, tc.Seed
	if tc.Task != nil {
		length, seed = tc.Task.Length, tc.Task.Seed
	} else if !given["task"] {
		return errors.New("--resume: the run was trained on a corpus, not a task; drop the task flags, or start a new run with --force")
	}
	s, err := o.Spec(length, seed, tc.Tokenizer)
	if err != nil {
		return fmt.Errorf("--task: %w", err)
	}
	tc.Task = s
	return nil
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
