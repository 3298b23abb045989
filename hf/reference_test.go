package hf

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/safetensors"
)

// This file holds a second, independent implementation of the imported
// architectures: a plain float64 transcription of transformers' modeling
// code (LlamaModel, Qwen2Model, MistralModel, GPT2Model and their rotary
// embeddings), reading the checkpoint's tensors by their own names. It is
// checked against transformers' logits on the fixtures
// (TestReferenceMatchesFixtures), and then stands in for transformers on
// checkpoints of settings the fixtures lack (TestVariants): Llama 3 and
// linear rope scaling, untied Qwen2, a head size other than
// hidden/heads, biases on every Llama projection, BF16 and F16 shards.

// hfTensors are a checkpoint's tensors in float64, by name.
type hfTensors map[string][]float64

// readTensors reads every float tensor of dir's shards.
func readTensors(t *testing.T, dir string) hfTensors {
	t.Helper()
	s, err := openShards(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	out := hfTensors{}
	for name, f := range s.where {
		info, _ := f.Lookup(name)
		buf := make([]float32, info.Len())
		if err := f.ReadFloat32(name, buf); err != nil {
			continue // not a float: ids, masks
		}
		v := make([]float64, len(buf))
		for i, x := range buf {
			v[i] = float64(x)
		}
		out[name] = v
	}
	return out
}

// refConfig is what the reference reads of config.json.
type refConfig map[string]any

func (c refConfig) int(k string, def int) int {
	if v, ok := c[k].(float64); ok {
		return int(v)
	}
	return def
}

func (c refConfig) float(k string, def float64) float64 {
	if v, ok := c[k].(float64); ok {
		return v
	}
	return def
}

// linear returns x·Wᵀ + b for x [n, in], W [out, in] (nn.Linear), b [out]
// or nil.
func linear(x []float64, n int, w []float64, b []float64, out int) []float64 {
	in := len(x) / n
	y := make([]float64, n*out)
	for r := range n {
		for o := range out {
			s := 0.0
			if b != nil {
				s = b[o]
			}
			for i := range in {
				s += x[r*in+i] * w[o*in+i]
			}
			y[r*out+o] = s
		}
	}
	return y
}

// conv1D returns x·W + b for x [n, in], W [in, out] (GPT-2's Conv1D).
func conv1D(x []float64, n int, w, b []float64, out int) []float64 {
	in := len(x) / n
	y := make([]float64, n*out)
	for r := range n {
		for o := range out {
			s := b[o]
			for i := range in {
				s += x[r*in+i] * w[i*out+o]
			}
			y[r*out+o] = s
		}
	}
	return y
}

func rmsNorm(x []float64, n int, w []float64, eps float64) []float64 {
	d := len(x) / n
	y := make([]float64, len(x))
	for r := range n {
		ms := 0.0
		for _, v := range x[r*d : (r+1)*d] {
			ms += v * v
		}
		s := 1 / math.Sqrt(ms/float64(d)+eps)
		for i := range d {
			y[r*d+i] = w[i] * x[r*d+i] * s
		}
	}
	return y
}

func layerNorm(x []float64, n int, w, b []float64, eps float64) []float64 {
	d := len(x) / n
	y := make([]float64, len(x))
	for r := range n {
		mean, vr := 0.0, 0.0
		for _, v := range x[r*d : (r+1)*d] {
			mean += v
		}
		mean /= float64(d)
		for _, v := range x[r*d : (r+1)*d] {
			vr += (v - mean) * (v - mean)
		}
		s := 1 / math.Sqrt(vr/float64(d)+eps)
		for i := range d {
			y[r*d+i] = (x[r*d+i]-mean)*s*w[i] + b[i]
		}
	}
	return y
}

// invFreq is transformers' rope_init_fn: the default frequencies
// 1/θ^(2i/h), then the scaling of rope_type "linear" or "llama3"
// (_compute_llama3_parameters, transcribed).
func invFreq(c refConfig, h int) []float64 {
	rp, ok := c["rope_parameters"].(map[string]any)
	if !ok {
		rp, _ = c["rope_scaling"].(map[string]any)
		if rp == nil {
			rp = map[string]any{}
		}
		if th, ok := c["rope_theta"]; ok {
			rp["rope_theta"] = th
		}
	}
	p := refConfig(rp)
	base := p.float("rope_theta", 10000)
	inv := make([]float64, h/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(base, float64(2*i)/float64(h))
	}
	typ, _ := rp["rope_type"].(string)
	if typ == "" {
		typ, _ = rp["type"].(string)
	}
	factor := p.float("factor", 1)
	switch typ {
	case "linear":
		for i := range inv {
			inv[i] /= factor
		}
	case "llama3":
		low, high := p.float("low_freq_factor", 0), p.float("high_freq_factor", 0)
		old := p.float("original_max_position_embeddings", 0)
		lowWavelen, highWavelen := old/low, old/high
		for i, f := range inv {
			wavelen := 2 * math.Pi / f
			scaled := f
			if wavelen > lowWavelen {
				scaled = f / factor
			}
			smooth := (old/wavelen - low) / (high - low)
			smoothed := (1-smooth)*scaled/factor + smooth*scaled
			if !(wavelen < highWavelen) && !(wavelen > lowWavelen) {
				scaled = smoothed
			}
			inv[i] = scaled
		}
	}
	return inv
}

// rotate applies rotate-half RoPE in place to x, [n positions, heads, h].
func rotate(x []float64, n, heads, h int, inv []float64) {
	for p := range n {
		for hd := range heads {
			v := x[(p*heads+hd)*h : (p*heads+hd+1)*h]
			for i := range h / 2 {
				c, s := math.Cos(float64(p)*inv[i]), math.Sin(float64(p)*inv[i])
				a, b := v[i], v[i+h/2]
				v[i], v[i+h/2] = a*c-b*s, b*c+a*s
			}
		}
	}
}

// attend is causal scaled dot-product attention of q [n, H, h] against k,
// v [n, G, h], query head i reading key/value head i/(H/G).
func attend(q, k, v []float64, n, H, G, h int) []float64 {
	o := make([]float64, n*H*h)
	for hd := range H {
		g := hd / (H / G)
		for i := range n {
			w := make([]float64, i+1)
			m := math.Inf(-1)
			for j := range w {
				s := 0.0
				for e := range h {
					s += q[(i*H+hd)*h+e] * k[(j*G+g)*h+e]
				}
				w[j] = s / math.Sqrt(float64(h))
				m = math.Max(m, w[j])
			}
			z := 0.0
			for j := range w {
				w[j] = math.Exp(w[j] - m)
				z += w[j]
			}
			for j := range w {
				for e := range h {
					o[(i*H+hd)*h+e] += w[j] / z * v[(j*G+g)*h+e]
				}
			}
		}
	}
	return o
}

// refLogits returns the logits [n, V] of one sequence of ids under the
// checkpoint in dir, in float64.
func refLogits(t *testing.T, dir string, ids []int32) []float64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var c refConfig
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	w := readTensors(t, dir)
	get := func(name string) []float64 {
		v, ok := w[name]
		if !ok {
			t.Fatalf("reference: no tensor %s", name)
		}
		return v
	}
	opt := func(name string) []float64 { return w[name] }
	n := len(ids)
	if c["model_type"] == "gpt2" {
		return refGPT2(c, get, ids)
	}
	d, H := c.int("hidden_size", 0), c.int("num_attention_heads", 0)
	G, h := c.int("num_key_value_heads", H), c.int("head_dim", d/H)
	V, hid, L := c.int("vocab_size", 0), c.int("intermediate_size", 0), c.int("num_hidden_layers", 0)
	eps := c.float("rms_norm_eps", 1e-6)
	inv := invFreq(c, h)
	emb := get("model.embed_tokens.weight")
	x := make([]float64, n*d)
	for i, id := range ids {
		copy(x[i*d:(i+1)*d], emb[int(id)*d:(int(id)+1)*d])
	}
	for l := range L {
		p := fmt.Sprintf("model.layers.%d.", l)
		a := rmsNorm(x, n, get(p+"input_layernorm.weight"), eps)
		q := linear(a, n, get(p+"self_attn.q_proj.weight"), opt(p+"self_attn.q_proj.bias"), H*h)
		k := linear(a, n, get(p+"self_attn.k_proj.weight"), opt(p+"self_attn.k_proj.bias"), G*h)
		v := linear(a, n, get(p+"self_attn.v_proj.weight"), opt(p+"self_attn.v_proj.bias"), G*h)
		rotate(q, n, H, h, inv)
		rotate(k, n, G, h, inv)
		o := linear(attend(q, k, v, n, H, G, h), n, get(p+"self_attn.o_proj.weight"), opt(p+"self_attn.o_proj.bias"), d)
		for i := range x {
			x[i] += o[i]
		}
		a = rmsNorm(x, n, get(p+"post_attention_layernorm.weight"), eps)
		g := linear(a, n, get(p+"mlp.gate_proj.weight"), opt(p+"mlp.gate_proj.bias"), hid)
		u := linear(a, n, get(p+"mlp.up_proj.weight"), opt(p+"mlp.up_proj.bias"), hid)
		for i := range g {
			g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
		}
		m := linear(g, n, get(p+"mlp.down_proj.weight"), opt(p+"mlp.down_proj.bias"), d)
		for i := range x {
			x[i] += m[i]
		}
	}
	x = rmsNorm(x, n, get("model.norm.weight"), eps)
	head := opt("lm_head.weight")
	if tied, ok := c["tie_word_embeddings"].(bool); ok && tied || head == nil {
		head = emb
	}
	return linear(x, n, head, nil, V)
}

func refGPT2(c refConfig, get func(string) []float64, ids []int32) []float64 {
	n := len(ids)
	d, H, L, V := c.int("n_embd", 0), c.int("n_head", 0), c.int("n_layer", 0), c.int("vocab_size", 0)
	hid, eps := c.int("n_inner", 4*d), c.float("layer_norm_epsilon", 1e-5)
	h := d / H
	wte, wpe := get("transformer.wte.weight"), get("transformer.wpe.weight")
	x := make([]float64, n*d)
	for i, id := range ids {
		for e := range d {
			x[i*d+e] = wte[int(id)*d+e] + wpe[i*d+e]
		}
	}
	gelu := func(v float64) float64 { return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))) }
	for l := range L {
		p := fmt.Sprintf("transformer.h.%d.", l)
		a := layerNorm(x, n, get(p+"ln_1.weight"), get(p+"ln_1.bias"), eps)
		qkv := conv1D(a, n, get(p+"attn.c_attn.weight"), get(p+"attn.c_attn.bias"), 3*d)
		q, k, v := make([]float64, n*d), make([]float64, n*d), make([]float64, n*d)
		for i := range n {
			copy(q[i*d:(i+1)*d], qkv[i*3*d:])
			copy(k[i*d:(i+1)*d], qkv[i*3*d+d:])
			copy(v[i*d:(i+1)*d], qkv[i*3*d+2*d:])
		}
		o := conv1D(attend(q, k, v, n, H, H, h), n, get(p+"attn.c_proj.weight"), get(p+"attn.c_proj.bias"), d)
		for i := range x {
			x[i] += o[i]
		}
		a = layerNorm(x, n, get(p+"ln_2.weight"), get(p+"ln_2.bias"), eps)
		m := conv1D(a, n, get(p+"mlp.c_fc.weight"), get(p+"mlp.c_fc.bias"), hid)
		for i := range m {
			m[i] = gelu(m[i])
		}
		m = conv1D(m, n, get(p+"mlp.c_proj.weight"), get(p+"mlp.c_proj.bias"), d)
		for i := range x {
			x[i] += m[i]
		}
	}
	x = layerNorm(x, n, get("transformer.ln_f.weight"), get("transformer.ln_f.bias"), eps)
	return linear(x, n, wte, nil, V)
}

// TestReferenceMatchesFixtures holds the reference to transformers'
// logits: it is a test of the test.
func TestReferenceMatchesFixtures(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", name)
			ref := readReference(t, dir)
			got := refLogits(t, dir, ref.ids[:ref.N])
			want := ref.logits[:len(got)]
			g32 := make([]float32, len(got))
			for i, v := range got {
				g32[i] = float32(v)
			}
			if e := relRMS(g32, want); !(e <= 1e-5) {
				t.Errorf("the float64 reference differs from transformers' logits by %.3g relative RMS", e)
			}
		})
	}
}

// writeCheckpoint writes a random checkpoint of the architecture cfg
// describes into dir as transformers lays one out: config.json, and the
// tensors in dtype ("F32", "BF16", "F16"), in shards files (one:
// model.safetensors; more: model-0000i-of-0000n.safetensors and the index).
// Norm weights and biases lie off 1 and 0, so that a wrong formula shows.
func writeCheckpoint(t testing.TB, dir string, cfg map[string]any, dtype string, shards int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 17))
	var c refConfig // as JSON reads it back: numbers float64
	b, _ := json.Marshal(cfg)
	json.Unmarshal(b, &c)
	tensors := map[string][]int{} // name → shape
	if c["model_type"] == "gpt2" {
		d, L, V := c.int("n_embd", 0), c.int("n_layer", 0), c.int("vocab_size", 0)
		hid, P := c.int("n_inner", 4*d), c.int("n_positions", 0)
		tensors["transformer.wte.weight"] = []int{V, d}
		tensors["transformer.wpe.weight"] = []int{P, d}
		for l := range L {
			p := fmt.Sprintf("transformer.h.%d.", l)
			for k, s := range map[string][]int{"ln_1.weight": {d}, "ln_1.bias": {d}, "ln_2.weight": {d}, "ln_2.bias": {d},
				"attn.c_attn.weight": {d, 3 * d}, "attn.c_attn.bias": {3 * d}, "attn.c_proj.weight": {d, d}, "attn.c_proj.bias": {d},
				"mlp.c_fc.weight": {d, hid}, "mlp.c_fc.bias": {hid}, "mlp.c_proj.weight": {hid, d}, "mlp.c_proj.bias": {d}} {
				tensors[p+k] = s
			}
		}
		tensors["transformer.ln_f.weight"], tensors["transformer.ln_f.bias"] = []int{d}, []int{d}
	} else {
		d, H := c.int("hidden_size", 0), c.int("num_attention_heads", 0)
		G, h := c.int("num_key_value_heads", H), c.int("head_dim", d/H)
		V, hid, L := c.int("vocab_size", 0), c.int("intermediate_size", 0), c.int("num_hidden_layers", 0)
		qkvBias := c["model_type"] == "qwen2" || c["attention_bias"] == true
		tensors["model.embed_tokens.weight"] = []int{V, d}
		tensors["model.norm.weight"] = []int{d}
		if c["tie_word_embeddings"] != true {
			tensors["lm_head.weight"] = []int{V, d}
		}
		for l := range L {
			p := fmt.Sprintf("model.layers.%d.", l)
			tensors[p+"input_layernorm.weight"], tensors[p+"post_attention_layernorm.weight"] = []int{d}, []int{d}
			for k, s := range map[string][]int{"q_proj": {H * h, d}, "k_proj": {G * h, d}, "v_proj": {G * h, d}} {
				tensors[p+"self_attn."+k+".weight"] = s
				if qkvBias {
					tensors[p+"self_attn."+k+".bias"] = s[:1]
				}
			}
			tensors[p+"self_attn.o_proj.weight"] = []int{d, H * h}
			tensors[p+"mlp.gate_proj.weight"], tensors[p+"mlp.up_proj.weight"], tensors[p+"mlp.down_proj.weight"] = []int{hid, d}, []int{hid, d}, []int{d, hid}
			if c["attention_bias"] == true {
				tensors[p+"self_attn.o_proj.bias"] = []int{d}
			}
			if c["mlp_bias"] == true {
				tensors[p+"mlp.gate_proj.bias"], tensors[p+"mlp.up_proj.bias"], tensors[p+"mlp.down_proj.bias"] = []int{hid}, []int{hid}, []int{d}
			}
		}
	}
	names := make([]string, 0, len(tensors))
	for name := range tensors {
		names = append(names, name)
	}
	sort.Strings(names)
	files := make([]map[string]safetensors.Raw, shards)
	for i := range files {
		files[i] = map[string]safetensors.Raw{}
	}
	weightMap := map[string]string{}
	for i, name := range names {
		shape := tensors[name]
		n := 1
		for _, s := range shape {
			n *= s
		}
		x := make([]float32, n)
		for j := range x {
			x[j] = float32(0.1 * rng.NormFloat64())
			if strings.Contains(name, "norm") || strings.Contains(name, "ln_") {
				if strings.HasSuffix(name, ".weight") {
					x[j] += 1
				}
			}
		}
		var raw []byte
		switch dtype {
		case "BF16":
			raw = safetensors.BF16(x)
		case "F16":
			raw = safetensors.F16(x)
		default:
			raw = f32Bytes(x)
		}
		k := i * shards / len(names)
		files[k][name] = safetensors.Raw{DType: dtype, Shape: shape, Data: raw}
		weightMap[name] = shardName(k, shards)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, f := range files {
		if err := safetensors.WriteRaw(filepath.Join(dir, shardName(k, shards)), f, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	if shards > 1 {
		writeJSON(t, filepath.Join(dir, IndexFile), map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
	}
	writeJSON(t, filepath.Join(dir, ConfigFile), cfg)
}

func shardName(k, n int) string {
	if n == 1 {
		return WeightsFile
	}
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, n)
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func f32Bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		u := math.Float32bits(v)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return b
}

// tinyLlama returns a small Llama config.json: GQA, 2 layers.
func tinyLlama() map[string]any {
	return map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
		"vocab_size": 96, "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2,
		"num_attention_heads": 6, "num_key_value_heads": 2, "max_position_embeddings": 64,
		"rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": false,
		"rope_theta": 10000.0, "rope_scaling": nil,
	}
}

// variants are checkpoints of settings the fixtures lack.
func variants() []struct {
	name   string
	cfg    map[string]any
	dtype  string
	shards int
} {
	with := func(base map[string]any, kv ...any) map[string]any {
		c := map[string]any{}
		for k, v := range base {
			c[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			c[kv[i].(string)] = kv[i+1]
		}
		return c
	}
	llama := tinyLlama()
	qwen := with(llama, "architectures", []string{"Qwen2ForCausalLM"}, "model_type", "qwen2", "use_sliding_window", false, "sliding_window", 4096)
	mistral := with(llama, "architectures", []string{"MistralForCausalLM"}, "model_type", "mistral", "sliding_window", nil)
	gpt2 := map[string]any{"architectures": []string{"GPT2LMHeadModel"}, "model_type": "gpt2", "vocab_size": 96, "n_embd": 32, "n_head": 4,
		"n_layer": 2, "n_positions": 40, "n_inner": 72, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}
	return []struct {
		name   string
		cfg    map[string]any
		dtype  string
		shards int
	}{
		{"llama3-scaling/bf16/sharded", with(llama, "rope_theta", 500000.0, "rope_scaling", map[string]any{
			"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}), "BF16", 3},
		{"linear-scaling/rope_parameters/f16", with(llama, "rope_theta", nil, "rope_parameters", map[string]any{
			"rope_type": "linear", "factor": 4.0, "rope_theta": 20000.0}), "F16", 2},
		{"head-dim/biases", with(llama, "head_dim", 12, "attention_bias", true, "mlp_bias", true), "F32", 1},
		{"qwen2-untied/bf16", with(qwen, "rope_theta", 1000000.0, "rms_norm_eps", 1e-6), "BF16", 2},
		{"qwen2-tied/head-dim", with(qwen, "tie_word_embeddings", true, "head_dim", 16, "num_key_value_heads", 1), "F32", 1},
		{"mistral", mistral, "F32", 1},
		{"gpt2/n_inner/f16", gpt2, "F16", 2},
	}
}

// TestVariants imports checkpoints of the settings the fixtures lack and
// compares their logits with the float64 reference.
func TestVariants(t *testing.T) {
	for i, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			dir := t.TempDir()
			writeCheckpoint(t, dir, v.cfg, v.dtype, v.shards, uint64(i))
			imp, err := Read(dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(i), 3))
			const N = 37 // past original_max_position_embeddings, into the scaled frequencies
			ids := make([]int32, N)
			for j := range ids {
				ids[j] = int32(rng.IntN(imp.Model.Config().Vocab))
			}
			want := refLogits(t, dir, ids)
			got := imp.Model.Forward(ids, 1, N)
			w32 := make([]float32, len(want))
			for j, x := range want {
				w32[j] = float32(x)
			}
			if e := relRMS(got.Data, w32); !(e <= 1e-5) {
				t.Errorf("logits differ from the reference by %.3g relative RMS, want ≤ 1e-5", e)
			}
		})
	}
}

// TestReadInBlocks: a tensor read in blocks of 16 rows (the smallest
// block read takes, where the variants' tensors otherwise fit in one)
// fills the parameters bit for bit as a tensor read whole, which
// TestVariants and TestFixtures check against the references.
func TestReadInBlocks(t *testing.T) {
	read := func(t *testing.T, dir string, block int) *Import {
		old := blockFloats
		blockFloats = block
		defer func() { blockFloats = old }()
		imp, err := Read(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return imp
	}
	for i, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			dir := t.TempDir()
			writeCheckpoint(t, dir, v.cfg, v.dtype, v.shards, uint64(i))
			whole, blocks := read(t, dir, 1<<30), read(t, dir, 1)
			for j, p := range whole.Model.Params() {
				q := blocks.Model.Params()[j]
				if !slices.EqualFunc(p.Value.Data, q.Value.Data, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
					t.Errorf("%s read in blocks of 16 rows differs from %s read whole", q.Name, p.Name)
				}
			}
		})
	}
}
