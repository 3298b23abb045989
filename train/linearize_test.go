package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/optim"
)

// tinyTeacher is tinyModel with softmax attention, context 32 (four
// blocks of 8 for a student), trained a few steps so that its attention
// is not that of random weights.
func tinyTeacher(t *testing.T) *model.Model {
	t.Helper()
	mc := tinyModel()
	mc.Attention, mc.Context = attention.SoftmaxConfig{}, 32
	tc := tinyTrain()
	tc.Steps, tc.EvalEvery = 30, 0
	tt, err := startNew(t, t.TempDir(), mc, tc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runTrainer(t, tt, 0); err != nil {
		t.Fatal(err)
	}
	return tt.Model
}

// TestTransferLowersErrors: a few steps of attention transfer lower every
// layer's relative error on held-out text, for a learned student with the
// softmax teacher's pieces and for one without them, and train only the
// parameters the student adds.
func TestTransferLowersErrors(t *testing.T) {
	teacher := tinyTeacher(t)
	tr, val := tinyData(t)
	for _, spec := range []string{
		"polysketch:block=8:sketch-size=4:learned:raw-qk:scale:local-softmax:mix",
		"polysketch:block=8:sketch-size=4:learned",
	} {
		t.Run(spec, func(t *testing.T) {
			cfg, err := attention.ParseSpec(spec)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Student(teacher, cfg, false)
			if err != nil {
				t.Fatal(err)
			}
			ps := NewParams(s, teacher)
			for _, p := range ps {
				if !strings.Contains(p.Name, ".attn.") {
					t.Errorf("new parameter %s is not the attention's", p.Name)
				}
			}
			frozen := map[string][]float32{}
			for _, p := range s.Params() {
				frozen[p.Name] = append([]float32(nil), p.Value.Data...)
			}
			x := NewTransfer(teacher, s)
			held, err := data.NewSequential(val, 2, 32, 0)
			if err != nil {
				t.Fatal(err)
			}
			before, err := x.Errors(context.Background(), held)
			if err != nil {
				t.Fatal(err)
			}
			opt, err := optim.NewAdamW(ps, optim.Config{Beta1: 0.9, Beta2: 0.98, Eps: 1e-8})
			if err != nil {
				t.Fatal(err)
			}
			b, err := data.NewRandom(tr, 4, 32, 1)
			if err != nil {
				t.Fatal(err)
			}
			var batch data.Batch
			var inputs, targets []int32
			for range 40 {
				if err := b.Next(&batch); err != nil {
					t.Fatal(err)
				}
				inputs, targets = split(batch, inputs, targets)
				optim.ZeroGrad(s.Params())
				x.Loss(inputs, batch.B, batch.N, true)
				opt.Update(3e-3)
			}
			after, err := x.Errors(context.Background(), held)
			if err != nil {
				t.Fatal(err)
			}
			for i := range before {
				if !(after[i] < before[i]) {
					t.Errorf("layer %d: relative error %.4g before, %.4g after transfer", i, before[i], after[i])
				}
			}
			t.Logf("relative errors %.4g → %.4g", before, after)
			isNew := map[string]bool{}
			for _, p := range ps {
				isNew[p.Name] = true
			}
			for _, p := range s.Params() {
				changed := false
				for j, v := range p.Value.Data {
					changed = changed || v != frozen[p.Name][j]
				}
				if changed != isNew[p.Name] {
					t.Errorf("%s: changed %v, new %v", p.Name, changed, isNew[p.Name])
				}
			}
		})
	}
}

// TestStudentRefused: a teacher or a student that linearization does not
// convert is refused in one line naming it, in the library's words.
func TestStudentRefused(t *testing.T) {
	soft := tinyModel()
	soft.Attention = attention.SoftmaxConfig{}
	lin := tinyModel()
	for _, c := range []struct {
		teacher    model.Config
		spec       string
		fromLinear bool
		want       string
	}{
		{lin, "elu", false, "the teacher's attention is polysketch, not softmax or flash"},
		{soft, "flash", false, "student attention flash is not a linear mechanism with a state of constant size: use one of polysketch, elu, performer, sqpolysketch"},
		{soft, "hyper", false, "student attention hyper is not a linear mechanism"},
		{lin, "polysketch:raw-qk", true, "the teacher normalizes q and k"},
	} {
		cfg, err := attention.ParseSpec(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		_, err = StudentConfig(c.teacher, cfg, c.fromLinear)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "--") {
			t.Errorf("teacher %s, student %s: error %v, want one line with %q", c.teacher.Attention.Mechanism(), c.spec, err, c.want)
		}
	}
	// With from_linear a polysketch teacher converts.
	cfg, _ := attention.ParseSpec("polysketch:learned")
	if _, err := StudentConfig(lin, cfg, true); err != nil {
		t.Errorf("from_linear: %v", err)
	}
}

// tinyLinearize returns a linearization of teacher into spec on the tiny
// corpus: 6 steps of transfer and 6 of fine-tuning with distillation.
func tinyLinearize(t *testing.T, teacher *model.Model, spec string) *Linearize {
	t.Helper()
	cfg, err := attention.ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := StudentConfig(teacher.Config(), cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	lin := &Linearization{Teacher: "teacher", Train: TrainAll, Distill: 0.5}
	tc := tinyTrain()
	tc.Steps, tc.Warmup, tc.EvalEvery, tc.SaveEvery, tc.Linearize = 6, 1, 3, 2, lin
	ft := tc
	ft.LR, ft.MinLR = 1e-3, 1e-4
	tr, val := tinyData(t)
	return &Linearize{Teacher: teacher, Student: sc, Transfer: tc, Finetune: ft, Source: &Corpus{Train: tr, Val: val}, Mode: ResumeOrNew}
}

const tinyStudent = "polysketch:block=8:sketch-size=4:learned:raw-qk:scale:local-softmax:mix"

// TestLinearizeResume: a linearization interrupted in either stage and
// resumed ends with the weights and metrics of one that was not, bit for
// bit; another directory with the same seed gives the same student; the
// per-layer errors fall, and each stage leaves its metrics and plot.
func TestLinearizeResume(t *testing.T) {
	teacher := tinyTeacher(t)
	whole := t.TempDir()
	l := tinyLinearize(t, teacher, tinyStudent)
	res, err := l.Run(context.Background(), whole)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != "" || res.Layers == nil || len(res.Layers.After) != 2 {
		t.Fatalf("result %+v: want transfer with per-layer errors", res)
	}
	for i, b := range res.Layers.Before {
		if !(res.Layers.After[i] < b) {
			t.Errorf("layer %d: relative error %.4g before transfer, %.4g after", i, b, res.Layers.After[i])
		}
	}
	for _, f := range []string{StageFile(MetricsFile, StageTransfer), StageFile(PlotFile, StageTransfer), MetricsFile, PlotFile, LayersFile} {
		if _, err := os.Stat(filepath.Join(whole, f)); err != nil {
			t.Error(err)
		}
	}
	want := finalWeights(t, whole)

	for _, stop := range []struct {
		stage string
		step  int
	}{{StageTransfer, 3}, {StageFinetune, 3}} {
		t.Run("interrupted in "+stageName(stop.stage), func(t *testing.T) {
			dir := t.TempDir()
			l := tinyLinearize(t, teacher, tinyStudent)
			ctx, cancel := context.WithCancel(context.Background())
			l.Progress = func(stage string, p Progress) {
				if stage == stop.stage && p.Step == stop.step {
					cancel()
				}
			}
			if _, err := l.Run(ctx, dir); !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted run: %v", err)
			}
			// Resumed from what the checkpoint records.
			r, err := SavedLinearization(dir)
			if err != nil {
				t.Fatal(err)
			}
			if r.TeacherPath() != "teacher" {
				t.Errorf("teacher %q recorded, want %q", r.TeacherPath(), "teacher")
			}
			r.Teacher, r.Source, r.Mode = teacher, l.Source, Resume
			if _, err := r.Run(context.Background(), dir); err != nil {
				t.Fatal(err)
			}
			requireSameWeights(t, finalWeights(t, dir), want)
			for _, f := range []string{StageFile(MetricsFile, StageTransfer), MetricsFile} {
				a, b := readMetricsFile(t, filepath.Join(whole, f)), readMetricsFile(t, filepath.Join(dir, f))
				if len(a) != len(b) {
					t.Fatalf("%s: %d steps, uninterrupted %d", f, len(b), len(a))
				}
				for i := range a {
					if a[i].Loss != b[i].Loss {
						t.Errorf("%s step %d: loss %v, uninterrupted %v", f, a[i].Step, b[i].Loss, a[i].Loss)
					}
				}
			}
		})
	}
	t.Run("fine-tuning starts from the transfer", func(t *testing.T) {
		// At a learning rate too small to move a weight, fine-tuning
		// ends with the weights transfer ended with: its layers score
		// as transfer left them.
		dir := t.TempDir()
		l := tinyLinearize(t, teacher, tinyStudent)
		l.Finetune.LR, l.Finetune.MinLR = 1e-20, 1e-21
		res, err := l.Run(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		held, err := data.NewSequential(l.Source.(*Corpus).Val, l.Transfer.Batch, 32, l.Transfer.EvalBatches)
		if err != nil {
			t.Fatal(err)
		}
		got, err := NewTransfer(teacher, s.Model).Errors(context.Background(), held)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range res.Layers.After {
			if math.Abs(got[i]-e) > 1e-6*e {
				t.Errorf("layer %d: relative error %.6g after fine-tuning, %.6g after transfer", i, got[i], e)
			}
		}
	})
	t.Run("same seed", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := tinyLinearize(t, teacher, tinyStudent).Run(context.Background(), dir); err != nil {
			t.Fatal(err)
		}
		requireSameWeights(t, finalWeights(t, dir), want)
	})
}

func stageName(s string) string {
	if s == StageFinetune {
		return "finetune"
	}
	return s
}

// TestLinearizeSkipsTransfer: a student without parameters of its own
// goes straight to fine-tuning, from the teacher's weights, and says so.
func TestLinearizeSkipsTransfer(t *testing.T) {
	teacher := tinyTeacher(t)
	dir := t.TempDir()
	l := tinyLinearize(t, teacher, "elu:block=8")
	var logged []string
	l.Logf = func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }
	res, err := l.Run(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Skipped, "elu attention has no parameters of its own") || res.Layers != nil {
		t.Errorf("result %+v: want transfer skipped", res)
	}
	if !slices.ContainsFunc(logged, func(s string) bool {
		return strings.HasPrefix(s, "attention transfer skipped: elu attention has no parameters")
	}) {
		t.Errorf("the log does not say transfer was skipped: %q", logged)
	}
	if _, err := os.Stat(filepath.Join(dir, StageFile(MetricsFile, StageTransfer))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a transfer stage ran: %v", err)
	}
	if ms := readMetrics(t, dir); len(ms) != 12 {
		t.Errorf("%d fine-tuning steps, want 12: its own and transfer's", len(ms))
	}
}

// finalWeights returns the weights of the checkpoint in dir by name.
func finalWeights(t *testing.T, dir string) map[string][]float32 {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	w := map[string][]float32{}
	for _, p := range s.Model.Params() {
		w[p.Name] = p.Value.Data
	}
	return w
}

func requireSameWeights(t *testing.T, got, want map[string][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d parameters, want %d", len(got), len(want))
	}
	for name, w := range want {
		if !slices.Equal(got[name], w) {
			t.Errorf("%s differs", name)
		}
	}
}

func readMetricsFile(t *testing.T, path string) []Metrics {
	t.Helper()
	ms, skipped, err := ReadMetrics(path)
	if err != nil || skipped != 0 {
		t.Fatalf("metrics log: %v, %d lines skipped", err, skipped)
	}
	return ms
}
