package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/train"
)

func taskArgs(out string) []string {
	return []string{"--out", out, "--attention", "softmax", "--dim", "16", "--heads", "2", "--context", "16",
		"--batch", "4", "--steps", "6", "--eval-every", "3"}
}

func TestTrainTask(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	args := append(taskArgs(out), "--task", "induction-heads", "--task-vocab", "6", "--task-test", "8")
	stdout, _, err := runQuiet(t, append([]string{"train"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "exact match") {
		t.Errorf("output %q does not report the exact match", stdout)
	}
	ms := metricsOf(t, out)
	if len(ms) != 6 || ms[2].ValExact == nil || ms[5].ValAccuracy == nil {
		t.Fatalf("metrics %+v: want 6 steps with task scores at 3 and 6", ms)
	}
	if _, err := os.Stat(filepath.Join(out, "accuracy.png")); err != nil {
		t.Error(err)
	}
	// Resuming with the same task flags goes on; with others it refuses.
	more := append(args[:len(args):len(args)], "--resume", "--steps", "8")
	if _, _, err := runQuiet(t, append([]string{"train"}, more...)...); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if n := len(metricsOf(t, out)); n != 8 {
		t.Errorf("%d steps after resuming to 8", n)
	}
	// eval scores the task's test examples; generate refuses.
	stdout, _, err = runQuiet(t, "eval", "--checkpoint", out)
	if err != nil || !strings.Contains(stdout, "on the 8 test examples of task induction-heads") {
		t.Errorf("eval: %v\n%s", err, stdout)
	}
	if _, _, err := runQuiet(t, "eval", "--checkpoint", out, "--corpus", "x.txt"); err == nil || !strings.Contains(err.Error(), "not on text") {
		t.Errorf("eval on a corpus: %v", err)
	}
	if _, _, err := runQuiet(t, "generate", "--checkpoint", out); err == nil || !strings.Contains(err.Error(), "tokens are not text") {
		t.Errorf("generate: %v", err)
	}
	bad := append(taskArgs(out), "--task", "induction-heads", "--task-vocab", "7", "--resume", "--steps", "9")
	if _, _, err := runQuiet(t, append([]string{"train"}, bad...)...); err == nil || !strings.Contains(err.Error(), "--task-vocab 7 where the checkpoint has 6") {
		t.Errorf("resume with another vocabulary: %v", err)
	}
}

func TestTrainTaskFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "task.jsonl")
	var b strings.Builder
	for i := range 40 {
		b.WriteString(`{"input": "ab` + string(rune('a'+i%20)) + `=", "target": "` + string(rune('a'+i%20)) + `"}` + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "run")
	if _, _, err := runQuiet(t, append([]string{"train", "--task", path}, taskArgs(out)...)...); err != nil {
		t.Fatal(err)
	}
	if ms := metricsOf(t, out); ms[len(ms)-1].ValExact == nil {
		t.Error("no test scores")
	}
	// A malformed line: named, and no run is made.
	if err := os.WriteFile(path, []byte(b.String()+"{\"input\": \"x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out2 := filepath.Join(dir, "run2")
	_, _, err := runQuiet(t, append([]string{"train", "--task", path}, taskArgs(out2)...)...)
	if err == nil || !strings.Contains(err.Error(), "task.jsonl:41:") {
		t.Errorf("malformed line 41: error %v", err)
	}
	if _, err := os.Stat(out2); !os.IsNotExist(err) {
		t.Errorf("a failed task run left %s behind", out2)
	}
}

func TestTrainTaskErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--task", "sorting"}, "choose one of selective-copy, induction-heads, mqar, reversal"},
		{[]string{"--task", "selective-copy", "--task-count", "9"}, "more than length 16"},
		{[]string{"--task", "mqar", "--task-vocab", "8", "--task-count", "4"}, "too few for 4 distinct keys"},
		{[]string{"--task", "induction-heads", "--corpus", "x.txt"}, "--corpus and --task"},
	}
	for _, tt := range tests {
		out := filepath.Join(t.TempDir(), "run")
		_, _, err := runQuiet(t, append(append([]string{"train"}, taskArgs(out)...), tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: error %v, want one line containing %q", tt.args, err, tt.want)
		}
	}
}

func TestTrainTaskBidirectional(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	args := []string{"train", "--out", out, "--attention", "softmax", "--dim", "16", "--heads", "2", "--layers", "1",
		"--batch", "4", "--steps", "4", "--eval-every", "2", "--task", "reversal", "--bidirectional", "--task-count", "6", "--task-test", "8"}
	if _, _, err := runQuiet(t, args...); err != nil {
		t.Fatal(err)
	}
	c, _, err := train.OpenRun(out)
	if err != nil {
		t.Fatal(err)
	}
	mc := c.Model.Config()
	if !mc.Bidirectional || mc.Context != 6 || mc.Vocab != 10 {
		t.Errorf("model %+v: want a bidirectional model of context 6 over the 10 digits", mc)
	}
	_, _, err = runQuiet(t, "train", "--out", filepath.Join(t.TempDir(), "r2"), "--task", "mqar", "--bidirectional")
	if err == nil || !strings.Contains(err.Error(), "no bidirectional form") {
		t.Errorf("bidirectional mqar: %v", err)
	}
}
