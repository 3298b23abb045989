package hf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/internal/atomicfile"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/safetensors"
	"github.com/polysketch/polysketch/tensor"
)

// LlamaConfig returns the config.json of the Llama layout for c, or an
// error naming every field of c that the layout cannot express: the
// layout has RMSNorm, SwiGLU, rotary embeddings alone, softmax attention,
// no embedding scale and no logits bias.
func LlamaConfig(c model.Config) (map[string]any, error) {
	var errs []error
	refuse := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Norm != model.NormRMS {
		refuse("norm %q: the Llama layout has rmsnorm", c.Norm)
	}
	if c.FFN != model.FFNSwiGLU {
		refuse("ffn %q: the Llama layout has swiglu", c.FFN)
	}
	if c.Positions != model.PositionsRoPEOnly {
		refuse("positions %q: the Llama layout has rope-only (no sinusoidal embeddings added)", c.Positions)
	}
	if c.EmbedScale != 1 {
		refuse("embed_scale %g: the Llama layout scales no embedding (embed_scale 1)", c.EmbedScale)
	}
	if !c.NoHeadBias {
		refuse("no_head_bias false: the Llama layout's logits have no bias")
	}
	if c.QKVBias != c.OutBias {
		refuse("qkv_bias %t with out_bias %t: the Llama layout's attention_bias is on q, k, v and the output alike", c.QKVBias, c.OutBias)
	}
	if m := c.Attention.Mechanism(); m != string(attention.Softmax) && m != string(attention.Flash) {
		refuse("attention %s: the Llama layout has softmax attention", m)
	}
	if c.Bidirectional || c.PostNorm {
		refuse("bidirectional or post_norm: the Llama layout is a pre-norm decoder")
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	theta := c.RoPETheta
	if theta == 0 {
		theta = 10000
	}
	eps := c.NormEps
	if eps == 0 {
		eps = 1e-5
	}
	var scaling any
	switch s := c.RoPEScaling; s.Type {
	case model.ScalingLinear:
		scaling = map[string]any{"rope_type": "linear", "factor": s.Factor}
	case model.ScalingLlama3:
		scaling = map[string]any{"rope_type": "llama3", "factor": s.Factor, "low_freq_factor": s.LowFreqFactor,
			"high_freq_factor": s.HighFreqFactor, "original_max_position_embeddings": s.OriginalContext}
	}
	return map[string]any{
		"architectures":           []string{"LlamaForCausalLM"},
		"model_type":              "llama",
		"vocab_size":              c.Vocab,
		"hidden_size":             c.Dim,
		"intermediate_size":       c.HiddenSize(),
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeadCount(),
		"head_dim":                c.HeadSize(),
		"max_position_embeddings": c.Context,
		"rms_norm_eps":            eps,
		"hidden_act":              "silu",
		"tie_word_embeddings":     c.Tied,
		"rope_theta":              theta,
		"rope_scaling":            scaling,
		"attention_bias":          c.QKVBias,
		"mlp_bias":                c.FFNBias,
		"torch_dtype":             "float32",
	}, nil
}

// Write writes m as a Hugging Face model directory of the Llama layout
// (see LlamaConfig), which transformers' LlamaForCausalLM loads, into dir,
// which must not exist: config.json, model.safetensors (F32, the weights
// as they are) and files (tokenizer.json and the like, by name). It
// writes a temporary directory beside dir and renames it, so that on
// error nothing is left.
func Write(dir string, m *model.Model, files map[string][]byte) error {
	return WriteContext(context.Background(), dir, m, files)
}

// WriteContext is Write, stopped when ctx is done (an export interrupted):
// the error wraps ctx's, and nothing is left.
func WriteContext(ctx context.Context, dir string, m *model.Model, files map[string][]byte) error {
	if err := write(ctx, dir, m, files); err != nil {
		return fmt.Errorf("writing %s: %w", dir, err)
	}
	return nil
}

// ctxWriter writes to w until ctx is done.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

func write(ctx context.Context, dir string, m *model.Model, files map[string][]byte) error {
	c := m.Config()
	cfg, err := LlamaConfig(c)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(dir); err == nil {
		return errors.New("it exists")
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(dir)), "."+filepath.Base(dir)+".tmp*")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	params := map[string]*nn.Param{}
	for _, p := range m.Params() {
		params[p.Name] = p
	}
	tensors := map[string]*tensor.Tensor{}
	for _, p := range placements("llama", c, "") {
		param := params[p.param]
		t := tensor.New(p.shape...)
		take(t.Data, param.Value.Data, param.Value.Shape, p)
		tensors[p.name] = t
	}
	err = atomicfile.Write(filepath.Join(tmp, WeightsFile), func(w io.Writer) error {
		return safetensors.Encode(ctxWriter{ctx, w}, tensors, map[string]string{"format": "pt"})
	})
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, ConfigFile), append(b, '\n'), 0o644); err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name != filepath.Base(name) || strings.HasPrefix(name, ".") || name == ConfigFile || name == WeightsFile {
			return fmt.Errorf("file %q: not a name Write may add", name)
		}
		if err := os.WriteFile(filepath.Join(tmp, name), files[name], 0o644); err != nil {
			return err
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	done = true
	return nil
}
