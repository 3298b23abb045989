package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"time"

	"github.com/polysketch/polysketch/blas"
)

// gemmCases are the default products, written m×k×n: square sizes, then
// the shapes attention runs (scores, values, projections).
const gemmCases = "256x256x256,512x512x512,1024x1024x1024,2048x2048x2048,256x64x256,256x1024x64,1024x256x64,4096x64x4096"

// gemmResult is one line of --json output.
type gemmResult struct {
	Impl    string  `json:"impl"`
	Kernel  string  `json:"kernel,omitempty"` // of the bf16 lines: the code the shape takes (blas.KernelBF16For)
	M       int     `json:"m"`
	N       int     `json:"n"`
	K       int     `json:"k"`
	Threads int     `json:"threads"`
	GFLOPS  float64 `json:"gflops"`
}

const benchGEMMHelp = `usage: polysketch bench gemm [flags]

Measures the GFLOPS of C = A·B for square and attention-shaped sizes, for
each SGEMM implementation (the pure-Go kernels, and OpenBLAS when built
with -tags openblas) and in bf16, taking turns on each case.

flags:
`

// benchGEMM measures C = A·B (no transposes, beta = 0) for each
// implementation in blas.Impls, and in bf16 (blas.GemmBF16) with B
// rounded as it is packed on each call ("bf16") and with B packed once,
// as a weight ("bf16-packed"). The implementations take turns on each
// case, so that load from other processes hits them alike, and the best
// of several repetitions counts.
func benchGEMM(args []string, stdout io.Writer) error {
	fs := newFlags("bench gemm", benchGEMMHelp, stdout)
	var jsonOut bool
	jsonFlag(fs, &jsonOut, "JSON lines (impl, kernel, m, n, k, threads, gflops) instead of a table")
	threads := fs.Int("threads", runtime.GOMAXPROCS(0), "threads per product (GOMAXPROCS, and OpenBLAS's)")
	minTime := fs.Duration("min-time", 50*time.Millisecond, "minimum time of one repetition of a case")
	reps := fs.Int("reps", 5, "repetitions per case and implementation; the best counts")
	pause := fs.Duration("pause", 100*time.Millisecond, "idle time before each measurement when comparing implementations (OpenBLAS's threads spin for a while after a call and would slow the next one)")
	casesFlag := fs.String("cases", gemmCases, "comma-separated products, each m×k×n written `MxKxN`")
	bf16 := fs.Bool("bf16", blas.KernelBF16() != "go", "also time bf16 products (default: unless the bf16 kernel is the portable one, far slower than float32)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *threads < 1 || *reps < 1 || *minTime <= 0 || *pause < 0 {
		return fmt.Errorf("bench gemm: --threads and --reps must be ≥ 1, --min-time > 0 and --pause ≥ 0")
	}
	cases, err := parseCases(*casesFlag)
	if err != nil {
		return fmt.Errorf("bench gemm: %w", err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(*threads))

	impls := gemmImpls(*bf16)
	fp32 := len(blas.Impls())
	enc := json.NewEncoder(stdout)
	if !jsonOut {
		for _, impl := range impls {
			fmt.Fprintf(stdout, "%s: %s\n", impl.name, impl.detail)
		}
		if !*bf16 {
			fmt.Fprintf(stdout, "bf16: not timed: the bf16 kernel in use is the portable one (POLYSKETCH_NOASM, POLYSKETCH_BF16_KERNEL or a purego build chose it), far slower than float32; --bf16 times it\n")
		}
		fmt.Fprintf(stdout, "threads: %d, best of %d × ≥%v\n\n", *threads, *reps, *minTime)
		fmt.Fprintf(stdout, "%16s", "m×k×n")
		for _, impl := range impls {
			fmt.Fprintf(stdout, "%*s", max(16, len(impl.name)+8), impl.name+" GFLOPS")
		}
		for _, impl := range impls[1:fp32] {
			fmt.Fprintf(stdout, "%16s", impls[0].name+"/"+impl.name)
		}
		for _, impl := range impls[fp32:] {
			fmt.Fprintf(stdout, "%16s", impl.name+"/"+impls[0].name)
		}
		if *bf16 {
			fmt.Fprintf(stdout, "  %s", "bf16 code")
		}
		fmt.Fprintln(stdout)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, cs := range cases {
		m, k, n := cs[0], cs[1], cs[2]
		a, b, c := randFloats(rng, m*k), randFloats(rng, k*n), make([]float32, m*n)
		calls := make([]func(), len(impls))
		for i, impl := range impls {
			calls[i] = impl.prepare(m, n, k, a, b, c)
		}
		flops := 2 * float64(m) * float64(n) * float64(k)
		best := make([]float64, len(impls))
		for range *reps {
			for i := range impls {
				if len(impls) > 1 {
					time.Sleep(*pause)
				}
				best[i] = max(best[i], flops/timeCall(calls[i], *minTime)/1e9)
			}
		}
		if jsonOut {
			for i, impl := range impls {
				r := gemmResult{Impl: impl.name, M: m, N: n, K: k, Threads: *threads, GFLOPS: round1(best[i])}
				if i >= fp32 {
					r.Kernel = blas.KernelBF16For(m, n, k)
				}
				if err := enc.Encode(r); err != nil {
					return err
				}
			}
			continue
		}
		fmt.Fprintf(stdout, "%16s", fmt.Sprintf("%d×%d×%d", m, k, n))
		for i, g := range best {
			fmt.Fprintf(stdout, "%*.1f", max(16, len(impls[i].name)+8), g)
		}
		for _, g := range best[1:fp32] {
			fmt.Fprintf(stdout, "%16.2f", best[0]/g)
		}
		for _, g := range best[fp32:] {
			fmt.Fprintf(stdout, "%16.2f", g/best[0])
		}
		if *bf16 {
			fmt.Fprintf(stdout, "  %s", blas.KernelBF16For(m, n, k))
		}
		fmt.Fprintln(stdout)
	}
	return nil
}

// gemmImpl is one implementation bench gemm times: prepare returns the
// call computing C = A·B for row-major m×k A, k×n B and m×n C.
type gemmImpl struct {
	name, detail string
	prepare      func(m, n, k int, a, b, c []float32) func()
}

// gemmImpls lists blas.Impls, then the bf16 products when bf16 is set.
func gemmImpls(bf16 bool) []gemmImpl {
	var impls []gemmImpl
	for _, impl := range blas.Impls() {
		impls = append(impls, gemmImpl{impl.Name, impl.Detail, func(m, n, k int, a, b, c []float32) func() {
			av, bv, cv := blas.NewGeneral(m, k, a), blas.NewGeneral(k, n, b), blas.NewGeneral(m, n, c)
			return func() { impl.Sgemm(blas.NoTrans, blas.NoTrans, 1, av, bv, 0, cv) }
		}})
	}
	if !bf16 {
		return impls
	}
	kernel := blas.KernelBF16()
	return append(impls,
		gemmImpl{"bf16", kernel + " (blas.GemmBF16; A and B rounded to bf16 as they are packed, on each call)",
			func(m, n, k int, a, b, c []float32) func() {
				av, bv, cv := blas.NewGeneral(m, k, a), blas.NewGeneral(k, n, b), blas.NewGeneral(m, n, c)
				return func() { blas.GemmBF16(blas.NoTrans, blas.NoTrans, 1, av, bv, 0, cv) }
			}},
		gemmImpl{"bf16-packed", kernel + " (B packed once with blas.PackBF16, as a weight)",
			func(m, n, k int, a, b, c []float32) func() {
				av, cv := blas.NewGeneral(m, k, a), blas.NewGeneral(m, n, c)
				pb := blas.PackBF16(blas.NoTrans, blas.NewGeneral(k, n, b))
				return func() { blas.GemmBF16(blas.NoTrans, blas.NoTrans, 1, av, pb, 0, cv) }
			}})
}

// timeCall runs call until minTime has passed (after one warm-up call)
// and returns the seconds per call.
func timeCall(call func(), minTime time.Duration) float64 {
	call()
	calls := 0
	start := time.Now()
	var elapsed time.Duration
	for elapsed < minTime {
		call()
		calls++
		elapsed = time.Since(start)
	}
	return elapsed.Seconds() / float64(calls)
}

func round1(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }

// parseCases parses "MxKxN,MxKxN,…" (× also accepted).
func parseCases(s string) ([][3]int, error) {
	var cases [][3]int
	for f := range strings.SplitSeq(s, ",") {
		dims, err := positiveInts(strings.ReplaceAll(strings.TrimSpace(f), "×", "x"), "x")
		if err != nil || len(dims) != 3 {
			return nil, fmt.Errorf("case %q: want MxKxN, three positive integers", f)
		}
		cases = append(cases, [3]int(dims))
	}
	if len(cases) == 0 {
		return nil, errors.New("no cases")
	}
	return cases, nil
}

func randFloats(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}
