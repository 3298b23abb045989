package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/polysketch/polysketch/internal/regular"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/safetensors"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// placement is one tensor of a Hugging Face checkpoint and where it goes
// among a polysketch model's parameters.
type placement struct {
	name  string // in the checkpoint
	shape []int  // as the checkpoint holds it
	param string // the polysketch parameter
	// transpose says that the tensor is an nn.Linear weight, [out, in],
	// for a parameter [in, cols] (polysketch's x·W); otherwise a matrix
	// is [in, n] (GPT-2's Conv1D, an embedding) as the parameter is, and
	// fills it whole.
	transpose bool
	// offset is the first column of the parameter (a matrix) or its
	// first element (a vector) that the tensor fills: q, k and v share
	// one projection, the gate and the value another.
	offset int
}

// placements lists every tensor of a checkpoint of architecture typ for
// the model c, with prefix the GPT-2 tensors' ("transformer." or none).
func placements(typ string, c model.Config, prefix string) []placement {
	d, V, h := c.Dim, c.Vocab, c.HeadSize()
	H, G, hid := c.Heads, c.KVHeadCount(), c.HiddenSize()
	var ps []placement
	add := func(name string, shape []int, param string, transpose bool, offset int) {
		ps = append(ps, placement{name, shape, param, transpose, offset})
	}
	if typ == "gpt2" {
		add(prefix+"wte.weight", []int{V, d}, "embed.weight", false, 0)
		add(prefix+"wpe.weight", []int{c.Context, d}, "pos.weight", false, 0)
		for i := range c.Layers {
			p, q := fmt.Sprintf("%sh.%d.", prefix, i), fmt.Sprintf("layers.%d.", i)
			for _, s := range []struct{ hf, ps string }{{"ln_1", "ln1"}, {"ln_2", "ln2"}} {
				add(p+s.hf+".weight", []int{d}, q+s.ps+".gain", false, 0)
				add(p+s.hf+".bias", []int{d}, q+s.ps+".bias", false, 0)
			}
			add(p+"attn.c_attn.weight", []int{d, 3 * d}, q+"attn.qkv.weight", false, 0)
			add(p+"attn.c_attn.bias", []int{3 * d}, q+"attn.qkv.bias", false, 0)
			add(p+"attn.c_proj.weight", []int{d, d}, q+"attn.out.weight", false, 0)
			add(p+"attn.c_proj.bias", []int{d}, q+"attn.out.bias", false, 0)
			add(p+"mlp.c_fc.weight", []int{d, hid}, q+"ffn.in.weight", false, 0)
			add(p+"mlp.c_fc.bias", []int{hid}, q+"ffn.in.bias", false, 0)
			add(p+"mlp.c_proj.weight", []int{hid, d}, q+"ffn.out.weight", false, 0)
			add(p+"mlp.c_proj.bias", []int{d}, q+"ffn.out.bias", false, 0)
		}
		add(prefix+"ln_f.weight", []int{d}, "norm.gain", false, 0)
		add(prefix+"ln_f.bias", []int{d}, "norm.bias", false, 0)
	} else {
		add("model.embed_tokens.weight", []int{V, d}, "embed.weight", false, 0)
		for i := range c.Layers {
			p, q := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("layers.%d.", i)
			add(p+"input_layernorm.weight", []int{d}, q+"ln1.gain", false, 0)
			add(p+"post_attention_layernorm.weight", []int{d}, q+"ln2.gain", false, 0)
			for _, s := range []struct {
				name      string
				heads, at int
			}{{"q_proj", H, 0}, {"k_proj", G, H * h}, {"v_proj", G, (H + G) * h}} {
				add(p+"self_attn."+s.name+".weight", []int{s.heads * h, d}, q+"attn.qkv.weight", true, s.at)
				if c.QKVBias {
					add(p+"self_attn."+s.name+".bias", []int{s.heads * h}, q+"attn.qkv.bias", false, s.at)
				}
			}
			add(p+"self_attn.o_proj.weight", []int{d, H * h}, q+"attn.out.weight", true, 0)
			if c.OutBias {
				add(p+"self_attn.o_proj.bias", []int{d}, q+"attn.out.bias", false, 0)
			}
			add(p+"mlp.gate_proj.weight", []int{hid, d}, q+"ffn.in.weight", true, 0)
			add(p+"mlp.up_proj.weight", []int{hid, d}, q+"ffn.in.weight", true, hid)
			add(p+"mlp.down_proj.weight", []int{d, hid}, q+"ffn.out.weight", true, 0)
			if c.FFNBias {
				add(p+"mlp.gate_proj.bias", []int{hid}, q+"ffn.in.bias", false, 0)
				add(p+"mlp.up_proj.bias", []int{hid}, q+"ffn.in.bias", false, hid)
				add(p+"mlp.down_proj.bias", []int{d}, q+"ffn.out.bias", false, 0)
			}
		}
		add("model.norm.weight", []int{d}, "norm.gain", false, 0)
	}
	if !c.Tied {
		add("lm_head.weight", []int{V, d}, "head.weight", true, 0)
	}
	return ps
}

// spare reports whether the checkpoint tensor name holds nothing a model
// needs: buffers older versions of transformers saved (rotary
// frequencies, GPT-2's causal mask), and a tied output layer's copy of
// the embedding.
func spare(name string, c model.Config) bool {
	switch {
	case strings.HasSuffix(name, ".rotary_emb.inv_freq"),
		strings.HasSuffix(name, ".attn.bias") && !strings.Contains(name, "c_attn"),
		strings.HasSuffix(name, ".attn.masked_bias"):
		return true
	}
	return c.Tied && name == "lm_head.weight"
}

// shards are the open safetensors files of a model directory and which
// file holds each tensor.
type shards struct {
	dir   string
	files []*safetensors.File
	names []string                     // of files, relative to the directory
	where map[string]*safetensors.File // tensor name → file
	file  map[string]string            // tensor name → file name
}

func (s *shards) close() {
	for _, f := range s.files {
		f.Close()
	}
}

// openShards opens model.safetensors of dir, or the shards its
// model.safetensors.index.json names, and reads their headers.
func openShards(dir string) (*shards, error) {
	s := &shards{dir: dir, where: map[string]*safetensors.File{}, file: map[string]string{}}
	names := []string{WeightsFile}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if _, err := os.Stat(filepath.Join(dir, WeightsFile)); errors.Is(err, os.ErrNotExist) {
		b, err := regular.ReadFile(filepath.Join(dir, IndexFile))
		if errors.Is(err, os.ErrNotExist) {
			msg := fmt.Sprintf("%s: no %s nor %s", dir, WeightsFile, IndexFile)
			if _, err := os.Stat(filepath.Join(dir, "pytorch_model.bin")); err == nil {
				msg += ": polysketch reads safetensors weights, not pytorch_model.bin; convert them first"
			}
			return nil, errors.New(msg)
		}
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &index); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, IndexFile), err)
		}
		if len(index.WeightMap) == 0 {
			return nil, fmt.Errorf("%s: no weight_map", filepath.Join(dir, IndexFile))
		}
		names = names[:0]
		for _, shard := range index.WeightMap {
			if shard == "" || shard != filepath.Base(shard) || strings.ContainsAny(shard, `/\`) || shard == "." || shard == ".." {
				return nil, fmt.Errorf("%s: shard %q: not a file name in the directory", filepath.Join(dir, IndexFile), shard)
			}
			if !slices.Contains(names, shard) {
				names = append(names, shard)
			}
		}
		sort.Strings(names)
	}
	for _, name := range names {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && index.WeightMap != nil {
			s.close()
			return nil, fmt.Errorf("%s names %s, which is missing", filepath.Join(dir, IndexFile), name)
		}
		f, err := safetensors.Open(path)
		if err != nil {
			s.close()
			return nil, err
		}
		s.files, s.names = append(s.files, f), append(s.names, name)
		for _, t := range f.Tensors() {
			if other, dup := s.file[t.Name]; dup {
				s.close()
				return nil, fmt.Errorf("%s: tensor %q is also in %s", path, t.Name, other)
			}
			s.where[t.Name], s.file[t.Name] = f, name
		}
	}
	for name, shard := range index.WeightMap {
		if s.file[name] != shard {
			s.close()
			return nil, fmt.Errorf("%s: tensor %q is not in %s, where the index puts it", filepath.Join(dir, IndexFile), name, filepath.Join(dir, shard))
		}
	}
	return s, nil
}

// check compares the tensors of the shards with the placements, before
// anything is allocated: every tensor present, of a float dtype and the
// shape the configuration gives, and no tensor the model has no place for.
func (s *shards) check(dir, typ string, c model.Config, ps []placement) error {
	want := map[string]bool{}
	for _, p := range ps {
		want[p.name] = true
		f, ok := s.where[p.name]
		if !ok {
			return fmt.Errorf("%s: no tensor %q in %s, which a %s model of this %s has", dir, p.name, strings.Join(s.names, ", "), typ, ConfigFile)
		}
		info, _ := f.Lookup(p.name)
		path := filepath.Join(dir, s.file[p.name])
		switch info.DType {
		case "F32", "BF16", "F16":
		default:
			return fmt.Errorf("%s: tensor %q has dtype %s: polysketch imports F32, BF16 and F16 weights", path, p.name, info.DType)
		}
		if !slices.Equal(info.Shape, p.shape) {
			return fmt.Errorf("%s: tensor %q has shape %v, but %s gives %v", path, p.name, info.Shape, ConfigFile, p.shape)
		}
	}
	var extra []string
	for name := range s.where {
		if !want[name] && !spare(name, c) {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		more := ""
		if len(extra) > 1 {
			more = fmt.Sprintf(" (and %d more)", len(extra)-1)
		}
		return fmt.Errorf("%s: tensor %q%s of %s is no parameter of a %s model of this %s", dir, extra[0], more, s.file[extra[0]], typ, ConfigFile)
	}
	return nil
}

// blockFloats is about how much of a tensor a goroutine of read holds at
// a time: 1 MiB, which stays in cache between its conversion to float32
// and its placing.
var blockFloats = 1 << 18 // a variable for TestReadInBlocks

// read reads every placement's tensor into the parameters of m, on up to
// GOMAXPROCS goroutines, a tensor each at a time: the placements of one
// parameter fill disjoint parts of it. A tensor laid out as its part of
// the parameter is (an embedding, a norm's gain, GPT-2's Conv1D weights)
// is read straight into it; one that is transposed, or placed in columns
// beside others (q, k and v in one projection), is read a block of rows
// at a time: reading takes no memory of a tensor's size.
func (s *shards) read(ps []placement, m *model.Model) error {
	params := map[string]*nn.Param{}
	for _, p := range m.Params() {
		params[p.Name] = p
	}
	var (
		next atomic.Int64
		errs = make([]error, len(ps))
		wg   sync.WaitGroup
	)
	for range min(runtime.GOMAXPROCS(0), len(ps)) {
		wg.Go(func() {
			var buf []float32
			for i := int(next.Add(1) - 1); i < len(ps); i = int(next.Add(1) - 1) {
				p := ps[i]
				param := params[p.param]
				if param == nil {
					panic("hf: no parameter " + p.param + " for " + p.name)
				}
				errs[i] = s.readOne(p, param.Value, &buf)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// readOne reads the tensor of p into its part of dst, with buf the
// goroutine's buffer of blocks.
func (s *shards) readOne(p placement, dst *tensor.Tensor, buf *[]float32) error {
	f := s.where[p.name]
	finite := func(x []float32, at int) error {
		if i := vec.NonFinite(x); i >= 0 {
			return fmt.Errorf("%s: tensor %q: element %d of shape %v is %v; a model's weights must be finite", filepath.Join(s.dir, s.file[p.name]), p.name, at+i, p.shape, x[i])
		}
		return nil
	}
	if !p.transpose {
		// A vector, or a matrix laid out as its parameter is: placements
		// transposes every matrix that shares its parameter.
		part := dst.Data[p.offset : p.offset+tensorLen(p.shape)]
		if err := f.ReadFloat32(p.name, part); err != nil {
			return err
		}
		return finite(part, 0)
	}
	rows, cols := p.shape[0], p.shape[1]
	step := min(rows, max(transposeBlock, blockFloats/cols/transposeBlock*transposeBlock))
	if cap(*buf) < step*cols {
		*buf = make([]float32, step*cols)
	}
	for r0 := 0; r0 < rows; r0 += step {
		block := (*buf)[:min(step, rows-r0)*cols]
		if err := f.ReadFloat32At(p.name, block, int64(r0*cols)); err != nil {
			return err
		}
		if err := finite(block, r0*cols); err != nil {
			return err
		}
		place(dst.Data, dst.Shape, block, p, r0)
	}
	return nil
}

func tensorLen(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// transposeBlock is the side of the tiles place and take transpose a
// matrix in: 16 float32 make one cache line, written or read whole.
const transposeBlock = 16

// place writes rows r0 … r0+len(t)/in of the checkpoint matrix of p, an
// nn.Linear weight [out, in] held in t, transposed into their columns of
// the parameter data dst of shape.
func place(dst []float32, shape []int, t []float32, p placement, r0 int) {
	cols, in := shape[1], p.shape[1]
	out := len(t) / in
	for o0 := 0; o0 < out; o0 += transposeBlock {
		o1 := min(o0+transposeBlock, out)
		for i := range in {
			row := dst[i*cols+p.offset+r0 : i*cols+p.offset+r0+out]
			for o := o0; o < o1; o++ {
				row[o] = t[o*in+i]
			}
		}
	}
}

// take is the inverse of place: it reads a checkpoint tensor of p's shape
// out of the parameter data src of shape.
func take(t, src []float32, shape []int, p placement) {
	if len(shape) == 1 {
		copy(t, src[p.offset:p.offset+len(t)])
		return
	}
	cols := shape[1]
	if !p.transpose {
		n := p.shape[1]
		for i := range p.shape[0] {
			copy(t[i*n:(i+1)*n], src[i*cols+p.offset:i*cols+p.offset+n])
		}
		return
	}
	out, in := p.shape[0], p.shape[1]
	for o0 := 0; o0 < out; o0 += transposeBlock {
		o1 := min(o0+transposeBlock, out)
		for i := range in {
			row := src[i*cols+p.offset : i*cols+p.offset+out]
			for o := o0; o < o1; o++ {
				t[o*in+i] = row[o]
			}
		}
	}
}
