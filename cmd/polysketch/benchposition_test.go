package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchPosition: a polysketch model's state stays the same size past
// its context; a softmax model's grows, and it refuses a length beyond
// its context.
func TestBenchPosition(t *testing.T) {
	dir, args := tinyRun(t)
	if _, errOut, err := runQuiet(t, append(append([]string{"train"}, args...), "--steps", "1")...); err != nil {
		t.Fatalf("train: %v\n%s", err, errOut)
	}
	out, _, err := runQuiet(t, "bench", "position", "--checkpoint", filepath.Join(dir, "run"), "--length", "40", "--window", "16", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var ws []positionWindow
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var w positionWindow
		if err := json.Unmarshal([]byte(line), &w); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		ws = append(ws, w)
	}
	if len(ws) != 3 || ws[2].From != 32 || ws[2].To != 40 {
		t.Fatalf("windows %+v, want [0,16) [16,32) [32,40)", ws)
	}
	for _, w := range ws {
		if w.StateBytes != ws[0].StateBytes || !(w.MsPerToken > 0) {
			t.Errorf("window %+v: state of %d bytes at first", w, ws[0].StateBytes)
		}
	}
	// Softmax: a KV cache, refused beyond the context of 16.
	soft := append(without(without(args, "--block"), "--sketch-size"), "--attention", "softmax", "--steps", "1", "--out", filepath.Join(dir, "soft"))
	if _, errOut, err := runQuiet(t, append([]string{"train"}, soft...)...); err != nil {
		t.Fatalf("train: %v\n%s", err, errOut)
	}
	out, _, err = runQuiet(t, "bench", "position", "--checkpoint", filepath.Join(dir, "soft"), "--length", "16", "--window", "8", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var a, b positionWindow
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &a) != nil || json.Unmarshal([]byte(lines[1]), &b) != nil || b.StateBytes != 2*a.StateBytes {
		t.Errorf("softmax windows %q: want the KV cache doubling", lines)
	}
	if _, _, err := runQuiet(t, "bench", "position", "--checkpoint", filepath.Join(dir, "soft"), "--length", "17"); err == nil || !strings.Contains(err.Error(), "keeps a KV cache of at most 16 positions") {
		t.Errorf("softmax past its context: %v", err)
	}
}
