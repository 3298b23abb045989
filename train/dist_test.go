package train

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/polysketch/polysketch/model"
)

// runRanks trains tc in dir on k ranks of a localComm, each a goroutine,
// and returns their trainers after Run. cancelAt, if positive, cancels
// rank k-1's context after that step.
func runRanks(t *testing.T, dir string, k int, tc Config, opt DistOptions, cancelAt int) ([]*Trainer, []error) {
	t.Helper()
	train, val := tinyData(t)
	comms := newLocalGroup(k)
	trs := make([]*Trainer, k)
	for r := range k {
		tr, err := Join(comms[r], opt, dir, tinyModel(), nil, tc, train, val)
		if err != nil {
			t.Fatal(err)
		}
		trs[r] = tr
	}
	errs := make([]error, k)
	var wg sync.WaitGroup
	for r, tr := range trs {
		ctx, cancel := context.WithCancel(context.Background())
		if r == k-1 && cancelAt > 0 {
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
	return trs, errs
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
	train, val := tinyData(t)
	ref := make([][]float32, 2)
	b, err := newWorker(tinyModel(), nil, tc, train, val)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := b.batches.Next(&b.batch); err != nil {
			t.Fatal(err)
		}
		in, tg := split(b.batch, nil, nil)
		m, _ := model.New(tinyModel())
		m.Loss(in, tg, b.batch.B, b.batch.N)
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
	if _, saved, err := LoadCheckpoint(dir); err != nil || saved.Steps != tc.Steps {
		t.Errorf("checkpoint: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func TestJoinErrors(t *testing.T) {
	train, val := tinyData(t)
	tc := tinyTrain()
	tc.Accum = 3
	_, err := Join(newLocalGroup(2)[0], DistOptions{}, t.TempDir(), tinyModel(), nil, tc, train, val)
	if err == nil || !strings.Contains(err.Error(), "not a multiple of the 2 ranks") {
		t.Errorf("accum 3 on 2 ranks: %v", err)
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
	c, saved, err := LoadCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.State.Step >= tc.Steps {
		t.Fatalf("the first session ran to step %d", c.State.Step)
	}
	train, val := tinyData(t)
	comms := newLocalGroup(4)
	trs := make([]*Trainer, 4)
	for r := range trs {
		// Every rank loads the checkpoint itself, as on separate hosts.
		c, _, err := LoadCheckpoint(dir)
		if err != nil {
			t.Fatal(err)
		}
		if trs[r], err = Join(comms[r], DistOptions{}, dir, c.Model.Config(), c, saved, train, val); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for r, tr := range trs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[r] = tr.Run(context.Background())
			tr.Close()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	sameRun(t, readMetrics(t, one), readMetrics(t, dir))
	for _, tr := range trs {
		sameWeights(t, single.Model, tr.Model)
	}
}
