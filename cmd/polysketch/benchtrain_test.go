package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// tinyBenchTrain is a bench train small enough for a test.
var tinyBenchTrain = []string{"bench", "train", "--n", "16,32", "--tokens", "64", "--layers", "1", "--dim", "16", "--heads", "2",
	"--block", "8", "--sketch-size", "4", "--steps", "1"}

func TestBenchTrainJSON(t *testing.T) {
	var out bytes.Buffer
	if err := run(append(tinyBenchTrain, "--json"), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if want := 2 * len(benchTrainSpecs()); len(lines) != want {
		t.Fatalf("%d lines, want %d: every mechanism × 2 lengths:\n%s", len(lines), want, out.String())
	}
	for i, line := range lines {
		var r struct {
			Mechanism    string   `json:"mechanism"`
			N            int      `json:"n"`
			Batch        int      `json:"batch"`
			Seconds      *float64 `json:"seconds"`
			TokensPerSec *float64 `json:"tokens_per_sec"`
			PeakBytes    *int64   `json:"peak_bytes"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		wantN := []int{16, 32}[i%2]
		if r.N != wantN || r.Batch != 64/wantN || r.Seconds == nil || r.TokensPerSec == nil || r.PeakBytes == nil {
			t.Fatalf("line %q: want n %d, batch %d and measurements", line, wantN, 64/wantN)
		}
		if got := *r.TokensPerSec * *r.Seconds; got < 63.9 || got > 64.1 {
			t.Errorf("line %q: tokens/s × seconds = %v, want the 64 tokens of a step", line, got)
		}
		if *r.PeakBytes <= 0 {
			t.Errorf("line %q: peak memory %d", line, *r.PeakBytes)
		}
	}
}

// TestBenchTrainPhases checks --phases: the serial share of a step, the
// speed-up Amdahl's law allows, and the phases with their items, beside
// the CPU time and spin of every row.
func TestBenchTrainPhases(t *testing.T) {
	r, table := benchTrainPhases(t, "4")
	// Which fields are there, not how long anything took.
	if r.CPUSeconds == nil || *r.CPUSeconds < 0 || r.SpinSeconds == nil || *r.SpinSeconds < 0 {
		t.Errorf("CPU %v s, spin %v s per step", r.CPUSeconds, r.SpinSeconds)
	}
	if r.SplitSeconds == nil || *r.SplitSeconds < 0 {
		t.Errorf("split step %v s", r.SplitSeconds)
	}
	if r.SerialShare == nil || *r.SerialShare < 0 || *r.SerialShare >= 1 || r.Bound == nil || *r.Bound < 1 || *r.Bound > 4 {
		t.Fatalf("serial share %v, Amdahl speed-up %v on 4 threads: want a share in [0, 1) and a speed-up in [1, 4]", r.SerialShare, r.Bound)
	}
	var products, attention bool
	for _, p := range r.Phases {
		if p.Calls < 1 || p.MinItems < 1 || p.MaxItems < p.MinItems || p.Share < 0 || p.Share > 1 {
			t.Errorf("phase %+v", p)
		}
		products = products || strings.Contains(p.Site, "blas.") && p.MaxItems > 1
		attention = attention || strings.Contains(p.Site, "attention.") && p.MaxItems > 1
	}
	if !products || !attention {
		t.Errorf("no parallel phase of the products (%t) or of attention (%t) among %d phases", products, attention, len(r.Phases))
	}
	if !strings.Contains(table, "one step at GOMAXPROCS=1 split for 4 threads") || !strings.Contains(table, "items/call") {
		t.Errorf("no phase table in:\n%s", table)
	}
	if strings.Contains(table, "speed-up") && runtime.GOMAXPROCS(0) != 4 {
		t.Errorf("speed-ups at GOMAXPROCS=%d, for --phases 4:\n%s", runtime.GOMAXPROCS(0), table)
	}
}

// benchTrainPhases runs the tiny bench train of polysketch:learned with
// --phases w, and returns its JSON row and its table.
func benchTrainPhases(t *testing.T, w string) (benchTrainRow, string) {
	t.Helper()
	args := append(tinyBenchTrain, "--attention", "polysketch:learned", "--n", "32", "--phases", w)
	var out bytes.Buffer
	if err := run(append(args[:len(args):len(args)], "--json"), &out); err != nil {
		t.Fatal(err)
	}
	var r benchTrainRow
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%q: %v", out.String(), err)
	}
	out.Reset()
	if err := run(args, &out); err != nil {
		t.Fatal(err)
	}
	return r, out.String()
}

// TestBenchTrainPhaseSpeedups checks --phases W at GOMAXPROCS=W: the step
// on W threads, and the speed-up of every phase the step calls itself.
func TestBenchTrainPhaseSpeedups(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	r, table := benchTrainPhases(t, "2")
	// Which fields are there, not how fast anything ran: the times are
	// the machine's.
	if r.ThreadsSeconds == nil || r.OutsideShare == nil || *r.OutsideShare < 0 || *r.OutsideShare > 1 {
		t.Fatalf("step on 2 threads %v s, outside the phases %v: want a time and a share in [0, 1]", r.ThreadsSeconds, r.OutsideShare)
	}
	timed := 0
	for _, p := range r.Phases {
		switch {
		case p.Nested && p.Speedup != nil:
			t.Errorf("nested phase %+v has a speed-up", p)
		case !p.Nested && p.Speedup == nil:
			t.Errorf("phase %+v has no speed-up", p)
		case p.Speedup != nil && (math.IsNaN(*p.Speedup) || math.IsInf(*p.Speedup, 0)):
			t.Errorf("phase %+v: speed-up %v", p, *p.Speedup)
		case p.Speedup != nil:
			timed++
		}
	}
	if timed == 0 {
		t.Errorf("no phase with a speed-up among %d", len(r.Phases))
	}
	if !strings.Contains(table, "the same step on 2 threads") || !strings.Contains(table, "speed-up") {
		t.Errorf("no speed-ups in:\n%s", table)
	}
}

func TestBenchTrainOOMAndSkip(t *testing.T) {
	var out bytes.Buffer
	if err := run(append(without(tinyBenchTrain, "--sketch-size"), "--attention", "flash", "--mem-limit", "1KiB"), &out); err != nil {
		t.Fatal(err)
	}
	if c := strings.Count(out.String(), "OOM: needs about"); c != 2 {
		t.Errorf("%d OOM rows, want 2:\n%s", c, out.String())
	}
	out.Reset()
	if err := run(append(tinyBenchTrain, "--attention", "softmax,polysketch", "--max-seconds", "1e-9"), &out); err != nil {
		t.Fatal(err)
	}
	// The first length of each runs; the second is predicted too slow.
	if c := strings.Count(out.String(), "skipped: predicted"); c != 2 {
		t.Errorf("%d skipped rows, want 2:\n%s", c, out.String())
	}
}

func TestBenchTrainFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--n", "0"}, "--n"},
		{[]string{"--attention", "linear"}, `unknown attention mechanism "linear"`},
		{[]string{"--attention", "softmax,flash"}, "--sketch-size is no option of softmax, flash"},
		{[]string{"--attention", "polysketch:learned:sketch-size=-1"}, "--sketch-size -1: must be positive"},
		{[]string{"--tokens", "0"}, "--tokens 0"},
		{[]string{"--steps", "0"}, "--steps 0"},
		{[]string{"--heads", "3"}, "--dim 16 is not divisible by --heads 3"},
		{[]string{"--mem-limit", "lots"}, "positive size"},
		{[]string{"--phases", "-1"}, "--phases -1"},
	} {
		var out bytes.Buffer
		err := run(append(append([]string{}, tinyBenchTrain...), tc.args...), &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	// GPT-2's learned positions end at 1024: a longer N would time another model.
	err := run([]string{"bench", "train", "--shape", "gpt2", "--n", "1024,2048"}, io.Discard)
	if want := "--n 2048: the model's learned positions cover 1024 tokens"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("--shape gpt2 --n 1024,2048: %v, want an error containing %q", err, want)
	}
}

// TestBenchCPUProfile checks that --cpuprofile writes a profile that
// go tool pprof reads (gzip-compressed protobuf), and that a profile that
// cannot be written fails the command naming the flag.
func TestBenchCPUProfile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cpu.prof")
	if err := run(append(tinyBenchTrain, "--n", "16", "--cpuprofile", path), io.Discard); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: not a gzip-compressed profile: %v", path, err)
	}
	if b, err := io.ReadAll(z); err != nil || len(b) == 0 {
		t.Fatalf("%s: %d bytes of profile, %v", path, len(b), err)
	}
	bad := filepath.Join(dir, "missing", "cpu.prof")
	err = run(append(tinyBenchTrain, "--n", "16", "--cpuprofile", bad), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--cpuprofile") {
		t.Fatalf("profile to %s: error %v, want one naming --cpuprofile", bad, err)
	}
}
