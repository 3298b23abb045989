package train

import (
	"errors"

	"github.com/polysketch/polysketch/data/task"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/internal/field"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/optim"
)

// Config is the training recipe: everything about a run but the model's
// shape (model.Config) and the tokens themselves. Checkpoints store it
// beside the model's configuration.
type Config struct {
	// Corpus lists the files, directories and globs trained on (see
	// data.NewCorpus); empty means the Go source tree (data.GoSource).
	// Start loads it when given no Source; either way the recipe records
	// where the tokens came from, so that a resumed run can load them
	// again.
	Corpus []string `json:"corpus"`
	// TextField is the field of the corpus's JSON lines, and the column of
	// its Parquet files, that holds the text; "" means data.DefaultTextField.
	TextField string `json:"text_field,omitempty"`
	// Task, if not nil, is the task trained on instead of a corpus (see
	// Task, the Source); Corpus is then unused.
	Task *task.Spec `json:"task,omitempty"`
	// Tokenizer names the tokenizer of the tokens (tokenizer.Lookup).
	Tokenizer string `json:"tokenizer"`

	Batch int `json:"batch"` // sequences of model.Config.Context tokens per micro-batch
	Accum int `json:"accum"` // micro-batches per optimizer step, whose gradients are averaged
	Steps int `json:"steps"` // optimizer steps of the whole run

	LR          float64 `json:"lr"`           // peak learning rate, reached after Warmup steps
	MinLR       float64 `json:"min_lr"`       // learning rate at step Steps, decayed to as Schedule says
	Warmup      int     `json:"warmup"`       // steps of linear warm-up
	WeightDecay float64 `json:"weight_decay"` // AdamW's decoupled weight decay λ
	Beta1       float64 `json:"beta1"`        // AdamW's first-moment decay
	Beta2       float64 `json:"beta2"`        // AdamW's second-moment decay
	Eps         float64 `json:"eps"`          // AdamW's ε
	Clip        float64 `json:"clip"`         // largest global gradient norm; 0 turns clipping off

	// Schedule is the shape of the decay from LR to MinLR after the
	// warm-up: ScheduleLinear ("" too, as in checkpoints made before there
	// was a choice) or ScheduleCosine.
	Schedule string `json:"schedule,omitempty"`

	EvalEvery   int `json:"eval_every"`   // steps between validations; 0: only at the end
	EvalBatches int `json:"eval_batches"` // validation batches of Batch sequences; 0: the whole validation split
	SaveEvery   int `json:"save_every"`   // steps between checkpoints; 0: only at the end (and on interruption)

	Seed uint64 `json:"seed"` // order of the training batches

	// Precision is the number format of the model's dense products:
	// nn.FP32, or nn.BF16 for mixed precision (bf16 products, float32
	// master weights and optimizer state; see model.Model.SetPrecision).
	// A run may resume with the other precision.
	Precision nn.Precision `json:"precision,omitempty"`

	// Linearize, if not nil, says the run is a stage of a linearization
	// (see Linearize): the teacher and what fine-tuning trains.
	Linearize *Linearization `json:"linearize,omitempty"`
}

// DefaultConfig returns settings that train model.DefaultConfig on a
// 2-core CPU in minutes: 8 sequences a step, 1000 steps, learning rate
// 2e-3 warmed up over 100 steps and decayed to 2e-4, AdamW with the
// paper's β1 = 0.95 and β2 = 0.98 and weight decay 0.1, gradients clipped
// at norm 1, a validation and a checkpoint every 100 steps. The peak rate
// was measured: over 1000 default steps on the Go corpus, 2e-3 against
// 1e-3 lowered the validation loss of softmax from 1.591 to 1.572 and of
// polysketch (learned + local) from 1.647 to 1.575.
func DefaultConfig() Config {
	o := optim.DefaultConfig()
	return Config{
		Tokenizer: tokenizer.Default,
		Batch:     8, Accum: 1, Steps: 1000,
		LR: 2e-3, MinLR: 2e-4, Warmup: 100,
		WeightDecay: o.WeightDecay, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps,
		Clip:      1,
		EvalEvery: 100, EvalBatches: 20, SaveEvery: 100,
		Seed: 1,
	}
}

// Derive sets the fields of c that follow from others unless chosen (by
// their JSON names) says the user set them: min_lr, a tenth of the peak
// rate, and warmup, at most a tenth of the steps, so that a short run
// still spends most of its steps at a useful rate.
func (c *Config) Derive(chosen func(field string) bool) {
	if !chosen("min_lr") {
		c.MinLR = c.LR / 10
	}
	if !chosen("warmup") {
		c.Warmup = min(c.Warmup, c.Steps/10)
	}
}

// The learning-rate schedules of Config.Schedule (see optim.Schedule).
const (
	ScheduleLinear = "linear"
	ScheduleCosine = "cosine"
)

// optimizer returns the AdamW settings of c.
func (c Config) optimizer() optim.Config {
	return optim.Config{Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay}
}

// schedule returns the learning-rate schedule of c.
func (c Config) schedule() optim.Schedule {
	return optim.Schedule{Peak: c.LR, Min: c.MinLR, Warmup: c.Warmup, Total: c.Steps, Cosine: c.Schedule == ScheduleCosine}
}

// Validate reports every problem of the configuration, one line each.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, field.Errorf(format, args...)) }
	if _, err := tokenizer.Lookup(c.Tokenizer); err != nil {
		errs = append(errs, err)
	}
	if c.Task != nil {
		if err := c.Task.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Linearize != nil {
		if err := c.Linearize.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Batch < 1 {
		add("%s %d: must be positive", field.Name("batch"), c.Batch)
	}
	if c.Accum < 1 {
		add("%s %d: must be positive", field.Name("accum"), c.Accum)
	}
	if c.Steps < 1 {
		add("%s %d: must be positive", field.Name("steps"), c.Steps)
	}
	if c.Warmup > c.Steps {
		add("%s %d: more than the %d steps of the run", field.Name("warmup"), c.Warmup, c.Steps)
	} else if err := c.schedule().Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Schedule != "" && c.Schedule != ScheduleLinear && c.Schedule != ScheduleCosine {
		add("%s %q: use %s or %s", field.Name("schedule"), c.Schedule, ScheduleLinear, ScheduleCosine)
	}
	if err := c.optimizer().Validate(); err != nil {
		errs = append(errs, err)
	}
	if !(c.Clip >= 0) {
		add("%s %v: must be 0 (off) or positive", field.Name("clip"), c.Clip)
	}
	if _, err := c.Precision.MarshalText(); err != nil {
		errs = append(errs, err)
	}
	if c.EvalEvery < 0 || c.EvalBatches < 0 || c.SaveEvery < 0 {
		add("%s %d, %s %d, %s %d: must not be negative", field.Name("eval_every"), c.EvalEvery, field.Name("eval_batches"), c.EvalBatches, field.Name("save_every"), c.SaveEvery)
	}
	return errors.Join(errs...)
}
