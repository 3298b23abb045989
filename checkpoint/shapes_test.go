package checkpoint

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/model"
)

// TestExpectedShapes checks expectedShapes against the parameters
// model.New creates, for configurations covering every optional
// parameter.
func TestExpectedShapes(t *testing.T) {
	learned := tinyConfig()
	learned.Attention = attention.PolysketchConfig{Degree: 4, SketchSize: 4, Block: 8, Local: true, Learned: true, Sketch: attention.Gaussian}
	untied := tinyConfig()
	untied.Tied, untied.Layers, untied.Hidden = false, 3, 24
	soft := tinyConfig()
	soft.Attention = attention.SoftmaxConfig{}
	encoder := tinyConfig()
	encoder.Bidirectional, encoder.Positions, encoder.PostNorm = true, model.PositionsLearned, true
	llama := tinyConfig()
	llama.Attention = attention.SoftmaxConfig{}
	llama.KVHeads, llama.Norm, llama.FFN, llama.Positions, llama.NoHeadBias, llama.Tied = 1, model.NormRMS, model.FFNSwiGLU, model.PositionsRoPEOnly, true, false
	qwen := llama
	qwen.QKVBias, qwen.HeadDim, qwen.Tied = true, 6, true
	gpt2 := tinyConfig()
	gpt2.Attention = attention.SoftmaxConfig{}
	gpt2.Positions, gpt2.FFN, gpt2.QKVBias, gpt2.OutBias, gpt2.FFNBias, gpt2.NoHeadBias = model.PositionsLearned, model.FFNGELU, true, true, true, true
	for name, cfg := range map[string]model.Config{"tiny": tinyConfig(), "learned sketch": learned, "untied": untied, "softmax": soft, "encoder": encoder,
		"llama": llama, "qwen2": qwen, "gpt2": gpt2} {
		t.Run(name, func(t *testing.T) {
			m, err := model.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			var count int64
			for _, p := range m.Params() {
				if !strings.Contains(p.Name, ".attn.sketch.") {
					want = append(want, fmt.Sprint(p.Name, p.Value.Shape))
					count += int64(p.Value.Len())
				}
			}
			if n := ParamCount(cfg); n != count {
				t.Errorf("ParamCount %d, model.New's parameters (but a learned sketch's) %d", n, count)
			}
			var got []string
			for _, p := range expectedShapes(cfg) {
				got = append(got, fmt.Sprint(p.name, p.shape))
			}
			if !slices.Equal(got, want) {
				t.Errorf("expectedShapes\n%q\nmodel.New's parameters\n%q", got, want)
			}
		})
	}
}

// TestParamCountSaturates: a configuration far too large to build is
// counted without allocating, and without wrapping.
func TestParamCountSaturates(t *testing.T) {
	cfg := tinyConfig()
	cfg.Dim, cfg.Vocab = 2_000_000_000, 2_000_000_000
	if n := ParamCount(cfg); n != math.MaxInt64 {
		t.Errorf("ParamCount of dim and vocabulary 2e9: %d, want the largest int64", n)
	}
	cfg.Dim, cfg.Vocab = 2_000_000, 50257
	if n := ParamCount(cfg); n < int64(3*cfg.Dim*cfg.Dim) || n == math.MaxInt64 {
		t.Errorf("ParamCount of dim 2e6: %d, want at least the qkv weights' 1.2e13, short of saturation", n)
	}
}

// TestLoadRefusesSizesTheFileCannotHold edits config.json (with a
// manifest to match, as someone crafting it would) to sizes far beyond
// what the weights hold: Load refuses in one line before building the
// model, rather than dying of exhausted memory.
func TestLoadRefusesSizesTheFileCannotHold(t *testing.T) {
	for _, tc := range []struct {
		field string
		value any
		want  string
	}{
		{"dim", 2e9, `tensor "embed.weight" has shape [32 16], the model needs [32 2000000000]: 256000000000 bytes, more than the whole model.safetensors`},
		{"vocab", 3e9, `the model needs [3000000000 16]: 192000000000 bytes, more than the whole model.safetensors`},
		{"hidden", 4e12, `tensor "layers.0.ffn.in.weight" has shape [16 128], the model needs [16 8000000000000]`},
		{"layers", 1e12, "1000000000000 layers, but only"},
		{"layers", 2, `no tensor "layers.1.ln1.gain"`},
		{"dim", 4.611686018427388e18, "more than the whole model.safetensors"}, // 2^62: 3·dim and the bytes saturate
	} {
		t.Run(fmt.Sprint(tc.field, " ", tc.value), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt")
			if err := Save(dir, newCheckpoint(t, 1, 7)); err != nil {
				t.Fatal(err)
			}
			editJSON(t, dir, configFile, func(m map[string]any) { m["model"].(map[string]any)[tc.field] = tc.value })
			_, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Load: %v; want one line containing %q", err, tc.want)
			}
		})
	}
}

// TestLoadRefusesHugeAttentionOptions: an attention option that sizes
// buffers (a polysketch's sketch size: its features are the square) set
// to 2e9 in config.json is refused in one line before anything is
// allocated, instead of running out of memory.
func TestLoadRefusesHugeAttentionOptions(t *testing.T) {
	for _, tc := range []struct {
		option string
		value  any
		want   string
	}{
		{"sketch_size", 2e9, "sketch_size 2000000000: at most 1024"},
		{"block", 1e12, "block 1000000000000: at most 65536"},
		{"degree", 1 << 40, "degree 1099511627776: at most 64"},
	} {
		t.Run(tc.option, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt")
			if err := Save(dir, newCheckpoint(t, 1, 7)); err != nil {
				t.Fatal(err)
			}
			editJSON(t, dir, configFile, func(m map[string]any) {
				m["model"].(map[string]any)["attention_options"].(map[string]any)[tc.option] = tc.value
			})
			_, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Load: %v; want one line containing %q", err, tc.want)
			}
		})
	}
}
