package experiment

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/model"
)

// TestDownstream runs the downstream experiment's --quick grid (two
// mechanisms trained, then scored), again in another directory (the same
// table), again in its own (resumed from its scores), and on the trained
// runs given as checkpoints (the same scores), and checks its refusals.
func TestDownstream(t *testing.T) {
	e, err := Lookup("downstream")
	if err != nil {
		t.Fatal(err)
	}
	a := filepath.Join(t.TempDir(), "a")
	o := optionsFor(t, e, a)
	ra, err := e.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(ra) != 2 {
		t.Fatalf("%d results, want a row for each of the 2 mechanisms", len(ra))
	}
	for _, r := range ra {
		if len(r.Downstream) != 4 || !(r.ValPPL > 1) {
			t.Errorf("%s: perplexity %v and %d scores, want 2 files × 0 and 1 shots", r.Row, r.ValPPL, len(r.Downstream))
		}
		for _, s := range r.Downstream {
			if s.Examples != 4 || s.Acc < 0 || s.Acc > 1 {
				t.Errorf("%s: %+v", r.Row, s)
			}
		}
	}
	table, err := os.ReadFile(filepath.Join(a, TableFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| model | perplexity | piqa 0-shot | piqa 1-shot | generic 0-shot | generic 1-shot |", "acc_norm:", "| softmax |", "Chance: piqa 50.0%, generic 41.7%."} {
		if !strings.Contains(string(table), want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	lines := func(dir string) int {
		b, _ := os.ReadFile(filepath.Join(dir, ScoresFile))
		return strings.Count(string(b), "\n")
	}
	if n := lines(a); n != 8 {
		t.Errorf("%s: %d lines, want 8", ScoresFile, n)
	}

	// Again in its directory: every score read back, none computed again.
	if _, err := e.Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if n := lines(a); n != 8 {
		t.Errorf("resumed: %s has %d lines, want the 8 of the first run", ScoresFile, n)
	}
	again, _ := os.ReadFile(filepath.Join(a, TableFile))
	if string(again) != string(table) {
		t.Errorf("resumed, another table:\n%s\n%s", again, table)
	}

	// In another directory: the same table, bit for bit.
	o.Dir = filepath.Join(t.TempDir(), "b")
	if _, err := e.Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	other, _ := os.ReadFile(filepath.Join(o.Dir, TableFile))
	if string(other) != string(table) {
		t.Errorf("same seed, different tables:\n%s\n%s", other, table)
	}

	// The trained runs as given checkpoints: the same scores.
	c := o
	c.Dir = filepath.Join(t.TempDir(), "c")
	for _, r := range ra {
		c.Checkpoints = append(c.Checkpoints, filepath.Join(a, RunsDir, r.Run))
	}
	rc, err := e.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rc {
		if r.Row != ra[i].Run || r.ValPPL != ra[i].ValPPL {
			t.Errorf("checkpoint %d: row %q, perplexity %v; want %q, %v", i, r.Row, r.ValPPL, ra[i].Run, ra[i].ValPPL)
		}
		for j := range r.Downstream {
			r.Downstream[j].Model, ra[i].Downstream[j].Model = "", ""
		}
		if !reflect.DeepEqual(r.Downstream, ra[i].Downstream) {
			t.Errorf("checkpoint %d: scores %+v, trained run's %+v", i, r.Downstream, ra[i].Downstream)
		}
	}

	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no files", Options{Seed: 1}, "no choices: experiment downstream needs files of multiple-choice questions"},
		{"relative checkpoint", Options{Seed: 1, Choices: []string{"/q.jsonl"}, Checkpoints: []string{"run"}}, `checkpoint "run": give an absolute path`},
		{"negative shots", Options{Seed: 1, Choices: []string{"/q.jsonl"}, Shots: -1}, "shots -1: must not be negative"},
	} {
		if _, err := e.Plan(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	lm, _ := Lookup("lm")
	if _, err := lm.Plan(Options{Seed: 1, Choices: []string{"/q.jsonl"}}); err == nil || !strings.Contains(err.Error(), "takes no choices or checkpoints") {
		t.Errorf("lm with multiple-choice files: %v", err)
	}
}

// TestDownstreamNoTokenizer: a checkpoint that reads and writes token ids
// alone (an import without a tokenizer.json) cannot be scored on text,
// and is refused in one line naming it, not with a panic.
func TestDownstreamNoTokenizer(t *testing.T) {
	e, err := Lookup("downstream")
	if err != nil {
		t.Fatal(err)
	}
	mc := model.DefaultConfig()
	mc.Layers, mc.Dim, mc.Heads, mc.Context = 1, 16, 2, 16
	m, err := model.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ids-only")
	if err := checkpoint.Save(dir, &checkpoint.Checkpoint{Model: m}); err != nil {
		t.Fatal(err)
	}
	o := quickOptions(t, t.TempDir())
	o.Choices, o.Checkpoints = choiceFiles(t, "piqa.jsonl"), []string{dir}
	_, err = e.Run(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "no tokenizer") {
		t.Errorf("error %v, want one naming %s and its missing tokenizer", err, dir)
	}
}

// TestDownstreamTokens: the table says in whose tokens the perplexities
// are, from the models scored: one vocabulary named, or each model's own
// where they differ (perplexities per token of different vocabularies do
// not compare), never bytes for a model of another tokenizer.
func TestDownstreamTokens(t *testing.T) {
	plan := Plan{Experiment: "downstream", Seed: 1, Checkpoints: []string{"/a", "/b"}, Choices: choiceFiles(t, "piqa.jsonl")}
	for _, c := range []struct {
		tokenizers []string
		want       string
	}{
		{[]string{"byte", "byte"}, "validation perplexity (bytes)"},
		{[]string{"gpt2", "gpt2"}, "validation perplexity (gpt2 tokens)"},
		{[]string{"byte", "bpe-0123456789abcdef"}, "validation perplexity (each model in its own tokens)"},
	} {
		rs := []Result{{Row: "a", Tokenizer: c.tokenizers[0]}, {Row: "b", Tokenizer: c.tokenizers[1]}}
		if table := downstreamTable(plan, rs); !strings.Contains(table, c.want) {
			t.Errorf("tokenizers %v: the table says\n%s\nwant %q", c.tokenizers, table, c.want)
		}
	}
}
