package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/train"
)

// TestPrecisionFlag gives every command that takes --precision a value it
// does not accept, and requires one line naming the accepted ones.
func TestPrecisionFlag(t *testing.T) {
	for _, cmd := range [][]string{
		{"train"}, {"bench", "train"}, {"experiment", "speed"}, {"eval"}, {"generate"}, {"serve"}, {"bench", "serve"},
	} {
		for _, bad := range []string{"fp16", "BF16", ""} {
			args := append(append([]string{}, cmd...), "--precision", bad)
			_, _, err := runQuiet(t, args...)
			want := `invalid value "` + bad + `" for flag -precision: want fp32 or bf16`
			if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%q: error %v, want one line containing %q", args, err, want)
			}
		}
	}
	err := run([]string{"bench", "serve", "--url", "http://127.0.0.1:1", "--precision", "bf16"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--precision applies to the in-process server") {
		t.Errorf("bench serve --url with --precision: %v", err)
	}
}

// TestTrainPrecision trains in bf16, resumes in fp32, and generates in
// bf16 from the result, through the CLI: the checkpoints record the
// precision of the session that wrote them, and bf16 on the portable
// kernel says once that it is slower.
func TestTrainPrecision(t *testing.T) {
	dir, args := tinyRun(t)
	runDir := filepath.Join(dir, "run")
	_, errOut, err := runQuiet(t, append(append([]string{"train"}, args...), "--steps", "4", "--precision", "bf16")...)
	if err != nil {
		t.Fatalf("train --precision bf16: %v\n%s", err, errOut)
	}
	const warning = "runs on the portable Go path, slower than fp32"
	if portable := blas.KernelBF16() == "go"; strings.Count(errOut, warning) != map[bool]int{true: 1, false: 0}[portable] {
		t.Errorf("kernel %s: stderr of train --precision bf16:\n%s", blas.KernelBF16(), errOut)
	}
	precisionOf := func() nn.Precision {
		t.Helper()
		_, tc, err := train.OpenRun(runDir)
		if err != nil {
			t.Fatal(err)
		}
		return tc.Precision
	}
	if p := precisionOf(); p != nn.BF16 {
		t.Errorf("checkpoint of a bf16 run records %v", p)
	}
	// Resuming keeps the precision unless told otherwise.
	cache := filepath.Join(dir, "cache")
	if _, errOut, err := runQuiet(t, "train", "--out", runDir, "--resume", "--steps", "6", "--cache-dir", cache); err != nil {
		t.Fatalf("resume: %v\n%s", err, errOut)
	}
	if p := precisionOf(); p != nn.BF16 {
		t.Errorf("resumed without --precision, the checkpoint records %v", p)
	}
	if _, errOut, err := runQuiet(t, "train", "--out", runDir, "--resume", "--steps", "8", "--precision", "fp32", "--cache-dir", cache); err != nil {
		t.Fatalf("resume --precision fp32: %v\n%s", err, errOut)
	}
	if p := precisionOf(); p != nn.FP32 {
		t.Errorf("resumed with --precision fp32, the checkpoint records %v", p)
	}
	config, err := os.ReadFile(filepath.Join(runDir, train.CheckpointDir, "config.json"))
	if err != nil || bytes.Contains(config, []byte("precision")) {
		t.Errorf("an fp32 checkpoint's config.json names a precision (%v):\n%s", err, config)
	}
	if ms := metricsOf(t, runDir); len(ms) != 8 {
		t.Errorf("%d steps in the metrics log, want 8", len(ms))
	}

	// eval in bf16: close to fp32, not equal.
	var losses [2]evalResult
	for i, p := range []string{"fp32", "bf16"} {
		out, errOut, err := runQuiet(t, "eval", "--checkpoint", runDir, "--cache-dir", cache, "--batch", "4", "--batches", "2", "--json", "--precision", p)
		if err != nil {
			t.Fatalf("eval --precision %s: %v\n%s", p, err, errOut)
		}
		if err := jsonUnmarshal(out, &losses[i]); err != nil {
			t.Fatalf("eval printed %q: %v", out, err)
		}
	}
	if a, b := losses[0].Loss, losses[1].Loss; a == b || math.Abs(b-a) > 0.01*a {
		t.Errorf("eval: loss %v in bf16, %v in fp32: want them within 1%%, and not equal", b, a)
	}

	out, errOut, err := runQuiet(t, "generate", "--checkpoint", runDir, "--prompt", "func f", "--tokens", "12", "--precision", "bf16")
	if err != nil || !strings.HasPrefix(out, "func f") || len(out) != len("func f")+12+1 {
		t.Errorf("generate --precision bf16: %v, %q\n%s", err, out, errOut)
	}
}

// TestPortableWarning runs bench train in a child process on the portable
// bf16 kernel (POLYSKETCH_NOASM=1): bf16 warns in one line that it is
// slower than fp32, fp32 says nothing.
func TestPortableWarning(t *testing.T) {
	if p := os.Getenv("POLYSKETCH_TEST_PRECISION"); p != "" {
		err := run([]string{"bench", "train", "--attention", "polysketch", "--n", "32", "--tokens", "32", "--steps", "1",
			"--layers", "1", "--dim", "16", "--heads", "2", "--block", "16", "--precision", p}, io.Discard)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	for _, c := range []struct {
		precision string
		warnings  int
	}{{"bf16", 1}, {"fp32", 0}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPortableWarning$")
		cmd.Env = append(os.Environ(), "POLYSKETCH_TEST_PRECISION="+c.precision, "POLYSKETCH_NOASM=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.precision, err, out)
		}
		if n := strings.Count(string(out), "runs on the portable Go path, slower than fp32"); n != c.warnings {
			t.Errorf("--precision %s on the portable kernel: %d warnings, want %d:\n%s", c.precision, n, c.warnings, out)
		}
	}
}
