// Command polysketch trains, evaluates and samples transformer language
// models with PolySketch attention, and benchmarks its kernels.
//
// Usage:
//
//	polysketch <command> [flags]
//
// Run "polysketch help" for the list of commands, "polysketch <command>
// -h" for the flags of one, and "polysketch --version" for the build.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand: run parses its own flags from args.
type command struct {
	summary string
	run     func(args []string, stdout io.Writer) error
}

var commands = map[string]command{
	"bench":      {"measure speed: bench gemm | bench attention | bench train | bench serve | bench cache | bench decode | bench position", runBench},
	"attend":     {"run one attention mechanism on tensors from a safetensors file", runAttend},
	"train":      {"train a language model on text files (default: the Go source tree)", runTrain},
	"linearize":  {"convert a trained softmax model into one with linear attention (attention transfer, then fine-tuning)", runLinearize},
	"eval":       {"loss and perplexity of a checkpoint on a corpus", runEval},
	"generate":   {"sample text from a checkpoint, streaming it token by token", runGenerate},
	"mechanisms": {"list the attention mechanisms, their cost and options", runMechanisms},
	"serve":      {"serve a checkpoint over the OpenAI HTTP API (completions, chat, streaming)", runServe},
	"tokenizer":  {"fit a BPE vocabulary to a corpus, encode and decode: tokenizer train | encode | decode", runTokenizer},
	"experiment": {"rerun a comparison of the seeds: a grid of mechanisms × sizes, its table and plots", runExperiment},
	"info":       {"describe a checkpoint: model, parameters, tokenizer, step, losses, and whether it verifies", runInfo},
	"import":     {"convert a Hugging Face model directory (llama, mistral, qwen2, gpt2) into a checkpoint", runImport},
	"export":     {"write a checkpoint as a Hugging Face model directory (Llama layout)", runExport},
	"logits":     {"write a checkpoint's float32 logits for token ids read from a safetensors file", runLogits},
}

var benches = map[string]command{
	"gemm":      {"GFLOPS of SGEMM for square and attention-shaped sizes", benchGEMM},
	"attention": {"forward and backward time per token of each attention mechanism", benchAttention},
	"train":     {"training tokens/s and peak memory of each attention mechanism", benchTrain},
	"serve":     {"requests/s, tokens/s and latencies of an OpenAI-compatible server under load", benchServe},
	"dp":        {"data-parallel training tokens/s, alone or under mpirun, and time waiting on communication", benchDP},
	"cache":     {"time to first token of follow-ups, state memory and shared-prompt tokens/s with the prefix cache of serve", benchCache},
	"decode":    {"decoding tokens/s of one and several streams and prefill tokens/s, against the memory-bandwidth bound", benchDecode},
	"position":  {"time per token and state bytes of one stream decoded with a checkpoint, against its position", benchPosition},
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		if errors.Is(err, errReported) { // a rank other than 0, whose failure rank 0 prints
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "polysketch:", oneLine(err))
		os.Exit(exitCode(err))
	}
}

// usageError is an error in how a command was called: an unknown command,
// flag or argument, or a flag's value that does not parse.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// exitCode returns the exit status for err: 2 for a usage error, as the
// flag package exits, and 1 for any other failure.
func exitCode(err error) int {
	if errors.As(err, new(usageError)) {
		return 2
	}
	return 1
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout, "polysketch", commands)
		return nil
	}
	if args[0] == "--version" || args[0] == "-version" || args[0] == "version" {
		info, ok := debug.ReadBuildInfo()
		_, err := fmt.Fprintln(stdout, version(info, ok))
		return err
	}
	c, ok := commands[args[0]]
	if !ok {
		return usageError{fmt.Errorf("unknown command %q; run 'polysketch help' for the list", args[0])}
	}
	return c.run(args[1:], stdout)
}

func runBench(args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout, "polysketch bench", benches)
		return nil
	}
	c, ok := benches[args[0]]
	if !ok {
		return usageError{fmt.Errorf("unknown benchmark %q; run 'polysketch bench help' for the list", args[0])}
	}
	return c.run(args[1:], stdout)
}

func usage(w io.Writer, prefix string, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\ncommands:\n", prefix)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
}

// newFlags returns the flag set of the command name, which reports
// errors instead of exiting, so that every failure reaches main as one
// line. Its -h prints help (the usage line and what the command does,
// ending in "flags:"), the flags, then what each of more adds (the
// mechanisms, the tasks).
func newFlags(name, help string, stdout io.Writer, more ...func(w io.Writer)) *flag.FlagSet {
	fs := flag.NewFlagSet("polysketch "+name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help)
		fs.PrintDefaults()
		for _, f := range more {
			f(fs.Output())
		}
	}
	return fs
}

// parseFlags parses args and rejects stray positional arguments. A bad
// flag gives one error line (no usage dump); -h prints the usage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return err
	}
	if err != nil {
		return usageError{fmt.Errorf("%s: %w (see '%s -h')", strings.TrimPrefix(fs.Name(), "polysketch "), err, fs.Name())}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("%s: unexpected argument %q (flags go before nothing else; see -h)", fs.Name(), strings.Join(fs.Args(), " "))}
	}
	return nil
}

// interruptible returns a context that SIGINT or SIGTERM cancels, for a
// command to stop cleanly (save, answer, report); the first signal also
// restores the default action, so a second one kills the process at
// once. stop releases the signals.
func interruptible() (ctx context.Context, stop context.CancelFunc) {
	ctx, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	return ctx, stop
}

// oneLine joins the lines of a multi-line error (errors.Join) with "; ":
// every failure reaches the user as one line.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// writeJSONLine writes v as one line of JSON, the --json output of every
// command.
func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
