package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data/task"
	"github.com/polysketch/polysketch/internal/regular"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/train"
)

const infoHelp = `usage: polysketch info [flags] DIR

Describes the checkpoint in DIR (a run's directory, or its checkpoint
directory): the model's shape, parameter count, attention and options,
tokenizer, training step, tokens seen, last losses (from the run's
metrics.jsonl), precision and recipe, and whether it verifies: every file
matches the checksums of its manifest, every weight is finite, the
tokenizer has no more tokens than the embedding has rows, and a forward
pass on a few tokens gives finite logits. A checkpoint that does not
verify is described as far as it can be read, and info exits with
status 1.

flags:
`

func runInfo(args []string, stdout io.Writer) error {
	fs := newFlags("info", infoHelp, stdout)
	// DIR follows the flags: parse them, then take it.
	var dir string
	if len(args) > 0 && !strings.HasPrefix(args[len(args)-1], "-") {
		dir, args = args[len(args)-1], args[:len(args)-1]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if dir == "" {
		return usageError{errors.New("info: name a checkpoint directory: polysketch info DIR")}
	}
	ckDir := train.CheckpointIn(dir)
	if !checkpoint.Exists(ckDir) {
		return fmt.Errorf("info: %s holds no checkpoint (no manifest.json): pass a run's directory or its checkpoint directory", dir)
	}

	// Read what the checkpoint says of itself before verifying it, so that
	// one that fails verification is still described.
	var cfg struct {
		Model model.Config    `json:"model"`
		Train json.RawMessage `json:"train"`
	}
	if err := readJSON(filepath.Join(ckDir, "config.json"), &cfg); err != nil {
		return fmt.Errorf("info: %w", err)
	}
	var state checkpoint.State
	if err := readJSON(filepath.Join(ckDir, "state.json"), &state); err != nil {
		return fmt.Errorf("info: %w", err)
	}
	var tc *train.Config
	if len(cfg.Train) > 0 && string(cfg.Train) != "null" {
		tc = new(train.Config)
		if err := json.Unmarshal(cfg.Train, tc); err != nil {
			return fmt.Errorf("info: %s: training configuration: %v", filepath.Join(ckDir, "config.json"), err)
		}
	}
	var c *checkpoint.Checkpoint
	saved, loadErr := train.Open(ckDir)
	if loadErr == nil {
		c = saved.Checkpoint
		loadErr = saved.Probe()
	}

	mc := cfg.Model
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	line := func(key, format string, args ...any) { fmt.Fprintf(w, "%s\t%s\n", key, fmt.Sprintf(format, args...)) }
	line("checkpoint", "%s", ckDir)
	kind := "decoder"
	if mc.Bidirectional {
		kind = "encoder"
	}
	line("model", "%s, %s", kind, describeModel(mc))
	if c != nil {
		n := 0
		for _, p := range c.Model.Params() {
			n += p.Value.Len()
		}
		line("parameters", "%s", exactCount(n))
	} else if mc.Attention != nil {
		// Counted from the configuration: a damaged one may describe a
		// model far too large to build.
		n := checkpoint.ParamCount(mc)
		note := "by its configuration"
		if attention.PropertiesOf(mc.Attention).Trainable {
			note += ", besides the attention's own"
		}
		if n == math.MaxInt64 {
			line("parameters", "more than 9.2e18 %s", note)
		} else {
			line("parameters", "%s %s", exactCount(int(n)), note)
		}
	}
	line("attention", "%s", describeAttention(mc.Attention))
	if state.Tokenizer == "" {
		line("tokenizer", "none: the model reads and writes token ids alone")
	} else {
		line("tokenizer", "%s", state.Tokenizer)
	}
	if tc != nil {
		line("precision", "%s", tc.Precision) // the recipe's: a run resumes with the one it is given
		line("step", "%d of %d", state.Step, tc.Steps)
	} else {
		line("step", "%d", state.Step)
	}
	line("tokens seen", "%s", exactCount(int(state.Tokens)))
	line("training time", "%s", time.Duration(state.Seconds*float64(time.Second)).Round(time.Millisecond))
	if losses := lastLosses(filepath.Dir(ckDir), ckDir, state.Step); losses != "" {
		line("last losses", "%s", losses)
	}
	if tc != nil {
		switch {
		case tc.Task != nil:
			what := tc.Task.Name
			if tc.Task.Name == task.File {
				what = tc.Task.Path
			}
			line("trained on", "task %s", what)
		default:
			on := describeCorpus(tc.Corpus)
			if tc.TextField != "" {
				on += fmt.Sprintf(", text field %q", tc.TextField)
			}
			line("trained on", "%s", on)
		}
		schedule := tc.Schedule
		if schedule == "" {
			schedule = train.ScheduleLinear
		}
		line("recipe", "batch %d × %d, lr %.3g → %.3g (%s, warm-up %d), weight decay %g, clip %g, seed %d",
			tc.Batch, tc.Accum, tc.LR, tc.MinLR, schedule, tc.Warmup, tc.WeightDecay, tc.Clip, tc.Seed)
	}
	if loadErr != nil {
		line("verified", "NO: %s", oneLine(loadErr))
	} else {
		line("verified", "yes: every file matches the manifest's size and SHA-256, every weight is finite, the tokenizer fits the embedding, a forward pass gives finite logits")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if loadErr != nil {
		return fmt.Errorf("info: %w", loadErr)
	}
	return nil
}

// exactCount formats n as count does, followed by n in full if that
// rounds it: "14.2k (14240)", "950".
func exactCount(n int) string {
	if s := count(n); s != fmt.Sprint(n) {
		return fmt.Sprintf("%s (%d)", s, n)
	}
	return fmt.Sprint(n)
}

// readJSON decodes the JSON file at path into v.
func readJSON(path string, v any) error {
	b, err := regular.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	return nil
}

// lastLosses returns the training loss of the checkpoint's step and the
// last validation loss up to it, from the metrics log of the run that
// holds the checkpoint directory ckDir in runDir; "" if there is none.
func lastLosses(runDir, ckDir string, step int) string {
	if filepath.Base(ckDir) != train.CheckpointDir {
		return ""
	}
	ms, _, err := train.ReadMetrics(filepath.Join(runDir, train.MetricsFile))
	if err != nil {
		return ""
	}
	var parts []string
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Step == step {
			parts = append(parts, fmt.Sprintf("training %.4f (step %d)", ms[i].Loss, step))
			break
		}
	}
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Step <= step && ms[i].ValLoss != nil {
			parts = append(parts, fmt.Sprintf("validation %.4f (step %d)", *ms[i].ValLoss, ms[i].Step))
			break
		}
	}
	return strings.Join(parts, ", ")
}
