package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/chart"
	"github.com/polysketch/polysketch/tensor"
)

const benchAttentionHelp = `usage: polysketch bench attention [flags]

Measures the latency per token of each attention mechanism, forward and
forward+backward, at each context length N: by default every registered
mechanism with its default options, and polysketch:cumsum (polysketch with
the per-token cumulative-sum algorithm instead of blocks). --attention
takes a comma-separated list of mechanisms, each a name or a spec with
options (polysketch:learned=true:sketch-size=64); an option flag such as
--block applies to every listed mechanism that has it.

Each case runs once to warm up, then up to --reps more times, stopping
early once the case has used --max-seconds; it reports the best (fastest)
run, since other work on the machine only ever adds time. µs/token is that
time over B·N tokens (all H heads included).

A case whose memory would exceed --mem-limit is reported as OOM without
running it; the prediction is q, k, v, o and their four gradients plus the
mechanism's Workspace. A case whose single run is predicted to exceed --max-seconds is reported as
skipped: the prediction scales the time at the previous context length by
(N/N_prev)² for quadratic mechanisms, N/N_prev for linear ones.
In JSON, both have null seconds, us_per_token and peak_bytes.

peak_bytes is the largest Go heap in use (runtime/metrics
/memory/classes/heap/objects:bytes, sampled every millisecond and after
each call) above the heap before the case allocated its tensors: the eight
tensors and whatever the mechanism allocates. The runtime counts small
objects per span, so tiny cases are off by a few KiB; short spikes between
samples can be missed.

--plot FILE writes µs/token of forward+backward against N (log₂ axis), one
line per mechanism, as a PNG (off by default).

flags:
`

// benchSpecs is the default list of mechanisms: every registered one and
// the cumulative-sum forms of those that have one.
func benchSpecs() []string {
	var specs []string
	for _, e := range attention.Entries() {
		specs = append(specs, e.Name)
		if _, err := attention.Set(e.Default(), "cumsum", "true"); err == nil {
			specs = append(specs, e.Name+":cumsum")
		}
	}
	return specs
}

// benchRow is one line of output. Seconds, USPerToken and PeakBytes are
// nil for a case that was not run; note says why.
type benchRow struct {
	Mechanism  string   `json:"mechanism"`
	N          int      `json:"n"`
	H          int      `json:"h"`
	Pass       string   `json:"pass"`
	Seconds    *float64 `json:"seconds"`
	USPerToken *float64 `json:"us_per_token"`
	PeakBytes  *int64   `json:"peak_bytes"`
	note       string
}

const (
	passForward  = "forward"
	passBackward = "forward+backward"
)

// benchAttentionConfig is the validated flags.
type benchAttentionConfig struct {
	ns              []int
	h, batch, heads int
	setup           attention.Setup
	mechanisms      []benchMechanism
	memLimit        byteSize
	maxSeconds      float64
	reps            int
	json            bool
	plot            string
}

func benchAttention(args []string, stdout io.Writer) (err error) {
	fs := newFlags("bench attention", benchAttentionHelp, stdout, mechanismList(nil))
	defer asCLI(fs, &err)
	cfg := benchAttentionConfig{memLimit: defaultMemLimit()}
	var af attentionFlags
	af.register(fs, strings.Join(benchSpecs(), ","), true)
	ns := fs.String("n", "512,1024,2048,4096,8192,16384,32768,65536", "comma-separated context lengths N")
	fs.IntVar(&cfg.h, "head-dim", 64, "head dimension h (the \"h\" of JSON lines)")
	fs.IntVar(&cfg.batch, "batch", 1, "batch size B")
	fs.IntVar(&cfg.heads, "heads", 2, "heads H (the default 2 keeps two cores busy over heads)")
	fs.BoolVar(&cfg.setup.Causal, "causal", true, "mask future positions")
	fs.Uint64Var(&cfg.setup.Seed, "seed", 1, "seed of the mechanisms' random draws and of the random inputs")
	fs.Var(&cfg.memLimit, "mem-limit", "report cases predicted to need more memory than this as OOM (e.g. 8GiB, 512MiB); the default is half of physical memory, at most 8GiB")
	fs.Float64Var(&cfg.maxSeconds, "max-seconds", 5, "time budget of one case: skip a case whose run is predicted to take longer, and stop repeating once it is spent")
	fs.IntVar(&cfg.reps, "reps", 3, "timed runs per case after the warm-up, at most")
	jsonFlag(fs, &cfg.json, "JSON lines (mechanism, n, h, pass, seconds, us_per_token, peak_bytes) instead of a table")
	fs.StringVar(&cfg.plot, "plot", "", "write a PNG plot of forward+backward µs/token against N to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cfg.parse(*ns, &af); err != nil {
		return fmt.Errorf("bench attention: %w", err)
	}
	return cfg.run(stdout)
}

// parse fills in and checks cfg from the list flags.
func (cfg *benchAttentionConfig) parse(ns string, af *attentionFlags) error {
	var err error
	if cfg.ns, err = parseContexts(ns); err != nil {
		return err
	}
	if cfg.mechanisms, err = benchMechanisms(af, benchSpecs(), 2, 1); err != nil {
		return err
	}
	switch {
	case cfg.h <= 0:
		return fmt.Errorf("--head-dim %d: must be positive", cfg.h)
	case cfg.batch <= 0:
		return fmt.Errorf("--batch %d: must be positive", cfg.batch)
	case cfg.heads <= 0:
		return fmt.Errorf("--heads %d: must be positive", cfg.heads)
	case cfg.memLimit <= 0:
		return fmt.Errorf("--mem-limit %v: must be positive", cfg.memLimit)
	case !(cfg.maxSeconds > 0):
		return fmt.Errorf("--max-seconds %v: must be positive", cfg.maxSeconds)
	case cfg.reps <= 0:
		return fmt.Errorf("--reps %d: must be positive", cfg.reps)
	}
	if cfg.plot != "" {
		// Fail now rather than after minutes of measuring.
		if !isDir(filepath.Dir(cfg.plot)) {
			return fmt.Errorf("--plot %s: no such directory", cfg.plot)
		}
	}
	return nil
}

// run measures every case, printing rows as they come, then writes the plot.
func (cfg *benchAttentionConfig) run(stdout io.Writer) error {
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if !cfg.json {
		fmt.Fprintf(w, "attention latency: B=%d H=%d h=%d causal=%t; best of up to %d runs after a warm-up; GOMAXPROCS=%d\n",
			cfg.batch, cfg.heads, cfg.h, cfg.setup.Causal, cfg.reps, runtime.GOMAXPROCS(0))
		fmt.Fprintf(w, "mechanisms: %s\n", specList(cfg.mechanisms))
		fmt.Fprintf(w, "%-18s %6s  %-16s %10s %10s %10s\n", "mechanism", "n", "pass", "seconds", "µs/token", "peak MiB")
		w.Flush()
	}
	series := make([]chart.Series, len(cfg.mechanisms))
	for i, m := range cfg.mechanisms {
		series[i].Name = m.name
		var history [2]*timing // per pass: the last measurement
		for _, n := range cfg.ns {
			rows, err := cfg.measure(m, n, &history)
			if err != nil {
				return err
			}
			for _, r := range rows {
				if err := cfg.print(w, r); err != nil {
					return err
				}
				if r.Pass == passBackward && r.USPerToken != nil {
					series[i].X = append(series[i].X, float64(n))
					series[i].Y = append(series[i].Y, *r.USPerToken)
				}
			}
			w.Flush()
		}
	}
	if cfg.plot != "" {
		c := &chart.Chart{
			Title:  fmt.Sprintf("attention latency per token, forward+backward (B=%d, H=%d, h=%d)", cfg.batch, cfg.heads, cfg.h),
			X:      chart.Axis{Label: "context length N", Log: 2},
			Y:      chart.Axis{Label: "µs per token", Log: 10},
			Series: series,
			Width:  20, Height: 12,
		}
		if err := chart.Write(cfg.plot, c); err != nil {
			return fmt.Errorf("bench attention: %w", err)
		}
	}
	return w.Flush()
}

func (cfg *benchAttentionConfig) print(w io.Writer, r benchRow) error {
	if cfg.json {
		return writeJSONLine(w, r)
	}
	if r.Seconds == nil {
		_, err := fmt.Fprintf(w, "%-18s %6d  %-16s %s\n", r.Mechanism, r.N, r.Pass, r.note)
		return err
	}
	_, err := fmt.Fprintf(w, "%-18s %6d  %-16s %10.6f %10.3f %10.1f\n", r.Mechanism, r.N, r.Pass, *r.Seconds, *r.USPerToken, float64(*r.PeakBytes)/(1<<20))
	return err
}

// measure runs mechanism m at context length n: both passes, or OOM or
// skipped rows.
func (cfg *benchAttentionConfig) measure(m benchMechanism, n int, history *[2]*timing) ([]benchRow, error) {
	passes := []string{passForward, passBackward}
	rows := make([]benchRow, len(passes))
	for i, p := range passes {
		rows[i] = benchRow{Mechanism: m.name, N: n, H: cfg.h, Pass: p}
	}
	mech, err := attention.New(m.cfg, cfg.setup)
	if err != nil {
		return nil, fmt.Errorf("bench attention: %s: %w", m.name, err)
	}
	elems := int64(cfg.batch) * int64(cfg.heads) * int64(n) * int64(cfg.h)
	need := 8*4*elems + mech.Workspace(cfg.batch, cfg.heads, n, cfg.h)
	if need > int64(cfg.memLimit) {
		for i := range rows {
			rows[i].note = fmt.Sprintf("OOM: needs %v > --mem-limit %v", byteSize(need), cfg.memLimit)
		}
		return rows, nil
	}
	skipped := 0
	for i := range passes {
		if t, ok := predict(history[i], n, m.growth); ok && t > cfg.maxSeconds {
			rows[i].note = fmt.Sprintf("skipped: predicted %.3g s per run > --max-seconds %g", t, cfg.maxSeconds)
			skipped++
		}
	}
	if skipped == len(passes) {
		return rows, nil
	}

	runtime.GC()
	base := heapInUse()
	shape := []int{cfg.batch, cfg.heads, n, cfg.h}
	rng := rand.New(rand.NewPCG(cfg.setup.Seed, uint64(n)))
	scale := math.Pow(float64(cfg.h), -0.25) // q·k of unit variance
	q, k, v, do := randn(rng, scale, shape), randn(rng, scale, shape), randn(rng, 1, shape), randn(rng, 1, shape)
	o, dq, dk, dv := tensor.New(shape...), tensor.New(shape...), tensor.New(shape...), tensor.New(shape...)

	for i, p := range passes {
		if rows[i].note != "" {
			continue
		}
		call := func() {
			mech.Forward(o, q, k, v)
			if p == passBackward {
				mech.Backward(dq, dk, dv, do)
			}
		}
		best, peak := cfg.time(call)
		history[i] = &timing{n, best}
		peakBytes := int64(peak) - int64(base)
		us := best * 1e6 / float64(cfg.batch*n)
		rows[i].Seconds, rows[i].USPerToken, rows[i].PeakBytes = &best, &us, &peakBytes
	}
	// Return the memory before the next case measures its baseline.
	mech, q, k, v, o, dq, dk, dv, do = nil, nil, nil, nil, nil, nil, nil, nil, nil
	debug.FreeOSMemory()
	return rows, nil
}

// time runs call once to warm up, then up to cfg.reps times while the case
// has used less than cfg.maxSeconds, and returns the best time and the
// peak heap in use.
func (cfg *benchAttentionConfig) time(call func()) (best float64, peak uint64) {
	s := startHeapSampler()
	start := time.Now()
	call()
	s.sample()
	best = math.Inf(1)
	for r := 0; r < cfg.reps && (r == 0 || time.Since(start).Seconds() < cfg.maxSeconds); r++ {
		t := time.Now()
		call()
		best = min(best, time.Since(t).Seconds())
		s.sample()
	}
	return best, s.stop()
}

func randn(rng *rand.Rand, scale float64, shape []int) *tensor.Tensor {
	t := tensor.New(shape...)
	for i := range t.Data {
		t.Data[i] = float32(rng.NormFloat64() * scale)
	}
	return t
}
