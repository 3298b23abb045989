package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
)

const benchDecodeHelp = `usage: polysketch bench decode [flags]

Measures generation of a model of --shape (random weights; or a
checkpoint's) at --precision, against the memory-bandwidth bound of this
machine:

  weights   the bytes a decoding step reads: every dense weight matrix (in
            bf16 two bytes a weight, else four; the tied embedding whole,
            as the logits read it), and the other parameters in float32;
            an untied embedding's lookup reads one row and is left out.
  copy      the copy bandwidth, bytes read plus bytes written per second by
            copy() of a --copy-mib buffer split among GOMAXPROCS goroutines,
            best of 5 (the STREAM convention), measured in this run.
  bound     copy bandwidth / weight bytes: tokens/s of one stream if every
            step only read the weights at that speed.
  1 stream  tokens/s of one sequence decoding --tokens tokens after a short
            prompt, and its share of the bound.
  S streams tokens/s of S sequences decoding together (one Batch step a
            token each), and the ratio to one stream, for each S of
            --streams.
  prefill   tokens/s of one prompt of --prefill tokens (Decoder.Prefill).

Each figure is the best of --rounds, with the cores the process kept busy
meanwhile (CPU time over wall time): below GOMAXPROCS, other work shared
the machine, or the step left cores idle.

flags:
`

func benchDecode(args []string, stdout io.Writer) (err error) {
	fs := newFlags("bench decode", benchDecodeHelp, stdout)
	shape := fs.String("shape", "smollm2-135m", shapeHelp())
	streams := fs.String("streams", "1,16", "comma-separated numbers of sequences decoded together")
	tokens := fs.Int("tokens", 32, "tokens each stream decodes")
	prefill := fs.Int("prefill", 2048, "tokens of the prompt whose prefill is timed (0: none)")
	rounds := fs.Int("rounds", 3, "rounds of each measurement; the best counts")
	copyMiB := fs.Int("copy-mib", 512, "size of the buffer the copy bandwidth is measured on, MiB")
	var prec nn.Precision
	addPrecisionFlag(fs, &prec)
	var prof cpuProfile
	prof.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := prof.start(); err != nil {
		return fmt.Errorf("bench decode: %w", err)
	}
	defer prof.stop(&err)
	counts, err := positiveInts(*streams, ",")
	switch {
	case err != nil:
		return fmt.Errorf("bench decode: --streams %q: want comma-separated positive numbers, as 1,16", *streams)
	case *tokens < 1 || *rounds < 1 || *copyMiB < 1 || *prefill < 0:
		return fmt.Errorf("bench decode: --tokens, --rounds and --copy-mib must be positive, --prefill not negative")
	}
	mc, _, err := benchShape(*shape)
	if err != nil {
		return fmt.Errorf("bench decode: %w", err)
	}
	if *prefill > 0 && model.ContextLimit(mc) > 0 && *prefill+*tokens > mc.Context {
		mc.Context = *prefill + *tokens // no parameter depends on it but learned positions'
	}
	m, err := model.New(mc)
	if err != nil {
		return fmt.Errorf("bench decode: %w", err)
	}
	weights := weightBytes(m, prec)
	warnPrecision(stderr, prec)
	if err := inferIn(m, prec); err != nil {
		return fmt.Errorf("bench decode: %w", err)
	}
	fmt.Fprintf(stdout, "decoding: %s; %s; GOMAXPROCS=%d; best of %d rounds\n", describeModel(mc), precisionDesc(prec), runtime.GOMAXPROCS(0), *rounds)
	bw := copyBandwidth(*copyMiB<<20, 5)
	bound := bw / float64(weights)
	fmt.Fprintf(stdout, "weights    %.1f MB read per token\n", float64(weights)/1e6)
	fmt.Fprintf(stdout, "copy       %.2f GB/s (read + write, %d MiB buffer)\n", bw/1e9, *copyMiB)
	fmt.Fprintf(stdout, "bound      %.1f tokens/s\n", bound)
	rng := rand.New(rand.NewPCG(1, 2))
	ids := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(rng.IntN(mc.Vocab))
		}
		return out
	}
	var one float64
	for _, s := range counts {
		best, cores := 0.0, 0.0
		for range *rounds {
			cpu := cpuTime()
			start := time.Now()
			tps, err := decodeStreams(m, s, *tokens, ids)
			if err != nil {
				return fmt.Errorf("bench decode: %w", err)
			}
			if tps > best {
				best, cores = tps, float64(cpuTime()-cpu)/float64(time.Since(start))
			}
		}
		if one == 0 {
			one = best
		}
		label := fmt.Sprintf("%d streams", s)
		if s == 1 {
			label = "1 stream"
		}
		note := fmt.Sprintf("%.2f× the first", best/one)
		if s == 1 {
			note = fmt.Sprintf("%.0f%% of the bound", 100*best/bound)
		}
		fmt.Fprintf(stdout, "%-10s %.1f tokens/s (%s; %.2f cores busy)\n", label, best, note, cores)
	}
	if *prefill > 0 {
		best, cores := 0.0, 0.0
		for range *rounds {
			dec, err := m.NewDecoder(1)
			if err != nil {
				return fmt.Errorf("bench decode: %w", err)
			}
			prompt := ids(*prefill)
			cpu := cpuTime()
			start := time.Now()
			if _, err := dec.Prefill(prompt); err != nil {
				return fmt.Errorf("bench decode: %w", err)
			}
			if tps := float64(*prefill) / time.Since(start).Seconds(); tps > best {
				best, cores = tps, float64(cpuTime()-cpu)/float64(time.Since(start))
			}
		}
		fmt.Fprintf(stdout, "prefill    %.1f tokens/s (%d tokens; %.2f cores busy)\n", best, *prefill, cores)
	}
	return nil
}

// weightBytes returns the bytes of m's parameters that a decoding step
// reads, at precision p: see benchDecodeHelp.
func weightBytes(m *model.Model, p nn.Precision) int64 {
	dense := int64(4)
	if p == nn.BF16 {
		dense = 2
	}
	var n int64
	for _, q := range m.Params() {
		switch {
		case q.Decay: // a dense layer's weight matrix
			n += dense * int64(q.Value.Len())
		case q.Name == "embed.weight" && m.Config().Tied:
			n += dense * int64(q.Value.Len())
		case q.Name == "embed.weight" || q.Name == "pos.weight":
			n += 4 * int64(q.Value.Shape[1]) // a row
		default:
			n += 4 * int64(q.Value.Len())
		}
	}
	return n
}

// copyBandwidth returns the best of rounds of copy() of a buffer of size
// bytes, split among GOMAXPROCS goroutines as decoding splits its
// products, as bytes read and written per second.
func copyBandwidth(size, rounds int) float64 {
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	workers := runtime.GOMAXPROCS(0)
	run := func() {
		var wg sync.WaitGroup
		for w := range workers {
			lo, hi := w*size/workers, (w+1)*size/workers
			wg.Go(func() { copy(dst[lo:hi], src[lo:hi]) })
		}
		wg.Wait()
	}
	run() // fault the pages in
	best := 0.0
	for range rounds {
		start := time.Now()
		run()
		best = max(best, 2*float64(size)/time.Since(start).Seconds())
	}
	return best
}

// decodeStreams decodes n tokens in each of s sequences, stepped together
// after a prompt of 4 tokens each, and returns the tokens/s of the steps.
func decodeStreams(m *model.Model, s, n int, ids func(int) []int32) (float64, error) {
	b := m.NewBatch()
	seqs := make([]*model.Sequence, s)
	chunks := make([][]int32, s)
	for i := range seqs {
		var err error
		if seqs[i], err = m.NewSequence(); err != nil {
			return 0, err
		}
		chunks[i] = ids(4)
	}
	if _, err := b.Step(seqs, chunks); err != nil {
		return 0, err
	}
	next := func(logits *tensor.Tensor) {
		V := logits.Shape[1]
		for i := range chunks {
			row := logits.Data[i*V : (i+1)*V]
			best := 0
			for j, v := range row {
				if v > row[best] {
					best = j
				}
			}
			chunks[i] = []int32{int32(best)}
		}
	}
	logits, err := b.Step(seqs, chunks)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	for range n {
		next(logits)
		if logits, err = b.Step(seqs, chunks); err != nil {
			return 0, err
		}
	}
	return float64(s*n) / time.Since(start).Seconds(), nil
}
