package checkpoint

import (
	"fmt"
	"math"
	"slices"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/safetensors"
)

// paramShape is the name and shape of a parameter as a configuration
// describes it, in int64 sizes that saturate rather than wrap.
type paramShape struct {
	name  string
	shape []int64
}

// expectedShapes lists the parameters that model.New would create for
// cfg, in the order and with the names of model.Params, without
// allocating them: every parameter but a learned sketch's, whose networks
// the attention package names and sizes (they are checked once the model
// is built). TestExpectedShapes keeps this in step with model.New.
func expectedShapes(cfg model.Config) []paramShape {
	d, V := int64(cfg.Dim), int64(cfg.Vocab)
	h, hidden := int64(cfg.HeadSize()), int64(cfg.HiddenSize())
	H, G := int64(cfg.Heads), int64(cfg.KVHeadCount())
	qkv := mul(mul(2, G)+H, h)
	var out []paramShape
	add := func(name string, shape ...int64) { out = append(out, paramShape{name, shape}) }
	norm := func(name string) {
		add(name+".gain", d)
		if cfg.Norm != model.NormRMS {
			add(name+".bias", d)
		}
	}
	add("embed.weight", V, d)
	if cfg.Positions == model.PositionsLearned {
		add("pos.weight", int64(cfg.Context), d)
	}
	qk := attention.PropertiesOf(cfg.Attention).NormalizeQK
	ffnIn := mul(2, hidden) // gate and value
	if cfg.FFN == model.FFNGELU {
		ffnIn = hidden
	}
	for i := range cfg.Layers {
		p := fmt.Sprintf("layers.%d.", i)
		norm(p + "ln1")
		add(p+"attn.qkv.weight", d, qkv)
		if cfg.QKVBias {
			add(p+"attn.qkv.bias", qkv)
		}
		if qk {
			add(p+"attn.qknorm.gain", h)
			add(p+"attn.qknorm.bias", h)
		}
		add(p+"attn.out.weight", mul(H, h), d)
		if cfg.OutBias {
			add(p+"attn.out.bias", d)
		}
		norm(p + "ln2")
		add(p+"ffn.in.weight", d, ffnIn)
		if cfg.FFNBias {
			add(p+"ffn.in.bias", ffnIn)
		}
		add(p+"ffn.out.weight", hidden, d)
		if cfg.FFNBias {
			add(p+"ffn.out.bias", d)
		}
	}
	norm("norm")
	if !cfg.Tied {
		add("head.weight", d, V)
	}
	if !cfg.NoHeadBias {
		add("head.bias", V)
	}
	return out
}

// ParamCount returns the number of parameters that model.New would
// create for cfg, computed from the configuration alone, without
// allocating them, so that a configuration too large to build is still
// described: saturating at the largest int64 rather than wrapping. A
// learned sketch's networks are not counted (the attention package sizes
// them when it builds them); attention.PropertiesOf(cfg.Attention).
// Trainable says whether there may be any.
func ParamCount(cfg model.Config) int64 {
	var n int64
	for _, p := range expectedShapes(cfg) {
		size := int64(1)
		for _, d := range p.shape {
			size = mul(size, d)
		}
		if n > math.MaxInt64-size {
			return math.MaxInt64
		}
		n += size
	}
	return n
}

// mul returns a·b for a, b ≥ 0, saturating at the largest int64.
func mul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// checkSizes compares the parameters cfg describes with the tensors of
// the weights file (size bytes), before anything of that size is
// allocated: a configuration whose sizes the file cannot hold, crafted or
// damaged, is refused in one line instead of exhausting memory.
func checkSizes(cfg model.Config, weights *safetensors.File, size int64) error {
	// Every layer has several tensors: more layers than tensors cannot
	// fit, and listing them would itself take memory.
	if n := len(weights.Tensors()); cfg.Layers > n {
		return fmt.Errorf("%d layers, but only %d tensors", cfg.Layers, n)
	}
	for _, p := range expectedShapes(cfg) {
		t, ok := weights.Lookup(p.name)
		if !ok {
			return fmt.Errorf("no tensor %q", p.name)
		}
		got := make([]int64, len(t.Shape))
		for i, n := range t.Shape {
			got[i] = int64(n)
		}
		if slices.Equal(got, p.shape) {
			continue
		}
		bytes := int64(4)
		for _, n := range p.shape {
			bytes = mul(bytes, n)
		}
		if bytes > size {
			return fmt.Errorf("tensor %q has shape %v, the model needs %v: %d bytes, more than the whole %s (%d bytes)", p.name, t.Shape, p.shape, bytes, weightsFile, size)
		}
		return fmt.Errorf("tensor %q has shape %v, the model needs %v", p.name, t.Shape, p.shape)
	}
	return nil
}
