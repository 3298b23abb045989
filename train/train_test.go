package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
)

// tinyModel is a byte-level polysketch model small enough to train in
// milliseconds a step, with two blocks per sequence so that the block
// algorithm and the local blocks both take part.
func tinyModel() model.Config {
	return model.Config{
		Vocab: 256, Dim: 16, Layers: 2, Heads: 2, Context: 16,
		Attention: attention.PolysketchConfig{Degree: 4, SketchSize: 4, Block: 8, Local: true, Sketch: attention.Gaussian},
		Seed:      1,
	}
}

func tinyTrain() Config {
	c := DefaultConfig()
	c.Batch, c.Steps, c.Warmup = 4, 20, 4
	c.LR, c.MinLR = 3e-3, 3e-4
	c.EvalEvery, c.EvalBatches, c.SaveEvery = 5, 2, 0
	return c
}

// corpusText is a few kilobytes of repetitive text that a tiny model
// learns something of in a few steps.
func corpusText() string {
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, "line %d: the quick brown fox jumps over the lazy dog.\n", i%17)
	}
	return b.String()
}

// tinyData writes a corpus of two files (one for training, one for
// validation, by the data package's hash split if it happens so, else by
// tokens) and returns its tokens.
func tinyData(t testing.TB) (train, val *data.Tokens) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte(corpusText()), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := data.NewCorpus(filepath.Join(dir, "a.txt"))
	if err != nil {
		t.Fatal(err)
	}
	train, val, err = data.Load(context.Background(), c, tokenizer.Byte, data.Options{CacheDir: filepath.Join(dir, "cache"), ValFraction: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { train.Close(); val.Close() })
	return train, val
}

// runTrainer trains tc.Steps steps in dir, or until stopAt steps if
// stopAt > 0, by cancelling its context, and returns the result and
// error of Run.
func runTrainer(t *testing.T, tr *Trainer, stopAt int) (Result, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if stopAt > 0 {
		tr.Progress = func(p Progress) {
			if p.Step == stopAt {
				cancel()
			}
		}
	}
	res, err := tr.Run(ctx)
	if cerr := tr.Close(); cerr != nil {
		t.Fatal(cerr)
	}
	return res, err
}

func newTrainer(t *testing.T, dir string, tc Config) *Trainer {
	t.Helper()
	tr, err := startNew(t, dir, tinyModel(), tc)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// startNew starts a new run of mc and tc in dir on the tiny corpus.
func startNew(t testing.TB, dir string, mc model.Config, tc Config) (*Trainer, error) {
	t.Helper()
	train, val := tinyData(t)
	return Start(context.Background(), dir, Run{Model: mc, Recipe: tc, Source: &Corpus{Train: train, Val: val}})
}

// resume resumes the run in dir on the tiny corpus with its recipe as
// edit makes it (nil: as saved).
func resume(t testing.TB, dir string, edit func(tc *Config)) (*Trainer, error) {
	t.Helper()
	train, val := tinyData(t)
	return Start(context.Background(), dir, Run{Mode: Resume, Source: &Corpus{Train: train, Val: val}, Configure: func(_ *model.Config, tc *Config) error {
		if edit != nil {
			edit(tc)
		}
		return nil
	}})
}

func readMetrics(t *testing.T, dir string) []Metrics {
	t.Helper()
	ms, skipped, err := ReadMetrics(filepath.Join(dir, MetricsFile))
	if err != nil || skipped != 0 {
		t.Fatalf("metrics log: %v, %d lines skipped", err, skipped)
	}
	return ms
}

// sameRun fails unless a and b hold the same steps with bitwise equal
// losses, learning rates, gradient norms and validation losses.
func sameRun(t *testing.T, a, b []Metrics) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%d and %d steps", len(a), len(b))
	}
	bits := func(p *float64) uint64 {
		if p == nil {
			return 1 // not a float64 bit pattern any loss has
		}
		return math.Float64bits(*p)
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Step != y.Step || x.Tokens != y.Tokens ||
			math.Float64bits(x.Loss) != math.Float64bits(y.Loss) ||
			math.Float64bits(x.LR) != math.Float64bits(y.LR) ||
			math.Float64bits(x.GradNorm) != math.Float64bits(y.GradNorm) ||
			bits(x.ValLoss) != bits(y.ValLoss) {
			t.Errorf("step %d: loss %v lr %v norm %v, and step %d: loss %v lr %v norm %v",
				x.Step, x.Loss, x.LR, x.GradNorm, y.Step, y.Loss, y.LR, y.GradNorm)
		}
	}
}

func sameWeights(t *testing.T, a, b *model.Model) {
	t.Helper()
	pa, pb := a.Params(), b.Params()
	for i := range pa {
		for j := range pa[i].Value.Data {
			if math.Float32bits(pa[i].Value.Data[j]) != math.Float32bits(pb[i].Value.Data[j]) {
				t.Fatalf("parameter %s differs at %d", pa[i].Name, j)
			}
		}
	}
}

func TestLearns(t *testing.T) {
	dir := t.TempDir()
	tc := tinyTrain()
	tc.Steps = 40
	tr := newTrainer(t, dir, tc)
	res, err := runTrainer(t, tr, 0)
	if err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, dir)
	if len(ms) != tc.Steps {
		t.Fatalf("%d lines in the metrics log, want %d", len(ms), tc.Steps)
	}
	for i, m := range ms {
		if m.Step != i+1 || m.Tokens != int64((i+1)*tc.Batch*16) || !(m.TokensPerSec > 0) || !(m.LR > 0) {
			t.Errorf("line %d: %+v", i, m)
		}
	}
	// A uniform guess over 256 bytes costs ln 256 = 5.55 nats a token.
	first, last := ms[0].Loss, ms[len(ms)-1].Loss
	if !(first > 5 && last < first-1) {
		t.Errorf("loss went from %.3f to %.3f; want it to start near ln 256 = 5.55 and fall by more than 1", first, last)
	}
	if res.Val == nil || ms[len(ms)-1].ValLoss == nil || *ms[len(ms)-1].ValLoss != res.Val.Loss {
		t.Fatalf("no final validation in the result (%v) or the log", res.Val)
	}
	if v := res.Val.Loss; !(v < first-1) || math.Abs(res.Val.Perplexity()-math.Exp(v)) > 1e-9 {
		t.Errorf("validation loss %.3f (perplexity %.3f), want it below %.3f", v, res.Val.Perplexity(), first-1)
	}
	for _, m := range ms {
		want := m.Step%tc.EvalEvery == 0
		if (m.ValLoss != nil) != want || (m.ValPPL != nil) != want {
			t.Errorf("step %d: validation %v, want one every %d steps", m.Step, m.ValLoss, tc.EvalEvery)
		}
	}
	png, err := os.ReadFile(filepath.Join(dir, PlotFile))
	if err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
		t.Errorf("loss curve: %v, %d bytes", err, len(png))
	}
	c, err := checkpoint.Load(filepath.Join(dir, CheckpointDir))
	if err != nil {
		t.Fatal(err)
	}
	if c.State.Step != tc.Steps || res.Saved != tc.Steps || c.State.Tokens != ms[len(ms)-1].Tokens {
		t.Errorf("final checkpoint at step %d with %d tokens, result says %d; want step %d", c.State.Step, c.State.Tokens, res.Saved, tc.Steps)
	}
	sameWeights(t, c.Model, tr.Model)
}

// TestResumeExact checks that a run interrupted at step 10 and resumed
// takes the same 20 steps, bit for bit, as one that ran straight through.
func TestResumeExact(t *testing.T) {
	tc := tinyTrain()
	tc.Accum = 2     // the data position must advance by every micro-batch
	tc.SaveEvery = 5 // the interruption at 10 finds a save pending
	checkResumeExact(t, tc)
}

// checkResumeExact runs tc straight through and interrupted at step 10,
// resumed from what is on disk, and requires the same steps and weights.
func checkResumeExact(t *testing.T, tc Config) {
	t.Helper()
	straightDir := t.TempDir()
	straight := newTrainer(t, straightDir, tc)
	if _, err := runTrainer(t, straight, 0); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	first := newTrainer(t, dir, tc)
	res, err := runTrainer(t, first, 10)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v, want context.Canceled", err)
	}
	if res.Step != 10 || res.Saved != 10 {
		t.Fatalf("interrupted run stopped at step %d, saved step %d; want 10 and 10", res.Step, res.Saved)
	}
	if n := len(readMetrics(t, dir)); n != 10 {
		t.Fatalf("%d lines in the metrics log after the interruption, want 10", n)
	}
	// Resume without the first session's state: only what is on disk.
	_, saved, err := OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := checkpoint.Diff(saved, tc); len(d) > 0 {
		t.Errorf("saved training config differs: %q", d)
	}
	second, err := resume(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runTrainer(t, second, 0); err != nil {
		t.Fatal(err)
	}
	sameRun(t, readMetrics(t, straightDir), readMetrics(t, dir))
	sameWeights(t, straight.Model, second.Model)
}

// TestResumeAfterCrash stops a run by a NaN at step 13, after the
// checkpoint of step 10 and the log of step 12, resumes it from that
// checkpoint, and checks that the lines of steps 11 and 12 are dropped and
// that the run goes on exactly as one that never stopped: the data
// position saved by a checkpoint written during the following step is
// the one after the checkpoint's own step.
func TestResumeAfterCrash(t *testing.T) {
	tc := tinyTrain()
	tc.SaveEvery = 5
	straightDir := t.TempDir()
	if _, err := runTrainer(t, newTrainer(t, straightDir, tc), 0); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	testHookLoss = func(step int, loss float64) float64 {
		if step == 13 {
			return math.Inf(1)
		}
		return loss
	}
	_, err := runTrainer(t, newTrainer(t, dir, tc), 0)
	testHookLoss = nil
	if !errors.Is(err, ErrDiverged) {
		t.Fatalf("Run: %v, want ErrDiverged", err)
	}
	if n := len(readMetrics(t, dir)); n != 12 {
		t.Fatalf("%d lines in the metrics log, want 12", n)
	}
	tr, err := resume(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Step() != 10 || len(tr.history) != 10 || len(readMetrics(t, dir)) != 10 {
		t.Fatalf("resumed at step %d with %d lines of history, want 10 and 10", tr.Step(), len(tr.history))
	}
	if _, err := runTrainer(t, tr, 0); err != nil {
		t.Fatal(err)
	}
	sameRun(t, readMetrics(t, straightDir), readMetrics(t, dir))
}

// TestThreads checks that a run gives bitwise the same losses for every
// GOMAXPROCS of parallel.TestThreads, for the tiny model and for one wide enough that the
// matrix products and attention split their work between goroutines.
func TestThreads(t *testing.T) {
	checkThreads(t, nn.FP32)
}

// checkThreads is TestThreads at precision p.
func checkThreads(t *testing.T, p nn.Precision) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	wide := tinyModel()
	wide.Dim, wide.Heads, wide.Context = 128, 4, 64
	wide.Attention = attention.PolysketchConfig{Degree: 4, SketchSize: 8, Block: 32, Local: true, Sketch: attention.Gaussian}
	if p == nn.BF16 {
		// Still wide enough for the products to split among goroutines,
		// and quick on the portable kernel of CPUs without bf16.
		wide.Dim, wide.Context = 64, 32
		wide.Attention = attention.PolysketchConfig{Degree: 4, SketchSize: 8, Block: 16, Local: true, Sketch: attention.Gaussian}
	}
	for _, mc := range []model.Config{tinyModel(), wide} {
		t.Run(fmt.Sprintf("dim %d", mc.Dim), func(t *testing.T) {
			tc := tinyTrain()
			tc.Steps = 6
			tc.Precision = p
			var runs [][]Metrics
			for _, procs := range parallel.TestThreads {
				runtime.GOMAXPROCS(procs)
				dir := t.TempDir()
				tr, err := startNew(t, dir, mc, tc)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := runTrainer(t, tr, 0); err != nil {
					t.Fatal(err)
				}
				runs = append(runs, readMetrics(t, dir))
			}
			for _, r := range runs[1:] {
				sameRun(t, runs[0], r)
			}
		})
	}
}

// TestAccumulation checks that 2 micro-batches of 2 sequences make the
// same step as 1 batch of 4 (the same windows, drawn in the same order),
// up to rounding.
func TestAccumulation(t *testing.T) {
	var runs [][]Metrics
	for _, ba := range [][2]int{{4, 1}, {2, 2}} {
		tc := tinyTrain()
		tc.Steps, tc.Batch, tc.Accum = 5, ba[0], ba[1]
		dir := t.TempDir()
		if _, err := runTrainer(t, newTrainer(t, dir, tc), 0); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, readMetrics(t, dir))
	}
	for i := range runs[0] {
		a, b := runs[0][i], runs[1][i]
		if math.Abs(a.Loss-b.Loss) > 1e-4*a.Loss || math.Abs(a.GradNorm-b.GradNorm) > 1e-3*a.GradNorm || a.Tokens != b.Tokens {
			t.Errorf("step %d: batch 4 gives loss %v norm %v, 2×2 gives %v and %v", a.Step, a.Loss, a.GradNorm, b.Loss, b.GradNorm)
		}
	}
}

// TestDiverged checks that a NaN loss stops the run without saving, and
// leaves the last periodic checkpoint as it was.
func TestDiverged(t *testing.T) {
	tc := tinyTrain()
	tc.SaveEvery = 5
	dir := t.TempDir()
	testHookLoss = func(step int, loss float64) float64 {
		if step == 8 {
			return math.NaN()
		}
		return loss
	}
	defer func() { testHookLoss = nil }()
	tr := newTrainer(t, dir, tc)
	res, err := runTrainer(t, tr, 0)
	if !errors.Is(err, ErrDiverged) || !strings.Contains(err.Error(), "step 8: loss is NaN") {
		t.Fatalf("Run: %v, want the divergence at step 8", err)
	}
	if res.Step != 7 || res.Saved != 5 {
		t.Errorf("result: step %d, saved %d; want 7 and 5", res.Step, res.Saved)
	}
	c, err := checkpoint.Load(filepath.Join(dir, CheckpointDir))
	if err != nil {
		t.Fatal(err)
	}
	if c.State.Step != 5 {
		t.Errorf("checkpoint of step %d, want the last good one, 5", c.State.Step)
	}
	if ms := readMetrics(t, dir); len(ms) != 7 {
		t.Errorf("%d lines in the metrics log, want the 7 finite steps", len(ms))
	}
}

// TestHugeLearningRate trains with an absurd learning rate, without any
// hook: the run must stop with ErrDiverged and no checkpoint of bad
// weights, never save them.
func TestHugeLearningRate(t *testing.T) {
	tc := tinyTrain()
	tc.LR, tc.MinLR, tc.Warmup, tc.Clip, tc.WeightDecay = 1e30, 1e30, 0, 0, 0
	tc.SaveEvery = 1
	dir := t.TempDir()
	res, err := runTrainer(t, newTrainer(t, dir, tc), 0)
	if !errors.Is(err, ErrDiverged) {
		t.Fatalf("Run: %v, want ErrDiverged", err)
	}
	if res.Saved < 0 {
		return
	}
	// Any checkpoint left must hold weights that gave a finite loss.
	c, err := checkpoint.Load(filepath.Join(dir, CheckpointDir))
	if err != nil {
		t.Fatalf("the checkpoint of step %d does not load: %v", res.Saved, err)
	}
	train, _ := tinyData(t)
	e, err := Evaluate(context.Background(), c.Model, train, 4, 1)
	if err != nil || math.IsNaN(e.Loss) || math.IsInf(e.Loss, 0) {
		t.Errorf("checkpoint of step %d gives loss %v, %v", c.State.Step, e.Loss, err)
	}
}

// TestCancelBeforeFirstStep checks that a run cancelled before it starts
// saves its initial state and stops cleanly.
func TestCancelBeforeFirstStep(t *testing.T) {
	dir := t.TempDir()
	tr := newTrainer(t, dir, tinyTrain())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := tr.Run(ctx)
	tr.Close()
	if !errors.Is(err, context.Canceled) || res.Step != 0 || res.Saved != 0 {
		t.Fatalf("Run: %v at step %d, saved %d; want context.Canceled at step 0, saved", err, res.Step, res.Saved)
	}
	if _, _, err := OpenRun(dir); err != nil {
		t.Error(err)
	}
}

func TestNewErrors(t *testing.T) {
	bigContext := tinyModel()
	bigContext.Context = 1 << 20
	gpt2 := tinyTrain()
	gpt2.Tokenizer = "gpt2"
	badLR := tinyTrain()
	badLR.LR = -1
	badModel := tinyModel()
	badModel.Heads = 3
	tests := []struct {
		name string
		mc   model.Config
		tc   Config
		want string
	}{
		{"tokens of another tokenizer", tinyModel(), gpt2, "holds byte tokens"},
		{"context longer than the corpus", bigContext, tinyTrain(), "window of sequence length 1048576"},
		{"negative learning rate", tinyModel(), badLR, "peak learning rate -1"},
		{"invalid model", badModel, tinyTrain(), "not divisible by heads 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := startNew(t, t.TempDir(), tc.mc, tc.tc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Start: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestResumeErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := runTrainer(t, newTrainer(t, dir, tinyTrain()), 3); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	_, err := resume(t, dir, func(tc *Config) { tc.Tokenizer = "gpt2" })
	if err == nil || !strings.Contains(err.Error(), `tokenizer "gpt2" where the checkpoint has "byte"`) {
		t.Errorf("resume with another tokenizer: %v", err)
	}
	s, _, err := OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	noOptimizer := t.TempDir()
	if err := checkpoint.Save(filepath.Join(noOptimizer, CheckpointDir), &checkpoint.Checkpoint{Model: s.Model, Train: s.Train, State: s.State}); err != nil {
		t.Fatal(err)
	}
	if _, err := resume(t, noOptimizer, nil); err == nil || !strings.Contains(err.Error(), "no optimizer state") {
		t.Errorf("resume without optimizer state: %v", err)
	}
	if _, _, err := OpenRun(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no checkpoint") {
		t.Errorf("OpenRun of an empty directory: %v", err)
	}
	weightsOnly := t.TempDir()
	if err := checkpoint.Save(filepath.Join(weightsOnly, CheckpointDir), &checkpoint.Checkpoint{Model: s.Model, State: s.State}); err != nil {
		t.Fatal(err)
	}
	if _, err := resume(t, weightsOnly, nil); err == nil || !strings.Contains(err.Error(), "no training configuration") {
		t.Errorf("resume of weights alone: %v", err)
	}
}

// TestEvaluate checks that the loss is weighted by tokens: any batch size
// gives the mean over the same windows, and maxBatches limits the count.
func TestEvaluate(t *testing.T) {
	train, _ := tinyData(t)
	m, err := model.New(tinyModel())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	windows := (train.Len() - 1) / 16
	var losses []float64
	for _, batch := range []int{1, 3, 8} {
		e, err := Evaluate(ctx, m, train, batch, 0)
		if err != nil {
			t.Fatal(err)
		}
		if e.Tokens != windows*16 || e.Batches != int((windows+int64(batch)-1)/int64(batch)) {
			t.Errorf("batch %d: %d tokens in %d batches, want %d in %d", batch, e.Tokens, e.Batches, windows*16, (windows+int64(batch)-1)/int64(batch))
		}
		losses = append(losses, e.Loss)
	}
	for _, l := range losses[1:] {
		if math.Abs(l-losses[0]) > 1e-5*losses[0] {
			t.Errorf("losses %v differ with the batch size", losses)
		}
	}
	// An untrained model guesses about uniformly: near ln 256 (its untied
	// head's unit-variance logits add about 1/2 nat).
	if math.Abs(losses[0]-math.Log(256)) > 1 {
		t.Errorf("untrained loss %v, want near ln 256 = %.3f", losses[0], math.Log(256))
	}
	e, err := Evaluate(ctx, m, train, 2, 3)
	if err != nil || e.Batches != 3 || e.Tokens != 3*2*16 {
		t.Errorf("maxBatches 3: %+v, %v", e, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Evaluate(cancelled, m, train, 2, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Tokenizer = "utf9" }, `unknown tokenizer "utf9"`},
		{func(c *Config) { c.Batch = 0 }, "batch 0"},
		{func(c *Config) { c.Accum = 0 }, "accum 0"},
		{func(c *Config) { c.Steps = 0 }, "steps 0"},
		{func(c *Config) { c.Warmup = 5000 }, "warmup 5000"},
		{func(c *Config) { c.MinLR = 1 }, "final learning rate 1"},
		{func(c *Config) { c.Beta2 = 1 }, "beta2 1"},
		{func(c *Config) { c.Clip = math.NaN() }, "clip NaN"},
		{func(c *Config) { c.SaveEvery = -1 }, "save_every -1"},
	}
	for _, tc := range tests {
		c := DefaultConfig()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate: %v, want an error containing %q", err, tc.want)
		}
	}
}

// snapshot returns the names and contents of the files under dir, for
// tests that nothing changed them.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if errors.Is(err, os.ErrNotExist) && path == dir {
			return nil // none: nothing to compare
		}
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		fmt.Fprintf(&b, "%s %x\n", path, data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
