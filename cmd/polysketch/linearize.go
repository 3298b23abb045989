package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/train"
)

const linearizeHelp = `usage: polysketch linearize --checkpoint TEACHER --out DIR [flags]

Converts a trained softmax (or flash) model, the teacher, into one whose
every layer uses a linear attention mechanism (--attention; by default
learned PolySketch with softmax local blocks, a learned temperature and
mix), in two stages on a corpus (by default the one the teacher trained
on):

  attention transfer  the teacher is frozen; each layer of the student
                      reads the teacher's own q, k and v of that layer and
                      learns to reproduce its attention output (relative
                      squared error). Only what the student adds trains:
                      the learned sketches, temperatures and mixes. The
                      per-layer error on held-out text is shown before
                      and after. A mechanism with nothing of its own to
                      train (elu, performer, random sketches without
                      --scale) skips to fine-tuning, which takes its steps.
  fine-tuning         next-token loss over every weight (--train all) or
                      the attention's (--train attention), with
                      --distill W times the KL divergence from the
                      teacher's predictions.

The run lives in --out, as train's does: checkpoint/ (the student: an
ordinary checkpoint for generate, eval, serve and bench), metrics.jsonl and
loss.png of fine-tuning, metrics-transfer.jsonl and loss-transfer.png of
attention transfer, and transfer-layers.json (the per-layer errors).
Ctrl-C stops and saves; --resume continues in the stage it stopped in, bit
for bit, from what the checkpoint records (give no other flags with it).

flags:
`

// linearizeOptions are the flags of linearize that are not a recipe's.
type linearizeOptions struct {
	teacher    string
	out        string
	fromLinear bool
	resume     bool
	force      bool
	cacheDir   string
	maxRecord  byteSize
	logEvery   int
}

func runLinearize(args []string, stdout io.Writer) (err error) {
	base := train.DefaultConfig()
	base.EvalEvery, base.SaveEvery = 50, 50
	tr, ft := train.LinearizeRecipes(base)
	lin := *ft.Linearize
	var seed uint64
	o := linearizeOptions{logEvery: 10}
	var af attentionFlags
	fs := newFlags("linearize", linearizeHelp, stdout, mechanismList(nil))
	fs.StringVar(&o.teacher, "checkpoint", "", "the teacher: a checkpoint directory, or the run directory holding one")
	fs.StringVar(&o.out, "out", "", "directory of the linearization: the student's checkpoint, metrics, plots")
	af.register(fs, train.DefaultStudent, false)
	fs.BoolVar(&o.fromLinear, "from-linear", false, "convert a teacher whose attention is not softmax or flash")
	corpusFlags(fs, &ft.Corpus, &ft.TextField, &o.cacheDir, &o.maxRecord, "the teacher's training corpus", "the teacher's")
	fs.IntVar(&tr.Steps, "transfer-steps", tr.Steps, "steps of attention transfer (0: none)")
	fs.Float64Var(&tr.LR, "transfer-lr", tr.LR, "peak learning rate of attention transfer (warmed up over a tenth of its steps, decayed to a tenth)")
	fs.IntVar(&ft.Steps, "steps", ft.Steps, "steps of fine-tuning")
	fs.Float64Var(&ft.LR, "lr", ft.LR, "peak learning rate of fine-tuning (warmed up over a tenth of its steps, decayed to a tenth)")
	fs.StringVar(&lin.Train, "train", lin.Train, "what fine-tuning trains: all, or attention (each layer's projections and what the student adds)")
	fs.Float64Var(&lin.Distill, "distill", lin.Distill, "weight of the KL divergence from the teacher's predictions in fine-tuning's loss (0: none)")
	fs.IntVar(&ft.Batch, "batch", ft.Batch, "sequences per step, of the teacher's context length")
	fs.Float64Var(&ft.WeightDecay, "weight-decay", ft.WeightDecay, "AdamW weight decay")
	fs.IntVar(&ft.EvalEvery, "eval-every", ft.EvalEvery, "steps between validations (0: only at the end)")
	fs.IntVar(&ft.EvalBatches, "eval-batches", ft.EvalBatches, "validation batches, which also score the layers (0: the whole validation split)")
	fs.IntVar(&ft.SaveEvery, "save-every", ft.SaveEvery, "steps between checkpoints (0: only at the end)")
	fs.Func("seed", "seed of the data order and of what the student adds (default: the teacher's)", func(v string) error {
		_, err := fmt.Sscan(v, &seed)
		return err
	})
	addPrecisionFlag(fs, &ft.Precision)
	fs.BoolVar(&o.resume, "resume", false, "continue the linearization in --out, in the stage it stopped in")
	fs.BoolVar(&o.force, "force", false, "start a new linearization in --out even if it holds one, replacing it")
	fs.IntVar(&o.logEvery, "log-every", o.logEvery, "steps between progress lines when stderr is not a terminal")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	defer asCLI(fs, &err)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case o.out == "":
		return errors.New("linearize: no --out: name the directory of the student")
	case o.resume && o.force:
		return errors.New("linearize: --resume and --force contradict each other: continue the linearization, or replace it")
	case o.logEvery < 1:
		return fmt.Errorf("linearize: --log-every %d: must be positive", o.logEvery)
	}

	var l *train.Linearize
	if o.resume {
		for name := range set {
			if name != "resume" && name != "out" && name != "log-every" && name != "cache-dir" {
				return fmt.Errorf("linearize: --resume continues the linearization in %s as it was started: drop --%s", o.out, name)
			}
		}
		if !checkpoint.Exists(filepath.Join(o.out, train.CheckpointDir)) {
			return fmt.Errorf("linearize: no linearization in %s to resume; start one without --resume", o.out)
		}
		var err error
		if l, err = train.SavedLinearization(o.out); err != nil {
			return fmt.Errorf("linearize: --resume: %w", err)
		}
		o.teacher = l.TeacherPath()
		l.Mode = train.Resume
	}
	if o.teacher == "" {
		return errors.New("linearize: no --checkpoint: name the teacher's checkpoint")
	}
	teacher, err := train.Open(o.teacher)
	if err != nil {
		return fmt.Errorf("linearize: --checkpoint: %w", err)
	}
	if err := notTeacher(o.out, teacher.Dir); err != nil {
		return fmt.Errorf("linearize: %w", err)
	}
	tm := teacher.Model.Config()
	if l == nil {
		if l, err = newLinearization(teacher, &af, &o, tr, ft, lin, seed, set); err != nil {
			return fmt.Errorf("linearize: %w", err)
		}
	}
	l.Teacher = teacher.Model

	p := newProgress(stderr, o.logEvery)
	ctx, stop := interruptible()
	defer stop()
	corpus := l.Finetune
	trainTokens, valTokens, err := data.LoadPaths(ctx, corpus.Corpus, corpus.TextField, teacher.Tokenizer,
		data.Options{CacheDir: o.cacheDir, Logf: p.logf, MaxRecord: int64(o.maxRecord)})
	if err != nil {
		return fmt.Errorf("linearize: --corpus: %w", err)
	}
	defer trainTokens.Close()
	defer valTokens.Close()
	l.Source = &train.Corpus{Train: trainTokens, Val: valTokens}
	l.Logf = p.logf
	stage := ""
	l.Progress = func(s string, u train.Progress) {
		if s != stage {
			p.done()
			stage = s
		}
		p.update(u)
	}
	p.logf("teacher: %s (%s attention, step %d); student: %s; %s training tokens (%s for validation)",
		teacher.Dir, tm.Attention.Mechanism(), teacher.State.Step, describeAttention(l.Student.Attention),
		count(int(trainTokens.Len())), count(int(valTokens.Len())))
	if l.Transfer.Steps > 0 {
		p.logf("attention transfer: %d steps of %d sequences × %d tokens, then fine-tuning (%s weights): %d steps; Ctrl-C stops and saves",
			l.Transfer.Steps, l.Transfer.Batch, tm.Context, l.Finetune.Linearize.Train, l.Finetune.Steps)
	}

	start := time.Now()
	res, err := l.Run(ctx, o.out)
	p.done()
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(stdout, "interrupted; checkpoint saved in %s\ncontinue with: polysketch linearize --out %s --resume\n",
			filepath.Join(o.out, train.CheckpointDir), o.out)
		return nil
	case err != nil:
		return runError("linearize", o.out, err)
	}
	if res.Skipped != "" {
		fmt.Fprintf(stdout, "attention transfer skipped: %s\n", res.Skipped)
	}
	if ly := res.Layers; ly != nil && ly.After != nil {
		fmt.Fprintf(stdout, "per-layer relative error on %d held-out batches: before transfer %s; after %s\n",
			ly.Batches, fmtFloats(ly.Before), fmtFloats(ly.After))
	}
	if v := res.Transfer.Val; v != nil {
		fmt.Fprintf(stdout, "after attention transfer: validation loss %.4f\n", v.Loss)
	}
	if v := res.Finetune.Val; v != nil {
		fmt.Fprintf(stdout, "after fine-tuning: validation loss %.4f (perplexity %.3f)\n", v.Loss, v.Perplexity())
	}
	fmt.Fprintf(stdout, "%s tokens in %s; the student is in %s: %s/, %s, %s\n",
		count(int(res.Transfer.Tokens+res.Finetune.Tokens)), time.Since(start).Round(time.Second), o.out,
		train.CheckpointDir, train.MetricsFile, train.PlotFile)
	return nil
}

// newLinearization makes the linearization of teacher the flags describe.
func newLinearization(teacher *train.Saved, af *attentionFlags, o *linearizeOptions, tr, ft train.Config, lin train.Linearization,
	seed uint64, set map[string]bool) (*train.Linearize, error) {
	// The default student, or the mechanism --attention names with its
	// own defaults.
	var base attention.Config
	if !af.given() {
		var err error
		if base, err = attention.ParseSpec(train.DefaultStudent); err != nil {
			return nil, err
		}
	}
	cfg, err := af.apply(base)
	if err != nil {
		return nil, err
	}
	student, err := train.StudentConfig(teacher.Model.Config(), cfg, o.fromLinear)
	if err != nil {
		return nil, err
	}
	if !set["seed"] {
		seed = student.Seed
	}
	student.Seed, ft.Seed = seed, seed
	recipe, _ := teacher.Recipe()
	ft.Tokenizer = teacher.Tokenizer.Name()
	if !set["corpus"] {
		ft.Corpus, ft.TextField = recipe.Corpus, recipe.TextField
	} else if err := absPaths(ft.Corpus); err != nil {
		return nil, fmt.Errorf("--corpus: %w", err)
	}
	if lin.Teacher, err = filepath.Abs(teacher.Dir); err != nil {
		return nil, err
	}
	lin.FromLinear = o.fromLinear
	if err := lin.Validate(); err != nil {
		return nil, err
	}
	// What the flags set of fine-tuning's recipe, transfer's shares.
	steps, lr := tr.Steps, tr.LR
	tr = ft
	tr.Steps, tr.LR, tr.MinLR, tr.Warmup, tr.Linearize = steps, lr, lr/10, steps/10, nil
	ft.MinLR, ft.Warmup, ft.Linearize = ft.LR/10, ft.Steps/10, &lin
	if steps < 0 {
		return nil, fmt.Errorf("--transfer-steps %d: must be 0 (none) or positive", steps)
	}
	if err := ft.Validate(); err != nil {
		return nil, errors.New(oneLine(err))
	}
	if steps > 0 {
		if err := tr.Validate(); err != nil {
			return nil, fmt.Errorf("attention transfer: %s", oneLine(err))
		}
	}
	mode := train.New
	if o.force {
		mode = train.Replace
	}
	return &train.Linearize{Student: student, Transfer: tr, Finetune: ft, Mode: mode}, nil
}

// notTeacher refuses an --out that is the teacher's run or checkpoint
// directory: the student would overwrite it.
func notTeacher(out, teacherDir string) error {
	same := func(a, b string) bool {
		a, b = resolved(a), resolved(b)
		return a == b
	}
	if same(out, teacherDir) || same(filepath.Join(out, train.CheckpointDir), teacherDir) {
		return fmt.Errorf("--out %s is the teacher's directory: the student would overwrite it; choose another --out", out)
	}
	return nil
}

// resolved returns path absolute, with its symbolic links resolved as
// far as it exists.
func resolved(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	if r, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		return filepath.Join(r, filepath.Base(abs))
	}
	return abs
}

// fmtFloats formats per-layer numbers.
func fmtFloats(x []float64) string {
	var s []string
	for _, v := range x {
		s = append(s, fmt.Sprintf("%.4f", v))
	}
	return strings.Join(s, " ")
}
