package experiment

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/chart"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/train"
)

// The linearize experiment: a softmax teacher, linearized into each linear
// mechanism with a tenth of its training tokens (attention transfer, then
// fine-tuning), against the same mechanism trained from scratch on as
// many tokens (package train's Linearize).

// The columns of the linearize experiment.
const (
	colTeacher  = "teacher"
	colStudent  = "linearized"
	colScratch  = "from scratch"
	teacherName = "teacher"
)

// students are the linearize experiment's rows: each linear mechanism
// with what it needs to read a softmax teacher's q and k (raw-qk for those
// that would normalize them; a temperature for polysketch; softmax local
// blocks and a mix where it has local blocks; see docs/linearize.md).
var students = []struct{ row, spec string }{
	{"polysketch learned + local", train.DefaultStudent},
	{"polysketch learned", "polysketch:block=64:learned:raw-qk:scale:local=false"},
	{"polysketch random + local", "polysketch:block=64:learned=false:raw-qk:scale:local-softmax:mix"},
	{"polysketch random", "polysketch:block=64:learned=false:raw-qk:scale:local=false"},
	{"Performer", "performer:block=64"},
	{"ELU+1", "elu:block=64"},
	{"sqpolysketch", "sqpolysketch:block=64"},
}

// linearizeGrid is the linearize experiment's plan: the teacher (the
// default model with softmax attention, 2,000 steps of 8 × 256 tokens),
// then for each student its linearization (50 steps of attention
// transfer, 150 of fine-tuning of every weight: a tenth of the teacher's
// tokens) and the same model trained from scratch for 200 steps.
func linearizeGrid(o Options) []Run {
	quick, seed := o.Quick, o.Seed
	teacher := model.DefaultConfig()
	teacher.Attention, teacher.Seed = attention.SoftmaxConfig{}, seed
	var given *train.Saved
	if o.Teacher != "" {
		var err error
		if given, err = train.Open(o.Teacher); err != nil {
			return []Run{{Name: teacherName, err: fmt.Errorf("teacher: %w", err)}}
		}
		teacher = given.Model.Config()
	}
	steps, transfer, finetune := 2000, 50, 150
	rows := students
	if quick {
		teacher.Dim, teacher.Layers, teacher.Heads, teacher.Context = 16, 1, 2, 32
		steps, transfer, finetune = 20, 2, 2
		rows = []struct{ row, spec string }{
			{students[0].row, "polysketch:block=8:sketch-size=4:learned:raw-qk:scale:local-softmax:mix"},
			{students[5].row, "elu:block=8"},
		}
	}
	var runs []Run
	tc := recipe(steps, 8, 2e-3, seed)
	t := Run{Name: teacherName, Mechanism: teacher.Attention.Mechanism(), Row: teacher.Attention.Mechanism() + " (teacher)", Column: colTeacher, Model: teacher, Train: tc}
	if given != nil {
		if rc, ok := given.Recipe(); ok {
			tc.Batch, tc.EvalBatches = rc.Batch, rc.EvalBatches
		}
		// The teacher is given: a run with nothing to train, its steps
		// those it was trained, for the students' tenth.
		t.Train, t.Given = tc, given.Dir
		steps = given.State.Step
		transfer, finetune = max(1, steps/40), max(1, steps*3/40)
	}
	runs = append(runs, t)
	for _, s := range rows {
		sc := teacher
		err := applyMechanism(&sc, s.spec)
		// linearize's recipes, at the experiment's steps and validations.
		tr, ft := train.LinearizeRecipes(tc)
		tr.Steps, tr.Warmup, tr.EvalEvery, tr.SaveEvery = transfer, transfer/10, max(1, transfer/10), max(1, transfer/10)
		ft.Steps, ft.Warmup, ft.EvalEvery, ft.SaveEvery = finetune, finetune/10, max(1, finetune/10), max(1, finetune/10)
		ft.Linearize.Teacher = teacherName
		name := unsafeName.ReplaceAllString(strings.ReplaceAll(strings.ReplaceAll(s.row, " + ", " "), " ", "-"), "")
		runs = append(runs, Run{Name: name + "-linearized", Mechanism: s.spec, Row: s.row, Column: colStudent,
			Model: sc, Train: ft, Transfer: &tr, Teacher: teacherName, err: err})
		scratch := recipe(transfer+finetune, tc.Batch, tc.LR, seed)
		runs = append(runs, Run{Name: name + "-scratch", Mechanism: s.spec, Row: s.row, Column: colScratch,
			Model: sc, Train: scratch, err: err})
	}
	return runs
}

// teacherDir returns the directory of the linearize experiment's teacher:
// Options.Teacher, or its teacher run's.
func (o Options) teacherDir() string {
	if o.Teacher != "" {
		return o.Teacher
	}
	return filepath.Join(o.Dir, RunsDir, teacherName)
}

// runLinearized runs (or resumes) the linearization r of its teacher.
func runLinearized(ctx context.Context, o Options, r Run, source *train.Corpus, logf func(string, ...any)) error {
	dir := filepath.Join(o.Dir, RunsDir, r.Name)
	teacherDir := o.teacherDir()
	s, err := train.Open(teacherDir)
	if err != nil {
		return fmt.Errorf("teacher: %w", err)
	}
	abs, err := filepath.Abs(teacherDir)
	if err != nil {
		return err
	}
	ft, tr := r.Train, *r.Transfer
	lin := *ft.Linearize
	lin.Teacher = abs
	ft.Linearize = &lin
	l := &train.Linearize{Teacher: s.Model, Student: r.Model, Transfer: tr, Finetune: ft, Source: source, Mode: train.ResumeOrNew, Logf: logf}
	if o.Progress != nil {
		l.Progress = func(_ string, p train.Progress) { o.Progress(r.Name, p) }
	}
	res, err := l.Run(ctx, dir)
	if err != nil {
		return err
	}
	if res.Skipped != "" {
		logf("%s: attention transfer skipped: %s", r.Name, res.Skipped)
	}
	return nil
}

// converted returns the validation loss of the student of r straight
// from its teacher, without training: what "after transfer" is for a
// student with nothing to transfer.
func converted(ctx context.Context, o Options, r Run, source *train.Corpus) (float64, error) {
	s, err := train.Open(o.teacherDir())
	if err != nil {
		return 0, err
	}
	m, err := train.Student(s.Model, r.Model.Attention, false)
	if err != nil {
		return 0, err
	}
	e, err := train.Evaluate(ctx, m, source.Val, r.Train.Batch, r.Train.EvalBatches)
	return e.Loss, err
}

// linearizedResult adds to res, of linearization r, what attention
// transfer gave: the validation loss after it and the per-layer errors,
// or the converted student's loss when transfer had nothing to train.
func linearizedResult(ctx context.Context, o Options, r Run, res *Result, source *train.Corpus) error {
	dir := filepath.Join(o.Dir, RunsDir, r.Name)
	ms, _, err := train.ReadMetrics(filepath.Join(dir, train.StageFile(train.MetricsFile, train.StageTransfer)))
	switch {
	case errors.Is(err, nil):
		for _, m := range slices.Backward(ms) {
			if m.ValLoss != nil {
				v := *m.ValLoss
				res.TransferLoss = &v
				break
			}
		}
		for _, m := range ms {
			if m.ValLoss != nil {
				res.transfer = append(res.transfer, m)
			}
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	default:
		v, err := converted(ctx, o, r, source)
		if err != nil {
			return err
		}
		res.TransferLoss, res.Skipped = &v, true
	}
	layers, err := train.ReadLayers(dir)
	if err != nil {
		return err
	}
	if layers != nil {
		res.LayersBefore, res.LayersAfter = layers.Before, layers.After
	}
	return nil
}

// linearizeTable is the linearize experiment's table: a row per student,
// its validation loss after attention transfer alone, after fine-tuning,
// and from scratch on as many tokens, and its layers' mean relative error
// before and after transfer; the teacher's above them.
func linearizeTable(plan Plan, rs []Result) string {
	var b strings.Builder
	teacherSteps, studentSteps := 0, 0
	for _, r := range plan.Runs {
		switch {
		case r.Column == colTeacher:
			teacherSteps = r.Train.Steps
		case r.Transfer != nil && studentSteps == 0:
			studentSteps = r.Transfer.Steps + r.Train.Steps
		}
	}
	quick := ""
	if plan.Quick {
		quick = " --quick"
	}
	fmt.Fprintf(&b, "linearize: validation loss (nats per %s) of students of a softmax teacher trained %d steps, each given %d steps of its tokens (attention transfer, then fine-tuning), against the same model from scratch on as many (`polysketch experiment linearize%s --seed %d`)\n\n",
		strings.TrimSuffix(tokens(plan), "s"), teacherSteps, studentSteps, quick, plan.Seed)
	b.WriteString("| mechanism | after transfer | after fine-tuning | from scratch | layer error before → after transfer |\n|---|---|---|---|---|\n")
	var rows []string
	cells := map[string]*[4]string{}
	for _, r := range rs {
		c := cells[r.Row]
		if c == nil {
			c = &[4]string{"–", "–", "–", "–"}
			cells[r.Row] = c
			rows = append(rows, r.Row)
		}
		switch r.Column {
		case colTeacher:
			c[1] = fmt.Sprintf("%.3f", r.ValLoss)
		case colStudent:
			if r.TransferLoss != nil {
				c[0] = fmt.Sprintf("%.3f", *r.TransferLoss)
				if r.Skipped {
					c[0] += "*"
				}
			}
			c[1] = fmt.Sprintf("%.3f", r.ValLoss)
			if len(r.LayersAfter) > 0 {
				c[3] = fmt.Sprintf("%.3f → %.3f", mean(r.LayersBefore), mean(r.LayersAfter))
			}
		case colScratch:
			c[2] = fmt.Sprintf("%.3f", r.ValLoss)
		}
	}
	for _, row := range rows {
		c := cells[row]
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", row, c[0], c[1], c[2], c[3])
	}
	b.WriteString("\n\\* nothing to transfer (no parameters of its own): the teacher's weights with the mechanism swapped, untrained.\n")
	return b.String()
}

func mean(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v
	}
	return s / float64(max(len(x), 1))
}

// linearizeCharts plots each student's validation loss against its steps
// (attention transfer, then fine-tuning, one axis) beside the same
// mechanism from scratch and the teacher's final loss.
func linearizeCharts(plan Plan, rs []Result) []namedChart {
	label := "validation loss (nats per " + strings.TrimSuffix(tokens(plan), "s") + ")"
	students := namedChart{file: "linearized.png", Chart: chart.Chart{
		Title: "students: attention transfer, then fine-tuning", X: chart.Axis{Label: "step"}, Y: chart.Axis{Label: label}}}
	scratch := namedChart{file: "scratch.png", Chart: chart.Chart{
		Title: "the same models from scratch", X: chart.Axis{Label: "step"}, Y: chart.Axis{Label: label}}}
	var teacher *Result
	last := 0.0
	for i, r := range rs {
		s := chart.Series{Name: r.Row}
		switch r.Column {
		case colTeacher:
			teacher = &rs[i]
			continue
		case colStudent:
			off := 0.0
			for _, m := range r.transfer {
				s.X, s.Y = append(s.X, float64(m.Step)), append(s.Y, *m.ValLoss)
				off = float64(m.Step)
			}
			for _, m := range r.history {
				if m.ValLoss != nil {
					s.X, s.Y = append(s.X, off+float64(m.Step)), append(s.Y, *m.ValLoss)
				}
			}
			students.Series = append(students.Series, s)
		case colScratch:
			for _, m := range r.history {
				if m.ValLoss != nil {
					s.X, s.Y = append(s.X, float64(m.Step)), append(s.Y, *m.ValLoss)
				}
			}
			scratch.Series = append(scratch.Series, s)
		}
		if n := len(s.X); n > 0 {
			last = max(last, s.X[n-1])
		}
	}
	if teacher != nil {
		line := chart.Series{Name: "softmax teacher", X: []float64{0, last}, Y: []float64{teacher.ValLoss, teacher.ValLoss}}
		students.Series = append(students.Series, line)
		scratch.Series = append(scratch.Series, line)
	}
	return []namedChart{students, scratch}
}

// givenResult is the result of the teacher given to the experiment: its
// loss on the validation batches its students are scored on.
func givenResult(ctx context.Context, o Options, r Run, source *train.Corpus) (Result, error) {
	s, err := train.Open(r.Given)
	if err != nil {
		return Result{}, err
	}
	e, err := train.Evaluate(ctx, s.Model, source.Val, r.Train.Batch, r.Train.EvalBatches)
	if err != nil {
		return Result{}, err
	}
	return Result{Run: r.Name, Mechanism: r.Mechanism, Row: r.Row, Column: r.Column, Step: s.State.Step,
		ValLoss: e.Loss, ValPPL: e.Perplexity()}, nil
}
