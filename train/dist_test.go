package train

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/polysketch/polysketch/model"
)

// startRanks calls Start on k ranks of a localComm at once, each a
// goroutine, with the Run that run returns for its rank (Comm set), and
// returns their trainers and errors.
func startRanks(k int, dir string, run func(r int) Run) ([]*Trainer, []error) {
	comms := newLocalGroup(k)
	trs, errs := make([]*Trainer, k), make([]error, k)
	var wg sync.WaitGroup
	for r := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rr := run(r)
			rr.Comm = comms[r]
			trs[r], errs[r] = Start(context.Background(), dir, rr)
		}()
	}
	wg.Wait()
	return trs, errs
}

// runRanks trains tc in dir on k ranks of a localComm, each a goroutine,
// and returns their trainers after Run. cancelAt, if positive, cancels
// rank k-1's context after that step.
func runRanks(t *testing.T, dir string, k int, tc Config, opt DistOptions, cancelAt int) ([]*Trainer, []error) {
	t.Helper()
	train, val := tinyData(t)
	return trainRanks(t, dir, k, func(int) Run {
		return Run{Model: tinyModel(), Recipe: tc, Source: &Corpus{Train: train, Val: val}, Dist: opt}
	}, cancelAt)
}

// trainRanks starts on k ranks the Run that run returns for each,
// failing the test if a rank fails to start, runs them (runAll) and
// returns their trainers and the errors of Run.
func trainRanks(t *testing.T, dir string, k int, run func(r int) Run, cancelAt int) ([]*Trainer, []error) {
	t.Helper()
	trs, errs := startRanks(k, dir, run)
	noErrors(t, errs)
	return trs, runAll(t, trs, cancelAt)
}

// noErrors fails the test at the first rank's error.
func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// runAll runs the trainers of the ranks, each in a goroutine, and closes
// them. cancelAt, if positive, cancels the last rank's context after that
// step.
func runAll(t *testing.T, trs []*Trainer, cancelAt int) []error {
	errs := make([]error, len(trs))
	var wg sync.WaitGroup
	for r, tr := range trs {
		ctx, cancel := context.WithCancel(context.Background())
		if r == len(trs)-1 && cancelAt > 0 {
			tr.Progress = func(p Progress) {
				if p.Step == cancelAt {
					cancel()
				}
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			_, errs[r] = tr.Run(ctx)
			if err := tr.Close(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	return errs
}

// TestDistributedSameAsOneProcess checks the promise of Join: K ranks
// give bitwise the losses, gradient norms and weights of one process with
// the same global batch, with one and with two micro-batches per rank,
// with and without overlapped communication.
func TestDistributedSameAsOneProcess(t *testing.T) {
	cases := []struct {
		k, accum int
		opt      DistOptions
	}{
		{1, 1, DistOptions{}},
		{2, 2, DistOptions{}},
		{2, 4, DistOptions{}},
		{2, 2, DistOptions{NoOverlap: true}},
		{4, 4, DistOptions{}},
		{3, 6, DistOptions{}},
	}
	if testing.Short() {
		cases = cases[1:3]
	}
	for _, c := range cases {
		tc := tinyTrain()
		tc.Steps, tc.Batch, tc.Accum, tc.EvalEvery = 6, 2, c.accum, 3
		one := t.TempDir()
		single := newTrainer(t, one, tc)
		if _, err := runTrainer(t, single, 0); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		trs, errs := runRanks(t, dir, c.k, tc, c.opt, 0)
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%d ranks, accum %d: rank %d: %v", c.k, c.accum, r, err)
			}
		}
		sameRun(t, readMetrics(t, one), readMetrics(t, dir))
		for _, tr := range trs {
			sameWeights(t, single.Model, tr.Model)
		}
	}
}

// TestAccumulationOrder checks that one process sums micro-batch
// gradients as g₀ + g₁ + …, each from zero: the gradient of a step of
// accum 2 equals, bitwise, the sum of the gradients of its two
// micro-batches computed separately.
func TestAccumulationOrder(t *testing.T) {
	tc := tinyTrain()
	tc.Steps, tc.Warmup, tc.Batch, tc.Accum, tc.Clip = 1, 0, 2, 2, 0
	tr := newTrainer(t, t.TempDir(), tc)
	defer tr.Close()
	if _, _, err := tr.gradients(); err != nil {
		t.Fatal(err)
	}
	// The same two micro-batches, one model each, from zero.
	ref := make([][]float32, 2)
	b := newTrainer(t, t.TempDir(), tc)
	defer b.Close()
	for i := range 2 {
		if err := b.feed.next(&b.batch); err != nil {
			t.Fatal(err)
		}
		m, _ := model.New(tinyModel())
		m.Loss(b.batch.Inputs, b.batch.Targets, b.batch.B, b.batch.N)
		m.Backward()
		for _, p := range m.Params() {
			ref[i] = append(ref[i], p.Grad.Data...)
		}
	}
	j := 0
	for _, p := range tr.Model.Params() {
		for _, g := range p.Grad.Data {
			if want := ref[0][j] + ref[1][j]; g != want {
				t.Fatalf("%s: gradient %v, want %v + %v = %v", p.Name, g, ref[0][j], ref[1][j], want)
			}
			j++
		}
	}
}

// TestDistributedStop checks that an interrupt on one rank stops every
// rank after the same step, and that rank 0 saves that step.
func TestDistributedStop(t *testing.T) {
	tc := tinyTrain()
	tc.Steps, tc.Batch, tc.Accum = 10, 2, 2
	dir := t.TempDir()
	trs, errs := runRanks(t, dir, 2, tc, DistOptions{}, 3)
	for r, err := range errs {
		if !strings.Contains(errString(err), "interrupted at step") {
			t.Errorf("rank %d: %v, want an interruption", r, err)
		}
	}
	if a, b := trs[0].Step(), trs[1].Step(); a != b || a >= tc.Steps {
		t.Errorf("ranks stopped at steps %d and %d", a, b)
	}
	if _, saved, err := OpenRun(dir); err != nil || saved.Steps != tc.Steps {
		t.Errorf("checkpoint: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestStartupAgreement: ranks that start different runs, or one of which
// fails before it agrees, all fail, rank 0 naming the rank and the
// difference, the others with ErrStartup; none writes anything.
func TestStartupAgreement(t *testing.T) {
	train, val := tinyData(t)
	corpus := &Corpus{Train: train, Val: val}
	recipe := tinyTrain()
	recipe.Accum = 6 // a multiple of 2 and 3 ranks
	other := recipe
	other.LR = 0.002
	three := recipe
	three.Accum = 3
	otherVal := &Corpus{Train: train, Val: train}
	tests := []struct {
		name  string
		k     int
		run   func(r int) Run
		rank0 string
	}{
		{"another recipe", 3, func(r int) Run {
			if r == 2 {
				return Run{Model: tinyModel(), Recipe: other, Source: corpus}
			}
			return Run{Model: tinyModel(), Recipe: recipe, Source: corpus}
		}, "rank 2 differs from rank 0 in train.lr: 0.003 vs 0.002"},
		{"other tokens", 2, func(r int) Run {
			if r == 1 {
				return Run{Model: tinyModel(), Recipe: recipe, Source: otherVal}
			}
			return Run{Model: tinyModel(), Recipe: recipe, Source: corpus}
		}, "rank 1 differs from rank 0 in tokens"},
		{"a rank fails", 2, func(r int) Run {
			mc := tinyModel()
			if r == 1 {
				mc.Heads = 3
			}
			return Run{Model: mc, Recipe: recipe, Source: corpus}
		}, "rank 1 failed at start-up: model: "},
		{"accum not a multiple of the ranks", 2, func(int) Run {
			return Run{Model: tinyModel(), Recipe: three, Source: corpus}
		}, "accum 3 is not a multiple of the 2 ranks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			trs, errs := startRanks(tt.k, dir, tt.run)
			if errs[0] == nil || !strings.Contains(errs[0].Error(), tt.rank0) {
				t.Errorf("rank 0: %v, want %q", errs[0], tt.rank0)
			}
			for r, err := range errs[1:] {
				if !errors.Is(err, ErrStartup) {
					t.Errorf("rank %d: %v, want ErrStartup", r+1, err)
				}
			}
			for r, tr := range trs {
				if tr != nil {
					t.Errorf("rank %d has a trainer", r)
				}
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a failed start-up left %s: %v", dir, err)
			}
		})
	}

	// A rank that fails before Start withdraws: the others fail with it.
	comms := newLocalGroup(2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, errs[0] = Start(context.Background(), t.TempDir(), Run{Model: tinyModel(), Recipe: recipe, Source: corpus, Comm: comms[0]})
	}()
	go func() {
		defer wg.Done()
		errs[1] = Withdraw(comms[1], errors.New("bad flag"))
	}()
	wg.Wait()
	if errs[0] == nil || errs[0].Error() != "rank 1 failed at start-up: bad flag" || !errors.Is(errs[1], ErrStartup) {
		t.Errorf("withdrawn rank 1: rank 0 %v, rank 1 %v", errs[0], errs[1])
	}
}

// TestDistributedAllreduce: with the library's all-reduce the run is the
// same up to rounding (it sums each rank's micro-batches first).
func TestDistributedAllreduce(t *testing.T) {
	tc := tinyTrain()
	tc.Steps, tc.Batch, tc.Accum = 4, 2, 4
	one := t.TempDir()
	if _, err := runTrainer(t, newTrainer(t, one, tc), 0); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, errs := runRanks(t, dir, 2, tc, DistOptions{Allreduce: true}, 0); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	a, b := readMetrics(t, one), readMetrics(t, dir)
	for i := range a {
		if math.Abs(a[i].Loss-b[i].Loss) > 1e-5*a[i].Loss || a[i].Tokens != b[i].Tokens {
			t.Errorf("step %d: loss %v alone, %v with all-reduce", a[i].Step, a[i].Loss, b[i].Loss)
		}
	}
}

// TestDistributedResume: a run stopped on 2 ranks and resumed from its
// checkpoint on 4 gives the losses and weights of one uninterrupted
// process.
func TestDistributedResume(t *testing.T) {
	tc := tinyTrain()
	tc.Steps, tc.Batch, tc.Accum, tc.EvalEvery = 8, 2, 4, 4
	one := t.TempDir()
	single := newTrainer(t, one, tc)
	if _, err := runTrainer(t, single, 0); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	runRanks(t, dir, 2, tc, DistOptions{}, 3)
	s, _, err := OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.State.Step >= tc.Steps {
		t.Fatalf("the first session ran to step %d", s.State.Step)
	}
	// Every rank loads the checkpoint itself, as on separate hosts.
	train, val := tinyData(t)
	trs, errs := trainRanks(t, dir, 4, func(int) Run {
		return Run{Mode: Resume, Configure: func(*model.Config, *Config) error { return nil }, Source: &Corpus{Train: train, Val: val}}
	}, 0)
	noErrors(t, errs)
	sameRun(t, readMetrics(t, one), readMetrics(t, dir))
	for _, tr := range trs {
		sameWeights(t, single.Model, tr.Model)
	}
}
