package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/internal/atomicfile"
	"github.com/polysketch/polysketch/internal/field"
	"github.com/polysketch/polysketch/internal/regular"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
)

// Linearization is what a linearization's recipes record beyond training
// (Config.Linearize), so that a resumed run continues the same
// conversion: the teacher, and what fine-tuning trains toward what.
type Linearization struct {
	Teacher    string  `json:"teacher"`               // the teacher's checkpoint directory
	FromLinear bool    `json:"from_linear,omitempty"` // the teacher's attention need not be softmax (see StudentConfig)
	Train      string  `json:"train"`                 // what fine-tuning trains: TrainAll or TrainAttention
	Distill    float64 `json:"distill"`               // weight of KL(teacher ‖ student) in fine-tuning's loss; 0: none
	// Finetune is the fine-tuning stage's recipe, in the transfer
	// stage's (Run records it there), so that a run resumed in transfer
	// goes on to the same fine-tuning; nil in fine-tuning's own.
	Finetune *Config `json:"finetune,omitempty"`
}

// Validate reports what is wrong with l, one line each.
func (l Linearization) Validate() error {
	var errs []error
	if l.Teacher == "" {
		errs = append(errs, errors.New("no teacher"))
	}
	if l.Train != TrainAll && l.Train != TrainAttention {
		errs = append(errs, field.Invalid("train", l.Train, "use %s or %s", TrainAll, TrainAttention))
	}
	if !(l.Distill >= 0) {
		errs = append(errs, field.Invalid("distill", l.Distill, "must be 0 (none) or positive"))
	}
	return errors.Join(errs...)
}

// LayersFile holds a linearization's per-layer errors (Layers), in the
// run's directory.
const LayersFile = "transfer-layers.json"

// Layers are each student layer's relative error against its teacher
// (Transfer.Errors) on held-out batches, before and after attention
// transfer.
type Layers struct {
	Batches int       `json:"batches"` // held-out batches measured
	Before  []float64 `json:"before"`
	After   []float64 `json:"after,omitempty"`
}

// Linearize is a linearization to run, or resume, in a directory: two
// ordinary runs of Start, one a stage (StageTransfer, then StageFinetune),
// in one directory whose checkpoint is the student's. A stage of a run
// interrupted resumes in that stage; the final checkpoint is an ordinary
// one of the student.
type Linearize struct {
	Teacher *model.Model // frozen
	Student model.Config // StudentConfig of the teacher's
	// Transfer and Finetune are the two stages' recipes; Finetune's
	// Linearize says what the linearization is (Run records it in
	// Transfer's too). Transfer.Steps 0 skips attention transfer, as does
	// a student without parameters of its own, whose fine-tuning then
	// takes transfer's steps too.
	Transfer, Finetune Config
	// Source is the data of both stages, a *Corpus (nil: each recipe's
	// corpus, read with Data's options); its validation data also scores
	// the layers (Layers), at most Transfer.EvalBatches batches of it.
	Source Source
	Data   data.Options
	// Mode says what to do with a directory that holds a run, or none,
	// as Start's: New refuses one, Resume needs one (of either stage),
	// Replace starts over, ResumeOrNew continues one if there is one.
	Mode Mode

	// Logf and Progress are given to each stage's trainer.
	Logf     func(format string, args ...any)
	Progress func(stage string, p Progress)
}

// LinearizeResult is where a linearization stands after Run.
type LinearizeResult struct {
	// Skipped says why attention transfer did not run, if it did not.
	Skipped  string
	Transfer Result // of the transfer stage's last session (zero if none ran now)
	Finetune Result
	Layers   *Layers // the per-layer errors, if transfer ran (now or before)
}

// Run runs whatever of the linearization is left in dir: attention
// transfer, then fine-tuning. If ctx is cancelled, the stage under way
// saves a checkpoint and Run returns ctx's error: running it again with
// Mode Resume (or ResumeOrNew) continues it.
func (l *Linearize) Run(ctx context.Context, dir string) (LinearizeResult, error) {
	var res LinearizeResult
	lin := l.Finetune.Linearize
	if lin == nil || lin.Finetune != nil {
		return res, errors.New("linearize: fine-tuning's recipe records no linearization, or another fine-tuning")
	}
	if err := lin.Validate(); err != nil {
		return res, err
	}
	stage, saved, err := savedStage(dir, l.Mode)
	if err != nil {
		return res, err
	}
	finetuning := saved && stage == StageFinetune
	if !finetuning {
		// The transfer stage records where it goes on to.
		tl, ft := *lin, l.Finetune
		tl.Finetune = &ft
		l.Transfer.Linearize = &tl
		student, err := model.New(l.Student)
		if err != nil {
			return res, err
		}
		switch {
		case len(NewParams(student, l.Teacher)) == 0:
			res.Skipped = fmt.Sprintf("%s attention has no parameters of its own to transfer", l.Student.Attention.Mechanism())
			// Fine-tuning takes transfer's steps too: the student sees as
			// many tokens as one with a transfer would.
			l.Finetune.Steps += l.Transfer.Steps
		case l.Transfer.Steps == 0:
			res.Skipped = "no steps of attention transfer"
		}
	}
	mode := l.Mode
	switch {
	case finetuning:
	case res.Skipped != "":
		l.logf("attention transfer skipped: %s; fine-tuning starts from the teacher's weights, for %d steps", res.Skipped, l.Finetune.Steps)
	default:
		if res.Transfer, err = l.transfer(ctx, dir, mode, &res); err != nil {
			return res, err
		}
		mode = ResumeOrNew // the transfer stage's checkpoint is where fine-tuning starts
	}
	if res.Layers == nil {
		if res.Layers, err = ReadLayers(dir); err != nil {
			return res, err
		}
	}
	res.Finetune, err = l.finetune(ctx, dir, mode, res.Skipped != "")
	return res, err
}

// SavedLinearization returns the linearization of the run in dir as its
// checkpoint records it, to resume (Teacher is to be opened from
// Transfer.Linearize.Teacher; Source and Mode to be set): the student's
// configuration, and the recipes of the stages still to run (Transfer
// zero when the checkpoint is fine-tuning's).
func SavedLinearization(dir string) (*Linearize, error) {
	s, tc, err := OpenRun(dir)
	if err != nil {
		return nil, err
	}
	lin := tc.Linearize
	if lin == nil {
		return nil, fmt.Errorf("the run in %s is no linearization", dir)
	}
	l := &Linearize{Student: s.Model.Config()}
	switch {
	case s.State.Stage == StageTransfer && lin.Finetune != nil:
		l.Transfer, l.Finetune = tc, *lin.Finetune
	case s.State.Stage == StageFinetune:
		l.Finetune = tc
	default:
		return nil, fmt.Errorf("the run in %s is at stage %q of a linearization whose next stage it does not record", dir, s.State.Stage)
	}
	return l, nil
}

// TeacherPath returns the teacher's checkpoint directory that l's
// recipes record.
func (l *Linearize) TeacherPath() string { return l.Finetune.Linearize.Teacher }

// savedStage returns the stage of the checkpoint in dir, and whether
// there is one that mode does not replace.
func savedStage(dir string, mode Mode) (string, bool, error) {
	if mode == Replace || !checkpoint.Exists(filepath.Join(dir, CheckpointDir)) {
		return "", false, nil
	}
	c, err := checkpoint.Load(filepath.Join(dir, CheckpointDir))
	if err != nil {
		return "", false, err
	}
	return c.State.Stage, true, nil
}

// teacherNames returns the names of the teacher's parameters: a
// student's others are what attention transfer trains.
func (l *Linearize) teacherNames() map[string]bool {
	names := map[string]bool{}
	for _, p := range l.Teacher.Params() {
		names[p.Name] = true
	}
	return names
}

// transfer runs (or resumes) the attention-transfer stage, with the
// per-layer errors on held-out data before its first step and after its
// last.
func (l *Linearize) transfer(ctx context.Context, dir string, mode Mode, res *LinearizeResult) (Result, error) {
	old := l.teacherNames()
	var x *Transfer
	t, err := Start(ctx, dir, Run{
		Model: l.Student, Recipe: l.Transfer, Source: l.Source, Data: l.Data, Mode: mode,
		Stage: StageTransfer,
		Init: func(m *model.Model, _ *checkpoint.Checkpoint) error {
			return InitStudent(m, l.Teacher)
		},
		Trainable: func(p *nn.Param) bool { return !old[p.Name] },
		Objective: func(m *model.Model, b Batch) float64 {
			if x == nil || x.student != m {
				x = NewTransfer(l.Teacher, m)
			}
			return x.Loss(b.Inputs, b.B, b.N, true)
		},
	})
	if errors.Is(err, ErrComplete) {
		res.Layers, err = ReadLayers(dir)
		return Result{}, err
	}
	if err != nil {
		return Result{}, err
	}
	defer t.Close()
	l.attach(t, StageTransfer)
	held, err := l.heldOut(t)
	if err != nil {
		return Result{}, err
	}
	xs := NewTransfer(l.Teacher, t.Model)
	layers, _ := ReadLayers(dir)
	if !t.Resumed || layers == nil {
		before, err := xs.Errors(ctx, held)
		if err != nil {
			return Result{}, err
		}
		layers = &Layers{Batches: held.Batches(), Before: before}
		if err := writeLayers(dir, layers); err != nil {
			return Result{}, err
		}
		l.logf("per-layer relative error before attention transfer, on %d held-out batches: %s", held.Batches(), fmtErrors(before))
	}
	r, err := t.Run(ctx)
	if err != nil {
		return r, err
	}
	if layers.After, err = xs.Errors(ctx, held); err != nil {
		return r, err
	}
	if err := writeLayers(dir, layers); err != nil {
		return r, err
	}
	l.logf("per-layer relative error after attention transfer: %s (before: %s)", fmtErrors(layers.After), fmtErrors(layers.Before))
	res.Layers = layers
	return r, nil
}

// finetune runs (or resumes) the fine-tuning stage, from the transfer
// stage's checkpoint, or from the teacher's weights when transfer was
// skipped.
func (l *Linearize) finetune(ctx context.Context, dir string, mode Mode, fromTeacher bool) (Result, error) {
	lin := l.Finetune.Linearize
	var ft *Finetune
	t, err := Start(ctx, dir, Run{
		Model: l.Student, Recipe: l.Finetune, Source: l.Source, Data: l.Data, Mode: mode,
		Stage: StageFinetune,
		Init: func(m *model.Model, prev *checkpoint.Checkpoint) error {
			if prev == nil || fromTeacher {
				return InitStudent(m, l.Teacher)
			}
			return copyWeights(m, prev.Model)
		},
		Trainable: finetunes(lin.Train),
		Objective: func(m *model.Model, b Batch) float64 {
			if ft == nil || ft.student != m {
				ft = NewFinetune(l.Teacher, m, lin.Distill)
			}
			return ft.Loss(b.Inputs, b.Targets, b.B, b.N)
		},
	})
	if errors.Is(err, ErrComplete) {
		return Result{}, nil
	}
	if err != nil {
		return Result{}, err
	}
	defer t.Close()
	l.attach(t, StageFinetune)
	return t.Run(ctx)
}

// copyWeights copies every parameter of from into m, by name.
func copyWeights(m, from *model.Model) error {
	have := map[string]*nn.Param{}
	for _, p := range from.Params() {
		have[p.Name] = p
	}
	for _, p := range m.Params() {
		q := have[p.Name]
		if q == nil {
			return fmt.Errorf("the previous stage's checkpoint has no %s", p.Name)
		}
		p.Value.CopyFrom(q.Value)
	}
	return nil
}

// attach gives t the linearization's callbacks.
func (l *Linearize) attach(t *Trainer, stage string) {
	t.Logf = l.Logf
	if l.Progress != nil {
		t.Progress = func(p Progress) { l.Progress(stage, p) }
	}
}

// heldOut returns the validation batches that score the layers.
func (l *Linearize) heldOut(t *Trainer) (*data.Batcher, error) {
	c, ok := t.Source.(*Corpus)
	if !ok {
		return nil, errors.New("linearize: the data must be a corpus")
	}
	return data.NewSequential(c.Val, l.Transfer.Batch, min(l.Student.Context, int(c.Val.Len()-1)), l.Transfer.EvalBatches)
}

func (l *Linearize) logf(format string, args ...any) {
	if l.Logf != nil {
		l.Logf(format, args...)
	}
}

// fmtErrors formats per-layer errors for the log.
func fmtErrors(x []float64) string {
	s := ""
	for i, v := range x {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%.4f", v)
	}
	return s
}

// ReadLayers reads the per-layer errors of the linearization in dir; nil
// if there are none.
func ReadLayers(dir string) (*Layers, error) {
	b, err := regular.ReadFile(filepath.Join(dir, LayersFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var l Layers
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("%s: %w", LayersFile, err)
	}
	return &l, nil
}

func writeLayers(dir string, l *Layers) error {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, LayersFile), func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}
