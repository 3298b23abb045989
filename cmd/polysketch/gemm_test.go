package main

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/blas"
)

// tinyGEMM is a bench gemm run small enough for a unit test, bf16
// included whatever the CPU.
var tinyGEMM = []string{"bench", "gemm", "--cases", "8x4x16,3x5x7", "--reps", "2", "--min-time", "1ms", "--pause", "0", "--bf16"}

func TestBenchGEMMJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := run(append(slices.Clone(tinyGEMM), "--json", "--threads", "1"), &buf); err != nil {
		t.Fatal(err)
	}
	var impls []string
	for _, impl := range blas.Impls() {
		impls = append(impls, impl.Name)
	}
	fp32 := len(impls)
	impls = append(impls, "bf16", "bf16-packed")
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	var got []gemmResult
	for dec.More() {
		var r gemmResult
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %d: %v", len(got)+1, err)
		}
		got = append(got, r)
	}
	if len(got) != 2*len(impls) {
		t.Fatalf("%d lines, want %d: %+v", len(got), 2*len(impls), got)
	}
	for i, r := range got {
		want := [3]int{8, 16, 4} // m, n, k of 8x4x16
		if i >= len(impls) {
			want = [3]int{3, 7, 5}
		}
		// The shape of the output, never a timed value: a product of a
		// few hundred flops may round to 0.0 GFLOPS on a loaded machine.
		if r.Impl != impls[i%len(impls)] || [3]int{r.M, r.N, r.K} != want || r.Threads != 1 || !(r.GFLOPS >= 0) || math.IsInf(r.GFLOPS, 0) {
			t.Errorf("line %d = %+v, want impl %s, m,n,k %v, 1 thread, a finite GFLOPS", i+1, r, impls[i%len(impls)], want)
		}
		if kernel := blas.KernelBF16For(want[0], want[1], want[2]); i%len(impls) >= fp32 && r.Kernel != kernel || i%len(impls) < fp32 && r.Kernel != "" {
			t.Errorf("line %d = %+v: kernel %q, want %q on the bf16 lines only", i+1, r, r.Kernel, kernel)
		}
	}
}

func TestBenchGEMMTable(t *testing.T) {
	var buf bytes.Buffer
	if err := run(tinyGEMM, &buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"go GFLOPS", "bf16 GFLOPS", "bf16-packed/go", "bf16: " + blas.KernelBF16(), "8×4×16", "3×5×7", "bf16 code", blas.KernelBF16For(3, 7, 5)} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchGEMMBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--cases", "8x4"},
		{"--cases", "8x0x4"},
		{"--cases", "axbxc"},
		{"--threads", "0"},
		{"--reps", "0"},
		{"--pause", "-1s"},
		{"stray"},
	} {
		var buf bytes.Buffer
		if err := run(append([]string{"bench", "gemm"}, args...), &buf); err == nil {
			t.Errorf("bench gemm %v: no error", args)
		}
	}
}
