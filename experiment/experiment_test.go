package experiment

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/train"
)

// tinyCorpus writes a small text file for the lm and speed experiments.
func tinyCorpus(t *testing.T) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "corpus.txt")
	var b strings.Builder
	for i := range 400 {
		b.WriteString("func f() int { return 42 } // the quick brown fox " + string(rune('a'+i%26)) + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{path}
}

func quickOptions(t *testing.T, dir string) Options {
	return Options{Dir: dir, Quick: true, Seed: 1, Corpus: tinyCorpus(t), CacheDir: filepath.Join(t.TempDir(), "cache")}
}

// tinyTaskFile writes a task file of 40 lines: "abX=" → "X".
func tinyTaskFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "task.jsonl")
	var b strings.Builder
	for i := range 40 {
		c := string(rune('a' + i%20))
		b.WriteString(`{"input": "ab` + c + `=", "target": "` + c + `"}` + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// optionsFor adds what experiment e needs beyond quickOptions.
func optionsFor(t *testing.T, e *Experiment, dir string) Options {
	o := quickOptions(t, dir)
	if e.Name == "task" {
		o.TaskFile, o.Context = tinyTaskFile(t), 8
	}
	if e.kind == downstreamKind {
		o.Choices, o.Shots = choiceFiles(t, "piqa.jsonl", "generic.jsonl"), 1
	}
	return o
}

// choiceFiles returns the absolute paths of multichoice's hand-written
// questions.
func choiceFiles(t *testing.T, names ...string) []string {
	t.Helper()
	var out []string
	for _, n := range names {
		p, err := filepath.Abs(filepath.Join("..", "multichoice", "testdata", n))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// TestQuick runs every experiment's --quick version, and some of them
// twice in two directories, requiring the same table bit for bit.
func TestQuick(t *testing.T) {
	for _, e := range List() {
		if e.kind == downstreamKind {
			continue // TestDownstream runs it: its table and files are of another kind
		}
		t.Run(e.Name, func(t *testing.T) {
			a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
			o := optionsFor(t, e, a)
			ra, err := e.Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			plan, _ := e.Plan(o)
			if len(ra) != len(plan.Runs) || len(ra) < 4 {
				t.Fatalf("%d results for %d runs", len(ra), len(plan.Runs))
			}
			for _, f := range []string{PlanFile, ResultsFile, TableFile} {
				if _, err := os.Stat(filepath.Join(a, f)); err != nil {
					t.Error(err)
				}
			}
			pngs, _ := filepath.Glob(filepath.Join(a, "*.png"))
			if len(pngs) == 0 {
				t.Error("no plots")
			}
			if e.Name == "reversal" {
				checkFreezeBest(t, a, ra)
			}
			if e.kind == speedKind {
				for _, r := range ra {
					if !(r.StepsPerSec > 0) {
						t.Errorf("%s: %v steps/s", r.Run, r.StepsPerSec)
					}
				}
				return
			}
			// Determinism: a second run for a few (each costs seconds).
			if e.Name == "selective-copy" || e.Name == "induction-heads" || e.Name == "task" {
				return
			}
			o.Dir = b
			if _, err := e.Run(context.Background(), o); err != nil {
				t.Fatal(err)
			}
			ta, _ := os.ReadFile(filepath.Join(a, TableFile))
			tb, _ := os.ReadFile(filepath.Join(b, TableFile))
			if string(ta) != string(tb) {
				t.Errorf("same seed, different tables:\n%s\n%s", ta, tb)
			}
			rows := strings.Count(string(ta), "\n| ") - 1
			if rows < 2 {
				t.Errorf("table of %d rows:\n%s", rows, ta)
			}
		})
	}
}

// TestResume interrupts an experiment in its second run, runs it again,
// and requires the table of an uninterrupted one.
func TestResume(t *testing.T) {
	e, err := Lookup("induction-heads")
	if err != nil {
		t.Fatal(err)
	}
	straight := filepath.Join(t.TempDir(), "straight")
	if _, err := e.Run(context.Background(), quickOptions(t, straight)); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "x")
	ctx, cancel := context.WithCancel(context.Background())
	o := quickOptions(t, dir)
	o.Progress = func(run string, p train.Progress) {
		if strings.HasPrefix(run, "polynomial") && p.Step == 2 {
			cancel()
		}
	}
	if _, err := e.Run(ctx, o); err == nil {
		t.Fatal("interrupted experiment: no error")
	}
	o.Progress = nil
	if _, err := e.Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(straight, TableFile))
	b, _ := os.ReadFile(filepath.Join(dir, TableFile))
	if string(a) != string(b) {
		t.Errorf("resumed experiment's table differs:\n%s\n%s", a, b)
	}
}

func TestRefusesOtherPlan(t *testing.T) {
	e, _ := Lookup("mqar")
	dir := filepath.Join(t.TempDir(), "x")
	if _, err := e.Run(context.Background(), quickOptions(t, dir)); err != nil {
		t.Fatal(err)
	}
	o := quickOptions(t, dir)
	o.Seed = 2
	if _, err := e.Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "different configuration") {
		t.Errorf("another seed in the same directory: %v", err)
	}
	other, _ := Lookup("reversal")
	if _, err := other.Run(context.Background(), quickOptions(t, dir)); err == nil || !strings.Contains(err.Error(), "different configuration") {
		t.Errorf("another experiment in the same directory: %v", err)
	}
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "x"), nil, 0o644)
	if _, err := e.Run(context.Background(), quickOptions(t, full)); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("a directory of other files: %v", err)
	}
}

func TestLookup(t *testing.T) {
	if _, err := Lookup("copying"); err == nil || !strings.Contains(err.Error(), "selective-copy, induction-heads, mqar, reversal, task, lm, speed, linearize") {
		t.Errorf("unknown experiment: %v", err)
	}
}

func TestPlansValid(t *testing.T) {
	for _, e := range List() {
		for _, quick := range []bool{false, true} {
			o := Options{Quick: quick, Seed: 1}
			if e.Name == "task" {
				o.TaskFile, o.Context = "x.jsonl", 64
			}
			if e.kind == downstreamKind {
				o.Choices = []string{"/x.jsonl"}
			}
			if _, err := e.Plan(o); err != nil {
				t.Errorf("%s (quick %v): %v", e.Name, quick, err)
			}
		}
	}
}

func TestApplyMechanism(t *testing.T) {
	tests := []struct {
		spec string
		want attention.Config
		err  string
	}{
		{spec: "softmax", want: attention.SoftmaxConfig{}},
		{spec: "polynomial:degree=8", want: attention.PolynomialConfig{Degree: 8, Block: 32}},
		{spec: "polysketch:learned=true:local=false:sketch-size=64", want: attention.PolysketchConfig{Degree: 4, SketchSize: 64, Block: 32, Sketch: attention.Gaussian, Learned: true}},
		{spec: "polysketch:learned:block=8", want: attention.PolysketchConfig{Degree: 4, SketchSize: 32, Block: 8, Local: true, Sketch: attention.Gaussian, Learned: true}},
		{spec: "linear", err: `unknown attention mechanism "linear"`},
		{spec: "polysketch:rank=3", err: "rank is no option of polysketch attention: its options are degree"},
		{spec: "polynomial:degree=four", err: "degree=four: want an integer"},
		{spec: "polynomial:degree=3", err: "degree 3: polynomial weights need an even degree"},
	}
	for _, tt := range tests {
		mc := model.Config{Context: 32}
		err := applyMechanism(&mc, tt.spec)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want %q", tt.spec, err, tt.err)
			}
			continue
		}
		if err != nil || mc.Attention != tt.want {
			t.Errorf("%s: %+v, %v; want %+v", tt.spec, mc.Attention, err, tt.want)
		}
	}
}

func TestTaskFileOptions(t *testing.T) {
	e, _ := Lookup("task")
	if _, err := e.Plan(Options{Quick: true, Seed: 1}); err == nil || !strings.Contains(err.Error(), "needs a task file") {
		t.Errorf("task without a file: %v", err)
	}
	m, _ := Lookup("mqar")
	if _, err := m.Plan(Options{Quick: true, Seed: 1, TaskFile: "x"}); err == nil || !strings.Contains(err.Error(), "takes no task file") {
		t.Errorf("mqar with a file: %v", err)
	}
}

func TestTable(t *testing.T) {
	e, _ := Lookup("selective-copy")
	plan := Plan{Experiment: e.Name, Seed: 3, Runs: []Run{{Train: train.Config{Steps: 7}}}}
	rs := []Result{
		{Row: "softmax", Column: "N=64", Exact: 1},
		{Row: "polysketch", Column: "N=64", Exact: 0.5},
		{Row: "softmax", Column: "N=128", Exact: 0.9973},
	}
	want := "selective-copy: exact match on the held-out test examples (every answer token right), after 7 steps (`polysketch experiment selective-copy --seed 3`)\n\n" +
		"| mechanism | N=64 | N=128 |\n|---|---|---|\n" +
		"| softmax | 100.00% | 99.73% |\n" +
		"| polysketch | 50.00% | – |\n"
	if got := e.Table(plan, rs); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	lm, _ := Lookup("lm")
	if got := lm.Table(plan, []Result{{Row: "softmax", Column: "N=128", ValPPL: 4.56789}}); !strings.Contains(got, "| softmax | 4.568 |") {
		t.Errorf("lm table:\n%s", got)
	}
	mq, _ := Lookup("mqar")
	if got := mq.Table(plan, []Result{{Row: "softmax", Column: "4 pairs", Accuracy: 0.5, Exact: 0.125}}); !strings.Contains(got, "| softmax | 50.0% (12.5%) |") {
		t.Errorf("mqar table:\n%s", got)
	}
	rev, _ := Lookup("reversal")
	if got := rev.Table(plan, []Result{{Row: "softmax", Column: "50 digits", ValLoss: 1.0851e-7, Exact: 1}}); !strings.Contains(got, "| softmax | 1.09e-07 (100.0%) |") {
		t.Errorf("reversal table:\n%s", got)
	}
}

// checkFreezeBest checks §5.4's run of each column of the reversal grid
// run in dir with results rs: it trained with the coefficients, frozen,
// that the learned square with the lowest final test loss ended with.
func checkFreezeBest(t *testing.T, dir string, rs []Result) {
	t.Helper()
	coefficients := func(run string) []float32 {
		c, err := checkpoint.Load(filepath.Join(dir, RunsDir, run, train.CheckpointDir))
		if err != nil {
			t.Fatal(err)
		}
		if cfg := c.Model.Config().Attention.(attention.SquarePolynomialConfig); cfg.Frozen {
			var a []float32
			for _, s := range strings.Split(cfg.Coefficients, ",") {
				x, err := strconv.ParseFloat(s, 32)
				if err != nil {
					t.Fatalf("run %s: coefficients %q: %v", run, cfg.Coefficients, err)
				}
				a = append(a, float32(x))
			}
			return a
		}
		for _, p := range c.Model.Params() {
			if strings.HasSuffix(p.Name, ".attn.coefficients") {
				return p.Value.Data
			}
		}
		t.Fatalf("run %s has no coefficients", run)
		return nil
	}
	frozen := 0
	for _, f := range rs {
		if f.Mechanism != "sqpoly:frozen" {
			continue
		}
		frozen++
		var best *Result
		for i, r := range rs {
			learned := strings.HasPrefix(r.Mechanism, "sqpoly:degree=") && !strings.HasSuffix(r.Mechanism, ":frozen")
			if learned && r.Column == f.Column && (best == nil || r.ValLoss < best.ValLoss) {
				best = &rs[i]
			}
		}
		if best == nil {
			t.Fatalf("%s: no learned square in its column", f.Column)
		}
		if !strings.Contains(f.Note, best.Row) {
			t.Errorf("%s: note %q does not name the best learned square, %s", f.Column, f.Note, best.Row)
		}
		want, got := coefficients(best.Run), coefficients(f.Run)
		if !slices.Equal(got, want) {
			t.Errorf("%s: frozen run ended with coefficients %v, want %s's %v", f.Column, got, best.Run, want)
		}
	}
	if frozen != 2 {
		t.Errorf("%d frozen-best runs, want one per column (2)", frozen)
	}
}

// TestSteps trains a quick grid for a number of steps of the user's and
// checks that every run took them, its validations scaled alike.
func TestSteps(t *testing.T) {
	e, _ := Lookup("mqar")
	o := quickOptions(t, t.TempDir())
	o.Steps = 6
	plan, err := e.Plan(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range plan.Runs {
		if r.Train.Steps != 6 || r.Train.EvalEvery != 3 || r.Train.SaveEvery != 0 {
			t.Fatalf("run %s: steps %d, eval every %d, save every %d; want 6, 3, 0", r.Name, r.Train.Steps, r.Train.EvalEvery, r.Train.SaveEvery)
		}
	}
	rs, err := e.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Step != 6 {
			t.Errorf("run %s trained %d steps, want 6", r.Run, r.Step)
		}
	}
	o.Steps = -1
	if _, err := e.Plan(o); err == nil || !strings.Contains(err.Error(), "steps -1") {
		t.Errorf("steps -1: %v", err)
	}
}

// TestTokenizer runs the lm grid on GPT-2's tokens: every run's model has
// its vocabulary and records it, the table says what its perplexities are
// of, and a task experiment refuses a tokenizer.
func TestTokenizer(t *testing.T) {
	e, _ := Lookup("lm")
	o := quickOptions(t, t.TempDir())
	gpt2, err := tokenizer.GPT2()
	if err != nil {
		t.Fatal(err)
	}
	o.Tokenizer = gpt2
	plan, err := e.Plan(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range plan.Runs {
		if r.Model.Vocab != 50257 || r.Train.Tokenizer != "gpt2" {
			t.Fatalf("run %s: vocabulary %d, tokenizer %q; want 50257, gpt2", r.Name, r.Model.Vocab, r.Train.Tokenizer)
		}
	}
	if _, err := e.Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	table, err := os.ReadFile(filepath.Join(o.Dir, TableFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(table), "validation perplexity (gpt2 tokens)") {
		t.Errorf("table does not name its tokens:\n%s", table)
	}
	mqar, _ := Lookup("mqar")
	if _, err := mqar.Plan(o); err == nil || !strings.Contains(err.Error(), "applies to lm and speed") {
		t.Errorf("mqar with a tokenizer: %v", err)
	}
}

// TestLinearizeTeacher: the linearize experiment with a teacher given
// trains none, scores the given one, and gives its students a tenth of
// the steps it trained.
func TestLinearizeTeacher(t *testing.T) {
	e, err := Lookup("linearize")
	if err != nil {
		t.Fatal(err)
	}
	o := quickOptions(t, filepath.Join(t.TempDir(), "e"))
	// The quick plan's teacher, trained apart for 40 steps.
	plan, err := e.Plan(o)
	if err != nil {
		t.Fatal(err)
	}
	teacher := filepath.Join(t.TempDir(), "teacher")
	tc := plan.Runs[0].Train
	tc.Steps, tc.Warmup = 40, 4
	trainTokens, valTokens, err := data.LoadPaths(context.Background(), o.Corpus, "", tokenizer.Byte, data.Options{CacheDir: o.CacheDir})
	if err != nil {
		t.Fatal(err)
	}
	defer trainTokens.Close()
	defer valTokens.Close()
	tr, err := train.Start(context.Background(), teacher, train.Run{Model: plan.Runs[0].Model, Recipe: tc, Source: &train.Corpus{Train: trainTokens, Val: valTokens}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	o.Teacher = filepath.Join(teacher, train.CheckpointDir)
	if plan, err = e.Plan(o); err != nil {
		t.Fatal(err)
	}
	if g := plan.Runs[0]; g.Given != o.Teacher || plan.Runs[1].Transfer.Steps != 1 || plan.Runs[1].Train.Steps != 3 || plan.Runs[2].Train.Steps != 4 {
		t.Fatalf("plan: teacher %q, steps %d + %d, from scratch %d; want the given teacher, 1 + 3 and 4",
			g.Given, plan.Runs[1].Transfer.Steps, plan.Runs[1].Train.Steps, plan.Runs[2].Train.Steps)
	}
	rs, err := e.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Step != 40 || !(rs[0].ValLoss > 0) {
		t.Errorf("teacher result %+v", rs[0])
	}
	if _, err := os.Stat(filepath.Join(o.Dir, RunsDir, teacherName)); !os.IsNotExist(err) {
		t.Errorf("a teacher was trained: %v", err)
	}
}
