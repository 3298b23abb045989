package train

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data/task"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/internal/field"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/vec"
)

// Saved is a checkpoint opened to be used: evaluated, sampled, served or
// resumed. It holds the tokenizer whose ids the model reads and writes,
// and the directory it was read from.
type Saved struct {
	*checkpoint.Checkpoint
	Dir string // the checkpoint's directory
	// Tokenizer is nil for a model imported without a tokenizer.json,
	// whose ids alone it reads and writes (its state names none).
	Tokenizer tokenizer.Tokenizer
	// TokenizerConfig is what the tokenizer_config.json,
	// generation_config.json and chat_template.jinja beside the
	// tokenizer.json say (an imported model has them): the tokens before a
	// prompt and those that end generation, and the chat template.
	TokenizerConfig *tokenizer.Config
}

// Open loads the checkpoint that path names: a checkpoint directory, or
// the directory of a run holding one (CheckpointDir), with its tokenizer:
// the tokenizer.json saved in it, the built-in tokenizer its state names,
// or none if it names none (an import without a tokenizer.json, whose
// TokenizerConfig is then empty); and the tokenizer's configuration files
// beside it. Every command that reads a checkpoint opens it here, where the
// ids the model may be given are checked against its embedding: a
// tokenizer with more tokens than the embedding has rows is refused.
//
// Open reads the model alone (checkpoint.LoadModel): the optimizer state
// is verified but not kept, as only a resumed run needs it (OpenRun).
func Open(path string) (*Saved, error) { return open(path, checkpoint.LoadModel) }

func open(path string, load func(string) (*checkpoint.Checkpoint, error)) (*Saved, error) {
	dir := CheckpointIn(path)
	c, err := load(dir)
	if err != nil {
		return nil, err
	}
	s := &Saved{Checkpoint: c, Dir: dir}
	if c.TokenizerJSON != nil {
		if s.Tokenizer, err = tokenizer.Parse(c.TokenizerJSON); err != nil {
			return nil, fmt.Errorf("checkpoint %s: %s: %w", dir, tokenizer.FileName, err)
		}
		if s.Tokenizer.Name() != c.State.Tokenizer {
			return nil, fmt.Errorf("checkpoint %s: its %s is %s, but its state names the tokenizer %s", dir, tokenizer.FileName, s.Tokenizer.Name(), c.State.Tokenizer)
		}
	} else if c.State.Tokenizer == "" {
		s.TokenizerConfig = &tokenizer.Config{Special: map[string]string{}}
		return s, nil
	} else if s.Tokenizer, err = tokenizer.Lookup(c.State.Tokenizer); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := s.checkVocabulary(); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if s.TokenizerConfig, err = tokenizer.ReadConfig(dir, s.Tokenizer); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return s, nil
}

// checkVocabulary checks that the model's embedding has a row for every
// id the model's inputs can hold: every token of the tokenizer, or of a
// built-in task, whose ids are the task's own.
func (s *Saved) checkVocabulary() error {
	rows := s.Model.Config().Vocab
	if tc, ok := s.Recipe(); ok && tc.Task != nil && tc.Task.Name != task.File {
		if ids := tc.Task.IDs(); ids > rows {
			return fmt.Errorf("its task %s has %d token ids, but its model's embedding only %d rows", tc.Task.Name, ids, rows)
		}
		return nil
	}
	if n := s.Tokenizer.VocabSize(); n > rows {
		return fmt.Errorf("its tokenizer %s has %d tokens, but its model's embedding only %d rows: ids %d to %d would have none; the tokenizer does not belong to these weights",
			s.Tokenizer.Name(), n, rows, rows, n-1)
	}
	return nil
}

// Probe runs the model forward on a few tokens and checks that its logits
// are finite. Load checks that every weight is finite, but finite weights
// can still overflow (an output layer of 3e38, say), which only running
// the model shows.
func (s *Saved) Probe() error {
	c := s.Model.Config()
	n := min(8, c.Context, c.Vocab)
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i)
	}
	logits := s.Model.Forward(ids, 1, n).Data
	if i := vec.NonFinite(logits); i >= 0 {
		return fmt.Errorf("checkpoint %s: a forward pass on %d tokens gives logits that are not finite (%v, of token %d at position %d): its weights overflow",
			s.Dir, n, logits[i], i%c.Vocab, i/c.Vocab)
	}
	return nil
}

// NeedTokenizer fails for a checkpoint without a tokenizer, for the
// commands that read or write text.
func (s *Saved) NeedTokenizer() error {
	if s.Tokenizer == nil {
		return fmt.Errorf("checkpoint %s has no tokenizer (imported without a tokenizer.json): it reads and writes token ids alone", s.Dir)
	}
	return nil
}

// CheckpointIn returns the checkpoint directory that path names: path
// itself, or its CheckpointDir if path is a run's directory.
func CheckpointIn(path string) string {
	if sub := filepath.Join(path, CheckpointDir); checkpoint.Exists(sub) {
		return sub
	}
	return path
}

// CheckTokenizer checks that arg (byte, gpt2, or a tokenizer.json or a
// directory holding one), when given, names the checkpoint's own
// tokenizer: a model's ids mean nothing in another vocabulary.
func (s *Saved) CheckTokenizer(arg string) error {
	if arg == "" {
		return nil
	}
	given, err := tokenizer.Open(arg)
	if err != nil {
		return field.Errorf("%s: %w", field.Name("tokenizer"), err)
	}
	if err := s.NeedTokenizer(); err != nil {
		return err
	}
	if given.Name() != s.Tokenizer.Name() {
		return field.Errorf("%s %s is %s (%d tokens), but checkpoint %s was trained with %s (%d tokens): drop %s to use the checkpoint's own",
			field.Name("tokenizer"), arg, given.Name(), given.VocabSize(), s.Dir, s.Tokenizer.Name(), s.Tokenizer.VocabSize(), field.Name("tokenizer"))
	}
	return nil
}

// Recipe returns the training configuration the checkpoint records, and
// false if it records none (weights saved without a run). It reads
// leniently: a field it does not know is no reason to lose the others.
func (s *Saved) Recipe() (Config, bool) {
	var tc Config
	if len(s.Train) == 0 || string(s.Train) == "null" || json.Unmarshal(s.Train, &tc) != nil {
		return Config{}, false
	}
	return tc, true
}

// OpenRun opens the checkpoint of the run in dir to resume it: Open with
// the optimizer state (checkpoint.Load), and the training configuration
// the checkpoint records, which it must.
func OpenRun(dir string) (*Saved, Config, error) {
	s, err := open(filepath.Join(dir, CheckpointDir), checkpoint.Load)
	if err != nil {
		return nil, Config{}, err
	}
	tc, err := recipe(s.Checkpoint, dir)
	if err != nil {
		return nil, Config{}, err
	}
	return s, tc, nil
}

// Resumable names the fields of a run's configuration, by their JSON
// names, that a resumed run may change: how long it runs, how often it
// validates and saves, and the number format of its products. Every other
// field of the model and of the recipe stays as the checkpoint has it, or
// the run would not continue the one that was saved.
var Resumable = []string{"steps", "eval_every", "eval_batches", "save_every", "precision"}

// Change is a field of a run's configuration that a resumed run was
// given with another value than its checkpoint's.
type Change struct {
	Field string // the JSON name; an attention option by its own ("block")
	// Saved and Given are the values as JSON; none for a field that is
	// empty, and so absent, on its side.
	Saved string
	Given string
}

// Changes returns the fields in which mc and tc, the configuration a
// resumed run is given, differ from the checkpoint's model and from its
// recipe (from OpenRun), other than those Resumable allows: none means the
// run may resume with them. Another attention mechanism is one change, not
// one per option, and so is a task where there was none, or none where
// there was one; a tokenizer given as a file that is the checkpoint's own
// tokenizer is no change.
func (s *Saved) Changes(recipe Config, mc model.Config, tc Config) []Change {
	if tc.Tokenizer != recipe.Tokenizer {
		if t, err := tokenizer.Open(tc.Tokenizer); err == nil && t.Name() == recipe.Tokenizer {
			tc.Tokenizer = recipe.Tokenizer
		}
	}
	smc := s.Model.Config()
	var out []Change
	otherMechanism := mc.Attention.Mechanism() != smc.Attention.Mechanism()
	otherTask := (tc.Task == nil) != (recipe.Task == nil)
	if otherTask {
		out = append(out, Change{Field: "task", Saved: taskName(recipe.Task), Given: taskName(tc.Task)})
	}
	for _, d := range append(checkpoint.Differences(smc, mc), checkpoint.Differences(recipe, tc)...) {
		if otherMechanism && strings.HasPrefix(d.Path, "attention_options.") || otherTask && (d.Path == "task" || strings.HasPrefix(d.Path, "task.")) {
			continue // the mechanism's or task's difference says it all
		}
		field := strings.TrimPrefix(d.Path, "attention_options.")
		if slices.Contains(Resumable, field) {
			continue
		}
		out = append(out, Change{Field: field, Saved: none(d.A), Given: none(d.B)})
	}
	return out
}

// none shows a field that one side lacks (an empty field omitted from its
// JSON) as none.
func none(v string) string {
	if v == "missing" {
		return "none"
	}
	return v
}

// taskName returns the name of task s as a Change shows it: JSON, none
// for no task.
func taskName(s *task.Spec) string {
	if s == nil {
		return "none"
	}
	name := s.Name
	if s.Name == task.File {
		name = s.Path
	}
	b, _ := json.Marshal(name)
	return string(b)
}
