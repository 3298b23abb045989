package train

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/data/task"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/internal/filelock"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/optim"
	"github.com/polysketch/polysketch/tensor"
)

// Run is what Start starts, or resumes, in a run directory.
type Run struct {
	// Model and Recipe configure a new run. A Model.Vocab of 0 takes the
	// vocabulary of the Source (the tokenizer's, or the task's).
	//
	// A resumed run keeps its checkpoint's configuration: it is given
	// Model and Recipe, or, if Configure is set, the checkpoint's
	// configuration with Configure applied, and Start refuses the
	// resumption if that differs from the checkpoint's in any field but
	// those Resumable names (see Saved.Changes).
	Model  model.Config
	Recipe Config
	// Configure, if not nil, applies the caller's choices to the
	// configuration of a resumed run, which it is given as its
	// checkpoint has it: the choices of a command line, say, over what
	// the run was started with.
	Configure func(mc *model.Config, tc *Config) error

	// Mode says what to do with a directory that holds a run, or none.
	Mode Mode

	// Source is the data the run trains and validates on. If nil, Start
	// opens the recipe's own: its Task, or else its Corpus (and TextField)
	// read with the recipe's Tokenizer, with Data's options.
	Source Source
	Data   data.Options

	// Comm, if not nil, makes the run data-parallel over its ranks: every
	// rank calls Start with the same Run (but Comm), and they agree on
	// what they are about to train before any of them trains (see
	// DistOptions for how the work is shared). Rank 0 alone takes the
	// lock and writes the run's files.
	Comm Comm
	Dist DistOptions

	// The fields below let a run be one stage of a procedure of several
	// in one directory (linearization: attention transfer, then
	// fine-tuning), each stage an ordinary run with checkpoints, resume,
	// metrics and plots.

	// Stage names the run's stage; "" for a run of one stage. A
	// checkpoint records its stage: a run resumes only a checkpoint of
	// its own stage, and with Mode ResumeOrNew, a checkpoint of another
	// stage is the previous stage's, which a new run of this one starts
	// from (see Init). A stage other than "" keeps its metrics log and
	// loss curves in files of its own (StageFile).
	Stage string
	// Init, if not nil, prepares the model of a new run, made from Model:
	// it may load weights into it, from prev, the previous stage's
	// checkpoint in the directory (nil if none), or from elsewhere.
	Init func(m *model.Model, prev *checkpoint.Checkpoint) error
	// Trainable, if not nil, chooses the parameters the optimizer trains;
	// the others stay as they are, and only the chosen ones have
	// optimizer state in the checkpoints. Nil trains them all.
	Trainable func(p *nn.Param) bool
	// Objective, if not nil, replaces the next-token cross-entropy as the
	// loss a step minimizes (see Objective). Validation is the Source's
	// next-token loss either way.
	Objective Objective
	// Files are model files the run's checkpoints keep
	// (checkpoint.Checkpoint.Files): a fine-tuned imported model's
	// tokenizer_config.json and generation_config.json. A resumed run
	// keeps its checkpoint's.
	Files map[string][]byte
}

// Weights returns a Run.Init that starts a new run from the weights of
// from, a model of the run's configuration (an imported model, to
// fine-tune it; another run's): every parameter is copied by its name.
func Weights(from *model.Model) func(m *model.Model, prev *checkpoint.Checkpoint) error {
	return func(m *model.Model, _ *checkpoint.Checkpoint) error {
		src := map[string]*nn.Param{}
		for _, p := range from.Params() {
			src[p.Name] = p
		}
		for _, p := range m.Params() {
			q, ok := src[p.Name]
			if !ok || !tensor.SameShape(p.Value, q.Value) {
				return fmt.Errorf("the weights to start from have no parameter %s of shape %v", p.Name, p.Value.Shape)
			}
			p.Value.CopyFrom(q.Value)
		}
		return nil
	}
}

// Objective computes the loss of model m on batch b, and its gradient
// into the Grad of m's trainable parameters: Start's Run.Objective. The
// trainer zeroes every parameter's gradient before each micro-batch, and
// averages the losses and gradients of a step's micro-batches, clips the
// gradient and updates the trainable parameters with AdamW as for the
// default, which is
//
//	func(m *model.Model, b train.Batch) float64 {
//		loss := m.Loss(b.Inputs, b.Targets, b.B, b.N)
//		m.Backward()
//		return loss
//	}
//
// For runs to resume exactly, it must be a deterministic function of m's
// weights and b. A data-parallel run with an Objective sends gradients
// once a micro-batch is done (DistOptions.NoOverlap).
type Objective func(m *model.Model, b Batch) float64

// nextToken is the default Objective.
func nextToken(m *model.Model, b Batch) float64 {
	loss := m.Loss(b.Inputs, b.Targets, b.B, b.N)
	m.Backward()
	return loss
}

// Mode says what Start does with the run directory: whether it must hold
// a run, and whether to resume it.
type Mode int

const (
	// New starts a new run, and refuses a directory that holds one.
	New Mode = iota
	// Resume continues the run in the directory from its checkpoint, and
	// refuses a directory that holds none.
	Resume
	// Replace starts a new run, replacing any the directory holds.
	Replace
	// ResumeOrNew continues the run in the directory if it holds one of
	// the run's stage, and starts a new one otherwise.
	ResumeOrNew
)

// The errors of Start that a caller may act on; each is wrapped in an
// error that names the directory.
var (
	// ErrLocked: another run holds the directory's lock (LockFile).
	ErrLocked = errors.New("in use by another run")
	// ErrExists: the directory holds a run and the Mode is New.
	ErrExists = errors.New("already holds a run")
	// ErrNoRun: the directory holds no run and the Mode is Resume.
	ErrNoRun = errors.New("holds no run to resume")
	// ErrComplete: the run to resume has taken all its steps; nothing
	// was started.
	ErrComplete = errors.New("complete")
)

// ResumeError is the error of Start refusing to resume a run with a
// configuration that changes fields the run keeps.
type ResumeError struct {
	Dir     string
	Changes []Change
}

func (e *ResumeError) Error() string {
	s := "resume of " + e.Dir + ": "
	for i, c := range e.Changes {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %s where the checkpoint has %s", c.Field, c.Given, c.Saved)
	}
	return s + ": a resumed run keeps its model and recipe"
}

// Start opens a run in dir (made if need be) and returns its trainer,
// ready to Run: the one way a run begins, alone or data-parallel, on a
// corpus or a task, new or resumed. It
//
//   - takes the directory's lock (LockFile), failing with ErrLocked while
//     another run holds it, until the trainer is closed;
//   - decides, by r.Mode and what the directory holds, to start a new run
//     or resume the one there, and applies the resume rules (Changes) to
//     the model, the recipe and the task alike;
//   - opens the data source, once, and checks it against the model;
//   - with r.Comm, has the ranks agree on all of it before any trains.
//
// A resumed run continues exactly where its checkpoint left off; lines of
// its metrics log after the checkpoint's step are dropped. A new run's
// metrics log starts empty, and a checkpoint already in dir is replaced by
// its first one. If Start fails, it writes nothing, and removes the
// directories it made. Tokenizing a corpus stops with ctx's error when
// ctx is done (see data.Load).
func Start(ctx context.Context, dir string, r Run) (*Trainer, error) {
	s := &starting{ctx: ctx, dir: dir, r: r}
	t, err := s.start()
	if r.Comm != nil && !s.agreed {
		err = agree(r.Comm, err, nil) // the others learn of this rank's failure
	}
	if err == nil && r.Comm != nil {
		// The ranks agree again, that rank 0 could open the run's files.
		err = agree(r.Comm, t.openLog(), nil)
	}
	if err != nil {
		if t != nil {
			t.log.close()
		}
		s.undo()
		return nil, err
	}
	t.closeSource = s.opened != nil
	return t, nil
}

// starting is the state of a Start under way.
type starting struct {
	ctx     context.Context // of Start's call
	dir     string
	r       Run
	agreed  bool       // the ranks' agreement on the run ran
	release func(bool) // the lock's, on rank 0
	opened  *Corpus    // a corpus Start loaded, closed if it fails
	saved   *Saved     // the checkpoint in dir, if read
	recipe  Config     // saved's recipe
}

func (s *starting) rank() int {
	if s.r.Comm == nil {
		return 0
	}
	return s.r.Comm.Rank()
}

// undo releases what a failed Start took.
func (s *starting) undo() {
	if s.opened != nil {
		s.opened.Train.Close()
		s.opened.Val.Close()
	}
	if s.release != nil {
		s.release(true)
	}
}

func (s *starting) start() (*Trainer, error) {
	r, dir := s.r, s.dir
	if s.rank() == 0 {
		var err error
		if s.release, err = lockRun(dir); err != nil {
			return nil, err
		}
	}
	resume, prev, err := s.decide()
	if err != nil {
		return nil, err
	}
	mc, tc := r.Model, r.Recipe
	if resume {
		if r.Configure != nil {
			mc, tc = s.saved.Model.Config(), s.recipe
			if err := r.Configure(&mc, &tc); err != nil {
				return nil, err
			}
		}
		if mc.Vocab == 0 {
			mc.Vocab = s.saved.Model.Config().Vocab
		}
		if changes := s.saved.Changes(s.recipe, mc, tc); len(changes) > 0 {
			return nil, &ResumeError{Dir: dir, Changes: changes}
		}
		if s.saved.Optimizer == nil {
			return nil, fmt.Errorf("checkpoint in %s holds weights only, no optimizer state to resume training with", dir)
		}
		if step := s.saved.State.Step; step >= tc.Steps {
			return nil, s.complete(mc, tc)
		}
	}

	// The tokenizer, by the name its content determines; the vocabulary.
	tok := s.tokenizer(tc.Tokenizer)
	if tok == nil {
		if tok, err = tokenizer.Open(tc.Tokenizer); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	tc.Tokenizer = tok.Name()
	src := r.Source
	if src == nil && tc.Task != nil {
		set, err := task.New(*tc.Task, tok)
		if err != nil {
			return nil, err
		}
		src = &Task{Set: set}
	}
	if mc.Vocab == 0 {
		switch src := src.(type) {
		case *Task:
			mc.Vocab = src.Set.Vocab()
		case *Corpus:
			mc.Vocab = src.Train.VocabSize()
		default:
			mc.Vocab = tok.VocabSize()
		}
	}
	if err := mc.Validate(); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if err := tc.Validate(); err != nil {
		return nil, fmt.Errorf("training config: %w", err)
	}
	if k := s.ranks(); tc.Accum%k != 0 {
		return nil, fmt.Errorf("accum %d is not a multiple of the %d ranks: the global batch (batch × accum) is split across the ranks; make accum %d, %d, …", tc.Accum, k, k, 2*k)
	}
	if src == nil {
		train, val, err := data.LoadPaths(s.ctx, tc.Corpus, tc.TextField, tok, r.Data)
		if err != nil {
			return nil, err
		}
		s.opened = &Corpus{Train: train, Val: val}
		src = s.opened
	}
	if tc.Task == nil {
		if _, ok := src.(*Task); ok {
			return nil, errors.New("a task to train on, but the training configuration names none")
		}
	} else if _, ok := src.(*Task); !ok {
		return nil, fmt.Errorf("the training configuration's task %s, but the data given is a corpus", tc.Task.Name)
	}

	t := &Trainer{Config: tc, Dir: dir, Source: src, saved: -1, stage: r.Stage, objective: r.Objective, release: s.release}
	if t.objective == nil {
		t.objective = nextToken
	}
	if t.feed, err = src.open(mc, tc); err != nil {
		return nil, err
	}
	if resume {
		c := s.saved.Checkpoint
		t.Model, t.state, t.saved, t.Resumed, t.files = c.Model, c.State, c.State.Step, true, c.Files
		if err := t.feed.setState(c.State.Data); err != nil {
			return nil, fmt.Errorf("checkpoint in %s: %w", dir, err)
		}
	} else {
		if t.Model, err = model.New(mc); err != nil {
			return nil, err
		}
		if r.Init != nil {
			if err := r.Init(t.Model, prev); err != nil {
				return nil, err
			}
		}
		t.state = checkpoint.State{Tokenizer: tc.Tokenizer, Stage: r.Stage}
		t.files = r.Files
	}
	t.params = t.Model.Params()
	if r.Trainable != nil {
		t.params = nil
		for _, p := range t.Model.Params() {
			if r.Trainable(p) {
				t.params = append(t.params, p)
			}
		}
		if len(t.params) == 0 {
			return nil, errors.New("no parameter of the model is trainable")
		}
	}
	if t.opt, err = optim.NewAdamW(t.params, tc.optimizer()); err != nil {
		return nil, err
	}
	if resume {
		if err := t.opt.LoadState(s.saved.Optimizer); err != nil {
			return nil, fmt.Errorf("checkpoint in %s: %w", dir, err)
		}
		t.opt.Step = s.saved.State.Step
	}
	t.sched = tc.schedule()
	if r.Comm != nil {
		parts := &startParts{Model: mc, Train: tc, Data: src.digest(), Stage: r.Stage}
		if resume {
			parts.Checkpoint = fmt.Sprintf("step %d, weights %s", t.state.Step, weightsDigest(t.Model))
		}
		s.agreed = true
		if err := agree(r.Comm, nil, parts); err != nil {
			return nil, err
		}
		opt := r.Dist
		if r.Objective != nil {
			opt.NoOverlap = true
		}
		t.dist = newDist(r.Comm, opt, t.Model, t.params)
	} else if err := t.openLog(); err != nil {
		return nil, err
	}
	return t, nil
}

// ranks returns the number of ranks of the run.
func (s *starting) ranks() int {
	if s.r.Comm == nil {
		return 1
	}
	return s.r.Comm.Size()
}

// decide reads what dir holds and decides, by the Mode, whether the run
// resumes the checkpoint there; for a new stage, prev is the previous
// stage's checkpoint.
func (s *starting) decide() (resume bool, prev *checkpoint.Checkpoint, err error) {
	dir, r := s.dir, s.r
	exists := checkpoint.Exists(filepath.Join(dir, CheckpointDir))
	switch {
	case r.Mode < New || r.Mode > ResumeOrNew:
		return false, nil, fmt.Errorf("mode %d: use New, Resume, Replace or ResumeOrNew", r.Mode)
	case r.Mode == Replace, !exists && r.Mode != Resume:
		return false, nil, nil
	case !exists:
		return false, nil, fmt.Errorf("%s %w", dir, ErrNoRun)
	case r.Mode == New:
		return false, nil, fmt.Errorf("%s %w", dir, ErrExists)
	}
	if s.saved, s.recipe, err = OpenRun(dir); err != nil {
		return false, nil, err
	}
	if st := s.saved.State.Stage; st != r.Stage {
		if r.Mode == Resume {
			return false, nil, fmt.Errorf("%s holds a checkpoint of stage %q, not of stage %q", dir, st, r.Stage)
		}
		return false, s.saved.Checkpoint, nil
	}
	return true, nil, nil
}

// tokenizer returns the saved checkpoint's tokenizer if name is its name;
// nil otherwise.
func (s *starting) tokenizer(name string) tokenizer.Tokenizer {
	if s.saved != nil && s.saved.Tokenizer.Name() == name {
		return s.saved.Tokenizer
	}
	return nil
}

// complete returns the error of resuming a run that is complete, once
// the ranks agree that it is.
func (s *starting) complete(mc model.Config, tc Config) error {
	step := s.saved.State.Step
	if s.r.Comm != nil {
		s.agreed = true
		parts := &startParts{Model: mc, Train: tc, Stage: s.r.Stage, Checkpoint: fmt.Sprintf("complete at step %d", step)}
		if err := agree(s.r.Comm, nil, parts); err != nil {
			return err
		}
	}
	if s.release != nil {
		s.release(false)
		s.release = nil
	}
	return fmt.Errorf("the run in %s is %w at step %d of %d", s.dir, ErrComplete, step, tc.Steps)
}

// openLog opens the run's metrics log, on the rank that writes it.
func (t *Trainer) openLog() error {
	if !t.writes() {
		return nil
	}
	var err error
	t.log, t.history, t.skipped, err = openMetrics(t.metricsPath(), t.saved)
	return err
}

// lockRun locks the run directory dir, made if need be, so that two
// trainings never write one run. Readers of a run (eval, generate) need no
// lock: a checkpoint is swapped in whole, so they see the old one or the
// new one; the loss curve is replaced whole too, and the metrics log grows
// by whole lines.
//
// release gives the lock back; failed says the run stopped with an error,
// in which case the directories lockRun made are removed again if they
// hold nothing but the lock, so that a mistaken call leaves nothing behind.
// Removing the lock file is safe: filelock.TryLock checks that the file it
// locked is still in place.
func lockRun(dir string) (release func(failed bool), err error) {
	// made is the outermost directory that MkdirAll will create, if any.
	var made string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
			break
		}
		made = d
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	path := filepath.Join(dir, LockFile)
	lk, err := filelock.TryLock(path)
	if errors.Is(err, filelock.ErrLocked) {
		return nil, fmt.Errorf("%s is %w (lock %s held)", dir, ErrLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	return func(failed bool) {
		tidy := false
		if failed && made != "" {
			if entries, err := os.ReadDir(dir); err == nil && len(entries) == 1 {
				// Removed while still locked, so that nobody locks it meanwhile.
				tidy = os.Remove(path) == nil
			}
		}
		lk.Unlock()
		if tidy {
			for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
				if os.Remove(d) != nil || d == made {
					break
				}
			}
		}
	}, nil
}
