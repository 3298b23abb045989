package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/polysketch/polysketch/hf"
	"github.com/polysketch/polysketch/train"
)

const exportHelp = `usage: polysketch export --checkpoint DIR --out HF_DIR [flags]

Writes the model of a checkpoint as a Hugging Face model directory of the
Llama layout, which transformers' LlamaForCausalLM (and every tool that
reads Llama checkpoints) loads: config.json, model.safetensors (float32,
the weights as they are), and the checkpoint's tokenizer.json,
tokenizer_config.json and generation_config.json. The reverse of import:
importing the directory again gives the same logits, bit for bit.

The Llama layout has RMSNorm, SwiGLU, rotary embeddings alone and softmax
attention, without an embedding scale or a logits bias: a model of
another architecture is refused, naming what the layout cannot hold.

flags:
`

func runExport(args []string, stdout io.Writer) error {
	fs := newFlags("export", exportHelp, stdout)
	path := fs.String("checkpoint", "run", "checkpoint directory, or the run directory holding it")
	out := fs.String("out", "", "Hugging Face model directory to write (required)")
	force := fs.Bool("force", false, "replace the Hugging Face model directory in --out (never a checkpoint or a run)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usageError{errors.New("export: --out is required: the model directory to write")}
	}
	if err := checkOut(*out, *force, "export"); err != nil {
		return err
	}
	c, err := train.Open(*path)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if _, err := hf.LlamaConfig(c.Model.Config()); err != nil {
		return fmt.Errorf("export: checkpoint %s cannot be written in the Llama layout: %w", c.Dir, err)
	}
	files := map[string][]byte{}
	if c.TokenizerJSON != nil {
		files[hf.TokenizerFile] = c.TokenizerJSON
	}
	for name, b := range c.Files {
		files[name] = b
	}
	// A fresh directory beside --out, swapped in once complete.
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(*out)), "."+filepath.Base(*out)+".export*")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	os.Remove(tmp)
	defer os.RemoveAll(tmp)
	// A signal while the model is written stops the writing, which
	// leaves nothing; --out is as it was.
	ctx, stop := interruptible()
	defer stop()
	if savingHook != nil {
		savingHook(ctx)
	}
	if err := hf.WriteContext(ctx, tmp, c.Model, files); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("export: interrupted: %s left as it was", *out)
		}
		return fmt.Errorf("export: %s", err)
	}
	stop()
	old := tmp + ".old"
	if _, err := os.Lstat(*out); err == nil {
		if err := os.Rename(*out, old); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		defer os.RemoveAll(old)
	}
	if err := os.Rename(tmp, *out); err != nil {
		os.Rename(old, *out)
		return fmt.Errorf("export: %w", err)
	}
	fmt.Fprintf(stdout, "exported %s to %s (Llama layout): %s\n", c.Dir, *out, describeModel(c.Model.Config()))
	return nil
}
