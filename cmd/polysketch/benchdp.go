package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/train"
	"github.com/polysketch/polysketch/vec"
)

const benchDPHelp = `usage: [mpirun -np K] polysketch bench dp [flags]

Measures data-parallel training: tokens per second of whole training
steps (train.Trainer: forward, backward, gradient reduction, clipping,
AdamW) of the default model on random bytes, in one process or, under
mpirun (a binary built with -tags mpi), on K ranks, each computing
--accum/K of the step's micro-batches. Under mpirun, "polysketch bench
train" runs this benchmark.

It prints, on rank 0: the ranks and GOMAXPROCS, the global tokens per
step, the mean seconds per step after a warm-up step, tokens/s, and the
seconds per step spent waiting on communication (gradients, losses) on
rank 0. Compare "mpirun -np 2 env GOMAXPROCS=1 polysketch bench dp" with
"GOMAXPROCS=2 polysketch bench dp --accum 2".

flags:
`

// benchDPRow is the output of bench dp.
type benchDPRow struct {
	Ranks        int     `json:"ranks"`
	Threads      int     `json:"gomaxprocs"`
	Tokens       int     `json:"tokens_per_step"`
	Seconds      float64 `json:"seconds_per_step"`
	TokensPerSec float64 `json:"tokens_per_sec"`
	CommSeconds  float64 `json:"comm_seconds_per_step"`
	// CPUSeconds is the CPU time per step of every rank together; on a
	// shared machine tokens per CPU-second compare configurations better
	// than tokens per second.
	CPUSeconds float64 `json:"cpu_seconds_per_step"`
	Reduce     string  `json:"reduce"`
	// Seconds of one reduction of the whole gradient alone, under mpirun:
	// the fixed-order one (all-to-all, sums in rank order, all-gather)
	// and MPI_Allreduce, the best of 5.
	FixedSeconds     float64 `json:"fixed_reduce_seconds,omitempty"`
	AllreduceSeconds float64 `json:"allreduce_seconds,omitempty"`
	GradientBytes    int     `json:"gradient_bytes"`
}

func benchDP(args []string, stdout io.Writer) (err error) {
	dr, err := startDist()
	if err != nil {
		return fmt.Errorf("bench dp: %w", err)
	}
	defer dr.finish(&err)
	stdout = dr.output(stdout)
	k := 1
	if dr != nil {
		k = dr.comm.Size()
	}
	mc, tc := model.DefaultConfig(), train.DefaultConfig()
	tc.Accum = k
	var opt train.DistOptions
	asJSON := false
	fs := newFlags("bench dp", benchDPHelp, stdout)
	defer asCLI(fs, &err)
	shapeFlags(fs, &mc)
	fs.IntVar(&mc.Context, "context", mc.Context, "tokens per sequence")
	fs.IntVar(&tc.Batch, "batch", tc.Batch, "sequences per micro-batch")
	fs.IntVar(&tc.Accum, "accum", tc.Accum, "micro-batches per step, over all ranks (default: the number of ranks)")
	fs.IntVar(&tc.Steps, "steps", 5, "timed steps, after one warm-up step")
	fs.BoolVar(&opt.NoOverlap, "no-overlap", false, "send each micro-batch's gradients after its backward pass, not layer by layer")
	fs.BoolVar(&opt.Allreduce, "allreduce", false, "sum gradients with MPI_Allreduce instead of the fixed-order reduction (not reproducible)")
	jsonFlag(fs, &asJSON, "a JSON line")
	tokName := vocabFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	tok, err := openTokenizer("bench dp", *tokName)
	if err != nil {
		return err
	}
	mc.Vocab = tok.VocabSize()
	steps := tc.Steps
	tc.Steps += 2 // a warm-up step first, and a last one that validates and saves
	tc.Warmup, tc.EvalEvery, tc.SaveEvery, tc.EvalBatches = 0, 0, 0, 1

	// Random printable text: the same on every rank, so that they agree.
	dir, err := os.MkdirTemp("", "polysketch-bench-dp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rng := rand.New(rand.NewPCG(1, 2))
	text := make([]byte, 1<<20)
	for i := range text {
		text[i] = byte(32 + rng.IntN(95))
	}
	if err := os.WriteFile(filepath.Join(dir, "bytes.txt"), text, 0o644); err != nil {
		return err
	}
	c, err := data.NewCorpus(filepath.Join(dir, "bytes.txt"))
	if err != nil {
		return err
	}
	trainTokens, valTokens, err := data.Load(context.Background(), c, tok, data.Options{CacheDir: dir})
	if err != nil {
		return err
	}
	defer trainTokens.Close()
	defer valTokens.Close()
	tc.Tokenizer, tc.Corpus = tok.Name(), nil
	dr.startAgreement()
	t, err := train.Start(context.Background(), filepath.Join(dir, "run"), train.Run{
		Model: mc, Recipe: tc, Comm: dr.commOrNil(), Dist: opt,
		Source: &train.Corpus{Train: trainTokens, Val: valTokens},
	})
	if err != nil {
		return runError("bench dp", filepath.Join(dir, "run"), err)
	}
	dr.startTraining()
	defer t.Close()
	var start time.Time
	var elapsed, wait, cpu time.Duration
	t.Progress = func(p train.Progress) {
		switch p.Step {
		case 1: // after the warm-up
			start, wait, cpu = time.Now(), t.CommWait(), cpuTime()
		case steps + 1:
			elapsed, wait, cpu = time.Since(start), t.CommWait()-wait, cpuTime()-cpu
		}
	}
	if _, err := t.Run(context.Background()); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("bench dp: %w", err)
	}
	sec := elapsed.Seconds() / float64(steps)
	tokens := tc.Accum * tc.Batch * mc.Context
	reduce := "fixed-order"
	switch {
	case k == 1:
		reduce = "none"
	case opt.Allreduce:
		reduce = "MPI_Allreduce"
	case opt.NoOverlap:
		reduce = "fixed-order, no overlap"
	}
	r := benchDPRow{Ranks: k, Threads: runtime.GOMAXPROCS(0), Tokens: tokens, Seconds: sec,
		TokensPerSec: float64(tokens) / sec, CommSeconds: wait.Seconds() / float64(steps), Reduce: reduce}
	n := 0
	for _, p := range t.Model.Params() {
		n += p.Value.Len()
	}
	r.GradientBytes = 4 * n
	r.CPUSeconds = cpu.Seconds() / float64(steps)
	if dr != nil {
		if r.CPUSeconds, err = sumRanks(dr.comm, r.CPUSeconds); err != nil {
			return fmt.Errorf("bench dp: %w", err)
		}
		if r.FixedSeconds, r.AllreduceSeconds, err = reduceCost(dr.comm, n); err != nil {
			return fmt.Errorf("bench dp: %w", err)
		}
	}
	if asJSON {
		return writeJSONLine(stdout, r)
	}
	_, err = fmt.Fprintf(stdout, "ranks %d × GOMAXPROCS %d, %d tokens/step (%d × %d × %d), reduce %s: %.3f s/step, %.0f tokens/s, %.4f s/step waiting on communication (rank 0); %.3f CPU s/step, %.0f tokens per CPU-second\n",
		r.Ranks, r.Threads, tokens, tc.Accum, tc.Batch, mc.Context, reduce, sec, r.TokensPerSec, r.CommSeconds, r.CPUSeconds, float64(tokens)/r.CPUSeconds)
	if err == nil && dr != nil {
		_, err = fmt.Fprintf(stdout, "reduction of the %.1f MB gradient alone: fixed-order %.4f s, MPI_Allreduce %.4f s (best of 5)\n",
			float64(r.GradientBytes)/1e6, r.FixedSeconds, r.AllreduceSeconds)
	}
	return err
}

// reduceCost times, best of 5, a reduction of n floats alone: the
// fixed-order one train.Join makes (an all-to-all of K chunks, each summed
// in rank order by its owner, then an all-gather) and MPI_Allreduce.
func reduceCost(comm train.Comm, n int) (fixed, allreduce float64, err error) {
	k := comm.Size()
	size := (n + k - 1) / k
	buf, recv, acc, all := make([]float32, size*k), make([]float32, size*k), make([]float32, size), make([]float32, size*k)
	counts, displs := make([]int, k), make([]int, k)
	for i := range k {
		counts[i], displs[i] = size, i*size
	}
	sync := func() error { return comm.Allgather(make([]byte, 1), make([]byte, k)) }
	fixed, allreduce = math.Inf(1), math.Inf(1)
	for range 5 {
		if err := sync(); err != nil {
			return 0, 0, err
		}
		t := time.Now()
		req, err := comm.Ialltoallv(buf, counts, displs, recv, counts, displs)
		if err == nil {
			err = req.Wait()
		}
		if err != nil {
			return 0, 0, err
		}
		copy(acc, recv[:size])
		for i := 1; i < k; i++ {
			vec.Add(acc, acc, recv[i*size:(i+1)*size])
		}
		if err := comm.Allgatherv(acc, all, counts, displs); err != nil {
			return 0, 0, err
		}
		fixed = min(fixed, time.Since(t).Seconds())
		if err := sync(); err != nil {
			return 0, 0, err
		}
		t = time.Now()
		if err := comm.Allreduce(buf[:n]); err != nil {
			return 0, 0, err
		}
		allreduce = min(allreduce, time.Since(t).Seconds())
	}
	return fixed, allreduce, nil
}

// sumRanks returns the sum of v over the ranks, in rank order.
func sumRanks(comm train.Comm, v float64) (float64, error) {
	k := comm.Size()
	send, recv := make([]byte, 8), make([]byte, 8*k)
	binary.LittleEndian.PutUint64(send, math.Float64bits(v))
	if err := comm.Allgather(send, recv); err != nil {
		return 0, err
	}
	sum := 0.0
	for r := range k {
		sum += math.Float64frombits(binary.LittleEndian.Uint64(recv[8*r:]))
	}
	return sum, nil
}
