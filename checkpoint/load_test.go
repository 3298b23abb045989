package checkpoint

import (
	"bytes"
	"encoding/binary"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/safetensors"
	"github.com/polysketch/polysketch/tensor"
)

// TestLoadAllocates bounds what loading allocates by what it returns: a
// checkpoint of 50 MB of weights and 100 MB of moments is read straight
// into the model's and the moments' tensors, not through a copy of its
// files nor a decoded map of them (which took three times the weights
// and moments). Load allocates the model (model.NewEmpty's allocation,
// which the gradients double) and the moments; LoadModel verifies the
// moments without keeping them.
func TestLoadAllocates(t *testing.T) {
	cfg := model.Config{
		Vocab: 8192, Dim: 512, Layers: 2, Heads: 8, Context: 64,
		Attention: attention.SoftmaxConfig{}, Tied: true, Seed: 1,
	}
	m, err := model.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var weightBytes uint64
	opt := map[string]*tensor.Tensor{}
	for _, p := range m.Params() {
		weightBytes += 4 * uint64(p.Value.Len())
		opt[p.Name+".m"], opt[p.Name+".v"] = tensor.New(p.Value.Shape...), tensor.New(p.Value.Shape...)
	}
	dir := filepath.Join(t.TempDir(), "ck")
	if err := Save(dir, &Checkpoint{Model: m, Optimizer: opt, State: State{Tokenizer: "byte"}}); err != nil {
		t.Fatal(err)
	}
	m, opt = nil, nil
	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	empty := allocated(func() { m, err = model.NewEmpty(cfg) })
	if err != nil {
		t.Fatal(err)
	}
	m = nil
	const slack = 4 << 20 // the small files, the headers, the buffers of reading and hashing
	for _, tc := range []struct {
		name string
		load func(string) (*Checkpoint, error)
		want uint64 // what is kept
	}{
		{"Load", Load, empty + 2*weightBytes},
		{"LoadModel", LoadModel, empty},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c *Checkpoint
			got := allocated(func() { c, err = tc.load(dir) })
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s allocated %.1f MB; the weights are %.1f MB, the empty model %.1f MB", tc.name, mb(got), mb(weightBytes), mb(empty))
			if got > tc.want+slack {
				t.Errorf("%s allocated %.1f MB for a model of %.1f MB of weights (%.1f MB built empty) and its moments: want at most %.1f MB", tc.name, mb(got), mb(weightBytes), mb(empty), mb(tc.want+slack))
			}
			if (c.Optimizer != nil) != (tc.name == "Load") {
				t.Errorf("%s: optimizer state of %d tensors", tc.name, len(c.Optimizer))
			}
			runtime.KeepAlive(c)
		})
	}
}

func mb(n uint64) float64 { return float64(n) / 1e6 }

// TestLoadVerifiesFirst: whatever damage to a weights or optimizer file
// makes its header or its values look like, a file that does not match
// its checksum is reported as corrupted, by every way of loading.
func TestLoadVerifiesFirst(t *testing.T) {
	for _, tc := range []struct {
		name   string
		file   string
		damage func(b []byte)
	}{
		// A digit of a shape in the header: 16 becomes 17.
		{"shape in the header", weightsFile, func(b []byte) { b[bytes.Index(b, []byte("[32,16]"))+5] = '7' }},
		{"header length", weightsFile, func(b []byte) { binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)-8) }},
		{"NaN in the data", weightsFile, func(b []byte) {
			binary.LittleEndian.PutUint32(b[len(b)-4:], math.Float32bits(float32(math.NaN())))
		}},
		{"moment of another parameter", optimizerFile, func(b []byte) { b[bytes.Index(b, []byte("embed.weight.m"))] = 'f' }},
		{"NaN in a moment", optimizerFile, func(b []byte) {
			binary.LittleEndian.PutUint32(b[len(b)-4:], math.Float32bits(float32(math.Inf(1))))
		}},
	} {
		for _, load := range []struct {
			name string
			f    func(string) (*Checkpoint, error)
		}{{"Load", Load}, {"LoadModel", LoadModel}} {
			t.Run(tc.name+"/"+load.name, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "ck")
				if err := Save(dir, newCheckpoint(t, 1, 7)); err != nil {
					t.Fatal(err)
				}
				b := readFileT(t, filepath.Join(dir, tc.file))
				tc.damage(b)
				rewrite(t, dir, tc.file, b, false)
				_, err := load.f(dir)
				if want := tc.file + ": SHA-256 checksum mismatch"; err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%v, want an error containing %q", err, want)
				}
			})
		}
	}
}

// TestLoadModel: LoadModel gives the model of Load without the optimizer
// state, and refuses what Load refuses of the optimizer's header.
func TestLoadModel(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	want := newCheckpoint(t, 1, 7)
	if err := Save(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Optimizer != nil {
		t.Errorf("LoadModel kept %d moments", len(got.Optimizer))
	}
	want.Optimizer = nil
	sameCheckpoint(t, got, want)

	editJSON(t, dir, stateFile, func(m map[string]any) { m["step"] = 11 })
	if _, err := LoadModel(dir); err == nil || !strings.Contains(err.Error(), `optimizer.safetensors is of step "7", state.json of step 11`) {
		t.Errorf("LoadModel of an optimizer of another step: %v", err)
	}
}

// TestLoadDType: a weights file of another dtype than F32, re-signed, is
// refused by name; a checkpoint's weights are F32.
func TestLoadDType(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	c := newCheckpoint(t, 1, 7)
	c.Optimizer = nil
	if err := Save(dir, c); err != nil {
		t.Fatal(err)
	}
	raw := map[string]safetensors.Raw{}
	for _, p := range c.Model.Params() {
		raw[p.Name] = safetensors.Raw{DType: "BF16", Shape: p.Value.Shape, Data: safetensors.BF16(p.Value.Data)}
	}
	var b bytes.Buffer
	if err := safetensors.EncodeRaw(&b, raw, nil); err != nil {
		t.Fatal(err)
	}
	rewrite(t, dir, weightsFile, b.Bytes(), true)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `tensor "embed.weight" has dtype BF16, a checkpoint's are F32`) {
		t.Errorf("Load of BF16 weights: %v", err)
	}
}
