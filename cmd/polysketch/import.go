package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/hf"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/serve"
	"github.com/polysketch/polysketch/train"
)

const importHelp = `usage: polysketch import [flags] HF_DIR --out DIR

Converts a Hugging Face model directory into a polysketch checkpoint in
DIR: what transformers' save_pretrained writes and 'hf download' fetches
(config.json; model.safetensors, or the shards of
model.safetensors.index.json, in float32, bfloat16 or float16;
tokenizer.json, tokenizer_config.json, generation_config.json and
chat_template.jinja, which the checkpoint keeps as they are). The weights
become float32 master weights; the checkpoint is checksummed (every
command that reads it verifies it) and every command takes it as it
takes one trained here.

Architectures (config.json's model_type): llama (Llama 1-3.x, SmolLM,
TinyLlama), mistral (with no sliding window, or one at least the
context), qwen2, gpt2. A setting of config.json that changes the
computation and that polysketch does not compute (another activation, a
rope_type such as yarn, a smaller sliding window) is refused, naming the
field; fields transformers does not read either are listed.

The imported model computes softmax attention (--attention flash, in
tiles, or softmax) over a context of max_position_embeddings (--context).

flags:
`

func runImport(args []string, stdout io.Writer) (err error) {
	fs := newFlags("import", importHelp, stdout)
	defer asCLI(fs, &err)
	out := fs.String("out", "", "checkpoint directory to write (required)")
	force := fs.Bool("force", false, "replace the checkpoint in --out")
	ctxLen := fs.Int("context", 0, "longest sequence the model takes, and its KV caches' limit (default: config.json's max_position_embeddings)")
	var attn attentionFlags
	attn.register(fs, "flash", false)
	src, err := parseWithArg(fs, args, "import", "HF_DIR")
	if err != nil {
		return err
	}
	switch {
	case *out == "":
		return usageError{errors.New("import: --out is required: the checkpoint directory to write")}
	case *ctxLen < 0:
		return fmt.Errorf("import: --context %d: must be positive", *ctxLen)
	}
	if err := checkOut(*out, *force, "import"); err != nil {
		return err
	}
	opts := hf.Options{Context: *ctxLen}
	if attn.given() {
		if opts.Attention, err = attn.apply(nil); err != nil {
			return fmt.Errorf("import: %w", err)
		}
	}
	start := time.Now()
	imp, err := hf.Read(src, opts)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	c := &checkpoint.Checkpoint{Model: imp.Model, TokenizerJSON: imp.Tokenizer, Files: imp.Files}
	tokDesc := "none (no tokenizer.json: the model reads and writes token ids)"
	if imp.Tokenizer != nil {
		tok, err := tokenizer.Parse(imp.Tokenizer)
		if err != nil {
			return fmt.Errorf("import: %s: %w", filepath.Join(src, hf.TokenizerFile), err)
		}
		if v := imp.Model.Config().Vocab; tok.VocabSize() > v {
			return fmt.Errorf("import: %s has %d tokens, more than the model's vocab_size %d", filepath.Join(src, hf.TokenizerFile), tok.VocabSize(), v)
		}
		// The files kept beside it, as every command that opens the
		// checkpoint will read them: one they would refuse is refused
		// now, before anything is written.
		cfg, err := tokenizer.ReadConfig(src, tok)
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		if err := serve.CheckChatTemplate(cfg); err != nil {
			file := hf.TokenizerCfg
			if _, ok := imp.Files[hf.ChatTemplate]; ok {
				file = hf.ChatTemplate // which ReadConfig prefers
			}
			return fmt.Errorf("import: %s: %w; serve could not chat with the model: fix the template, or remove it for the plain rendering", filepath.Join(src, file), err)
		}
		c.State.Tokenizer = tok.Name()
		tokDesc = fmt.Sprintf("%s (%d tokens)", tok.Name(), tok.VocabSize())
	}
	// Until now a signal ends the process with nothing written; while the
	// checkpoint is written it stops the save, which then leaves --out as
	// it was and nothing of its own behind. Save hashes the bytes it
	// writes and syncs them: reading them back from the page cache here
	// would check nothing the first command to load the checkpoint does
	// not (a fifth of the import's time).
	ctx, stop := interruptible()
	defer stop()
	if savingHook != nil {
		savingHook(ctx)
	}
	if err := checkpoint.SaveContext(ctx, *out, c); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("import: interrupted: %s left as it was", *out)
		}
		return fmt.Errorf("import: %w", err)
	}
	stop()
	mc := imp.Model.Config()
	fmt.Fprintf(stdout, "imported %s from %s: %s\n", imp.Type, src, describeModel(mc))
	var dtypes []string
	for dt, n := range imp.DTypes {
		dtypes = append(dtypes, fmt.Sprintf("%d %s", n, dt))
	}
	slices.Sort(dtypes)
	params := 0
	for _, p := range imp.Model.Params() {
		params += p.Value.Len()
	}
	fmt.Fprintf(stdout, "parameters: %s, from %s tensors, now float32\n", exactCount(params), strings.Join(dtypes, ", "))
	fmt.Fprintf(stdout, "tokenizer: %s\n", tokDesc)
	if len(imp.Files) > 0 {
		var kept []string
		for name := range imp.Files {
			kept = append(kept, name)
		}
		slices.Sort(kept)
		fmt.Fprintf(stdout, "kept: %s\n", strings.Join(kept, ", "))
	}
	if len(imp.Ignored) > 0 {
		fmt.Fprintf(stdout, "not read (transformers does not read them for %s either): %s\n", imp.Type, strings.Join(imp.Ignored, ", "))
	}
	// Read back what was written: the manifest's checksums against the
	// files on disk, as every later load checks them.
	if err := checkpoint.Verify(*out); err != nil {
		return fmt.Errorf("import: the checkpoint written to %s does not verify: %w", *out, err)
	}
	fmt.Fprintf(stdout, "checkpoint %s written and verified in %s\n", *out, time.Since(start).Round(time.Millisecond))
	return nil
}

// savingHook, if set, is called as import or export starts writing, with
// the context that a signal cancels (a test interrupts them there).
var savingHook func(ctx context.Context)

// describeModel is one line of a model's shape and architecture.
func describeModel(c model.Config) string {
	h := c.HeadSize()
	heads := fmt.Sprintf("%d heads of %d", c.Heads, h)
	if g := c.KVHeadCount(); g != c.Heads {
		heads = fmt.Sprintf("%d query heads of %d, %d key/value heads", c.Heads, h, g)
	}
	s := fmt.Sprintf("%s, dim %d, %s, hidden %d, context %d, vocabulary %d", plural(c.Layers, "layer"), c.Dim, heads, c.HiddenSize(), c.Context, c.Vocab)
	var arch []string
	if c.Norm != "" {
		arch = append(arch, c.Norm)
	}
	if c.FFN != "" {
		arch = append(arch, c.FFN)
	}
	if c.Positions != "" {
		p := "positions " + c.Positions
		if c.RoPETheta != 0 {
			p += fmt.Sprintf(", θ %g", c.RoPETheta)
		}
		if s := c.RoPEScaling; s.Type != "" {
			p += fmt.Sprintf(", %s scaling ×%g", s.Type, s.Factor)
		}
		arch = append(arch, p)
	}
	var biases []string
	for _, b := range []struct {
		on   bool
		name string
	}{{c.QKVBias, "qkv"}, {c.OutBias, "out"}, {c.FFNBias, "ffn"}} {
		if b.on {
			biases = append(biases, b.name)
		}
	}
	if len(biases) > 0 {
		arch = append(arch, "biases on "+strings.Join(biases, ", "))
	}
	if c.Tied {
		arch = append(arch, "tied output")
	}
	if len(arch) > 0 {
		s += " (" + strings.Join(arch, "; ") + ")"
	}
	return s
}

// parseWithArg parses fs from args with one positional argument, called
// what in messages, before or after the flags, and returns it.
func parseWithArg(fs *flag.FlagSet, args []string, cmd, what string) (string, error) {
	var arg string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--":
			i = len(args)
		case strings.HasPrefix(a, "-"):
			if flagTakesValue(fs, a) {
				i++
			}
		default:
			arg, args = a, append(args[:i:i], args[i+1:]...)
			i = len(args)
		}
	}
	if err := parseFlags(fs, args); err != nil {
		return "", err
	}
	if arg == "" {
		return "", usageError{fmt.Errorf("%s: name the %s: polysketch %s %s [flags]", cmd, what, cmd, what)}
	}
	return arg, nil
}

// flagTakesValue reports whether arg is a flag of fs that takes the next
// argument as its value ("--out" but not "--force" or "--out=x").
func flagTakesValue(fs *flag.FlagSet, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	if strings.Contains(name, "=") || !strings.HasPrefix(arg, "-") {
		return false
	}
	f := fs.Lookup(name)
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

// checkOut refuses an --out that holds something, unless force and it is
// what the command writes: a checkpoint for import (which a save then
// replaces as a whole), a Hugging Face model directory for export (never
// a checkpoint, which has a config.json too, nor a run directory).
func checkOut(out string, force bool, cmd string) error {
	entries, err := os.ReadDir(out)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: --out %s: %w", cmd, out, err)
	}
	if len(entries) == 0 {
		return nil
	}
	if !force {
		return fmt.Errorf("%s: --out %s exists: choose another directory, or give --force to replace it", cmd, out)
	}
	if cmd == "import" && !checkpoint.Exists(out) {
		return fmt.Errorf("%s: --out %s holds files but no checkpoint: --force replaces a checkpoint only; choose another directory", cmd, out)
	}
	if cmd == "export" && (checkpoint.Exists(train.CheckpointIn(out)) || !slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == hf.ConfigFile })) {
		return fmt.Errorf("%s: --out %s holds files but no Hugging Face model (a %s, and no checkpoint): --force replaces an exported model only; choose another directory", cmd, out, hf.ConfigFile)
	}
	return nil
}
