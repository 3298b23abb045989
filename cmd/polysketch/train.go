package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/data/task"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/train"
)

const trainHelp = `usage: polysketch train [flags]

Trains a decoder-only language model (Transformer++ with PolySketch
attention by default) on text files, by default the Go toolchain's own
source tree, showing progress on stderr.

The run lives in the --out directory:
  checkpoint/     the latest checkpoint: model.safetensors (the weights,
                  readable by any safetensors loader), optimizer.safetensors,
                  config.json, state.json, manifest.json (checksums)
  metrics.jsonl   one JSON line per step: step, loss, lr, grad_norm, tokens,
                  tokens_per_sec, elapsed, and val_loss, val_ppl when validated
  loss.png        training and validation loss against step
  .lock           locked while the run trains (by train, or an experiment)

A checkpoint is saved every --save-every steps, at the end, and on Ctrl-C
(SIGINT) or SIGTERM, which stop the run cleanly after the step under way;
--resume continues it exactly where it stopped. A resumed run keeps its
model and recipe: flags given with --resume must match the checkpoint,
except --steps, --eval-every, --eval-batches, --save-every, --log-every,
--cache-dir and --precision (a run may switch between fp32 and bf16, see
docs/bf16.md). A NaN or infinite loss stops the run without saving, leaving
the last good checkpoint.

Only one train at a time may use a --out directory: train locks its .lock
file before it reads or writes anything there, and a second train on the
same --out (or on a run an experiment is training) fails at once instead
of overwriting the first one's files.
The system releases the lock when train ends, however it ends, so a
crashed run never leaves a stale lock to remove. eval and generate take
no lock: a checkpoint is swapped in whole, so they may read one while a
run saves it.

The learning rate warms up linearly over --warmup steps to --lr, then decays
to --min-lr at --steps: linearly, or along half a cosine with --schedule
cosine.

flags:
`

// stderr receives progress and log lines; tests replace it.
var stderr io.Writer = os.Stderr

// isTerminal reports whether w is a terminal, where a progress line may
// rewrite itself; a variable so that tests can pretend.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// trainOptions are the flags of train that are not part of a configuration.
type trainOptions struct {
	out      string
	resume   bool
	force    bool
	cacheDir string
	logEvery int
	task     task.Options
	from     string // checkpoint whose model a new run starts from

	maxRecord byteSize // of the corpus's JSON-lines records
}

// trainFlags defines the flags of train on fs, bound to mc, tc and o, with
// their current values as defaults.
func trainFlags(fs *flag.FlagSet, mc *model.Config, tc *train.Config, o *trainOptions, af *attentionFlags) {
	corpusFlags(fs, &tc.Corpus, &tc.TextField, &o.cacheDir, &o.maxRecord, "the Go source tree, GOROOT/src", `"text"`)
	tokenizerFlag(fs, &tc.Tokenizer, "the tokenizer; the checkpoint keeps a copy of a file")

	af.register(fs, attention.Spec(mc.Attention), false)
	shapeFlags(fs, mc)
	fs.IntVar(&mc.Context, "context", mc.Context, "context length N: tokens per training sequence")
	fs.BoolVar(&mc.PostNorm, "post-norm", mc.PostNorm, "encoders (--bidirectional): LayerNorm after each residual sum, as BERT and the thesis's encoder")
	fs.StringVar(&mc.Positions, "positions", mc.Positions, "encoders (--bidirectional): positions as rope (sinusoidal plus rotary, the default), sinusoidal or learned")

	fs.IntVar(&tc.Batch, "batch", tc.Batch, "sequences per micro-batch")
	fs.IntVar(&tc.Accum, "accum", tc.Accum, "micro-batches per step (gradient accumulation)")
	fs.IntVar(&tc.Steps, "steps", tc.Steps, "optimizer steps of the whole run")
	fs.Float64Var(&tc.LR, "lr", tc.LR, "peak learning rate")
	fs.Float64Var(&tc.MinLR, "min-lr", tc.MinLR, "final learning rate (default: --lr/10)")
	fs.Var(scheduleFlag{&tc.Schedule}, "schedule", "learning-rate decay after the warm-up: linear (the default) or cosine")
	fs.IntVar(&tc.Warmup, "warmup", tc.Warmup, "steps of linear learning-rate warm-up (unless given, at most --steps/10)")
	fs.Float64Var(&tc.WeightDecay, "weight-decay", tc.WeightDecay, "AdamW weight decay")
	fs.Float64Var(&tc.Clip, "clip", tc.Clip, "clip the global gradient norm to this; 0 turns clipping off")
	fs.IntVar(&tc.EvalEvery, "eval-every", tc.EvalEvery, "steps between validations (0: only at the end)")
	fs.IntVar(&tc.EvalBatches, "eval-batches", tc.EvalBatches, "validation batches (0: the whole validation split)")
	fs.IntVar(&tc.SaveEvery, "save-every", tc.SaveEvery, "steps between checkpoints (0: only at the end)")
	fs.Var(seedFlag{mc, tc}, "seed", "seed of the initial weights, the sketches and the data order")
	addPrecisionFlag(fs, &tc.Precision)

	fs.StringVar(&o.out, "out", o.out, "directory of the run: checkpoint, metrics.jsonl, loss.png")
	fs.BoolVar(&o.resume, "resume", o.resume, "continue the run in --out from its checkpoint")
	fs.BoolVar(&o.force, "force", o.force, "start a new run in --out even if it holds a checkpoint, replacing it")
	fs.IntVar(&o.logEvery, "log-every", o.logEvery, "steps between progress lines when stderr is not a terminal")
	fs.StringVar(&o.from, "from", o.from, "start a new run from this checkpoint's model, weights and tokenizer (an imported model, to fine-tune it), instead of the model flags; --context is the length of the training sequences")
	taskFlags(fs, &o.task)
}

func runTrain(args []string, stdout io.Writer) (err error) {
	dr, err := startDist() // under mpirun: this rank's part (dist.go)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	defer dr.finish(&err)
	stdout = dr.output(stdout)
	mc, tc := model.DefaultConfig(), train.DefaultConfig()
	tc.MinLR = 0 // 0 until set: --lr/10
	o := trainOptions{out: "run", logEvery: 10}
	fs := newFlags("train", trainHelp, stdout, mechanismList(mc.Attention), func(w io.Writer) { fmt.Fprint(w, taskHelp) })
	defer asCLI(fs, &err)
	var af attentionFlags
	trainFlags(fs, &mc, &tc, &o, &af)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := newRun(&mc, &tc, &af, o.task, set); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if o.resume && o.force {
		return errors.New("train: --resume and --force contradict each other: continue the run, or replace it")
	}
	if o.logEvery < 1 {
		return fmt.Errorf("train: --log-every %d: must be positive", o.logEvery)
	}
	var from *train.Saved
	if o.from != "" {
		if from, err = fromRun(&mc, &tc, o, set, af.given()); err != nil {
			return fmt.Errorf("train: %w", err)
		}
	}
	if !o.resume {
		if err := fitsMemory(mc, tc); err != nil {
			return fmt.Errorf("train: %w", err)
		}
	}
	mode := train.New
	switch {
	case o.resume:
		mode = train.Resume
	case o.force:
		mode = train.Replace
	}
	p := newProgress(dr.output(stderr), o.logEvery)
	// A signal from here on stops the run cleanly: tokenizing, it
	// removes the token file it was writing; training, it saves a
	// checkpoint.
	ctx, stop := interruptible()
	defer stop()
	dr.startAgreement()
	run := train.Run{
		Model: mc, Recipe: tc, Mode: mode, Comm: dr.commOrNil(),
		Configure: func(mc *model.Config, tc *train.Config) error { return resumedRun(args, mc, tc, set) },
		Data:      data.Options{CacheDir: o.cacheDir, Logf: p.logf, MaxRecord: int64(o.maxRecord)},
	}
	if from != nil {
		run.Init, run.Files = train.Weights(from.Model), from.Files
	}
	t, err := train.Start(ctx, o.out, run)
	switch {
	case errors.Is(err, context.Canceled):
		return errors.New("train: interrupted while tokenizing the corpus")
	case errors.Is(err, train.ErrComplete):
		fmt.Fprintf(stdout, "%v; pass a larger --steps to train further\n", err)
		return nil
	case err != nil:
		return runError("train", o.out, err)
	}
	dr.startTraining()
	defer t.Close()
	t.Logf, t.Progress = p.logf, p.update
	mc, tc = t.Model.Config(), t.Config
	warnPrecision(dr.output(stderr), tc.Precision)

	nparams := 0
	for _, q := range t.Model.Params() {
		nparams += q.Value.Len()
	}
	p.logf("model: %s, %d layers, dim %d, %d heads, context %d: %s parameters",
		describeAttention(mc.Attention), mc.Layers, mc.Dim, mc.Heads, mc.Context, count(nparams))
	what := "training"
	if t.Resumed {
		what = fmt.Sprintf("resuming at step %d:", t.Step())
	}
	accum := ""
	if tc.Accum > 1 {
		accum = fmt.Sprintf(" × %d micro-batches", tc.Accum)
	}
	p.logf("%s %d steps of %d sequences × %d tokens%s, on %s; Ctrl-C stops and saves",
		what, tc.Steps, tc.Batch, mc.Context, accum, sourceDesc(t.Source))

	start, before := time.Now(), t.Tokens()
	res, err := t.Run(ctx)
	p.done()
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(stdout, "interrupted at step %d of %d; checkpoint saved in %s\ncontinue with: polysketch train --out %s --resume\n",
			res.Step, tc.Steps, filepath.Join(o.out, train.CheckpointDir), o.out)
		return nil
	case err != nil:
		return fmt.Errorf("train: %w", err)
	}
	fmt.Fprintf(stdout, "step %d of %d: training loss %.4f", res.Step, tc.Steps, res.Loss)
	if res.Val != nil && res.Val.Task != nil {
		fmt.Fprintf(stdout, ", test loss %.4f, accuracy %.4f, exact match %.4f", res.Val.Loss, res.Val.Task.Accuracy, res.Val.Task.Exact)
	} else if res.Val != nil {
		fmt.Fprintf(stdout, ", validation loss %.4f (perplexity %.3f, %.3f bits/token)", res.Val.Loss, res.Val.Perplexity(), res.Val.BitsPerToken())
	}
	trained := res.Tokens - before
	fmt.Fprintf(stdout, "; %s tokens in %s (%s tokens/s)\nrun saved in %s: %s/, %s, %s\n",
		count(int(trained)), time.Since(start).Round(time.Second), count(int(float64(trained)/time.Since(start).Seconds())),
		o.out, train.CheckpointDir, train.MetricsFile, train.PlotFile)
	return nil
}

// fitsMemory refuses, before anything is written, a run whose training
// step needs more memory than the machine has by predictMemory's estimate
// (the vocabulary's logits left out: it is not known yet): the OS would
// kill it at its first step.
func fitsMemory(mc model.Config, tc train.Config) error {
	total := physicalMemory()
	if total <= 0 {
		return nil
	}
	need, err := predictMemory(mc, tc.Batch, mc.Context)
	if err != nil || need <= total {
		return nil // a configuration's own errors come from train.Start
	}
	return fmt.Errorf("a step of %d sequences of %d tokens needs about %v, more than this machine's %v of memory: lower --batch (--accum keeps the tokens a step) or --context",
		tc.Batch, mc.Context, byteSize(need), byteSize(total))
}

// newRun completes the configuration of a new run from the flags given
// (set): the attention flags, absolute corpus paths, the derived recipe
// fields and a task's. The vocabulary is left to train.Start: the
// tokenizer's, or the task's.
func newRun(mc *model.Config, tc *train.Config, af *attentionFlags, o task.Options, set map[string]bool) error {
	var err error
	if mc.Attention, err = af.apply(mc.Attention); err != nil {
		return err
	}
	if err := absPaths(tc.Corpus); err != nil {
		return fmt.Errorf("--corpus: %w", err)
	}
	tc.Derive(func(f string) bool { return set[strings.ReplaceAll(f, "_", "-")] })
	mc.Vocab = 0
	return setTask(mc, tc, o, set)
}

// fromRun sets mc and tc for a new run from the checkpoint o.from: its
// model (at the training context the flags give, unless its positions are
// a learned table) and its tokenizer; flags that would choose another
// model or tokenizer are refused.
func fromRun(mc *model.Config, tc *train.Config, o trainOptions, set map[string]bool, attention bool) (*train.Saved, error) {
	var clash []string
	for _, f := range []string{"layers", "dim", "heads", "tokenizer", "bidirectional", "post-norm", "positions", "resume"} {
		if set[f] {
			clash = append(clash, "--"+f)
		}
	}
	if attention {
		clash = append(clash, "the attention flags")
	}
	if tc.Task != nil {
		clash = append(clash, "--task")
	}
	if len(clash) > 0 {
		return nil, fmt.Errorf("--from and %s: a run from a checkpoint takes its model and tokenizer, and trains on a corpus", strings.Join(clash, ", "))
	}
	s, err := train.Open(o.from)
	if err == nil {
		err = s.NeedTokenizer()
	}
	if err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	context := mc.Context
	*mc = s.Model.Config()
	switch {
	case mc.Positions != model.PositionsLearned:
		mc.Context = context
	case set["context"] && context != mc.Context:
		return nil, fmt.Errorf("--context %d: %s's positions are a learned table of %d, the length a run from it trains at: drop --context", context, o.from, mc.Context)
	}
	tc.Tokenizer = s.State.Tokenizer
	if s.TokenizerJSON != nil {
		tc.Tokenizer = s.Dir // its tokenizer.json
	}
	return s, nil
}

// resumedRun applies the flags of a train --resume (args, set) over the
// configuration of the run resumed, as train.Start gives it: they must
// not change it, but where the resume rules allow.
func resumedRun(args []string, mc *model.Config, tc *train.Config, set map[string]bool) error {
	fs := newFlags("train", "", io.Discard)
	var af attentionFlags
	var o trainOptions
	if tc.Task != nil {
		o.task = tc.Task.Options() // the task flags given apply over it
	}
	trainFlags(fs, mc, tc, &o, &af)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if mc.Attention, err = af.apply(mc.Attention); err != nil {
		return err
	}
	if err := absPaths(tc.Corpus); err != nil {
		return fmt.Errorf("--corpus: %w", err)
	}
	return resumedTask(mc, tc, o.task, set)
}

// sourceDesc describes the data of a run for the log.
func sourceDesc(s train.Source) string {
	switch s := s.(type) {
	case *train.Task:
		return taskDesc(s.Set)
	case *train.Corpus:
		return fmt.Sprintf("%s training tokens (%s for validation)", count(int(s.Train.Len())), count(int(s.Val.Len())))
	}
	return fmt.Sprint(s)
}

// runError says an error of train.Start on the run directory out in the
// words of the command line.
func runError(cmd, out string, err error) error {
	var re *train.ResumeError
	switch {
	case errors.Is(err, train.ErrStartup):
		return err
	case errors.Is(err, train.ErrLocked):
		return fmt.Errorf("%s: %s is in use by another polysketch train (lock %s held); wait for it or choose another --out", cmd, out, filepath.Join(out, train.LockFile))
	case errors.Is(err, train.ErrExists):
		return fmt.Errorf("%s: %s already holds a run; pass --resume to continue it, or --force to start over and replace it", cmd, out)
	case errors.Is(err, train.ErrNoRun):
		return fmt.Errorf("%s: no checkpoint in %s to resume; start a new run without --resume", cmd, out)
	case errors.As(err, &re):
		var bad []string
		for _, ch := range re.Changes {
			bad = append(bad, fmt.Sprintf("%s %s where the checkpoint has %s", flagOf(ch.Field), ch.Given, ch.Saved))
		}
		return fmt.Errorf("%s: --resume of %s: %s: a resumed run keeps its model and recipe; drop those flags, or start a new run with --force",
			cmd, out, strings.Join(bad, ", "))
	}
	return fmt.Errorf("%s: %w", cmd, err)
}

// absPaths makes the corpus paths absolute, so that the checkpoint
// records paths that work from any directory a run is resumed in.
func absPaths(paths []string) error {
	for i, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return err
		}
		paths[i] = abs
	}
	return nil
}

// count formats n with a k or M suffix: 950, 12.3k, 3.21M.
func count(n int) string {
	switch v := float64(n); {
	case math.Abs(v) >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case math.Abs(v) >= 1e4:
		return fmt.Sprintf("%.3gk", v/1e3)
	}
	return fmt.Sprint(n)
}

// plural formats n with noun, plural unless n is 1: "1 file", "3 files".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// progress shows training progress: on a terminal, one line rewritten in
// place; elsewhere, a line every few steps.
type progress struct {
	w        io.Writer
	terminal bool
	every    int
	shown    bool // a progress line is on screen, without a newline
	any      bool // a line was printed: the first step always is
	last     time.Time
}

func newProgress(w io.Writer, every int) *progress {
	return &progress{w: w, terminal: isTerminal(w), every: every}
}

// logf prints a line of its own, above the progress line.
func (p *progress) logf(format string, args ...any) {
	p.clear()
	fmt.Fprintf(p.w, format+"\n", args...)
}

func (p *progress) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

func (p *progress) update(u train.Progress) {
	line := fmt.Sprintf("step %d/%d  loss %.4f  lr %.2e  %s tokens/s  ETA %s",
		u.Step, u.Steps, u.Loss, u.LR, count(int(u.TokensPerSec)), u.ETA.Round(time.Second))
	if !p.terminal {
		if u.Step%p.every == 0 || u.Step == u.Steps || !p.any {
			p.any = true
			fmt.Fprintln(p.w, line)
		}
		return
	}
	if time.Since(p.last) < 100*time.Millisecond && u.Step != u.Steps {
		return // a terminal need not redraw more than ten times a second
	}
	p.last = time.Now()
	const width = 24
	done := width * u.Step / max(u.Steps, 1)
	bar := strings.Repeat("=", done) + strings.Repeat(" ", width-done)
	fmt.Fprintf(p.w, "\r\033[K[%s] %s", bar, line)
	p.shown = true
}

// done ends the progress line.
func (p *progress) done() {
	if p.shown {
		fmt.Fprintln(p.w)
		p.shown = false
	}
}

// scheduleFlag is train.Config.Schedule, where linear, the default, is
// stored as "", as checkpoints from before the choice have it.
type scheduleFlag struct{ s *string }

func (f scheduleFlag) String() string {
	if f.s == nil || *f.s == "" {
		return train.ScheduleLinear
	}
	return *f.s
}

func (f scheduleFlag) Set(v string) error {
	switch v {
	case train.ScheduleLinear:
		*f.s = ""
	case train.ScheduleCosine:
		*f.s = v
	default:
		return fmt.Errorf("want %s or %s", train.ScheduleLinear, train.ScheduleCosine)
	}
	return nil
}

// seedFlag sets the seed of the model and of the training data together.
type seedFlag struct {
	mc *model.Config
	tc *train.Config
}

func (s seedFlag) String() string {
	if s.mc == nil {
		return "0"
	}
	return fmt.Sprint(s.mc.Seed)
}

func (s seedFlag) Set(v string) error {
	var n uint64
	if _, err := fmt.Sscan(v, &n); err != nil || fmt.Sprint(n) != v {
		return errors.New("want a non-negative integer")
	}
	s.mc.Seed, s.tc.Seed = n, n
	return nil
}
