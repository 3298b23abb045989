package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/polysketch/polysketch/data"
	"github.com/polysketch/polysketch/internal/field"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/sample"
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

// tokenizerFlag defines --tokenizer on fs, bound to p with its current
// value as default: what use says it is for, then what it takes (byte,
// gpt2, or a tokenizer.json or a directory holding one). Open the value
// with openTokenizer.
func tokenizerFlag(fs *flag.FlagSet, p *string, use string) {
	fs.StringVar(p, "tokenizer", *p, use+"; "+tokenizerFlagHelp)
}

// vocabFlag defines --tokenizer for the benchmarks that train a model
// (bench train, bench dp), whose output layer's cost grows with the
// vocabulary's size.
func vocabFlag(fs *flag.FlagSet) *string {
	name := "byte"
	tokenizerFlag(fs, &name, "the vocabulary of the model, whose size the output layer's cost grows with")
	return &name
}

// jsonFlag defines --json on fs, bound to p: print what instead of text
// for people (writeJSONLine).
func jsonFlag(fs *flag.FlagSet, p *bool, what string) {
	fs.BoolVar(p, "json", false, "print "+what)
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
	tokenizerFlag(fs, &f.tokenizer, "the tokenizer to check against the checkpoint's (default: the checkpoint's own)")
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
// (train, eval, tokenizer train, experiment), bound to paths, field,
// cacheDir and maxRecord; a nil field or cacheDir leaves its flag out.
// defs say what no --corpus and no --text-field mean.
func corpusFlags(fs *flag.FlagSet, paths *[]string, field, cacheDir *string, maxRecord *byteSize, defCorpus, defField string) {
	if *maxRecord == 0 {
		*maxRecord = data.DefaultMaxRecord
	}
	fs.Var(maxRecord, "max-record", "the longest record to read, a JSON-lines line or a Parquet text, as 64MiB: a longer one is refused, as it would take as much memory")
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
	"task_file":          "task", // experiment.Options.TaskFile
}

// flagOf returns the flag that sets the library's field, "--" included.
func flagOf(field string) string {
	if f, ok := fieldFlags[field]; ok {
		return "--" + f
	}
	return "--" + strings.ReplaceAll(field, "_", "-")
}

// samplingFlags defines the flags of sampling (generate), bound to set,
// with its values as defaults.
func samplingFlags(fs *flag.FlagSet, set *sample.Settings) {
	fs.Float64Var(&set.Temperature, "temperature", set.Temperature, "sampling temperature; 0 is greedy")
	fs.IntVar(&set.TopK, "top-k", set.TopK, "sample among the k most likely tokens only; 0 for all")
	fs.Float64Var(&set.TopP, "top-p", set.TopP, "sample among the most likely tokens of total probability p only (nucleus); 1 for all")
	fs.Float64Var(&set.PresencePenalty, "presence-penalty", set.PresencePenalty, fmt.Sprintf("subtracted from the logit of every token generated before, from -%d to %d", sample.MaxPenalty, sample.MaxPenalty))
	fs.Float64Var(&set.FrequencyPenalty, "frequency-penalty", set.FrequencyPenalty, fmt.Sprintf("subtracted from the logit of a token once per time it was generated, from -%d to %d", sample.MaxPenalty, sample.MaxPenalty))
	fs.Var(&biasFlag{&set.LogitBias}, "logit-bias", "ID:BIAS pairs, comma-separated or repeated, added to the logits of token ids; -100 bans a token (as 50256:-100)")
}

// biasFlag is a logit bias given as ID:BIAS pairs.
type biasFlag struct{ bias *map[int32]float64 }

func (b *biasFlag) String() string {
	if b == nil || b.bias == nil {
		return ""
	}
	var pairs []string
	for id, v := range *b.bias {
		pairs = append(pairs, fmt.Sprintf("%d:%g", id, v))
	}
	slices.Sort(pairs)
	return strings.Join(pairs, ",")
}

func (b *biasFlag) Set(s string) error {
	if *b.bias == nil {
		*b.bias = map[int32]float64{}
	}
	for pair := range strings.SplitSeq(s, ",") {
		id, v, ok := strings.Cut(strings.TrimSpace(pair), ":")
		tok, err := strconv.ParseInt(strings.TrimSpace(id), 10, 32)
		bias, err2 := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if !ok || err != nil || err2 != nil {
			return fmt.Errorf("%q: want token:bias pairs such as 50256:-100", pair)
		}
		(*b.bias)[int32(tok)] = bias
	}
	return nil
}

// asCLI rewrites *err, a command's error, as the command line shows it:
// in one line (errors.Join's lines joined), and with the fields that the
// library's errors in it name (internal/field) named as the flags of fs
// that set them; a field fs has no flag for keeps the library's name.
// Every command that reports the library's errors defers it.
func asCLI(fs *flag.FlagSet, err *error) {
	if *err == nil {
		return
	}
	msg := oneLine(errors.New(field.Rename(*err, func(name string) string {
		f := flagOf(name)
		if fs.Lookup(strings.TrimPrefix(f, "--")) == nil {
			return name
		}
		return f
	})))
	if msg != (*err).Error() {
		*err = &flagError{msg, *err}
	}
}

// flagError is an error said in the words of the command line.
type flagError struct {
	msg string
	err error
}

func (e *flagError) Error() string { return e.msg }
func (e *flagError) Unwrap() error { return e.err }
