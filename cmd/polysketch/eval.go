package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/train"
)

const evalHelp = `usage: polysketch eval [flags]

Measures a checkpoint's loss and perplexity on a corpus: windows of the
model's context length laid end to end, each token predicted from those
before it in its window.

Without --corpus it evaluates the validation split of the corpus the
checkpoint was trained on (the Go source tree by default); with --corpus,
all of the given files (--split val or train picks one split of them).

A checkpoint trained on a task is scored on the task's held-out test
examples, or with --task FILE on all the examples of a task file of the
same form (a test file kept apart from the training file).

flags:
`

// evalResult is the JSON output of eval.
type evalResult struct {
	Checkpoint   string  `json:"checkpoint"`
	Step         int     `json:"step"`
	Corpus       string  `json:"corpus"`
	Split        string  `json:"split"`
	Loss         float64 `json:"loss"`
	Perplexity   float64 `json:"perplexity"`
	BitsPerToken float64 `json:"bits_per_token"`
	Tokens       int64   `json:"tokens"`
}

func runEval(args []string, stdout io.Writer) error {
	fs := newFlags("eval", stdout)
	var corpus []string
	var (
		ckpt     = fs.String("checkpoint", "run", "checkpoint directory, or the run directory holding it")
		split    = fs.String("split", "", "part of the corpus: val, train or all (default: val of the training corpus, all of a --corpus)")
		batch    = fs.Int("batch", 8, "sequences per batch")
		batches  = fs.Int("batches", 100, "batches at most; 0 evaluates everything")
		cacheDir = fs.String("cache-dir", "", "directory for tokenized corpora (default: the user cache directory)")
		asJSON   = fs.Bool("json", false, "print the result as a JSON object")
		tokName  = fs.String("tokenizer", "", "tokenizer to check against the checkpoint's (default: the checkpoint's own; "+tokenizerFlagHelp+")")
	)
	fs.Var(&listFlag{list: &corpus}, "corpus", "files (text, JSON lines .jsonl/.ndjson, Parquet .parquet; .gz: gzip), directories or glob patterns, comma-separated or repeated")
	textField := fs.String("text-field", "", textFieldUsage+"; default: the training corpus's")
	taskFile := fs.String("task", "", "task checkpoints: a task file of JSON lines to score on, all of its examples (default: the test examples held out of the training file)")
	var prec nn.Precision
	addPrecisionFlag(fs, &prec)
	var af attentionFlags
	af.register(fs, "the checkpoint's", false)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), evalHelp)
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "\nAttention flags must match the checkpoint's mechanism and options: the model runs as it was trained.")
		printMechanisms(fs.Output())
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *split == "" {
		*split = "val"
		if len(corpus) > 0 {
			*split = "all"
		}
	}
	switch {
	case *split != "val" && *split != "train" && *split != "all":
		return fmt.Errorf("eval: --split %q: use val, train or all", *split)
	case *batch < 1:
		return fmt.Errorf("eval: --batch %d: must be positive", *batch)
	case *batches < 0:
		return fmt.Errorf("eval: --batches %d: must not be negative", *batches)
	}

	dir := checkpointDir(*ckpt)
	c, err := checkpoint.Load(dir)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	if err := af.checkSame(c.Model.Config().Attention); err != nil {
		return fmt.Errorf("eval: checkpoint %s: %w", dir, err)
	}
	warnPrecision(stderr, prec)
	if err := inferIn(c.Model, prec); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	tok, err := checkpointTokenizer(c, dir, *tokName)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	if *taskFile != "" && len(corpus) > 0 {
		return usageError{errors.New("eval: --task and --corpus: score on one or the other")}
	}
	if spec := trainedTask(c); spec != nil {
		if len(corpus) == 0 {
			return evalTask(stdout, dir, c, *spec, *taskFile, tok, *batch, *asJSON)
		}
		if v := c.Model.Config().Vocab; v != tok.VocabSize() {
			return fmt.Errorf("eval: checkpoint %s was trained on the task %s, with %d token ids, not on text: drop --corpus to score it on its test examples", dir, spec.Name, v)
		}
	}
	if *taskFile != "" {
		return fmt.Errorf("eval: --task: checkpoint %s was trained on a corpus, not a task: drop --task", dir)
	}
	if len(corpus) == 0 {
		corpus = trainedCorpus(c)
		if *textField == "" {
			*textField = trainedTextField(c)
		}
	}
	p := newProgress(stderr, 1)
	trainTokens, valTokens, err := loadCorpus(corpus, *textField, tok, *cacheDir, p.logf)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	defer trainTokens.Close()
	defer valTokens.Close()
	var parts []*data.Tokens
	switch *split {
	case "val":
		parts = []*data.Tokens{valTokens}
	case "train":
		parts = []*data.Tokens{trainTokens}
	default:
		parts = []*data.Tokens{trainTokens, valTokens}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var sum float64
	var total train.Eval
	for _, part := range parts {
		left := 0 // batches left to run; 0 for all
		if *batches > 0 {
			if left = *batches - total.Batches; left <= 0 {
				break
			}
		}
		e, err := train.Evaluate(ctx, c.Model, part, *batch, left)
		if errors.Is(err, context.Canceled) {
			return errors.New("eval: interrupted")
		}
		if err != nil {
			return fmt.Errorf("eval: %w", err)
		}
		sum += e.Loss * float64(e.Tokens)
		total.Tokens += e.Tokens
		total.Batches += e.Batches
	}
	total.Loss = sum / float64(total.Tokens)

	r := evalResult{
		Checkpoint: dir, Step: c.State.Step, Corpus: describeCorpus(corpus), Split: *split,
		Loss: total.Loss, Perplexity: total.Perplexity(), BitsPerToken: total.BitsPerToken(), Tokens: total.Tokens,
	}
	if *asJSON {
		return writeJSONLine(stdout, r)
	}
	_, err = fmt.Fprintf(stdout, "checkpoint %s (step %d) on %s, split %s: loss %.4f nats/token, perplexity %.3f, %.3f bits/token, over %d tokens\n",
		r.Checkpoint, r.Step, r.Corpus, r.Split, r.Loss, r.Perplexity, r.BitsPerToken, r.Tokens)
	return err
}

// checkpointDir returns the checkpoint directory that path names: path
// itself, or its checkpoint subdirectory if path is a run's directory.
func checkpointDir(path string) string {
	if sub := filepath.Join(path, train.CheckpointDir); checkpoint.Exists(sub) {
		return sub
	}
	return path
}

// trainedCorpus returns the corpus paths the checkpoint was trained on, as
// its training configuration records them; nil (the Go source tree) if
// it records none.
func trainedCorpus(c *checkpoint.Checkpoint) []string {
	var tc train.Config
	if json.Unmarshal(c.Train, &tc) == nil {
		return tc.Corpus
	}
	return nil
}

// trainedTextField returns the text field of the corpus the checkpoint
// was trained on, "" for the default.
func trainedTextField(c *checkpoint.Checkpoint) string {
	var tc train.Config
	if json.Unmarshal(c.Train, &tc) == nil {
		return tc.TextField
	}
	return ""
}

func describeCorpus(paths []string) string {
	if len(paths) == 0 {
		return "the Go source tree"
	}
	b, _ := json.Marshal(paths)
	return string(b)
}
