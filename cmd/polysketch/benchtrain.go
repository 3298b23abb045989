package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/internal/mpi"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/optim"
)

const benchTrainHelp = `usage: polysketch bench train [flags]

Measures training throughput, tokens per second of whole optimizer steps
(forward, backward, gradient clipping and AdamW), and peak memory, of a
byte-level model (or one of --tokenizer's vocabulary) for each attention mechanism and context length N, with
the same number of tokens in every step: B = --tokens/N sequences of N
tokens (as the paper's Figure 3 and Table 2 compare mechanisms). The
defaults are the paper's small model: 4 layers, d_model 256, 4 heads of 64,
and every registered mechanism with its default options (polysketch:
degree 4, r = 32, blocks of 256, local attention, random sketches), plus
polysketch:learned (the paper's best variant). --attention takes a
comma-separated list of mechanisms, each a name or a spec with options;
an option flag such as --block applies to every listed mechanism that has
it.

Each case takes one warm-up step, then up to --steps timed steps, stopping
early once the case has used --max-seconds, and reports the fastest step.

A case whose predicted memory exceeds --mem-limit is reported as OOM
without running it. The prediction adds the weights, gradients and AdamW
moments, the activations the model keeps per token (about 40·d floats per
layer, as measured, plus the logits), and each layer's attention workspace as the
mechanism reports it; it is an estimate, not a bound. A case whose step is
predicted to exceed --max-seconds is skipped: the prediction scales the
step time at the previous N by N/N_prev for the quadratic mechanisms
(with fixed tokens per step their cost per token grows with N) and keeps
it for the linear ones.

peak_bytes is the largest Go heap in use during the case, above the heap
before it (see bench attention): model, optimizer and activations.
cpu_seconds is the CPU time of the process (user and system, all threads)
per timed step, on average: with more threads it should stay that of one
thread, the work split, not grown. spin_seconds is the part of it that
the goroutines of the parallel runtime spent spinning on a processor,
waiting for work or for each other.

--phases W adds, for each case, one more step at GOMAXPROCS=1 with every
parallel phase split as for W threads, and reports its time against the
timed steps' (work that splitting adds, such as operands converted once
per item, shows there, apart from any waiting), the share of that
step's time spent outside parallel phases (the serial part, which W
threads cannot shorten), the speedup on W threads that Amdahl's law then
allows phase by phase, and the phases themselves: where each is called
from, its calls, its items per call and its share of the time. Where
GOMAXPROCS is W as well (and above 1), the same step then runs once more
on the W threads, and each phase that the step calls itself (not those
nested in the items of another) gets its speed-up there against its
time on one thread; the time outside those phases on W threads is the
step's serial part plus what starting and ending the phases costs.

flags:
`

// benchTrainRow is one line of output. Seconds, TokensPerSec and
// PeakBytes are nil for a case not run; note says why.
type benchTrainRow struct {
	Mechanism    string   `json:"mechanism"`
	N            int      `json:"n"`
	Batch        int      `json:"batch"`
	Seconds      *float64 `json:"seconds"`
	TokensPerSec *float64 `json:"tokens_per_sec"`
	PeakBytes    *int64   `json:"peak_bytes"`
	CPUSeconds   *float64 `json:"cpu_seconds,omitempty"`
	SpinSeconds  *float64 `json:"spin_seconds,omitempty"`
	// With --phases: the time of a step at GOMAXPROCS=1 split as for
	// that many threads, its serial share, the speedup Amdahl's law
	// allows on that many threads, and the phases.
	SplitSeconds *float64 `json:"split_seconds,omitempty"`
	SerialShare  *float64 `json:"serial_share,omitempty"`
	Bound        *float64 `json:"amdahl_speedup,omitempty"`
	// With --phases W at GOMAXPROCS=W > 1: that step's time on the W
	// threads, and the share of it spent outside the phases it calls.
	ThreadsSeconds *float64     `json:"threads_seconds,omitempty"`
	OutsideShare   *float64     `json:"threads_outside_share,omitempty"`
	Phases         []benchPhase `json:"phases,omitempty"`
	note           string
}

// benchPhase is one parallel phase of a profiled step (see --phases).
type benchPhase struct {
	Site     string  `json:"site"`
	Calls    int     `json:"calls"`
	MinItems int     `json:"min_items"`
	MaxItems int     `json:"max_items"`
	Share    float64 `json:"share"` // of the step's time
	Serial   bool    `json:"serial,omitempty"`
	Nested   bool    `json:"nested,omitempty"`
	// Speedup is its time at GOMAXPROCS=1 over its time on the threads
	// (ThreadsSeconds); nil for nested phases, or without that step.
	Speedup *float64 `json:"speedup,omitempty"`
}

type benchTrainConfig struct {
	ns         []int
	mechanisms []benchMechanism
	model      model.Config
	tokens     int
	steps      int
	memLimit   byteSize
	maxSeconds float64
	json       bool
	precision  nn.Precision
	phases     int // --phases: profile a step split for this many threads (0: no)
}

func benchTrain(args []string, stdout io.Writer) (err error) {
	if n, _ := mpi.Launched(); n > 1 {
		return benchDP(args, stdout) // under mpirun: the data-parallel benchmark (benchdp.go)
	}
	fs := newFlags("bench train", benchTrainHelp, stdout, mechanismList(nil))
	defer asCLI(fs, &err)
	cfg := benchTrainConfig{memLimit: defaultMemLimit()}
	mc := &cfg.model
	*mc = model.DefaultConfig()
	var af attentionFlags
	af.register(fs, strings.Join(benchTrainSpecs(), ","), true)
	ns := fs.String("n", "1024,4096,8192,32768", "comma-separated context lengths N")
	shapeFlags(fs, mc)
	fs.IntVar(&cfg.tokens, "tokens", 32768, "tokens per step: B = tokens/N sequences (at least 1)")
	fs.IntVar(&cfg.steps, "steps", 2, "timed steps per case after the warm-up, at most")
	fs.Var(&cfg.memLimit, "mem-limit", "report cases predicted to need more memory than this as OOM (e.g. 8GiB); the default is half of physical memory, at most 8GiB")
	fs.Float64Var(&cfg.maxSeconds, "max-seconds", 60, "time budget of one case: skip a case whose step is predicted to take longer, and stop repeating once it is spent")
	tokName := vocabFlag(fs)
	shape := shapeFlag(fs)
	jsonFlag(fs, &cfg.json, "JSON lines (mechanism, n, batch, seconds, tokens_per_sec, peak_bytes) instead of a table")
	addPrecisionFlag(fs, &cfg.precision)
	fs.IntVar(&cfg.phases, "phases", 0, "also profile one step at GOMAXPROCS=1 split as for this many threads: the serial share and the parallel phases, and at GOMAXPROCS equal to it their speed-ups (0: no)")
	var prof cpuProfile
	prof.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := prof.start(); err != nil {
		return fmt.Errorf("bench train: %w", err)
	}
	defer prof.stop(&err)
	defs := benchTrainSpecs()
	vocab := false
	if *shape != "" {
		var err error
		if vocab, err = applyShape(fs, *shape, mc); err != nil {
			return fmt.Errorf("bench train: %w", err)
		}
		if vocab {
			// A published model's own attention, unless --attention says.
			defs = []string{attention.Spec(mc.Attention)}
		}
	}
	if !vocab {
		tok, err := openTokenizer("bench train", *tokName)
		if err != nil {
			return err
		}
		mc.Vocab = tok.VocabSize()
	} else if isSet(fs, "tokenizer") {
		return usageError{fmt.Errorf("bench train: --tokenizer and --shape %s: the shape has its own vocabulary of %d", *shape, mc.Vocab)}
	}
	if err := cfg.parse(*ns, &af, defs); err != nil {
		return fmt.Errorf("bench train: %w", err)
	}
	warnPrecision(stderr, cfg.precision)
	return cfg.run(stdout)
}

// benchTrainSpecs is the default list of bench train: every registered
// mechanism, and polysketch with learned sketches.
func benchTrainSpecs() []string { return append(attention.Names(), "polysketch:learned") }

func (cfg *benchTrainConfig) parse(ns string, af *attentionFlags, defs []string) error {
	var err error
	if cfg.ns, err = parseContexts(ns); err != nil {
		return err
	}
	// At fixed tokens per step, quadratic attention's time grows as N.
	if cfg.mechanisms, err = benchMechanisms(af, defs, 1, 0); err != nil {
		return err
	}
	switch {
	case cfg.tokens <= 0:
		return fmt.Errorf("--tokens %d: must be positive", cfg.tokens)
	case cfg.steps <= 0:
		return fmt.Errorf("--steps %d: must be positive", cfg.steps)
	case !(cfg.maxSeconds > 0):
		return fmt.Errorf("--max-seconds %v: must be positive", cfg.maxSeconds)
	case cfg.phases < 0:
		return fmt.Errorf("--phases %d: must be 0 (no profile) or a number of threads", cfg.phases)
	}
	// A learned table of positions is the model's: a longer N would grow
	// it into another model than the one named.
	if cfg.model.Positions == model.PositionsLearned {
		if n := cfg.ns[len(cfg.ns)-1]; n > cfg.model.Context {
			return fmt.Errorf("--n %d: the model's learned positions cover %d tokens; use --n %d or less", n, cfg.model.Context, cfg.model.Context)
		}
	}
	for _, m := range cfg.mechanisms {
		c := cfg.config(m, cfg.ns[0])
		if err := c.Validate(); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	return nil
}

// config returns the model of mechanism m at context n.
func (cfg *benchTrainConfig) config(m benchMechanism, n int) model.Config {
	c := cfg.model
	c.Attention, c.Context = m.cfg, n
	return c
}

func (cfg *benchTrainConfig) run(stdout io.Writer) error {
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if !cfg.json {
		m := cfg.model
		fmt.Fprintf(w, "training throughput: %s; %d tokens per step, %s; best of up to %d steps after a warm-up; GOMAXPROCS=%d\n",
			describeModel(m), cfg.tokens, precisionDesc(cfg.precision), cfg.steps, runtime.GOMAXPROCS(0))
		fmt.Fprintf(w, "mechanisms: %s\n", specList(cfg.mechanisms))
		fmt.Fprintf(w, "%-18s %6s %5s %10s %12s %10s %8s %8s\n", "mechanism", "n", "batch", "seconds", "tokens/s", "peak MiB", "CPU s", "spin s")
		w.Flush()
	}
	for _, m := range cfg.mechanisms {
		var last *timing
		for _, n := range cfg.ns {
			r, err := cfg.measure(m, n, &last)
			if err != nil {
				return err
			}
			if err := cfg.print(w, r); err != nil {
				return err
			}
			w.Flush()
		}
	}
	return w.Flush()
}

func (cfg *benchTrainConfig) print(w io.Writer, r benchTrainRow) error {
	if cfg.json {
		return writeJSONLine(w, r)
	}
	if r.Seconds == nil {
		_, err := fmt.Fprintf(w, "%-18s %6d %5d  %s\n", r.Mechanism, r.N, r.Batch, r.note)
		return err
	}
	_, err := fmt.Fprintf(w, "%-18s %6d %5d %10.3f %12.0f %10.1f %8.3f %8.3f\n", r.Mechanism, r.N, r.Batch, *r.Seconds, *r.TokensPerSec, float64(*r.PeakBytes)/(1<<20), *r.CPUSeconds, *r.SpinSeconds)
	if err != nil || r.SerialShare == nil {
		return err
	}
	fmt.Fprintf(w, "  one step at GOMAXPROCS=1 split for %d threads: %.3f s (%.2f× the step above); %.1f%% serial; Amdahl's law allows %.1f× on %d threads\n",
		cfg.phases, *r.SplitSeconds, *r.SplitSeconds / *r.Seconds, 100**r.SerialShare, *r.Bound, cfg.phases)
	speedups := r.ThreadsSeconds != nil
	if speedups {
		fmt.Fprintf(w, "  the same step on %d threads: %.3f s (%.2f× the split step); %.1f%% of it outside the phases below\n",
			cfg.phases, *r.ThreadsSeconds, *r.SplitSeconds / *r.ThreadsSeconds, 100**r.OutsideShare)
		fmt.Fprintf(w, "  %7s %6s %11s %8s  %s\n", "time", "calls", "items/call", "speed-up", "phase")
	} else {
		fmt.Fprintf(w, "  %7s %6s %11s  %s\n", "time", "calls", "items/call", "phase")
	}
	for _, p := range r.Phases {
		items := fmt.Sprint(p.MinItems)
		if p.MaxItems != p.MinItems {
			items += "-" + fmt.Sprint(p.MaxItems)
		}
		note := ""
		switch {
		case p.Nested:
			note = " (nested)"
		case p.Serial:
			note = " (serial)"
		}
		col := ""
		if speedups {
			x := "-"
			if p.Speedup != nil {
				x = fmt.Sprintf("%.2f×", *p.Speedup)
			}
			col = fmt.Sprintf(" %8s", x)
		}
		if _, err := fmt.Fprintf(w, "  %6.2f%% %6d %11s%s  %s%s\n", 100*p.Share, p.Calls, items, col, p.Site, note); err != nil {
			return err
		}
	}
	return nil
}

// predictMemory estimates the bytes a training step of model c on B×N
// tokens holds: see benchTrainHelp.
func predictMemory(c model.Config, B, N int) (int64, error) {
	mech, err := attention.New(c.Attention, attention.Setup{Causal: true, Seed: c.Seed})
	if err != nil {
		return 0, err
	}
	d, V, L := int64(c.Dim), int64(c.Vocab), int64(c.Layers)
	params := checkpoint.ParamCount(c)
	tokens := int64(B) * int64(N)
	// 40·d floats per layer and token: measured on this model (flash,
	// N=1024: the attention keeps next to nothing), more than the layers'
	// named buffers because of the GLU's hidden activations.
	perToken := L*(40*d) + 10*d + 2*V
	return 4*(4*params+tokens*perToken) + L*mech.Workspace(B, c.Heads, N, c.HeadSize()), nil
}

// measure runs the training steps of mechanism k at context n, or
// reports why not.
func (cfg *benchTrainConfig) measure(mech benchMechanism, n int, last **timing) (benchTrainRow, error) {
	B := max(1, cfg.tokens/n)
	r := benchTrainRow{Mechanism: mech.name, N: n, Batch: B}
	c := cfg.config(mech, n)
	need, err := predictMemory(c, B, n)
	if err != nil {
		return r, fmt.Errorf("bench train: %s: %w", mech.name, err)
	}
	if need > int64(cfg.memLimit) {
		r.note = fmt.Sprintf("OOM: needs about %v > --mem-limit %v", byteSize(need), cfg.memLimit)
		return r, nil
	}
	if t, ok := predict(*last, n, mech.growth); ok && t > cfg.maxSeconds {
		r.note = fmt.Sprintf("skipped: predicted %.3g s per step > --max-seconds %g", t, cfg.maxSeconds)
		return r, nil
	}

	runtime.GC()
	base := heapInUse()
	s := startHeapSampler()
	m, err := model.New(c)
	if err != nil {
		s.stop()
		return r, fmt.Errorf("bench train: %s: %w", mech.name, err)
	}
	m.SetPrecision(cfg.precision)
	opt, err := optim.NewAdamW(m.Params(), optim.DefaultConfig())
	if err != nil {
		s.stop()
		return r, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, uint64(n)))
	tokens, targets := make([]int32, B*n), make([]int32, B*n)
	for i := range tokens {
		tokens[i], targets[i] = int32(rng.IntN(c.Vocab)), int32(rng.IntN(c.Vocab))
	}
	step := func() {
		params := m.Params()
		optim.ZeroGrad(params)
		m.Loss(tokens, targets, B, n)
		m.Backward()
		optim.ClipGradNorm(params, 1)
		opt.Update(1e-4)
		m.RoundWeights()
	}
	start := time.Now()
	step() // warm-up: sizes every buffer
	s.sample()
	best := math.Inf(1)
	var cpu time.Duration
	steps := 0
	spun := parallel.ReadStats().Spin
	for i := 0; i < cfg.steps && (i == 0 || time.Since(start).Seconds() < cfg.maxSeconds); i++ {
		t, c := time.Now(), cpuTime()
		step()
		best = min(best, time.Since(t).Seconds())
		cpu += cpuTime() - c
		steps++
		s.sample()
	}
	peak := int64(s.stop()) - int64(base)
	*last = &timing{n, best}
	tps := float64(B*n) / best
	cpuStep := cpu.Seconds() / float64(steps)
	spinStep := (parallel.ReadStats().Spin - spun).Seconds() / float64(steps)
	r.Seconds, r.TokensPerSec, r.PeakBytes, r.CPUSeconds, r.SpinSeconds = &best, &tps, &peak, &cpuStep, &spinStep
	if cfg.phases > 0 {
		cfg.profile(&r, step)
	}
	m, opt = nil, nil
	debug.FreeOSMemory()
	return r, nil
}

// profile runs step once at GOMAXPROCS=1 with the phases split for
// cfg.phases threads, and where GOMAXPROCS is cfg.phases once more on
// those threads, and adds what it found to r (see --phases).
func (cfg *benchTrainConfig) profile(r *benchTrainRow, step func()) {
	procs := runtime.GOMAXPROCS(1)
	rep := profileStep(cfg.phases, step)
	runtime.GOMAXPROCS(procs)
	total := rep.Total.Seconds()
	share := rep.Serial().Seconds() / total
	bound := total / rep.Bound(cfg.phases).Seconds()
	r.SplitSeconds, r.SerialShare, r.Bound = &total, &share, &bound
	var on map[string]time.Duration
	if procs == cfg.phases && procs > 1 {
		threads := profileStep(cfg.phases, step)
		secs := threads.Total.Seconds()
		outside := threads.Serial().Seconds() / secs
		r.ThreadsSeconds, r.OutsideShare = &secs, &outside
		on = map[string]time.Duration{}
		for _, p := range threads.Phases {
			on[p.Site] = p.Time
		}
	}
	for _, p := range rep.Phases {
		ph := benchPhase{Site: p.Site, Calls: p.Calls, MinItems: p.MinItems, MaxItems: p.MaxItems,
			Share: p.Time.Seconds() / total, Serial: p.Serial == p.Time, Nested: p.Nested}
		if t, ok := on[p.Site]; ok && !p.Nested && t > 0 {
			x := p.Time.Seconds() / t.Seconds()
			ph.Speedup = &x
		}
		r.Phases = append(r.Phases, ph)
	}
}

// profileStep runs step under a profile of width threads and returns the
// report of a second run. The first sizes the buffers of the profile's
// split: parallel.Threads returns its width only while it runs.
func profileStep(width int, step func()) parallel.Report {
	parallel.StartProfile(width)
	step()
	parallel.StopProfile()
	parallel.StartProfile(width)
	step()
	return parallel.StopProfile()
}
