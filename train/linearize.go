package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/internal/field"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
)

// Linearization turns a trained softmax model (the teacher) into one whose
// every layer uses a linear mechanism (the student), in two stages, after
// LoLCATs (Zhang et al., 2024):
//
//   - attention transfer: the teacher stays frozen; each layer of the
//     student reads the teacher's own projections of that layer (q, k and
//     v of the teacher's activations, not the student's) and learns to
//     reproduce the teacher's attention output, in mean squared error
//     relative to the output's own size. Only the parameters the student
//     adds train: a learned sketch's networks, a temperature and mix
//     (attention.PolysketchConfig), a q/k LayerNorm. Layers are
//     independent of one another, each fitted to the teacher's input.
//   - fine-tuning: next-token loss over every weight, or over the
//     attention's (its projections and what the student adds), optionally
//     with a distillation term toward the teacher's logits.
//
// The student starts as the teacher with another mechanism: the teacher's
// configuration and every one of its weights, and new parameters as the
// student's mechanism makes them from the teacher's seed.

// Stages of a linearization (Run.Stage). Fine-tuning's is that of an
// ordinary run, whose checkpoint, metrics log and loss curve the
// linearized model ends with.
const (
	StageTransfer = "transfer"
	StageFinetune = ""
)

// What fine-tuning trains (LinearizeConfig.Train).
const (
	TrainAll       = "all"
	TrainAttention = "attention"
)

// DefaultStudent is the student attention of a linearization unless told
// otherwise: the variant docs/linearize.md measured best.
const DefaultStudent = "polysketch:block=64:learned:raw-qk:scale:local-softmax:mix"

// LinearizeRecipes returns the recipes of the two stages of a
// linearization by default, from base (the batch, evaluations, seed and
// corpus of the run): 50 steps of attention transfer at a peak learning
// rate of 1e-2, then 150 of fine-tuning every weight at 5e-4, distilled
// from the teacher with weight 1, warm-up over a tenth of each and decay to
// a tenth of the peak: with the default batch of 8 × 256 tokens, a tenth
// of the tokens of a 2,000-step teacher.
func LinearizeRecipes(base Config) (transfer, finetune Config) {
	transfer, finetune = base, base
	transfer.Steps, transfer.LR, transfer.Warmup = 50, 1e-2, 5
	finetune.Steps, finetune.LR, finetune.Warmup = 150, 5e-4, 15
	transfer.MinLR, finetune.MinLR = transfer.LR/10, finetune.LR/10
	transfer.Linearize = nil
	finetune.Linearize = &Linearization{Train: TrainAll, Distill: 1}
	return transfer, finetune
}

// Student returns the student of teacher with attention cfg (see
// StudentConfig and InitStudent).
func Student(teacher *model.Model, cfg attention.Config, fromLinear bool) (*model.Model, error) {
	sc, err := StudentConfig(teacher.Config(), cfg, fromLinear)
	if err != nil {
		return nil, err
	}
	s, err := model.New(sc)
	if err != nil {
		return nil, fmt.Errorf("student: %w", err)
	}
	if err := InitStudent(s, teacher); err != nil {
		return nil, err
	}
	return s, nil
}

// StudentConfig returns the configuration of the student of a teacher
// configured as tc, with attention cfg: tc with cfg's mechanism. The
// teacher's attention must be softmax or flash unless fromLinear is set;
// cfg must be a linear mechanism with a recurrent state (constant memory
// per stream), of a causal model.
func StudentConfig(tc model.Config, cfg attention.Config, fromLinear bool) (model.Config, error) {
	if err := CheckStudent(tc, cfg, fromLinear); err != nil {
		return model.Config{}, err
	}
	tc.Attention = cfg
	return tc, nil
}

// InitStudent copies every weight of teacher into student, a model of
// StudentConfig; the student's other parameters keep their values.
func InitStudent(student, teacher *model.Model) error {
	have := map[string]*nn.Param{}
	for _, p := range student.Params() {
		have[p.Name] = p
	}
	for _, p := range teacher.Params() {
		q := have[p.Name]
		if q == nil || !tensor.SameShape(p.Value, q.Value) {
			return fmt.Errorf("student: the teacher's %s %v has no counterpart in a %s model", p.Name, p.Value.Shape, student.Config().Attention.Mechanism())
		}
		q.Value.CopyFrom(p.Value)
	}
	return nil
}

// CheckStudent reports why a teacher of configuration tc cannot have a
// student with attention cfg, or nil.
func CheckStudent(tc model.Config, cfg attention.Config, fromLinear bool) error {
	teach := tc.Attention.Mechanism()
	if tc.Bidirectional {
		return errors.New("the teacher is an encoder (bidirectional): linearization converts decoders")
	}
	if !fromLinear && teach != string(attention.Softmax) && teach != string(attention.Flash) {
		return field.Errorf("the teacher's attention is %s, not softmax or flash: linearization converts softmax models (%s converts another)", teach, field.Name("from_linear"))
	}
	if cfg == nil {
		return errors.New("no student attention given")
	}
	if p := attention.PropertiesOf(cfg); !p.Linear || !p.Recurrent {
		return fmt.Errorf("student attention %s is not a linear mechanism with a state of constant size: use one of %s", cfg.Mechanism(), strings.Join(Students(), ", "))
	}
	if attention.PropertiesOf(tc.Attention).NormalizeQK && !attention.PropertiesOf(cfg).NormalizeQK {
		return fmt.Errorf("the teacher normalizes q and k and a %s student would read them raw: keep its q/k LayerNorm", cfg.Mechanism())
	}
	return nil
}

// Students returns the names of the mechanisms a student may have: the
// linear ones with a recurrent state.
func Students() []string {
	var names []string
	for _, e := range attention.Entries() {
		if e.Linear && e.Recurrent {
			names = append(names, e.Name)
		}
	}
	return names
}

// NewParams returns the parameters of student that teacher does not have,
// in student's order: what attention transfer trains.
func NewParams(student, teacher *model.Model) []*nn.Param {
	old := map[string]bool{}
	for _, p := range teacher.Params() {
		old[p.Name] = true
	}
	var ps []*nn.Param
	for _, p := range student.Params() {
		if !old[p.Name] {
			ps = append(ps, p)
		}
	}
	return ps
}

// FinetuneParams returns the parameters fine-tuning trains: every one
// (TrainAll), or the attention's (TrainAttention): each layer's
// projections and whatever its mechanism and q/k LayerNorm add.
func FinetuneParams(student *model.Model, train string) ([]*nn.Param, error) {
	if train != TrainAll && train != TrainAttention {
		return nil, field.Invalid("train", train, "use %s or %s", TrainAll, TrainAttention)
	}
	var ps []*nn.Param
	for _, p := range student.Params() {
		if finetunes(train)(p) {
			ps = append(ps, p)
		}
	}
	return ps, nil
}

// finetunes says which parameters fine-tuning trains (see FinetuneParams).
func finetunes(train string) func(p *nn.Param) bool {
	return func(p *nn.Param) bool {
		return train == TrainAll || strings.Contains(p.Name, ".attn.")
	}
}

// Transfer is attention transfer's objective: each layer of the student
// reproduces the teacher's attention output from the teacher's
// projections of the same layer.
type Transfer struct {
	teacher, student *model.Model
	qkv, o           []*tensor.Tensor // per layer: the teacher's projections and attention output
	do               tensor.Tensor
	// Layer holds the last Loss's relative error of each layer.
	Layer []float64
}

// NewTransfer returns the attention-transfer objective of student and
// teacher.
func NewTransfer(teacher, student *model.Model) *Transfer {
	x := &Transfer{teacher: teacher, student: student}
	n := teacher.Config().Layers
	x.qkv, x.o, x.Layer = make([]*tensor.Tensor, n), make([]*tensor.Tensor, n), make([]float64, n)
	for i := range n {
		x.qkv[i], x.o[i] = new(tensor.Tensor), new(tensor.Tensor)
	}
	return x
}

// teach runs the teacher on tokens, keeping each layer's projections and
// attention output.
func (x *Transfer) teach(tokens []int32, B, N int) {
	x.teacher.Tap = func(i int, qkv, o *tensor.Tensor) {
		x.qkv[i].Resize(qkv.Shape...)
		x.qkv[i].CopyFrom(qkv)
		x.o[i].Resize(o.Shape...)
		x.o[i].CopyFrom(o)
	}
	defer func() { x.teacher.Tap = nil }()
	x.teacher.Forward(tokens, B, N)
}

// Loss runs the teacher on tokens ([B·N] ids) and every student layer on
// its projections, and returns the mean over layers of the relative error
// ‖o_student − o_teacher‖² / ‖o_teacher‖², each in x.Layer. With backward
// set it adds the loss's gradient to the student's attention parameters
// (of the q/k LayerNorms and the mechanisms), layer by layer.
func (x *Transfer) Loss(tokens []int32, B, N int, backward bool) float64 {
	x.teach(tokens, B, N)
	L := len(x.Layer)
	var mean float64
	for i := range L {
		o := x.student.AttentionForward(i, x.qkv[i])
		want := x.o[i]
		var num, den float64
		x.do.Resize(o.Shape...)
		for j, v := range o.Data {
			d := v - want.Data[j]
			x.do.Data[j] = d
			num += float64(d) * float64(d)
			den += float64(want.Data[j]) * float64(want.Data[j])
		}
		den = max(den, 1e-30)
		x.Layer[i] = num / den
		mean += x.Layer[i] / float64(L)
		if backward {
			s := float32(2 / (den * float64(L)))
			for j := range x.do.Data {
				x.do.Data[j] *= s
			}
			x.student.AttentionBackward(i, &x.do)
		}
	}
	return mean
}

// Errors returns each layer's relative error (as Loss) over the batches of
// b, from its start: the sum of its squared errors over the sum of the
// teacher's squared outputs.
func (x *Transfer) Errors(ctx context.Context, b *data.Batcher) ([]float64, error) {
	b.Reset()
	var batch data.Batch
	var inputs, targets []int32
	L := len(x.Layer)
	num, den := make([]float64, L), make([]float64, L)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		err := b.Next(&batch)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		inputs, targets = split(batch, inputs, targets)
		x.teach(inputs, batch.B, batch.N)
		for i := range L {
			o := x.student.AttentionForward(i, x.qkv[i])
			for j, v := range o.Data {
				w := float64(x.o[i].Data[j])
				d := float64(v) - w
				num[i] += d * d
				den[i] += w * w
			}
		}
	}
	for i := range num {
		num[i] /= max(den[i], 1e-30)
	}
	return num, nil
}

// Finetune is fine-tuning's objective: the student's next-token loss,
// with Weight·KL(teacher ‖ student) when Weight > 0.
type Finetune struct {
	teacher, student *model.Model
	Weight           float64
	logits           tensor.Tensor
	// KL holds the last Loss's KL divergence (0 without distillation).
	KL float64
}

// NewFinetune returns the fine-tuning objective of student, distilled
// from teacher with weight (0: none).
func NewFinetune(teacher, student *model.Model, weight float64) *Finetune {
	return &Finetune{teacher: teacher, student: student, Weight: weight}
}

// Loss runs the student (and with distillation the teacher) on a batch
// and adds the gradient of its loss to every parameter of the student's;
// it returns the cross-entropy.
func (f *Finetune) Loss(inputs, targets []int32, B, N int) float64 {
	if f.Weight == 0 {
		ce := f.student.Loss(inputs, targets, B, N)
		f.student.Backward()
		return ce
	}
	tl := f.teacher.Forward(inputs, B, N)
	f.logits.Resize(tl.Shape...)
	f.logits.CopyFrom(tl)
	ce, kl := f.student.Distill(inputs, targets, B, N, &f.logits, f.Weight)
	f.student.Backward()
	f.KL = kl
	return ce
}
