package main

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// testdata is where multichoice keeps its hand-written questions.
var choicesData = filepath.Join("..", "..", "multichoice", "testdata")

// TestEvalChoices scores a checkpoint on the questions of every format:
// the table, JSON lines of the accuracies, and the questions' scores in
// --log-samples, whose picks the accuracies count; the same shots and
// scores again with the same --seed.
func TestEvalChoices(t *testing.T) {
	dir, args := tinyRun(t)
	runDir := filepath.Join(dir, "run")
	if _, errOut, err := runQuiet(t, append(append([]string{"train"}, args...), "--steps", "2")...); err != nil {
		t.Fatalf("train: %v\n%s", err, errOut)
	}
	files := []string{"hellaswag.jsonl", "piqa.parquet", "arc.parquet", "generic.jsonl"}
	var paths []string
	for _, f := range files {
		paths = append(paths, filepath.Join(choicesData, f))
	}
	out, errOut, err := runQuiet(t, "eval", "--checkpoint", runDir, "--choices", strings.Join(paths, ","))
	if err != nil {
		t.Fatalf("eval --choices: %v\n%s", err, errOut)
	}
	for _, want := range []string{"0-shot", "acc %", "acc_norm %", "hellaswag  5", "piqa       4", "arc        4", "generic    4", "25.0", "50.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}

	scores := func(seed string) ([]choiceResult, []string) {
		t.Helper()
		log := filepath.Join(dir, "samples-"+seed+".jsonl")
		out, errOut, err := runQuiet(t, "eval", "--checkpoint", runDir, "--choices", strings.Join(paths[:2], ","),
			"--shots", "2", "--seed", seed, "--json", "--log-samples", log)
		if err != nil {
			t.Fatalf("eval --choices --shots 2: %v\n%s", err, errOut)
		}
		var rs []choiceResult
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var r choiceResult
			if err := jsonUnmarshal(line, &r); err != nil {
				t.Fatalf("eval --json printed %q: %v", line, err)
			}
			rs = append(rs, r)
		}
		f, err := os.Open(log)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var lines []string
		for sc := bufio.NewScanner(f); sc.Scan(); {
			lines = append(lines, sc.Text())
		}
		return rs, lines
	}
	rs, lines := scores("3")
	if len(rs) != 2 || rs[0].Format != "hellaswag" || rs[0].Examples != 5 || rs[1].Format != "piqa" || rs[1].Shots != 2 || len(lines) != 9 {
		t.Fatalf("results %+v and %d sample lines; want hellaswag's 5 and piqa's 4", rs, len(lines))
	}
	right := map[string]int{}
	for _, l := range lines {
		var s struct {
			File   string    `json:"file"`
			Label  int       `json:"label"`
			Pred   int       `json:"pred"`
			LogLik []float64 `json:"loglik"`
		}
		if err := jsonUnmarshal(l, &s); err != nil || len(s.LogLik) < 2 {
			t.Fatalf("sample line %q: %v", l, err)
		}
		if s.Pred == s.Label {
			right[s.File]++
		}
	}
	for _, r := range rs {
		if want := float64(right[r.File]) / float64(r.Examples); r.Acc != want {
			t.Errorf("%s: acc %v, but the samples have %d of %d right", r.File, r.Acc, right[r.File], r.Examples)
		}
	}
	rs2, lines2 := scores("3")
	for i := range rs2 {
		rs2[i].Seconds = rs[i].Seconds
	}
	if !reflect.DeepEqual(rs, rs2) || !reflect.DeepEqual(lines, lines2) {
		t.Error("the same --seed gave other shots or scores")
	}
	if _, lines3 := scores("4"); reflect.DeepEqual(lines, lines3) {
		t.Error("--seed 3 and 4 gave the same scores: the shots do not depend on the seed")
	}
}

// TestEvalChoicesErrors checks that bad files and flags are one line
// that says what is wrong.
func TestEvalChoicesErrors(t *testing.T) {
	dir, args := tinyRun(t)
	runDir := filepath.Join(dir, "run")
	if _, errOut, err := runQuiet(t, append(append([]string{"train"}, args...), "--steps", "1")...); err != nil {
		t.Fatalf("train: %v\n%s", err, errOut)
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unknown := write("unknown.jsonl", `{"text": "hello", "id": 3}`)
	label := write("label.jsonl", `{"goal": "g", "sol1": "a", "sol2": "b", "label": 0}`+"\n"+`{"goal": "g", "sol1": "a", "sol2": "b", "label": 2}`)
	one := write("one.jsonl", `{"context": "c", "choices": ["a"], "answer": 0}`)
	piqa := filepath.Join(choicesData, "piqa.jsonl")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--choices", unknown}, "unknown.jsonl: no known multiple-choice format: its first record has the fields id, text; known formats: hellaswag (ctx, endings, label)"},
		{[]string{"--choices", label}, "label.jsonl:2: label 2 out of range: 2 choices"},
		{[]string{"--choices", one}, "one.jsonl:1: 1 choices: a question needs at least 2"},
		{[]string{"--choices", piqa, "--format", "mmlu"}, `--format: unknown multiple-choice format "mmlu"`},
		{[]string{"--choices", piqa, "--format", "arc"}, "piqa.jsonl:1: no field question, which the arc format needs"},
		{[]string{"--choices", piqa, "--shots", "-1"}, "--shots -1: must not be negative"},
		{[]string{"--choices", piqa, "--shots", "4"}, "piqa.jsonl:1: --shots 4: only 3 other examples"},
		{[]string{"--choices", piqa, "--batch", "3"}, "--batch: a flag of the perplexity, not of --choices"},
		{[]string{"--shots", "3"}, "--shots: a flag of --choices, which is not given"},
		{[]string{"--choices", piqa, "--shots-from", piqa}, "--shots-from: a flag of --shots, which is 0"},
		{[]string{"--choices", piqa, "--shots", "1", "--shots-from", filepath.Join(choicesData, "arc.jsonl")}, "--shots-from " + filepath.Join(choicesData, "arc.jsonl") + " is of the arc format, --choices " + piqa + " of the piqa format"},
		{[]string{"--choices", piqa + "," + filepath.Join(choicesData, "hellaswag.jsonl"), "--shots", "1", "--shots-from", piqa}, "hellaswag.jsonl of the hellaswag format"},
		{[]string{"--choices", filepath.Join(dir, "nothere.jsonl")}, "nothere.jsonl"},
	} {
		_, _, err := runQuiet(t, append([]string{"eval", "--checkpoint", runDir}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line containing %q", tc.args, err, tc.want)
		}
	}
}
