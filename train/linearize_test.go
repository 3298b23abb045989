package train

import (
	"context"
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
	tr, val := tinyData(t)
	tt, err := New(t.TempDir(), mc, tc, tr, val)
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
