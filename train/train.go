// Package train trains polysketch language models: the training loop
// (AdamW, a warm-up-then-linear-decay learning rate, gradient clipping and
// accumulation), periodic validation, a metrics log and a loss curve, and
// checkpoints to stop and resume a run exactly.
//
// A run lives in a directory:
//
//	checkpoint/     the latest checkpoint (package checkpoint)
//	metrics.jsonl   one line of Metrics per step
//	loss.png        training and validation loss against step
//	accuracy.png    a task's test accuracy and exact match against step
//	.lock           locked while a trainer has the run open
//
// Start is the one way a run begins, new or resumed, on a corpus or a task,
// in one process or data-parallel:
//
//	t, err := train.Start(ctx, dir, train.Run{Model: mc, Recipe: tc, Source: &train.Corpus{Train: tr, Val: val}})
//	res, err := t.Run(ctx) // until Steps, a NaN, or ctx is cancelled
//	t.Close()
//
// Runs are deterministic: the same configuration and tokens give bitwise
// the same losses, whatever GOMAXPROCS is, and a run interrupted and
// resumed gives the same losses as one that was not.
package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/optim"
)

// Trainer runs one training run. Model and Config are for reading: the
// trainer's optimizer and data batches were made from them.
type Trainer struct {
	Model  *model.Model
	Config Config
	// Dir is the run's directory: checkpoint, metrics log, loss curve.
	Dir string

	// Progress, if not nil, is called after every step.
	Progress func(Progress)
	// Logf, if not nil, is told about checkpoints, validations and
	// anything unusual.
	Logf func(format string, args ...any)

	// Source is the data the run trains and validates on.
	Source Source
	// Resumed says the run continues from a checkpoint.
	Resumed bool

	opt       *optim.AdamW
	params    []*nn.Param // the parameters trained: all, or Run.Trainable's
	objective Objective
	sched     optim.Schedule
	feed      feed
	state     checkpoint.State
	stage     string // Run.Stage
	history   []Metrics
	log       *metricsLog

	release     func(failed bool) // the directory's lock; nil on ranks other than 0
	closeSource bool              // the Source is a corpus Start loaded

	files map[string][]byte // model files the checkpoints keep (Run.Files)

	batch   Batch
	saved   int  // step of the last checkpoint; -1 if none
	pending bool // a checkpoint of this step is due
	skipped int  // lines of the metrics log that did not parse

	dist   *dist       // the data-parallel part (dist.go); nil in a single process
	losses []float64   // of the step's micro-batches
	mine   []float64   // of this rank's micro-batches
	acc    [][]float32 // sum of the micro-batches' gradients, by parameter
}

// Progress is what the Progress callback learns after each step.
type Progress struct {
	Metrics
	Steps int           // steps of the whole run
	ETA   time.Duration // estimated time to Steps, from this session's speed
	Saved int           // step of the last checkpoint written, -1 if none
}

// Result summarizes a Run.
type Result struct {
	Step   int   // steps taken, over all sessions
	Tokens int64 // training tokens seen
	Loss   float64
	// Val is the last validation, nil if none ran.
	Val *Eval
	// Saved is the step of the last checkpoint, -1 if none was saved.
	Saved int
}

// recipe decodes the training configuration of checkpoint c, of the run
// in dir, which it must record.
func recipe(c *checkpoint.Checkpoint, dir string) (Config, error) {
	if string(c.Train) == "null" {
		return Config{}, fmt.Errorf("checkpoint in %s holds no training configuration to resume with", dir)
	}
	var tc Config
	if err := checkpoint.DecodeJSON(c.Train, &tc); err != nil {
		return Config{}, fmt.Errorf("checkpoint in %s: training configuration: %w", dir, err)
	}
	return tc, nil
}

func (t *Trainer) logf(format string, args ...any) {
	if t.Logf != nil {
		t.Logf(format, args...)
	}
}

// Step returns the number of steps taken.
func (t *Trainer) Step() int { return t.opt.Step }

// Tokens returns the number of training tokens seen, over all sessions.
func (t *Trainer) Tokens() int64 { return t.state.Tokens }

// Close closes the metrics log, the corpus Start loaded, if it did, and
// gives back the run directory's lock.
func (t *Trainer) Close() error {
	err := t.log.close()
	if c, ok := t.Source.(*Corpus); ok && t.closeSource {
		err = errors.Join(err, c.Train.Close(), c.Val.Close())
	}
	if t.release != nil {
		t.release(false)
		t.release = nil
	}
	return err
}

// ErrDiverged is wrapped by the error of a run stopped by a loss or
// gradient that is not finite.
var ErrDiverged = errors.New("training diverged")

// Run trains until Config.Steps steps are taken, validating every
// EvalEvery steps and at the end, and saving a checkpoint every SaveEvery
// steps and at the end.
//
// A checkpoint due after step s is written during step s+1, once the
// weights of step s have given a finite loss and gradient, so that no
// checkpoint holds weights already known to be bad. If a loss, gradient
// norm or validation loss is not finite, Run stops at once, saves nothing,
// and returns an error wrapping ErrDiverged: the last checkpoint is the
// last good one. If ctx is cancelled, Run finishes the step under way,
// saves a checkpoint and returns ctx's error. Either way the Result says
// where the run stands.
func (t *Trainer) Run(ctx context.Context) (Result, error) {
	start := time.Now()
	startStep, base := t.opt.Step, t.state.Seconds
	elapsed := func() float64 { return base + time.Since(start).Seconds() }
	var res Result
	defer t.plot()
	t.pending = false
	if t.skipped > 0 {
		t.logf("%s: dropped %d lines that do not parse", MetricsFile, t.skipped)
		t.skipped = 0
	}
	for t.opt.Step < t.Config.Steps {
		if err := t.stopErr(ctx); err != nil {
			return t.stop(res, elapsed(), err)
		}
		m, err := t.step()
		if err != nil {
			return t.result(res), t.failed(err)
		}
		step := t.opt.Step
		done := step == t.Config.Steps
		if t.writes() && (done || (t.Config.EvalEvery > 0 && step%t.Config.EvalEvery == 0)) {
			e, err := t.feed.validate(ctx, t.Model)
			switch {
			case err == nil && (math.IsNaN(e.Loss) || math.IsInf(e.Loss, 0)):
				return t.result(res), t.failed(fmt.Errorf("step %d: validation loss is %v: %w", step, e.Loss, ErrDiverged))
			case err == nil:
				res.Val = &e
				loss, ppl := e.Loss, e.Perplexity()
				m.ValLoss, m.ValPPL = &loss, &ppl
				if e.Task != nil {
					m.ValAccuracy, m.ValExact = &e.Task.Accuracy, &e.Task.Exact
					t.logf("step %d: test loss %.4f, accuracy %.4f, exact match %.4f", step, loss, e.Task.Accuracy, e.Task.Exact)
					break
				}
				t.logf("step %d: validation loss %.4f, perplexity %.3f", step, loss, ppl)
			case ctx.Err() != nil: // interrupted: log the step without it
			default:
				return t.result(res), fmt.Errorf("validation at step %d: %w", step, err)
			}
		}
		t.state.Seconds = elapsed()
		m.Elapsed = t.state.Seconds
		if err := t.log.write(m); err != nil {
			return t.result(res), err
		}
		t.history = append(t.history, m)
		if done {
			if err := t.save(nil); err != nil {
				return t.result(res), err
			}
		} else if t.Config.SaveEvery > 0 && step%t.Config.SaveEvery == 0 {
			t.pending = true
		}
		if m.ValLoss != nil {
			t.plot()
		}
		if t.Progress != nil {
			per := time.Since(start) / time.Duration(step-startStep)
			t.Progress(Progress{Metrics: m, Steps: t.Config.Steps, ETA: per * time.Duration(t.Config.Steps-step), Saved: t.saved})
		}
	}
	return t.result(res), nil
}

// failed adds to the error of a diverged run where its last checkpoint is.
func (t *Trainer) failed(err error) error {
	if !errors.Is(err, ErrDiverged) {
		return err
	}
	err = fmt.Errorf("%w (try a lower learning rate)", err)
	if t.saved < 0 {
		return fmt.Errorf("%w; no checkpoint was saved", err)
	}
	return fmt.Errorf("%w; nothing saved after step %d: the checkpoint in %s is the last good one", err, t.saved, t.Dir)
}

// stop saves a checkpoint for a run interrupted by err (ctx's error).
func (t *Trainer) stop(res Result, elapsed float64, err error) (Result, error) {
	t.state.Seconds = elapsed
	if t.saved != t.opt.Step {
		if serr := t.save(nil); serr != nil {
			return t.result(res), fmt.Errorf("interrupted at step %d, and the checkpoint could not be saved: %w", t.opt.Step, serr)
		}
	}
	return t.result(res), fmt.Errorf("interrupted at step %d; checkpoint saved in %s: %w", t.opt.Step, t.Dir, err)
}

func (t *Trainer) result(res Result) Result {
	res.Step, res.Tokens, res.Saved = t.opt.Step, t.state.Tokens, t.saved
	if n := len(t.history); n > 0 {
		res.Loss = t.history[n-1].Loss
	}
	return res
}

// step takes one optimizer step over Accum micro-batches and returns its
// metrics (without validation and elapsed time). A pending checkpoint of
// the previous step is saved once its weights have given a finite loss
// and gradient, before they are updated.
func (t *Trainer) step() (Metrics, error) {
	start := time.Now()
	var pos []byte // data position before this step, for the pending save
	if t.pending {
		var err error
		if pos, err = t.feed.state(); err != nil {
			return Metrics{}, err
		}
	}
	t.Model.SetStep(t.opt.Step)
	if t.Model.Precision() != t.Config.Precision {
		t.Model.SetPrecision(t.Config.Precision) // the first step of a session
	}
	loss, tokens, err := t.gradients()
	if err != nil {
		return Metrics{}, err
	}
	loss /= float64(t.Config.Accum)
	if t.Config.Accum > 1 {
		optim.ScaleGrads(t.params, 1/float32(t.Config.Accum))
	}
	norm := optim.ClipGradNorm(t.params, t.Config.Clip)
	step := t.opt.Step + 1
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return Metrics{}, fmt.Errorf("step %d: loss is %v: %w", step, loss, ErrDiverged)
	}
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return Metrics{}, fmt.Errorf("step %d: gradient norm is %v: %w", step, norm, ErrDiverged)
	}
	if t.pending {
		s := time.Now()
		if err := t.save(pos); err != nil {
			return Metrics{}, err
		}
		start = start.Add(time.Since(s)) // the throughput is of training alone
	}
	lr := t.sched.LR(t.opt.Step)
	t.opt.Update(lr)
	t.Model.RoundWeights() // the bf16 copies every micro-batch of the next step reads
	t.state.Step = t.opt.Step
	t.state.Tokens += tokens
	d := time.Since(start).Seconds()
	return Metrics{
		Step: step, Loss: loss, LR: lr, GradNorm: norm,
		Tokens: t.state.Tokens, TokensPerSec: float64(tokens) / d,
	}, nil
}

// testHookLoss, if set, replaces the loss of each micro-batch of step
// step, for tests of what a diverging run does.
var testHookLoss func(step int, loss float64) float64

// save writes a checkpoint of the run as it stands after t.opt.Step
// updates, with the data position pos, or the batcher's current one if pos
// is nil.
func (t *Trainer) save(pos []byte) error {
	if !t.writes() {
		t.saved, t.pending = t.opt.Step, false
		return nil
	}
	if pos == nil {
		var err error
		if pos, err = t.feed.state(); err != nil {
			return err
		}
	}
	tc, err := json.Marshal(t.Config)
	if err != nil {
		return err
	}
	t.state.Step, t.state.Data = t.opt.Step, pos
	c := &checkpoint.Checkpoint{Model: t.Model, Train: tc, Optimizer: t.opt.State(), State: t.state, Files: t.files}
	if tok, err := tokenizer.Lookup(t.state.Tokenizer); err == nil {
		if f, ok := tok.(*tokenizer.BPE); ok {
			c.TokenizerJSON = f.JSON() // the ids' meaning travels with the weights
		}
	}
	if err := checkpoint.Save(filepath.Join(t.Dir, CheckpointDir), c); err != nil {
		return err
	}
	t.saved, t.pending = t.opt.Step, false
	t.logf("step %d: checkpoint saved in %s", t.opt.Step, filepath.Join(t.Dir, CheckpointDir))
	return nil
}

// plot redraws the loss curve; a failure is only logged, since the
// metrics log holds the same data.
func (t *Trainer) plot() {
	if len(t.history) == 0 || !t.writes() {
		return
	}
	if err := plot(filepath.Join(t.Dir, StageFile(PlotFile, t.stage)), t.history); err != nil {
		t.logf("loss curve: %v", err)
	}
	if err := plotAccuracy(filepath.Join(t.Dir, StageFile(AccuracyPlotFile, t.stage)), t.history); err != nil {
		t.logf("accuracy curve: %v", err)
	}
}
