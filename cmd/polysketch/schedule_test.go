package main

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainCosineSchedule checks the learning rates of a run with
// --schedule cosine against values worked out by hand, and that a resumed
// run goes on along the cosine of its new length.
func TestTrainCosineSchedule(t *testing.T) {
	dir, args := tinyRun(t)
	runDir := filepath.Join(dir, "run")
	args = append(append([]string{"train"}, args...), "--schedule", "cosine", "--warmup", "2", "--lr", "1e-3", "--min-lr", "1e-4", "--steps", "8")
	if _, errOut, err := runQuiet(t, args...); err != nil {
		t.Fatalf("train: %v\n%s", err, errOut)
	}
	if _, errOut, err := runQuiet(t, "train", "--out", runDir, "--resume", "--steps", "10", "--cache-dir", filepath.Join(dir, "cache")); err != nil {
		t.Fatalf("resume: %v\n%s", err, errOut)
	}
	// Warm-up over 2 steps, then 1e-4 + 0.9e-3·(1 + cos(π·(s−2)/(T−2)))/2
	// for the update after s steps; T is 8, then 10 from the resumption on.
	want := []float64{
		5e-4,          // s 0: warm-up, half the peak
		1e-3,          // s 1: the peak
		1e-3,          // s 2: cos 0 = 1
		9.39711432e-4, // s 3: cos π/6 = 0.866025404
		7.75e-4,       // s 4: cos π/3 = 1/2
		5.5e-4,        // s 5: cos π/2 = 0
		3.25e-4,       // s 6: cos 2π/3 = −1/2
		1.60288568e-4, // s 7: cos 5π/6 = −0.866025404
		2.31801948e-4, // s 8 of 10: cos 3π/4 = −0.707106781
		1.34254210e-4, // s 9 of 10: cos 7π/8 = −0.923879533
	}
	ms := metricsOf(t, runDir)
	if len(ms) != len(want) {
		t.Fatalf("%d steps, want %d", len(ms), len(want))
	}
	for i, m := range ms {
		if math.Abs(m.LR-want[i]) > 1e-12 {
			t.Errorf("step %d: learning rate %.10g, want %.10g", i+1, m.LR, want[i])
		}
	}

	_, _, err := runQuiet(t, "train", "--schedule", "step")
	if want := `invalid value "step" for flag -schedule: want linear or cosine`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("--schedule step: %v, want %q", err, want)
	}
}
