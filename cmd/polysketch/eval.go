package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/train"
)

const evalHelp = `usage: polysketch eval [flags]

Measures a checkpoint's loss and perplexity on a corpus: windows of the
model's context length laid end to end, each token predicted from those
before it in its window. With --choices, its accuracy on multiple-choice
questions instead (HellaSwag, PIQA, ARC or a generic file; see
docs/evaluation.md).

Without --corpus it evaluates the validation split of the corpus the
checkpoint was trained on (the Go source tree by default); with --corpus,
all of the given files (--split val or train picks one split of them).

A checkpoint trained on a task is scored on the task's held-out test
examples, or with --task FILE on all the examples of a task file of the
same form (a test file kept apart from the training file).

--choices scores each choice of a question by its log-likelihood after
the question, as lm-evaluation-harness does, and prints acc (the choice
of the highest log-likelihood) and acc_norm (per character of the
choice), each with its standard error, in percent; --json adds acc_bytes
(per byte). The question's context is read once and each choice
continues from a copy of the model's state after it.

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

func runEval(args []string, stdout io.Writer) (err error) {
	var ck checkpointFlags
	fs := newFlags("eval", evalHelp, stdout, ck.usage)
	defer asCLI(fs, &err)
	var (
		corpus              []string
		textField, cacheDir string
		maxRecord           byteSize
	)
	ck.register(fs)
	corpusFlags(fs, &corpus, &textField, &cacheDir, &maxRecord, "the corpus the checkpoint was trained on", "the training corpus's")
	var (
		split   = fs.String("split", "", "part of the corpus: val, train or all (default: val of the training corpus, all of a --corpus)")
		batch   = fs.Int("batch", 8, "sequences per batch")
		batches = fs.Int("batches", 100, "batches at most; 0 evaluates everything")
	)
	var asJSON bool
	jsonFlag(fs, &asJSON, "the result as a JSON object")
	taskFile := fs.String("task", "", "task checkpoints: a task file of JSON lines to score on, all of its examples (default: the test examples held out of the training file)")
	var choices choiceFlags
	choices.register(fs)
	var prec nn.Precision
	addPrecisionFlag(fs, &prec)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkChoiceFlags(fs, len(choices.files) > 0); err != nil {
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

	c, err := ck.open()
	if err == nil {
		err = c.NeedTokenizer()
	}
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	dir, tok := c.Dir, c.Tokenizer
	warnPrecision(stderr, prec)
	if err := inferIn(c.Model, prec); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	if len(choices.files) > 0 {
		return evalChoices(stdout, c, choices, asJSON)
	}
	if *taskFile != "" && len(corpus) > 0 {
		return usageError{errors.New("eval: --task and --corpus: score on one or the other")}
	}
	recipe, _ := c.Recipe()
	if spec := recipe.Task; spec != nil {
		if len(corpus) == 0 {
			return evalTask(stdout, c, *spec, *taskFile, *batch, asJSON)
		}
		if v := c.Model.Config().Vocab; v != tok.VocabSize() {
			return fmt.Errorf("eval: checkpoint %s was trained on the task %s, with %d token ids, not on text: drop --corpus to score it on its test examples", dir, spec.Name, v)
		}
	}
	if *taskFile != "" {
		return fmt.Errorf("eval: --task: checkpoint %s was trained on a corpus, not a task: drop --task", dir)
	}
	if len(corpus) == 0 {
		corpus = recipe.Corpus
		if textField == "" {
			textField = recipe.TextField
		}
	}
	p := newProgress(stderr, 1)
	// A signal stops tokenizing too, which removes the token file it was
	// writing.
	ctx, stop := interruptible()
	defer stop()
	trainTokens, valTokens, err := data.LoadPaths(ctx, corpus, textField, tok, data.Options{CacheDir: cacheDir, Logf: p.logf, MaxRecord: int64(maxRecord)})
	if errors.Is(err, context.Canceled) {
		return errors.New("eval: interrupted while tokenizing the corpus")
	}
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
	if asJSON {
		return writeJSONLine(stdout, r)
	}
	_, err = fmt.Fprintf(stdout, "checkpoint %s (step %d) on %s, split %s: loss %.4f nats/token, perplexity %.3f, %.3f bits/token, over %d tokens\n",
		r.Checkpoint, r.Step, r.Corpus, r.Split, r.Loss, r.Perplexity, r.BitsPerToken, r.Tokens)
	return err
}

func describeCorpus(paths []string) string {
	if len(paths) == 0 {
		return "the Go source tree"
	}
	b, _ := json.Marshal(paths)
	return string(b)
}
