package hf

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/safetensors"
)

// TestConfigRefused: every setting polysketch cannot compute is refused in
// one line naming the file, the field and its value.
func TestConfigRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		edit map[string]any
		want string
	}{
		{"unknown type", map[string]any{"model_type": "phi3"}, `model_type "phi3": not supported; polysketch imports gpt2, llama, mistral, qwen2`},
		{"no type", map[string]any{"model_type": nil}, "no model_type"},
		{"other class", map[string]any{"architectures": []string{"LlamaForSequenceClassification"}}, `architectures "LlamaForSequenceClassification"`},
		{"activation", map[string]any{"hidden_act": "gelu"}, `hidden_act "gelu": polysketch computes the SiLU-gated blocks`},
		{"yarn", map[string]any{"rope_scaling": map[string]any{"rope_type": "yarn", "factor": 4.0}}, `rope_scaling: rope_type "yarn"`},
		{"dynamic", map[string]any{"rope_scaling": map[string]any{"type": "dynamic", "factor": 2.0}}, `rope_scaling: rope_type "dynamic"`},
		{"partial rotary", map[string]any{"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}, "rope_theta": nil}, "rope_parameters: partial_rotary_factor 0.5: polysketch turns the whole head"},
		{"llama3 without original", map[string]any{"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}}, "rope_scaling: no original_max_position_embeddings"},
		{"llama3 unknown key", map[string]any{"rope_scaling": map[string]any{"rope_type": "linear", "factor": 8.0, "beta_fast": 4.0}}, "rope_scaling: beta_fast: not read by polysketch's linear scaling"},
		{"window", map[string]any{"model_type": "mistral", "architectures": []string{"MistralForCausalLM"}, "sliding_window": 32}, "sliding_window 32: smaller than the context 64"},
		{"mistral default window", map[string]any{"model_type": "mistral", "architectures": []string{"MistralForCausalLM"}, "max_position_embeddings": 8192}, "sliding_window 4096: smaller than the context 8192"},
		{"qwen2 window", map[string]any{"model_type": "qwen2", "architectures": []string{"Qwen2ForCausalLM"}, "use_sliding_window": true, "sliding_window": 16}, "sliding_window 16: smaller than the context 64"},
		{"layer types", map[string]any{"layer_types": []string{"full_attention", "sliding_attention"}}, `layer_types[1] "sliding_attention"`},
		{"quantized", map[string]any{"quantization_config": map[string]any{"quant_method": "gptq"}}, "quantization_config"},
		{"kv heads", map[string]any{"num_key_value_heads": 4}, "heads 6 is not a multiple of kv_heads 4"},
		{"bad size", map[string]any{"hidden_size": "big"}, `hidden_size "big": want a whole number`},
		{"missing size", map[string]any{"num_hidden_layers": nil}, "no num_hidden_layers"},
		{"gpt2 activation", map[string]any{"model_type": "gpt2", "architectures": []string{"GPT2LMHeadModel"}, "activation_function": "relu"}, `activation_function "relu"`},
		{"rope_scaling beside rope_parameters", map[string]any{"rope_theta": nil, "rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e4}, "rope_scaling": map[string]any{"rope_type": "linear", "factor": 2.0}}, "rope_scaling beside rope_parameters: give the settings once"},
		{"no epsilon", map[string]any{"rms_norm_eps": 0}, "rms_norm_eps 0: must be positive"},
		{"negative epsilon", map[string]any{"rms_norm_eps": -1e-6}, "rms_norm_eps -1e-06: must be positive"},
		{"gpt2 no epsilon", map[string]any{"model_type": "gpt2", "architectures": []string{"GPT2LMHeadModel"}, "layer_norm_epsilon": 0}, "layer_norm_epsilon 0: must be positive"},
		{"gpt2 layer scaling", map[string]any{"model_type": "gpt2", "architectures": []string{"GPT2LMHeadModel"}, "scale_attn_by_inverse_layer_idx": true}, "scale_attn_by_inverse_layer_idx true"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := tinyLlama()
			for k, v := range c.edit {
				cfg[k] = v
			}
			dir := t.TempDir()
			writeJSON(t, filepath.Join(dir, ConfigFile), cfg)
			_, err := ReadConfig(dir, Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Join(dir, ConfigFile)) {
				t.Errorf("error %v, want one naming config.json and containing %q", err, c.want)
			}
		})
	}
}

// TestConfigRead: what ReadConfig maps, notes and leaves.
func TestConfigRead(t *testing.T) {
	cfg := tinyLlama()
	cfg["rope_interleaved"] = false // a field of nanotron's, which transformers does not read
	cfg["eos_token_id"] = []int{2, 7}
	dir := t.TempDir()
	writeJSON(t, filepath.Join(dir, ConfigFile), cfg)
	c, err := ReadConfig(dir, Options{Context: 4096})
	if err != nil {
		t.Fatal(err)
	}
	m := c.Model
	if m.Context != 4096 || m.KVHeads != 2 || m.Norm != "rmsnorm" || m.FFN != "swiglu" || m.Tied || m.EmbedScale != 1 || !m.NoHeadBias {
		t.Errorf("model config %+v", m)
	}
	if len(c.Ignored) != 1 || c.Ignored[0] != "rope_interleaved" {
		t.Errorf("Ignored %v, want [rope_interleaved]", c.Ignored)
	}
	if len(c.EOS) != 2 || c.EOS[1] != 7 {
		t.Errorf("EOS %v", c.EOS)
	}
}

// TestBadDirectories: a directory without config.json, a missing shard, a
// tensor of the wrong shape or dtype, and sizes far beyond the tensors
// each give one line naming the file, before any weights are allocated.
func TestBadDirectories(t *testing.T) {
	good := func(t *testing.T, shards int) string {
		dir := t.TempDir()
		writeCheckpoint(t, dir, tinyLlama(), "BF16", shards, 1)
		return dir
	}
	for _, c := range []struct {
		name string
		make func(t *testing.T) string
		want string
	}{
		{"no config", func(t *testing.T) string {
			dir := good(t, 1)
			os.Remove(filepath.Join(dir, ConfigFile))
			return dir
		}, "no config.json: not a Hugging Face model directory"},
		{"no directory", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }, "not a directory"},
		{"no weights", func(t *testing.T) string {
			dir := good(t, 1)
			os.Remove(filepath.Join(dir, WeightsFile))
			return dir
		}, "no model.safetensors nor model.safetensors.index.json"},
		{"missing shard", func(t *testing.T) string {
			dir := good(t, 3)
			os.Remove(filepath.Join(dir, shardName(1, 3)))
			return dir
		}, "model.safetensors.index.json names " + shardName(1, 3) + ", which is missing"},
		{"shard outside", func(t *testing.T) string {
			dir := good(t, 2)
			writeJSON(t, filepath.Join(dir, IndexFile), map[string]any{"weight_map": map[string]string{"model.norm.weight": "../x.safetensors"}})
			return dir
		}, `shard "../x.safetensors": not a file name in the directory`},
		{"shape", func(t *testing.T) string {
			dir := good(t, 1)
			editConfig(t, dir, "intermediate_size", 81)
			return dir
		}, `tensor "model.layers.0.mlp.gate_proj.weight" has shape [80 48], but config.json gives [81 48]`},
		{"sizes beyond memory", func(t *testing.T) string {
			dir := good(t, 1)
			editConfig(t, dir, "vocab_size", 1<<40)
			return dir
		}, `tensor "model.embed_tokens.weight" has shape [96 48], but config.json gives [1099511627776 48]`},
		{"dtype", func(t *testing.T) string {
			dir := good(t, 1)
			retype(t, filepath.Join(dir, WeightsFile), "model.norm.weight", "F64")
			return dir
		}, `tensor "model.norm.weight" has dtype F64: polysketch imports F32, BF16 and F16 weights`},
		{"integer weights", func(t *testing.T) string {
			dir := good(t, 1)
			retype(t, filepath.Join(dir, WeightsFile), "model.norm.weight", "I64")
			return dir
		}, "has dtype I64"},
		{"missing tensor", func(t *testing.T) string {
			dir := good(t, 1)
			editConfig(t, dir, "num_hidden_layers", 3)
			return dir
		}, `no tensor "model.layers.2.input_layernorm.weight"`},
		{"extra tensor", func(t *testing.T) string {
			dir := good(t, 1)
			editConfig(t, dir, "num_hidden_layers", 1)
			return dir
		}, "is no parameter of a llama model of this config.json"},
		{"unknown architecture", func(t *testing.T) string {
			dir := good(t, 1)
			editConfig(t, dir, "model_type", "falcon")
			return dir
		}, `model_type "falcon": not supported`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := c.make(t)
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Read(dir, Options{})
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line containing %q", err, c.want)
			}
			if !strings.Contains(err.Error(), dir) {
				t.Errorf("error %v does not name the directory's file", err)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
				t.Errorf("allocated %d bytes before refusing", grew)
			}
		})
	}
}

// editConfig sets one field of dir's config.json.
func editConfig(t *testing.T, dir, key string, value any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	json.Unmarshal(b, &c)
	c[key] = value
	writeJSON(t, filepath.Join(dir, ConfigFile), c)
}

// retype rewrites the file at path with tensor name of dtype dt, its bytes
// repeated to fill the new size.
func retype(t *testing.T, path, name, dt string) {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	raws := map[string]safetensors.Raw{}
	for _, info := range f.Tensors() {
		x := make([]float32, info.Len())
		if err := f.ReadFloat32(info.Name, x); err != nil {
			t.Fatal(err)
		}
		raws[info.Name] = safetensors.Raw{DType: "BF16", Shape: info.Shape, Data: safetensors.BF16(x)}
	}
	f.Close()
	r := raws[name]
	r.DType, r.Data = dt, make([]byte, 8*int(f64len(r.Shape)))
	raws[name] = r
	if err := safetensors.WriteRaw(path, raws, nil); err != nil {
		t.Fatal(err)
	}
}

func f64len(shape []int) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= int64(d)
	}
	return n
}

// TestShapes: every named shape maps, with the sizes of its model.
func TestShapes(t *testing.T) {
	want := map[string]int64{ // parameters, as the model cards count them
		"smollm2-135m": 134_515_008, "smollm2-360m": 361_821_120, "qwen2.5-0.5b": 494_032_768,
		"llama-3.2-1b": 1_235_814_400, "tinyllama-1.1b": 1_100_048_384, "gpt2": 124_439_808,
	}
	for _, name := range Shapes() {
		c, err := Shape(name, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if n := checkpointParams(c.Model); n != want[name] {
			t.Errorf("%s: %d parameters, want %d", name, n, want[name])
		}
	}
	if _, err := Shape("llama-70b", Options{}); err == nil || !strings.Contains(err.Error(), "the shapes are gpt2, llama-3.2-1b") {
		t.Errorf("unknown shape: %v", err)
	}
}

// checkpointParams counts the parameters of a model of c.
func checkpointParams(c model.Config) int64 { return checkpoint.ParamCount(c) }

// TestNotFinite: a weight that is NaN or infinite is refused in one line
// naming the file, the tensor and the element, whether the tensor is read
// straight into its parameter or in blocks of rows to be transposed.
func TestNotFinite(t *testing.T) {
	for _, c := range []struct {
		tensor string
		at     int
		value  float32
	}{
		{"model.norm.weight", 5, float32(math.NaN())},
		{"model.layers.1.mlp.down_proj.weight", 17*80 + 3, float32(math.Inf(-1))}, // [48 80], row 17: the second block of 16
	} {
		t.Run(c.tensor, func(t *testing.T) {
			dir := t.TempDir()
			writeCheckpoint(t, dir, tinyLlama(), "BF16", 1, 1)
			path := filepath.Join(dir, WeightsFile)
			f, err := safetensors.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			raws := map[string]safetensors.Raw{}
			for _, info := range f.Tensors() {
				x := make([]float32, info.Len())
				if err := f.ReadFloat32(info.Name, x); err != nil {
					t.Fatal(err)
				}
				if info.Name == c.tensor {
					x[c.at] = c.value
				}
				raws[info.Name] = safetensors.Raw{DType: "BF16", Shape: info.Shape, Data: safetensors.BF16(x)}
			}
			f.Close()
			if err := safetensors.WriteRaw(path, raws, nil); err != nil {
				t.Fatal(err)
			}
			old := blockFloats
			blockFloats = 1
			defer func() { blockFloats = old }()
			_, err = Read(dir, Options{})
			want := fmt.Sprintf("%s: tensor %q: element %d of shape", path, c.tensor, c.at)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprint(c.value)) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %v, want one line containing %q and %v", err, want, c.value)
			}
		})
	}
}
