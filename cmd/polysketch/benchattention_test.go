package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tinyBench is a bench attention run small enough for a unit test.
var tinyBench = []string{"bench", "attention", "--n", "32,16", "--head-dim", "8", "--block", "8", "--sketch-size", "4", "--reps", "2"}

// allMechanisms are the rows of a bench attention run by default.
var allMechanisms = benchSpecs()

func TestBenchAttentionTable(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "attention.png")
	var buf bytes.Buffer
	if err := run(append(slices.Clone(tinyBench), "--plot", plot), &buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3+len(allMechanisms)*2*2 {
		t.Fatalf("table has %d lines, want a title, the mechanisms, a heading and %d rows:\n%s", len(lines), len(allMechanisms)*4, buf.String())
	}
	if !strings.Contains(lines[1], "polysketch:sketch-size=4:block=8:cumsum=true") {
		t.Errorf("mechanisms line %q lacks the options of polysketch:cumsum", lines[1])
	}
	if !strings.Contains(lines[2], "µs/token") {
		t.Errorf("heading %q lacks µs/token", lines[2])
	}
	i := 3
	for _, m := range allMechanisms {
		for _, n := range []string{"16", "32"} { // sorted
			for _, pass := range []string{"forward", "forward+backward"} {
				f := strings.Fields(lines[i])
				if len(f) != 6 || f[0] != m || f[1] != n || f[2] != pass {
					t.Errorf("row %d = %q, want %s %s %s and three numbers", i, lines[i], m, n, pass)
				}
				i++
			}
		}
	}

	f, err := os.Open(plot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("plot: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 200 {
		t.Errorf("plot is %v pixels", b)
	}
}

func TestBenchAttentionJSON(t *testing.T) {
	var buf bytes.Buffer
	// Tensors of 64 and 128 KiB: the runtime counts large objects exactly,
	// small ones per span.
	args := []string{"bench", "attention", "--json", "--n", "512,256", "--head-dim", "32", "--batch", "2", "--heads", "1",
		"--block", "64", "--sketch-size", "4", "--reps", "1"}
	if err := run(args, &buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(allMechanisms)*2*2 {
		t.Fatalf("%d JSON lines, want %d:\n%s", len(lines), len(allMechanisms)*4, buf.String())
	}
	fields := []string{"h", "mechanism", "n", "pass", "peak_bytes", "seconds", "us_per_token"}
	seen := map[string]int{}
	for _, line := range lines {
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		var keys []string
		for k := range row {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, fields) {
			t.Fatalf("%q has fields %v, want exactly %v", line, keys, fields)
		}
		n, _ := row["n"].(float64)
		seconds, _ := row["seconds"].(float64)
		us, _ := row["us_per_token"].(float64)
		peak, _ := row["peak_bytes"].(float64)
		pass, _ := row["pass"].(string)
		seen[row["mechanism"].(string)]++
		switch {
		case n != 256 && n != 512, row["h"] != 32.0:
			t.Errorf("%q: n or h is not what was asked", line)
		case pass != "forward" && pass != "forward+backward":
			t.Errorf("%q: pass %q", line, pass)
		case !(seconds > 0):
			t.Errorf("%q: seconds %v, want positive", line, row["seconds"])
		}
		// µs per token counts the B·N tokens of the batch.
		if want := seconds * 1e6 / (2 * n); us < want*(1-1e-9) || us > want*(1+1e-9) {
			t.Errorf("%q: us_per_token %v, want seconds·1e6/(B·n) = %v", line, us, want)
		}
		// The peak counts at least q, k, v, o and their gradients: 8 tensors
		// of B·H·n·h float32s, allocated after the baseline.
		if min := 8 * 4 * 2 * n * 32; peak < min {
			t.Errorf("%q: peak_bytes %v, less than the %v bytes of the tensors", line, peak, min)
		}
	}
	for _, m := range allMechanisms {
		if seen[m] != 4 {
			t.Errorf("%s: %d rows, want 4", m, seen[m])
		}
	}
}

func TestBenchAttentionOOM(t *testing.T) {
	// 16·8 floats per tensor, 8 tensors: 4 KiB, plus workspace. A 6 KiB
	// limit admits n=16 of the linear-memory mechanisms but nothing at n=32
	// (8 KiB of tensors alone).
	var buf bytes.Buffer
	if err := run(append(slices.Clone(tinyBench), "--heads", "1", "--mem-limit", "6KiB"), &buf); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && f[1] == "32" && !strings.Contains(line, "OOM: needs") {
			t.Errorf("n=32 row not OOM: %q", line)
		}
	}
	buf.Reset()
	if err := run(append(slices.Clone(tinyBench), "--json", "--mem-limit", "1KiB"), &buf); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		if row["seconds"] != nil || row["us_per_token"] != nil || row["peak_bytes"] != nil {
			t.Errorf("OOM case %q has measurements", line)
		}
	}
}

func TestBenchAttentionSkip(t *testing.T) {
	// Any measured time at n=16 predicts more than a nanosecond at n=32.
	var buf bytes.Buffer
	if err := run(append(slices.Clone(tinyBench), "--max-seconds", "1e-9", "--attention", "flash,polysketch"), &buf); err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(buf.String(), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || (f[0] != "flash" && f[0] != "polysketch") {
			continue
		}
		rows++
		if skipped := strings.Contains(line, "skipped: predicted"); skipped != (f[1] == "32") {
			t.Errorf("row %q: skipped is %t, want it only at n=32", line, skipped)
		}
	}
	if rows != 8 {
		t.Errorf("%d rows, want 8:\n%s", rows, buf.String())
	}
}

func TestBenchAttentionFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--n", "0"}, "--n"},
		{[]string{"--n", "512,abc"}, "--n"},
		{[]string{"--n", ""}, "--n"},
		{[]string{"--head-dim", "0"}, "--head-dim 0"},
		{[]string{"--batch", "-1"}, "--batch -1"},
		{[]string{"--heads", "0"}, "--heads 0"},
		{[]string{"--attention", "softmax,linear"}, `unknown attention mechanism "linear"`},
		{[]string{"--attention", "flash:degree=4"}, "--degree is no option of flash attention: its options are --block"},
		{[]string{"--mem-limit", "lots"}, "mem-limit"},
		{[]string{"--mem-limit", "-5GiB"}, "mem-limit"},
		{[]string{"--max-seconds", "0"}, "--max-seconds 0"},
		{[]string{"--max-seconds", "NaN"}, "--max-seconds NaN"},
		{[]string{"--reps", "0"}, "--reps 0"},
		{[]string{"--degree", "3"}, "--degree 3"},
		{[]string{"--degree", "6"}, "power of two"},
		{[]string{"--block", "0"}, "--block 0"},
		{[]string{"--sketch-size", "-1"}, "--sketch-size -1"},
		{[]string{"--sketch", "fourier"}, `--sketch "fourier"`},
		{[]string{"512"}, "unexpected argument"},
		{[]string{"--plot", "/nonexistent/dir/a.png"}, "--plot"},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		err := run(append([]string{"bench", "attention"}, tt.args...), &buf)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one containing %q", tt.args, err, tt.want)
		}
	}
}

func TestByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want byteSize
	}{
		{"8GiB", 8 << 30}, {"512MiB", 512 << 20}, {"1.5GB", 1_500_000_000}, {"4096", 4096}, {"2K", 2048}, {"10 MB", 10_000_000}, {"3B", 3},
	}
	for _, tt := range tests {
		var b byteSize
		if err := b.Set(tt.in); err != nil || b != tt.want {
			t.Errorf("Set(%q) = %d, %v; want %d", tt.in, b, err, tt.want)
		}
	}
	for _, bad := range []string{"", "GiB", "-1", "0", "1.5.5MB", "8 lightyears"} {
		var b byteSize
		if err := b.Set(bad); err == nil {
			t.Errorf("Set(%q) = %d, want an error", bad, b)
		}
	}
	if s := byteSize(8 << 30).String(); s != "8GiB" {
		t.Errorf("String() = %q, want 8GiB", s)
	}
}

func TestPredict(t *testing.T) {
	if _, ok := predict(nil, 1024, 2); ok {
		t.Error("predicted from no measurement")
	}
	tests := []struct {
		last   timing
		n      int
		growth float64
		want   float64
	}{
		{timing{512, 1}, 1024, 2, 4},
		{timing{512, 1}, 4096, 2, 64},
		{timing{512, 0.5}, 2048, 1, 2},
		{timing{1000, 3}, 1500, 1, 4.5},
	}
	for _, tt := range tests {
		if got, _ := predict(&tt.last, tt.n, tt.growth); got < tt.want*(1-1e-9) || got > tt.want*(1+1e-9) {
			t.Errorf("predict(%v, %d, %v) = %v, want %v", tt.last, tt.n, tt.growth, got, tt.want)
		}
	}
}
