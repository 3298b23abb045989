package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/polysketch/polysketch/data/task"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/sample"
)

const generateHelp = `usage: polysketch generate [flags]

Samples text from a checkpoint, continuing --prompt, and streams it to
stdout token by token. Generation is incremental: the prompt runs through
the model in chunks of positions (matrix products), then each token runs
it once at one position, keeping per-layer state (for polysketch a state
of constant size, so every token costs the same and prompt and text may
run past the context length trained on; for the other mechanisms a KV
cache limited to the model's context length).

Sampling: the logits are divided by --temperature (0 picks the most likely
token every time), cut to the --top-k most likely tokens (0: all), then to
the smallest set whose probability reaches --top-p (1: all), and a token is
drawn from what is left with a generator seeded by --seed.

A model trained on GPT-2 tokens has seen <|endoftext|> between documents:
generation stops when it samples that token, without printing it, unless
--stop-at-eot=false. An imported model stops at its own end-of-sequence
tokens (generation_config.json's eos_token_id, tokenizer_config.json's
eos_token), and its prompt starts with its beginning-of-sequence token
where its tokenizer adds one (Llama's <s>).

flags:
`

func runGenerate(args []string, stdout io.Writer) error {
	var ck checkpointFlags
	fs := newFlags("generate", generateHelp, stdout, ck.usage)
	ck.register(fs)
	var (
		prompt  = fs.String("prompt", "func main() {\n", "text to continue")
		n       = fs.Int("tokens", 200, "tokens to generate")
		echo    = fs.Bool("echo", true, "print the prompt before the generated text")
		stopEOT = fs.Bool("stop-at-eot", true, "stop at the model's end-of-sequence tokens (GPT-2's <|endoftext|>, an imported model's eos_token_id), if it has any")
		s       = sample.New(0.8, 0.95, 0, nil)
	)
	fs.Float64Var(&s.Temperature, "temperature", s.Temperature, "sampling temperature; 0 is greedy")
	fs.IntVar(&s.TopK, "top-k", s.TopK, "sample among the k most likely tokens only; 0 for all")
	fs.Float64Var(&s.TopP, "top-p", s.TopP, "sample among the most likely tokens of total probability p only (nucleus); 1 for all")
	seed := fs.Uint64("seed", 1, "seed of the sampling")
	var prec nn.Precision
	addPrecisionFlag(fs, &prec)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case !(s.Temperature >= 0) || math.IsInf(s.Temperature, 0):
		return fmt.Errorf("generate: --temperature %v: must be 0 or positive", s.Temperature)
	case s.TopK < 0:
		return fmt.Errorf("generate: --top-k %d: must not be negative", s.TopK)
	case !(s.TopP > 0 && s.TopP <= 1):
		return fmt.Errorf("generate: --top-p %v: must be in (0, 1]", s.TopP)
	case *n < 0:
		return fmt.Errorf("generate: --tokens %d: must not be negative", *n)
	case *prompt == "":
		return errors.New("generate: --prompt is empty: the model needs at least one token to start from")
	}

	c, err := ck.open()
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	dir, tok := c.Dir, c.Tokenizer
	if recipe, _ := c.Recipe(); recipe.Task != nil && recipe.Task.Name != task.File {
		return fmt.Errorf("generate: checkpoint %s was trained on the task %s, whose tokens are not text; score it with 'polysketch eval --checkpoint %s'", dir, recipe.Task.Name, ck.path)
	}
	var eos []int32
	if *stopEOT {
		eos = c.TokenizerConfig.EOS
	}
	ids := tok.Encode(slices.Clone(c.TokenizerConfig.Begin), []byte(*prompt))
	if len(ids) == 0 {
		return fmt.Errorf("generate: --prompt %q encodes to no tokens: the model needs at least one to start from", *prompt)
	}
	warnPrecision(stderr, prec)
	if err := inferIn(c.Model, prec); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	dec, err := c.Model.NewDecoder(1)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	// The last generated token is never fed back: prompt and tokens may
	// take one position more than the limit.
	if limit := dec.Limit(); limit > 0 && len(ids) > limit {
		return fmt.Errorf("generate: the prompt of %d tokens exceeds the context length %d of this %s model; shorten it",
			len(ids), limit, c.Model.Config().Attention.Mechanism())
	} else if limit > 0 && len(ids)+*n-1 > limit {
		return fmt.Errorf("generate: a prompt of %d tokens and --tokens %d exceed the context length %d of this %s model; use --tokens %d or fewer",
			len(ids), *n, limit, c.Model.Config().Attention.Mechanism(), limit-len(ids)+1)
	}
	s.Rand = rand.New(rand.NewPCG(*seed, 0x67656e6572617465)) // "generate"

	ctx, stop := interruptible()
	defer stop()
	if *echo {
		if _, err := io.WriteString(stdout, *prompt); err != nil {
			return err
		}
	}
	flush(stdout)
	// The whole prompt in one Prefill, which cuts it into chunks; its
	// logits are those of the first token to generate.
	start := time.Now()
	logits, err := dec.Prefill(ids)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	prefill := time.Since(start)
	start = time.Now()
	var out []byte
	generated := 0
	for generated < *n && ctx.Err() == nil {
		next := s.Next(logits.Data)
		if slices.Contains(eos, next) {
			break
		}
		if out, err = tok.Decode(out[:0], []int32{next}); err != nil {
			return fmt.Errorf("generate: %w", err)
		}
		if _, err := stdout.Write(out); err != nil {
			return err
		}
		flush(stdout)
		if generated++; generated < *n {
			if logits, err = dec.Step([]int32{next}); err != nil {
				return fmt.Errorf("generate: %w", err)
			}
		}
	}
	fmt.Fprintln(stdout)
	d := time.Since(start)
	fmt.Fprintf(stderr, "generated %d tokens in %s (%.1f tokens/s) after a prompt of %d tokens in %s (%.1f tokens/s)\n",
		generated, d.Round(time.Millisecond), float64(generated)/d.Seconds(),
		len(ids), prefill.Round(time.Millisecond), float64(len(ids))/prefill.Seconds())
	return nil
}

// flush flushes w if it buffers.
func flush(w io.Writer) {
	if f, ok := w.(interface{ Flush() error }); ok {
		f.Flush()
	}
}
