package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/experiment"
	"github.com/polysketch/polysketch/internal/regular"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/train"
)

const experimentHelp = `usage: polysketch experiment NAME [flags]

Reruns one of the seeds' comparisons of attention mechanisms in miniature:
a grid of mechanisms × sizes, each an ordinary checkpointed training run
under --dir, then results.jsonl, results.md (a table laid out like the
paper's) and PNG plots there. Running the same command again resumes an
interrupted experiment (Ctrl-C stops it cleanly); a directory made by a
different configuration is refused. The same --seed gives the same table,
bit for bit (but for speed's timings).

Experiments (times measured on a 2-core AMD EPYC, most of them on one
thread beside another experiment, so alone they are shorter; --quick
versions take seconds):
`

func runExperiment(args []string, stdout io.Writer) (err error) {
	help := experimentHelp
	for _, e := range experiment.List() {
		help += fmt.Sprintf("  %-16s %s (%s)\n", e.Name, e.Summary, e.Duration)
	}
	fs := newFlags("experiment", help+"\nflags:\n", stdout)
	defer asCLI(fs, &err)
	var (
		dir, cacheDir string
		textField     string
		maxRecord     byteSize
		quick         bool
		seed          uint64 = 1
		corpus        []string
		logEvery      = 50
		taskFile      string
		contextLen    int
		steps         int
		teacher       string
	)
	fs.StringVar(&dir, "dir", "", "experiment directory (default: experiments/NAME, or experiments/NAME-quick)")
	fs.BoolVar(&quick, "quick", false, "the CI-sized version: tiny models, a few steps, seconds")
	fs.Uint64Var(&seed, "seed", seed, "seed of every run (the lm noise rows use seed+1)")
	fs.IntVar(&steps, "steps", 0, "train every run this many steps instead of the default (warm-up, validations and checkpoints scaled alike; a new --dir)")
	corpusFlags(fs, &corpus, &textField, &cacheDir, &maxRecord, "the Go source tree; lm and speed only", `"text"`)
	tokName := tokenizer.Byte.Name()
	tokenizerFlag(fs, &tokName, "lm and speed: the vocabulary of the models and the corpus")
	fs.StringVar(&taskFile, "task", "", "experiment task: the JSON-lines task file (see 'polysketch train -h'; byte tokens)")
	fs.IntVar(&contextLen, "context", 256, "experiment task: tokens per example")
	fs.StringVar(&teacher, "teacher", "", "experiment linearize: a trained softmax checkpoint to linearize instead of training one (its students get a tenth of the steps it trained)")
	fs.IntVar(&logEvery, "log-every", logEvery, "steps between progress lines when stderr is not a terminal")
	var checkpoints, choices []string
	shots, limit := 5, 500
	fs.Var(&listFlag{list: &checkpoints}, "checkpoints", "experiment downstream: checkpoints (or run directories) to score, comma-separated or repeated (default: train the grid's mechanisms and score those)")
	fs.Var(&listFlag{list: &choices}, "choices", "experiment downstream: files of multiple-choice questions (HellaSwag, PIQA, ARC or generic; JSON lines or Parquet), comma-separated or repeated")
	fs.IntVar(&shots, "shots", shots, "experiment downstream: the shots of the k-shot columns (0: 0-shot only)")
	fs.IntVar(&limit, "limit", limit, "experiment downstream: questions sampled from each file with --seed, as the paper's 500 (0: all)")
	var prec nn.Precision
	addPrecisionFlag(fs, &prec)
	if len(args) == 0 {
		return fmt.Errorf("experiment: name one of %s (see 'polysketch experiment -h')", strings.Join(experiment.Names(), ", "))
	}
	name := args[0]
	if name == "-h" || name == "-help" || name == "--help" || name == "help" {
		fs.Usage()
		return flag.ErrHelp
	}
	if strings.HasPrefix(name, "-") {
		return fmt.Errorf("experiment: name the experiment before the flags: polysketch experiment NAME %s", strings.Join(args, " "))
	}
	args = args[1:]
	e, err := experiment.Lookup(name)
	if err != nil {
		return fmt.Errorf("experiment: %w", err)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if logEvery < 1 {
		return fmt.Errorf("experiment: --log-every %d: must be positive", logEvery)
	}
	if err := absPaths(corpus); err != nil {
		return fmt.Errorf("experiment: --corpus: %w", err)
	}
	if err := absPaths(checkpoints); err != nil {
		return fmt.Errorf("experiment: --checkpoints: %w", err)
	}
	if err := absPaths(choices); err != nil {
		return fmt.Errorf("experiment: --choices: %w", err)
	}
	if name != "downstream" {
		shots, limit = 0, 0 // not the plan of any other experiment
	}
	tok, err := openTokenizer("experiment", tokName)
	if err != nil {
		return err
	}
	if teacher != "" {
		if teacher, err = filepath.Abs(train.CheckpointIn(teacher)); err != nil {
			return fmt.Errorf("experiment: --teacher: %w", err)
		}
	}
	if taskFile != "" {
		if taskFile, err = filepath.Abs(taskFile); err != nil {
			return fmt.Errorf("experiment: --task: %w", err)
		}
	}
	if dir == "" {
		dir = filepath.Join("experiments", name)
		if quick {
			dir += "-quick"
		}
		if steps > 0 {
			dir += fmt.Sprintf("-%dsteps", steps)
		}
		if prec != nn.FP32 {
			dir += "-" + prec.String()
		}
		if tok.Name() != tokenizer.Byte.Name() {
			dir += "-" + tok.Name()
		}
	}
	warnPrecision(stderr, prec)
	p := newProgress(stderr, logEvery)
	o := experiment.Options{
		Dir: dir, Quick: quick, Seed: seed, Corpus: corpus, CacheDir: cacheDir, Logf: p.logf,
		TaskFile: taskFile, Context: contextLen, Steps: steps, Precision: prec, Tokenizer: tok, TextField: textField, MaxRecord: int64(maxRecord),
		Checkpoints: checkpoints, Choices: choices, Shots: shots, Limit: limit, Teacher: teacher,
		Progress: func(run string, u train.Progress) { p.update(u) },
	}
	ctx, stop := interruptible()
	defer stop()
	start := time.Now()
	_, err = e.Run(ctx, o)
	p.done()
	if errors.Is(err, context.Canceled) {
		fmt.Fprintf(stdout, "interrupted; checkpoints saved in %s\ncontinue with the same command\n", dir)
		return nil
	}
	if err != nil {
		return fmt.Errorf("experiment %s: %w", name, err)
	}
	table, err := regular.ReadFile(filepath.Join(dir, experiment.TableFile))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\nwritten in %s: %s, %s, plots (this session: %s)\n", table, dir,
		experiment.ResultsFile, experiment.TableFile, time.Since(start).Round(time.Second))
	return nil
}
