package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/polysketch/polysketch/safetensors"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/train"
)

const logitsHelp = `usage: polysketch logits --checkpoint DIR --ids IN.safetensors --out OUT.safetensors [flags]

Runs a checkpoint's model on token ids and writes its float32 logits, so
that another implementation (transformers, llama.cpp) can be compared with
polysketch's on the same ids. IN.safetensors holds the ids as an integer
tensor (I64, I32, …) called input_ids (--name), of shape [B, N] (B
sequences of N positions) or [N]; OUT.safetensors receives a float32
tensor "logits" of shape [B, N, V]: at each position the logits of the
next token, with no padding and no mask, as transformers computes them
for input_ids alone. With Python:

    from safetensors.torch import save_file, load_file
    save_file({"input_ids": ids}, "ids.safetensors")   # ids: torch.int64 [B, N]
    logits = load_file("logits.safetensors")["logits"]

flags:
`

func runLogits(args []string, stdout io.Writer) error {
	fs := newFlags("logits", logitsHelp, stdout)
	path := fs.String("checkpoint", "run", "checkpoint directory, or the run directory holding it")
	in := fs.String("ids", "", "safetensors file of the token ids (required)")
	name := fs.String("name", "input_ids", "name of the ids' tensor in --ids")
	out := fs.String("out", "", "safetensors file to write the logits to (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *in == "" || *out == "" {
		return usageError{errors.New("logits: --ids and --out are required")}
	}
	if sameFile(*in, *out) {
		return fmt.Errorf("logits: --out %s is the --ids file: name another file for the logits", *out)
	}
	f, err := safetensors.Open(*in)
	if err != nil {
		return fmt.Errorf("logits: --ids: %w", err)
	}
	defer f.Close()
	info, ok := f.Lookup(*name)
	if !ok {
		return fmt.Errorf("logits: --ids %s has no tensor %q: give its name with --name", *in, *name)
	}
	B, N := 1, 0
	switch len(info.Shape) {
	case 1:
		N = info.Shape[0]
	case 2:
		B, N = info.Shape[0], info.Shape[1]
	default:
		return fmt.Errorf("logits: --ids %s: tensor %q has shape %v: want [B, N] or [N]", *in, *name, info.Shape)
	}
	ids, err := f.ReadInt64(*name)
	if err != nil {
		return fmt.Errorf("logits: --ids: %w", err)
	}
	c, err := train.Open(*path)
	if err != nil {
		return fmt.Errorf("logits: %w", err)
	}
	if sameFile(filepath.Dir(*out), c.Dir) {
		return fmt.Errorf("logits: --out %s is inside the checkpoint %s: name a file outside it", *out, c.Dir)
	}
	mc := c.Model.Config()
	switch {
	case B*N == 0:
		return fmt.Errorf("logits: --ids %s: tensor %q of shape %v holds no ids", *in, *name, info.Shape)
	case N > mc.Context:
		return fmt.Errorf("logits: --ids %s: %d positions exceed the model's context %d", *in, N, mc.Context)
	}
	tokens := make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= int64(mc.Vocab) {
			return fmt.Errorf("logits: --ids %s: id %d at position %d of sequence %d is outside the vocabulary [0, %d)", *in, id, i%N, i/N, mc.Vocab)
		}
		tokens[i] = int32(id)
	}
	logits := c.Model.Forward(tokens, B, N)
	t := tensor.From(logits.Data, B, N, mc.Vocab)
	if err := safetensors.Write(*out, map[string]*tensor.Tensor{"logits": t}, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("logits: %w", err)
	}
	fmt.Fprintf(stdout, "wrote the logits [%d, %d, %d] of %s to %s\n", B, N, mc.Vocab, c.Dir, *out)
	return nil
}

// sameFile reports whether the paths a and b name one existing file or
// directory.
func sameFile(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}
