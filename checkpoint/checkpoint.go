// Package checkpoint saves and restores training runs: a model's weights,
// its configuration, the optimizer's moments and the position of the data,
// so that a run stopped at any step continues exactly as if it had not
// stopped.
//
// A checkpoint is a directory of five or six files:
//
//	model.safetensors      the weights, one F32 tensor per parameter, named as model.Params names them
//	optimizer.safetensors  the AdamW moments, "<param>.m" and "<param>.v" (absent for weights alone)
//	config.json            {"model": model.Config, "train": the training settings}
//	state.json             step, tokenizer, data position, tokens seen, training time
//	tokenizer.json         the tokenizer, if it came from a file (a Hugging Face tokenizer.json)
//	tokenizer_config.json  of an imported model, as it came (special tokens, chat template)
//	generation_config.json of an imported model, as it came (the ids that end a generation)
//	chat_template.jinja    of an imported model, as it came (its chat template, where not in tokenizer_config.json)
//	manifest.json          format version, and the size and SHA-256 of each file above
//
// The weights are plain safetensors, so other ecosystems read them
// directly (safetensors.numpy.load_file, safetensors.torch.load_file).
//
// Save writes a new directory beside the old one, syncs it, and swaps the
// two, so that at every moment a complete checkpoint exists: a failed or
// interrupted save leaves the previous checkpoint as it was. Load checks
// every file against the manifest, every parameter's name and shape
// against the configuration (before building a model of the sizes the
// configuration gives, so that sizes the weights cannot hold are an error,
// not an exhausted memory), and every value for NaN and infinity before
// returning anything, so a truncated, corrupted or mismatched checkpoint
// is an error, never a silently wrong model.
package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/safetensors"
	"github.com/polysketch/polysketch/tensor"
)

// Version is the format version Save writes and Load accepts.
const Version = 1

// The files of a checkpoint.
const (
	weightsFile   = "model.safetensors"
	optimizerFile = "optimizer.safetensors"
	configFile    = "config.json"
	stateFile     = "state.json"
	manifestFile  = "manifest.json"
	tokenizerFile = "tokenizer.json"
)

// Checkpoint is a saved training run.
type Checkpoint struct {
	// Model holds the weights; its Config is saved in config.json. Load
	// builds it from the saved configuration and fills in the weights.
	Model *model.Model
	// Train is the training configuration, saved in config.json beside
	// the model's and otherwise left to the caller (package train). Nil
	// saves null.
	Train json.RawMessage
	// Optimizer is the optimizer state keyed by parameter name plus ".m"
	// and ".v", as optim.AdamW.State returns it, of every parameter or of
	// those a run trains; nil saves weights alone.
	Optimizer map[string]*tensor.Tensor
	// State is the rest of the run's position.
	State State
	// TokenizerJSON is the tokenizer.json of the model's tokenizer if it
	// was read from a file (data/tokenizer.Parse), saved whole so that
	// the model's ids never depend on a file outside the checkpoint; nil
	// for a built-in tokenizer, which State.Tokenizer names.
	TokenizerJSON []byte
	// Files are other files of the model kept whole, by name: the
	// tokenizer_config.json, generation_config.json and
	// chat_template.jinja of an imported model (ModelFiles); nil for none.
	Files map[string][]byte
}

// ModelFiles are the names a Checkpoint's Files may have: the files of a
// Hugging Face model directory that an import keeps as they came.
var ModelFiles = []string{"tokenizer_config.json", "generation_config.json", "chat_template.jinja"}

// State is where a run stands, saved in state.json.
type State struct {
	// Step is the number of optimizer updates taken.
	Step int `json:"step"`
	// Tokenizer names the tokenizer (data/tokenizer.Lookup) of the
	// model's token ids.
	Tokenizer string `json:"tokenizer"`
	// Data is the position of the training batches (data.Batcher.State),
	// base64 in JSON.
	Data []byte `json:"data,omitempty"`
	// Tokens is the number of training tokens seen.
	Tokens int64 `json:"tokens"`
	// Seconds is the time spent training, over every session of the run.
	Seconds float64 `json:"seconds"`
	// Stage names the stage of a run of several (package train's
	// Run.Stage) that the checkpoint was saved in; "" for a run of one.
	Stage string `json:"stage,omitempty"`
}

// stateJSON is state.json: State with the format version.
type stateJSON struct {
	Version int `json:"version"`
	State
}

// configJSON is config.json.
type configJSON struct {
	Model model.Config    `json:"model"`
	Train json.RawMessage `json:"train"`
}

// Save writes c to the checkpoint directory dir, replacing the checkpoint
// there, if any, only once the new one is complete and on disk. It refuses
// to save weights or optimizer state that are not finite, and to replace a
// directory that is not a checkpoint. On error the previous checkpoint is
// untouched and nothing of the new one is left behind.
func Save(dir string, c *Checkpoint) error {
	return SaveContext(context.Background(), dir, c)
}

// SaveContext is Save, stopped when ctx is done (a command interrupted
// while it writes): the error wraps ctx's, the previous checkpoint is
// untouched, and nothing of the new one is left behind.
func SaveContext(ctx context.Context, dir string, c *Checkpoint) error {
	if err := save(ctx, dir, c); err != nil {
		return fmt.Errorf("saving checkpoint %s: %w", dir, err)
	}
	return nil
}

func save(ctx context.Context, dir string, c *Checkpoint) error {
	if c.Model == nil {
		return errors.New("no model")
	}
	params := c.Model.Params()
	weights := make(map[string]*tensor.Tensor, len(params))
	for _, p := range params {
		if err := p.Value.CheckFinite("parameter " + p.Name); err != nil {
			return fmt.Errorf("refusing to save weights that are not finite: %w", err)
		}
		weights[p.Name] = p.Value
	}
	if c.Optimizer != nil {
		if err := checkOptimizer(c.Optimizer, params); err != nil {
			return fmt.Errorf("refusing to save optimizer state: %w", err)
		}
	}
	train := c.Train
	if train == nil {
		train = json.RawMessage("null")
	}
	cfg, err := json.MarshalIndent(configJSON{Model: c.Model.Config(), Train: train}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding configuration: %w", err)
	}
	state, err := json.MarshalIndent(stateJSON{Version: Version, State: c.State}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding state: %w", err)
	}

	tmp, err := prepare(dir)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	var files []fileSum
	write := func(name string, encode func(w *hashWriter) error) error {
		if err := hook("write " + name); err != nil {
			return err
		}
		s, err := writeFile(ctx, filepath.Join(tmp, name), encode)
		if err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
		s.Name = name
		files = append(files, s)
		return nil
	}
	raw := func(b []byte) func(*hashWriter) error {
		return func(w *hashWriter) error { _, err := w.Write(append(b, '\n')); return err }
	}
	if err := write(configFile, raw(cfg)); err != nil {
		return err
	}
	if err := write(stateFile, raw(state)); err != nil {
		return err
	}
	meta := map[string]string{"format": "pt"} // what Hugging Face loaders look for
	if err := write(weightsFile, func(w *hashWriter) error { return safetensors.Encode(w, weights, meta) }); err != nil {
		return err
	}
	if c.Optimizer != nil {
		meta := map[string]string{"step": strconv.Itoa(c.State.Step)}
		if err := write(optimizerFile, func(w *hashWriter) error { return safetensors.Encode(w, c.Optimizer, meta) }); err != nil {
			return err
		}
	}
	if c.TokenizerJSON != nil {
		if err := write(tokenizerFile, func(w *hashWriter) error { _, err := w.Write(c.TokenizerJSON); return err }); err != nil {
			return err
		}
	}
	for _, name := range sortedKeys(c.Files) {
		if !slices.Contains(ModelFiles, name) {
			return fmt.Errorf("file %q is none of the model files a checkpoint keeps (%s)", name, strings.Join(ModelFiles, ", "))
		}
		b := c.Files[name]
		if err := write(name, func(w *hashWriter) error { _, err := w.Write(b); return err }); err != nil {
			return err
		}
	}
	man, err := json.MarshalIndent(manifest{Format: formatName, Version: Version, Files: files}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding manifest: %w", err)
	}
	if err := write(manifestFile, raw(man)); err != nil {
		return err
	}
	if err := syncDir(tmp); err != nil {
		return err
	}
	if err := hook("swap"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := swap(tmp, dir); err != nil {
		return err
	}
	done = true
	return nil
}

// checkOptimizer checks that state holds finite moments, both of them,
// of the shape of each parameter it names, and nothing else: of every
// parameter, or of those a run trains (train.Run.Trainable).
func checkOptimizer(state map[string]*tensor.Tensor, params []*nn.Param) error {
	shapes := make(map[string][]int, len(state))
	for key, t := range state {
		shapes[key] = t.Shape
	}
	if err := checkMoments(shapes, params); err != nil {
		return err
	}
	for _, key := range sortedKeys(state) {
		if err := state[key].CheckFinite(key); err != nil {
			return err
		}
	}
	return nil
}

// checkMoments checks that shapes holds the shapes of the moments, both
// of them, of each parameter it names, and nothing else: of every
// parameter, or of those a run trains.
func checkMoments(shapes map[string][]int, params []*nn.Param) error {
	if len(shapes) == 0 {
		return errors.New("no moments")
	}
	own := make(map[string]bool, len(shapes))
	for _, p := range params {
		m, v := p.Name+".m", p.Name+".v"
		_, hasM := shapes[m]
		_, hasV := shapes[v]
		switch {
		case !hasM && !hasV:
			continue // not trained
		case !hasM:
			return fmt.Errorf("no entry %q", m)
		case !hasV:
			return fmt.Errorf("no entry %q", v)
		}
		for _, key := range []string{m, v} {
			if !slices.Equal(shapes[key], p.Value.Shape) {
				return fmt.Errorf("%q has shape %v, the parameter has %v", key, shapes[key], p.Value.Shape)
			}
			own[key] = true
		}
	}
	for _, key := range sortedKeys(shapes) {
		if !own[key] {
			return fmt.Errorf("entry %q belongs to no parameter of the model", key)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Exists reports whether dir holds a checkpoint, complete or not: a
// directory with a manifest, or the previous checkpoint that a save
// interrupted between its two renames left aside.
func Exists(dir string) bool {
	for _, d := range []string{dir, backupPath(dir)} {
		if _, err := os.Stat(filepath.Join(d, manifestFile)); err == nil {
			return true
		}
	}
	return false
}

// DecodeJSON decodes the JSON in b into v strictly, rejecting unknown
// fields and trailing data: for the Train configuration of a checkpoint,
// which Load leaves to the caller.
func DecodeJSON(b []byte, v any) error { return decodeJSON(b, v) }

// decodeJSON decodes b into v, rejecting unknown fields and trailing data.
func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON object")
	}
	return nil
}
