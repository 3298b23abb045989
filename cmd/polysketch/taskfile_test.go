package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/train"
)

// TestTaskFileLengthAndTestFile trains on a task file without --context,
// which takes the length of its longest example, and scores the run on a
// test file kept apart.
func TestTaskFileLengthAndTestFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var b strings.Builder
	for i := range 30 {
		c := string(rune('a' + i%10))
		b.WriteString(`{"input": "ab` + c + `=", "target": "` + c + `"}` + "\n")
	}
	// The longest example: 6 bytes of input and 3 of target, 8 positions.
	b.WriteString(`{"input": "abcde=", "target": "xyz"}` + "\n")
	trainFile := write("train.jsonl", b.String())
	testFile := write("test.jsonl", `{"input": "abc=", "target": "c"}`+"\n"+`{"input": "abd=", "target": "d"}`+"\n"+`{"input": "abe=", "target": "e"}`+"\n")
	out := filepath.Join(dir, "run")
	args := []string{"train", "--task", trainFile, "--out", out, "--attention", "softmax", "--dim", "16", "--heads", "2", "--batch", "4", "--steps", "4", "--eval-every", "2"}
	if _, errOut, err := runQuiet(t, args...); err != nil {
		t.Fatalf("train --task FILE without --context: %v\n%s", err, errOut)
	}
	c, err := checkpoint.Load(filepath.Join(out, train.CheckpointDir))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Model.Config().Context; got != 8 {
		t.Errorf("context %d, want 8, the longest example's length", got)
	}

	stdout, errOut, err := runQuiet(t, "eval", "--checkpoint", out, "--task", testFile, "--json")
	if err != nil {
		t.Fatalf("eval --task: %v\n%s", err, errOut)
	}
	var r taskEvalResult
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("eval printed %q: %v", stdout, err)
	}
	if r.Examples != 3 || r.Task != testFile || r.Step != 4 {
		t.Errorf("eval --task %s: %+v; want its 3 examples at step 4", testFile, r)
	}
	// Without --task: the examples held out of the training file.
	stdout, _, err = runQuiet(t, "eval", "--checkpoint", out, "--json")
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || r.Examples != 3 || r.Task != trainFile {
		t.Errorf("eval: %+v, %v; want the 3 test lines of the training file", r, err)
	}

	long := write("long.jsonl", `{"input": "abc=", "target": "c"}`+"\n"+`{"input": "abcdefgh=", "target": "c"}`+"\n")
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"--task", long}, long + ":2: input of 9 tokens and target of 1 make 9 positions, more than the context 8", 1},
		{[]string{"--task", testFile, "--corpus", trainFile}, "--task and --corpus", 2},
		{[]string{"--task", filepath.Join(dir, "missing.jsonl")}, "missing.jsonl: no such file", 1},
	} {
		_, _, err := runQuiet(t, append([]string{"eval", "--checkpoint", out}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err) != tc.code {
			t.Errorf("eval %q: %v (exit %d), want %q, exit %d", tc.args, err, exitCode(err), tc.want, tc.code)
		}
	}

	// A checkpoint trained on a corpus has no task to score.
	_, cargs := tinyRun(t)
	cout := cargs[len(cargs)-1]
	for i, a := range cargs {
		if a == "--out" {
			cout = cargs[i+1]
		}
	}
	cargs = append(cargs, "--steps", "2")
	if _, _, err := runQuiet(t, append([]string{"train"}, cargs...)...); err != nil {
		t.Fatal(err)
	}
	_, _, err = runQuiet(t, "eval", "--checkpoint", cout, "--task", testFile)
	if err == nil || !strings.Contains(err.Error(), "trained on a corpus, not a task") {
		t.Errorf("eval --task of a corpus checkpoint: %v", err)
	}
}
