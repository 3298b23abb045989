package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
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
--stop-at-eot=false. An imported model stops at its own end-of-sequence
tokens (generation_config.json's eos_token_id, tokenizer_config.json's
eos_token), and its prompt starts with its beginning-of-sequence token
where its tokenizer adds one (Llama's <s>).

Ids in, ids out, for scripts: --prompt-ids 1,2,3 continues those token
ids instead of --prompt's text (the only way for a model imported without
a tokenizer), and --json prints one JSON object when done instead of
streaming the text: {"prompt_ids": […], "ids": […], "text": "…"}, the
generated ids and their text (absent without a tokenizer).

flags:
`

func runGenerate(args []string, stdout io.Writer) (err error) {
	var ck checkpointFlags
	fs := newFlags("generate", generateHelp, stdout, ck.usage)
	defer asCLI(fs, &err)
	ck.register(fs)
	var (
		prompt  = fs.String("prompt", "func main() {\n", "text to continue")
		n       = fs.Int("tokens", 200, "tokens to generate")
		echo    = fs.Bool("echo", true, "print the prompt before the generated text")
		stopEOT = fs.Bool("stop-at-eot", true, "stop at the model's end-of-sequence tokens (GPT-2's <|endoftext|>, an imported model's eos_token_id), if it has any")
		set     = sample.Settings{Temperature: 0.8, TopP: 0.95}
	)
	samplingFlags(fs, &set)
	seed := fs.Uint64("seed", 1, "seed of the sampling")
	promptIDs := fs.String("prompt-ids", "", "comma-separated token ids to continue, instead of --prompt's text")
	asJSON := fs.Bool("json", false, "print the prompt's and the generated ids and the text as one JSON object when done, instead of streaming the text")
	var prec nn.Precision
	addPrecisionFlag(fs, &prec)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *n < 0:
		return fmt.Errorf("generate: --tokens %d: must not be negative", *n)
	case isSet(fs, "prompt-ids") && strings.TrimSpace(*promptIDs) == "":
		return errors.New("generate: --prompt-ids is empty: the model needs at least one token to start from")
	case *prompt == "" && *promptIDs == "":
		return errors.New("generate: --prompt is empty: the model needs at least one token to start from")
	}
	if isSet(fs, "prompt") && *promptIDs != "" {
		return usageError{errors.New("generate: --prompt and --prompt-ids: give the prompt as text or as ids, not both")}
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
	ctx, stop := interruptible()
	defer stop()
	var eos []int32
	if *stopEOT {
		eos = c.TokenizerConfig.EOS
	}
	// Ids are taken as they are given, as transformers takes input_ids;
	// text is encoded after the model's beginning-of-sequence tokens.
	var ids []int32
	if *promptIDs != "" {
		if ids, err = parseIDs(*promptIDs, c.Model.Config().Vocab); err != nil {
			return fmt.Errorf("generate: --prompt-ids: %w", err)
		}
		if tok != nil {
			if p, err := tokenizer.Text(tok, nil, ids); err == nil { // as Hugging Face's libraries decode them
				*prompt = string(p)
			}
		}
	} else if err := c.NeedTokenizer(); err != nil {
		return fmt.Errorf("generate: %w; give the prompt as --prompt-ids", err)
	} else {
		ids, err = tok.Encode(ctx, slices.Clone(c.TokenizerConfig.Begin), []byte(*prompt))
		if err != nil {
			return fmt.Errorf("generate: --prompt: %w", err)
		}
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

	// With --json, or without a tokenizer, nothing streams: the ids (and
	// text) come at the end.
	text := stdout
	if *asJSON || tok == nil {
		text = io.Discard
	}
	if *echo {
		if _, err := io.WriteString(text, *prompt); err != nil {
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
	var out, all []byte
	var gen []int32
	generated := 0
	for generated < *n && ctx.Err() == nil {
		next, err := s.Next(logits.Data)
		if err != nil {
			fmt.Fprintln(text)
			return fmt.Errorf("generate: after %d tokens: %w", generated, err)
		}
		if slices.Contains(eos, next) {
			break
		}
		gen = append(gen, next)
		if tok != nil {
			if out, err = tok.Decode(out[:0], []int32{next}); err != nil {
				return fmt.Errorf("generate: %w", err)
			}
			all = append(all, out...)
			if _, err := text.Write(out); err != nil {
				return err
			}
			flush(text)
		}
		if generated++; generated < *n {
			if logits, err = dec.Step([]int32{next}); err != nil {
				return fmt.Errorf("generate: %w", err)
			}
		}
	}
	if *asJSON || tok == nil {
		if err := printGenerated(stdout, ids, gen, all, tok != nil, *asJSON); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(stdout)
	}
	d := time.Since(start)
	fmt.Fprintf(stderr, "generated %d tokens in %s (%.1f tokens/s) after a prompt of %d tokens in %s (%.1f tokens/s)\n",
		generated, d.Round(time.Millisecond), float64(generated)/d.Seconds(),
		len(ids), prefill.Round(time.Millisecond), float64(len(ids))/prefill.Seconds())
	return nil
}

// printGenerated prints the generated ids: as one JSON object (with the
// text, if there is a tokenizer), or as space-separated numbers.
func printGenerated(w io.Writer, prompt, gen []int32, text []byte, hasText, asJSON bool) error {
	if !asJSON {
		for i, id := range gen {
			if i > 0 {
				fmt.Fprint(w, " ")
			}
			fmt.Fprint(w, id)
		}
		_, err := fmt.Fprintln(w)
		return err
	}
	v := struct {
		Prompt []int32 `json:"prompt_ids"`
		IDs    []int32 `json:"ids"`
		Text   *string `json:"text,omitempty"`
	}{Prompt: prompt, IDs: gen}
	if v.IDs == nil {
		v.IDs = []int32{}
	}
	if hasText {
		s := string(text)
		v.Text = &s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// parseIDs parses comma-separated token ids, each in [0, vocab).
func parseIDs(s string, vocab int) ([]int32, error) {
	var ids []int32
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		id, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q is not a token id", f)
		}
		if id < 0 || id >= int64(vocab) {
			return nil, fmt.Errorf("id %d is outside the vocabulary [0, %d)", id, vocab)
		}
		ids = append(ids, int32(id))
	}
	return ids, nil
}

// flush flushes w if it buffers.
func flush(w io.Writer) {
	if f, ok := w.(interface{ Flush() error }); ok {
		f.Flush()
	}
}
