package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/train"
)

// The flag groups below, with attentionFlags (attnflags.go), taskFlags
// (task.go) and addPrecisionFlag (precision.go), are the one vocabulary
// of the commands, in the manner of cmd/go's shared build flags: a flag
// that means the same thing in two commands is defined in one place.

// shapeFlags defines the flags of the model's shape on fs, bound to mc,
// with its current values as defaults: the one vocabulary of train, bench
// train and bench dp.
func shapeFlags(fs *flag.FlagSet, mc *model.Config) {
	fs.IntVar(&mc.Layers, "layers", mc.Layers, "Transformer blocks")
	fs.IntVar(&mc.Dim, "dim", mc.Dim, "model width d")
	fs.IntVar(&mc.Heads, "heads", mc.Heads, "attention heads (head size dim/heads)")
}

// vocabFlag defines --tokenizer for the benchmarks that train a model
// (bench train, bench dp), whose output layer's cost grows with the
// vocabulary's size; open the value with openTokenizer.
func vocabFlag(fs *flag.FlagSet) *string {
	return fs.String("tokenizer", "byte", "the vocabulary of the model, whose size the output layer's cost grows with: "+tokenizerFlagHelp)
}

// checkpointFlags is the flag group of the commands that use a trained
// model (eval, generate, serve): which checkpoint, and the tokenizer and
// attention it must have been trained with, if the user wants that
// checked: the model runs as it was trained.
type checkpointFlags struct {
	path      string
	tokenizer string
	attention attentionFlags
}

func (f *checkpointFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.path, "checkpoint", "run", "checkpoint directory, or the run directory holding it")
	fs.StringVar(&f.tokenizer, "tokenizer", "", "tokenizer to check against the checkpoint's (default: the checkpoint's own; "+tokenizerFlagHelp+")")
	f.attention.register(fs, "the checkpoint's", false)
}

// usage ends the help of a command with the group.
func (f *checkpointFlags) usage(w io.Writer) {
	fmt.Fprintln(w, "\nAttention flags must match the checkpoint's mechanism and options: the model runs as it was trained.")
	printMechanisms(w, nil)
}

// open loads the checkpoint with its tokenizer, and checks --tokenizer
// and the attention flags against it.
func (f *checkpointFlags) open() (*train.Saved, error) {
	s, err := train.Open(f.path)
	if err != nil {
		return nil, err
	}
	if err := s.CheckTokenizer(f.tokenizer); err != nil {
		return nil, err
	}
	if err := f.attention.checkSame(s.Model.Config().Attention); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", s.Dir, err)
	}
	return s, nil
}

// corpusFlags defines the flags of the commands that read a corpus
// (train, eval, tokenizer train, experiment), bound to paths, field and
// cacheDir; a nil field or cacheDir leaves its flag out. defs say what
// no --corpus and no --text-field mean.
func corpusFlags(fs *flag.FlagSet, paths *[]string, field, cacheDir *string, defCorpus, defField string) {
	fs.Var(&listFlag{list: paths}, "corpus", "files (text, JSON lines .jsonl/.ndjson, Parquet .parquet; .gz: gzip), directories or glob patterns, comma-separated or repeated (default: "+defCorpus+")")
	if field != nil {
		fs.StringVar(field, "text-field", *field, "field of JSON-lines records, or column of Parquet files, that holds the text (default: "+defField+")")
	}
	if cacheDir != nil {
		fs.StringVar(cacheDir, "cache-dir", *cacheDir, "directory for tokenized corpora (default: the user cache directory)")
	}
}

// listFlag is a list of strings given comma-separated or by repeating the
// flag. The first value given replaces the default; later ones append.
type listFlag struct {
	list *[]string
	set  bool
}

func (l *listFlag) String() string {
	if l == nil || l.list == nil {
		return ""
	}
	return strings.Join(*l.list, ",")
}

func (l *listFlag) Set(s string) error {
	if !l.set {
		*l.list, l.set = nil, true
	}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			*l.list = append(*l.list, f)
		}
	}
	if len(*l.list) == 0 {
		return errors.New("empty list")
	}
	return nil
}

// fieldFlags maps the fields of the library's configurations, as its
// errors and a refused resume's changes name them (their JSON names; a
// task's as task.NAME), to the flags that set them, where the flag is not
// the name with hyphens for underscores.
var fieldFlags = map[string]string{
	"task.name":          "task",
	"task.path":          "task",
	"task.length":        "context",
	"task.seed":          "seed",
	"task.count":         "task-count",
	"task.vocab":         "task-vocab",
	"task.train":         "task-train",
	"task.test":          "task-test",
	"task.bidirectional": "bidirectional",
}

// flagOf returns the flag that sets the library's field, "--" included.
func flagOf(field string) string {
	if f, ok := fieldFlags[field]; ok {
		return "--" + f
	}
	return "--" + strings.ReplaceAll(field, "_", "-")
}
