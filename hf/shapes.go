package hf

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// shapes are the config.json of published models, as their hub
// directories have them (the fields that shape the computation): named
// shapes to benchmark without downloading anything.
var shapes = map[string]map[string]any{
	"smollm2-135m": {
		"model_type": "llama", "architectures": []string{"LlamaForCausalLM"},
		"vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
		"num_attention_heads": 9, "num_key_value_heads": 3, "max_position_embeddings": 8192,
		"rms_norm_eps": 1e-5, "rope_theta": 100000.0, "tie_word_embeddings": true, "hidden_act": "silu",
	},
	"smollm2-360m": {
		"model_type": "llama", "architectures": []string{"LlamaForCausalLM"},
		"vocab_size": 49152, "hidden_size": 960, "intermediate_size": 2560, "num_hidden_layers": 32,
		"num_attention_heads": 15, "num_key_value_heads": 5, "max_position_embeddings": 8192,
		"rms_norm_eps": 1e-5, "rope_theta": 100000.0, "tie_word_embeddings": true, "hidden_act": "silu",
	},
	"qwen2.5-0.5b": {
		"model_type": "qwen2", "architectures": []string{"Qwen2ForCausalLM"},
		"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
		"num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 32768,
		"rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true, "hidden_act": "silu",
		"use_sliding_window": false, "sliding_window": 32768,
	},
	"llama-3.2-1b": {
		"model_type": "llama", "architectures": []string{"LlamaForCausalLM"},
		"vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
		"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 131072,
		"rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": true, "hidden_act": "silu",
		"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
			"high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
	},
	"tinyllama-1.1b": {
		"model_type": "llama", "architectures": []string{"LlamaForCausalLM"},
		"vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
		"num_attention_heads": 32, "num_key_value_heads": 4, "max_position_embeddings": 2048,
		"rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false, "hidden_act": "silu",
	},
	"gpt2": {
		"model_type": "gpt2", "architectures": []string{"GPT2LMHeadModel"},
		"vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,
		"activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
	},
}

// Shapes lists the named shapes, sorted.
func Shapes() []string {
	names := make([]string, 0, len(shapes))
	for k := range shapes {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// ShapeJSON returns the config.json of the named shape.
func ShapeJSON(name string) ([]byte, error) {
	c, ok := shapes[name]
	if !ok {
		return nil, fmt.Errorf("no shape %q: the shapes are %s", name, strings.Join(Shapes(), ", "))
	}
	return json.MarshalIndent(c, "", "  ")
}

// Shape returns the configuration of the named shape, as Read maps it:
// a model of a published architecture and size, for random weights.
func Shape(name string, opts Options) (*Config, error) {
	b, err := ShapeJSON(name)
	if err != nil {
		return nil, err
	}
	c, err := parseConfig(b, opts)
	if err != nil {
		return nil, fmt.Errorf("shape %s: %w", name, err)
	}
	return c, nil
}
