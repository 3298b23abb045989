package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/polysketch/polysketch/data/task"
	"github.com/polysketch/polysketch/data/tokenizer"
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

Sampling: the logits get --logit-bias (-100 bans a token) and the
penalties on tokens generated before (--presence-penalty once,
--frequency-penalty per time generated), are divided by --temperature (0
picks the most likely token every time), cut to the --top-k most likely
tokens (0: all), then to the smallest set whose probability reaches
--top-p (1: all), and a token is drawn from what is left with a generator
seeded by --seed. Logits that are not finite (a model that overflows) stop
generation with an error.

A model trained on GPT-2 tokens has seen <|endoftext|> between documents:
generation stops when it samples that token, without printing it, unless
--stop-at-eot=false.

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
		stopEOT = fs.Bool("stop-at-eot", true, "stop at the tokenizer's end-of-text token (GPT-2's <|endoftext|>), if it has one")
		set     = sample.Settings{Temperature: 0.8, TopP: 0.95}
	)
	samplingFlags(fs, &set)
	seed := fs.Uint64("seed", 1, "seed of the sampling")
	var prec nn.Precision
	addPrecisionFlag(fs, &prec)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
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
	if err := set.Validate(c.Model.Config().Vocab); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	if recipe, _ := c.Recipe(); recipe.Task != nil && recipe.Task.Name != task.File {
		return fmt.Errorf("generate: checkpoint %s was trained on the task %s, whose tokens are not text; score it with 'polysketch eval --checkpoint %s'", dir, recipe.Task.Name, ck.path)
	}
	eot, hasEOT := tokenizer.EndOfText(tok)
	hasEOT = hasEOT && *stopEOT
	ctx, stop := interruptible()
	defer stop()
	ids, err := tok.Encode(ctx, nil, []byte(*prompt))
	if err != nil {
		return fmt.Errorf("generate: --prompt: %w", err)
	}
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
	s := sample.New(set, rand.New(rand.NewPCG(*seed, 0x67656e6572617465))) // "generate"

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
		next, err := s.Next(logits.Data)
		if err != nil {
			fmt.Fprintln(stdout)
			return fmt.Errorf("generate: after %d tokens: %w", generated, err)
		}
		if hasEOT && next == eot {
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
