// Package hf reads and writes Hugging Face model directories: the
// config.json, single or sharded safetensors weights (F32, BF16, F16) and
// tokenizer files that transformers' save_pretrained writes, for the
// architectures llama (Llama 1-3, SmolLM, TinyLlama), mistral, qwen2 and
// gpt2. Read maps such a directory to a model.Config and the model's
// parameters, exactly: the imported model computes the logits
// transformers computes, in float32. Write is the reverse, for the Llama
// layout.
//
// Every field of config.json that changes the computation is read; one
// whose value polysketch cannot compute (another activation, a rope_type
// such as yarn, a sliding window smaller than the context) is refused in
// one line naming the field and value. Fields that change nothing at
// inference (dropout, initialization, token ids, use_cache) are read and
// left. Fields that transformers does not read for the architecture
// either are reported (Import.Ignored), never refused.
package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/internal/field"
	"github.com/polysketch/polysketch/internal/regular"
	"github.com/polysketch/polysketch/model"
)

// The files of a model directory.
const (
	ConfigFile     = "config.json"
	WeightsFile    = "model.safetensors"
	IndexFile      = "model.safetensors.index.json"
	TokenizerFile  = "tokenizer.json"
	TokenizerCfg   = "tokenizer_config.json"
	GenerationFile = "generation_config.json"
	ChatTemplate   = "chat_template.jinja"
)

// The architectures (config.json's model_type) and the class each must
// name in architectures.
var classes = map[string]string{
	"llama":   "LlamaForCausalLM",
	"mistral": "MistralForCausalLM",
	"qwen2":   "Qwen2ForCausalLM",
	"gpt2":    "GPT2LMHeadModel",
}

// Architectures lists the model types Read accepts.
func Architectures() []string {
	names := make([]string, 0, len(classes))
	for k := range classes {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Options are the choices of an import that config.json leaves open.
type Options struct {
	// Context is the longest sequence the imported model takes
	// (model.Config.Context); 0 means config.json's
	// max_position_embeddings (n_positions for GPT-2).
	Context int
	// Attention is the mechanism that computes the model's attention:
	// softmax or flash (the same softmax attention, tiled); nil means
	// flash in tiles of 64.
	Attention attention.Config
}

// Config is a config.json read and mapped.
type Config struct {
	// Type is the architecture, config.json's model_type.
	Type string
	// Model is the polysketch configuration that computes what
	// transformers computes for the checkpoint.
	Model model.Config
	// Ignored lists the fields of config.json that neither polysketch
	// nor transformers' class for the architecture reads, sorted.
	Ignored []string
	// BOS and EOS are the token ids config.json names (bos_token_id,
	// eos_token_id: one or several), nil if none; generation_config.json
	// takes precedence where it names them.
	BOS, EOS []int
}

// ReadConfig reads and maps dir's config.json.
func ReadConfig(dir string, opts Options) (*Config, error) {
	path := filepath.Join(dir, ConfigFile)
	b, err := regular.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if st, serr := os.Stat(dir); serr != nil || !st.IsDir() {
				return nil, fmt.Errorf("%s: not a directory", dir)
			}
			return nil, fmt.Errorf("%s: no %s: not a Hugging Face model directory (save_pretrained writes one)", dir, ConfigFile)
		}
		return nil, err
	}
	c, err := parseConfig(b, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// fields reads the values of a config.json object, remembering which it
// read, and collecting one error a field.
type fields struct {
	m    map[string]json.RawMessage
	read map[string]bool
	errs []error
}

func (f *fields) fail(format string, args ...any) {
	f.errs = append(f.errs, fmt.Errorf(format, args...))
}

// get decodes field name into v, and reports whether it is present and
// not null.
func (f *fields) get(name string, v any) bool {
	f.read[name] = true
	raw, ok := f.m[name]
	if !ok || string(raw) == "null" {
		return false
	}
	if err := json.Unmarshal(raw, v); err != nil {
		f.fail("%s %s: want a %s", name, clip(raw), kind(v))
		return false
	}
	return true
}

// kind names the JSON type of v for an error.
func kind(v any) string {
	switch v.(type) {
	case *int:
		return "whole number"
	case *float64:
		return "number"
	case *bool:
		return "boolean"
	case *string:
		return "string"
	}
	return "value of another form"
}

// size reads a positive integer that sizes the model; def < 0 makes it
// required.
func (f *fields) size(name string, def int) int {
	var v int
	if !f.get(name, &v) {
		if def < 0 {
			f.fail("no %s", name)
		}
		return def
	}
	if v < 1 {
		f.fail("%s %d: must be positive", name, v)
	}
	return v
}

func (f *fields) float(name string, def float64) float64 {
	var v float64
	if !f.get(name, &v) {
		return def
	}
	return v
}

// positive reads a positive number, such as a norm's epsilon, where
// polysketch reads 0 as its own default.
func (f *fields) positive(name string, def float64) float64 {
	v := f.float(name, def)
	if !(v > 0) {
		f.fail("%s %g: must be positive", name, v)
	}
	return v
}

func (f *fields) bool(name string, def bool) bool {
	v := def
	f.get(name, &v)
	return v
}

func (f *fields) string(name, def string) string {
	v := def
	f.get(name, &v)
	return v
}

// ids reads a token id field: a number, a list of numbers, or null.
func (f *fields) ids(name string) []int {
	f.read[name] = true
	raw, ok := f.m[name]
	if !ok || string(raw) == "null" {
		return nil
	}
	var one int
	if json.Unmarshal(raw, &one) == nil {
		return []int{one}
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		f.fail("%s %s: want a token id or a list of them", name, clip(raw))
	}
	return many
}

// refuseIf refuses field name when it is present, not null and bad says
// so of its raw value.
func (f *fields) refuseIf(name string, bad func(raw json.RawMessage) bool, why string) {
	f.read[name] = true
	raw, ok := f.m[name]
	if ok && string(raw) != "null" && bad(raw) {
		f.fail("%s %s: %s", name, clip(raw), why)
	}
}

// isTrue, nonEmpty and notOne test raw values for refuseIf.
func isTrue(raw json.RawMessage) bool { return string(raw) == "true" }
func nonEmpty(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s != "{}" && s != "[]" && s != `""` && s != "false"
}
func notOne(raw json.RawMessage) bool {
	var v float64
	return json.Unmarshal(raw, &v) != nil || v != 1
}

// clip shortens a JSON value for an error message.
func clip(raw []byte) string {
	s := string(bytes.Join(bytes.Fields(raw), []byte(" ")))
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// inert are fields that change nothing in the logits: what the library
// writes about itself, token ids (read apart), training-only settings,
// generation defaults of older files.
var inert = []string{
	"_name_or_path", "architectures", "model_type", "dtype", "torch_dtype", "transformers_version",
	"use_cache", "initializer_range", "pad_token_id", "sep_token_id", "decoder_start_token_id",
	"output_attentions", "output_hidden_states", "return_dict", "torchscript", "use_return_dict",
	"attention_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_type", "summary_use_proj",
	"summary_activation", "summary_proj_to_labels", "summary_first_dropout", "pretraining_tp",
	"id2label", "label2id", "problem_type", "finetuning_task", "tokenizer_class", "prefix",
	"task_specific_params", "max_length", "min_length", "do_sample", "early_stopping", "num_beams",
	"num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
	"repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
	"bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate",
	"forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
	"suppress_tokens", "begin_suppress_tokens", "chunk_size_feed_forward", "cross_attention_hidden_size",
	"tie_encoder_decoder", "is_decoder", "_attn_implementation_autoset", "_commit_hash", "use_bfloat16",
	"n_ctx", // GPT-2's old name of n_positions, which transformers no longer reads
}

func parseConfig(b []byte, opts Options) (*Config, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	f := &fields{m: m, read: map[string]bool{}}
	for _, k := range inert {
		f.read[k] = true
	}
	typ := f.string("model_type", "")
	var archs []string
	f.get("architectures", &archs)
	if typ == "" {
		return nil, fmt.Errorf("no model_type: polysketch imports %s", strings.Join(Architectures(), ", "))
	}
	class, ok := classes[typ]
	if !ok {
		return nil, fmt.Errorf("model_type %q: not supported; polysketch imports %s", typ, strings.Join(Architectures(), ", "))
	}
	for _, a := range archs {
		if a != class {
			return nil, fmt.Errorf("architectures %q: polysketch imports the %s of %s, a causal language model", a, class, typ)
		}
	}
	// Settings of every architecture that transformers would compute
	// and polysketch does not.
	f.refuseIf("is_encoder_decoder", isTrue, "polysketch imports decoder-only models")
	f.refuseIf("add_cross_attention", isTrue, "polysketch's blocks have no cross-attention")
	f.refuseIf("pruned_heads", nonEmpty, "pruned heads are not supported")
	f.refuseIf("quantization_config", func(json.RawMessage) bool { return true }, "quantized weights are not supported: import the model in float32, bfloat16 or float16")
	c := &Config{Type: typ, BOS: f.ids("bos_token_id"), EOS: f.ids("eos_token_id")}
	if typ == "gpt2" {
		c.Model = gpt2Config(f, opts)
	} else {
		c.Model = llamaConfig(f, typ, opts)
	}
	if a := opts.Attention; a != nil {
		if m := a.Mechanism(); m != string(attention.Softmax) && m != string(attention.Flash) {
			f.errs = append(f.errs, field.Errorf("%s %s: the checkpoint's attention is softmax (softmax or flash); linearize the imported model for another", field.Name("attention"), m))
		}
		c.Model.Attention = a
	}
	if len(f.errs) > 0 {
		return nil, errors.Join(f.errs...)
	}
	if err := c.Model.Validate(); err != nil {
		return nil, fmt.Errorf("the model it describes: %w", err)
	}
	for k := range m {
		if !f.read[k] {
			c.Ignored = append(c.Ignored, k)
		}
	}
	sort.Strings(c.Ignored)
	return c, nil
}

// llamaConfig maps the config of llama, mistral and qwen2: RMSNorm,
// SwiGLU, grouped-query attention, rotary embeddings alone.
func llamaConfig(f *fields, typ string, opts Options) model.Config {
	c := model.Config{
		Vocab:   f.size("vocab_size", -1),
		Dim:     f.size("hidden_size", -1),
		Hidden:  f.size("intermediate_size", -1),
		Layers:  f.size("num_hidden_layers", -1),
		Heads:   f.size("num_attention_heads", -1),
		KVHeads: f.size("num_key_value_heads", 0),
		HeadDim: f.size("head_dim", 0),

		Attention: attention.FlashConfig{Block: 64},
		Positions: model.PositionsRoPEOnly,
		Norm:      model.NormRMS,
		NormEps:   f.positive("rms_norm_eps", 1e-6),
		FFN:       model.FFNSwiGLU,
		Tied:      f.bool("tie_word_embeddings", false),

		NoHeadBias: true,
		EmbedScale: 1,
	}
	if act := f.string("hidden_act", "silu"); act != "silu" {
		f.fail("hidden_act %q: polysketch computes the SiLU-gated blocks (silu) of %s", act, typ)
	}
	if typ == "llama" {
		bias := f.bool("attention_bias", false)
		c.QKVBias, c.OutBias = bias, bias
		c.FFNBias = f.bool("mlp_bias", false)
	}
	if typ == "qwen2" {
		c.QKVBias = true // Qwen2's q, k and v projections always have biases
		f.refuseIf("use_mrope", isTrue, "multimodal rotary embeddings (Qwen2-VL) are not supported")
	}
	defContext := map[string]int{"llama": 2048, "mistral": 131072, "qwen2": 32768}[typ]
	trained := f.size("max_position_embeddings", defContext)
	c.Context = trained
	if opts.Context > 0 {
		c.Context = opts.Context
	}
	rope(f, &c)
	window(f, typ, c.Context)
	var layerTypes []string
	if f.get("layer_types", &layerTypes) {
		for i, t := range layerTypes {
			if t != "full_attention" {
				f.fail("layer_types[%d] %q: polysketch computes full attention in every layer", i, t)
				break
			}
		}
	}
	return c
}

// window refuses a sliding window smaller than the context: transformers
// would mask the keys beyond it, polysketch attends to all.
func window(f *fields, typ string, context int) {
	use := true
	if typ == "qwen2" {
		use = f.bool("use_sliding_window", false)
		f.read["max_window_layers"] = true // read by transformers only with use_sliding_window
	}
	var w int
	present := f.get("sliding_window", &w)
	if _, given := f.m["sliding_window"]; !given && typ == "mistral" {
		w, present = 4096, true // transformers' default for Mistral
	}
	if present && use && w < context {
		f.errs = append(f.errs, field.Errorf("sliding_window %d: smaller than the %s %d, and polysketch attends to every position; import with %s %d or less", w, field.Name("context"), context, field.Name("context"), w))
	}
}

// rope reads the rotary embeddings' settings, in either form: rope_theta
// and rope_scaling at the top level (transformers 4), or rope_parameters
// (transformers 5).
func rope(f *fields, c *model.Config) {
	params := map[string]json.RawMessage{}
	name := "rope_parameters"
	if !f.get(name, &params) {
		name = "rope_scaling"
		f.get(name, &params)
		if theta := f.float("rope_theta", 0); theta != 0 {
			params["rope_theta"], _ = json.Marshal(theta)
		}
	} else {
		// transformers 5 would take one or the other: refused, as any
		// setting polysketch would not read.
		if raw, top := f.m["rope_theta"]; top && string(raw) != "null" {
			f.fail("rope_theta beside rope_parameters: give the base once")
		}
		if raw, top := f.m["rope_scaling"]; top && string(raw) != "null" {
			f.fail("rope_scaling beside rope_parameters: give the settings once, in rope_parameters")
		}
	}
	f.read["rope_scaling"], f.read["rope_theta"] = true, true
	p := &fields{m: params, read: map[string]bool{}}
	theta := p.float("rope_theta", 10000)
	if !(theta > 0) || theta == 1 || math.IsInf(theta, 0) {
		p.fail("rope_theta %g: must be a positive base other than 1", theta)
	}
	c.RoPETheta = theta
	typ := p.string("rope_type", "")
	if typ == "" {
		typ = p.string("type", "default") // the older key
	} else {
		p.read["type"] = true
	}
	p.refuseIf("partial_rotary_factor", notOne, "polysketch turns the whole head")
	p.refuseIf("attention_factor", notOne, "polysketch scales attention by 1/√head_dim alone")
	switch typ {
	case "default":
	case "linear":
		c.RoPEScaling = model.RoPEScaling{Type: model.ScalingLinear, Factor: p.float("factor", 0)}
	case "llama3":
		c.RoPEScaling = model.RoPEScaling{
			Type: model.ScalingLlama3, Factor: p.float("factor", 0),
			LowFreqFactor: p.float("low_freq_factor", 0), HighFreqFactor: p.float("high_freq_factor", 0),
			OriginalContext: p.size("original_max_position_embeddings", -1),
		}
	default:
		p.fail("rope_type %q: polysketch computes default, linear and llama3 rotary embeddings", typ)
	}
	for k := range params {
		if !p.read[k] && typ != "default" {
			p.fail("%s: not read by polysketch's %s scaling", k, typ)
		}
	}
	for _, err := range p.errs {
		f.fail("%s: %w", name, err)
	}
}

// gpt2Config maps GPT-2's config: LayerNorm, a GELU MLP, learned
// positions, biases on every projection.
func gpt2Config(f *fields, opts Options) model.Config {
	d := f.size("n_embd", 768)
	c := model.Config{
		Vocab:  f.size("vocab_size", 50257),
		Dim:    d,
		Layers: f.size("n_layer", 12),
		Heads:  f.size("n_head", 12),
		Hidden: f.size("n_inner", 4*d),

		Attention: attention.FlashConfig{Block: 64},
		Positions: model.PositionsLearned,
		Norm:      model.NormLayer,
		NormEps:   f.positive("layer_norm_epsilon", 1e-5),
		FFN:       model.FFNGELU,
		Tied:      f.bool("tie_word_embeddings", true),

		QKVBias: true, OutBias: true, FFNBias: true,
		NoHeadBias: true,
		EmbedScale: 1,
	}
	if c.Hidden == 4*d {
		c.Hidden = 0 // the default, 4·dim
	}
	positions := f.size("n_positions", 1024)
	c.Context = positions
	if opts.Context > 0 && opts.Context != positions {
		f.errs = append(f.errs, field.Errorf("%s %d: GPT-2's learned positions (n_positions) are %d; import with that %s", field.Name("context"), opts.Context, positions, field.Name("context")))
	}
	switch act := f.string("activation_function", "gelu_new"); act {
	case "gelu_new", "gelu_pytorch_tanh", "gelu_fast":
	default:
		f.fail("activation_function %q: polysketch computes the tanh approximation of GELU (gelu_new)", act)
	}
	if !f.bool("scale_attn_weights", true) {
		f.fail("scale_attn_weights false: polysketch scales attention by 1/√head_dim")
	}
	f.refuseIf("scale_attn_by_inverse_layer_idx", isTrue, "polysketch scales attention by 1/√head_dim alone")
	f.bool("reorder_and_upcast_attn", false) // float32 throughout: nothing to upcast
	return c
}
