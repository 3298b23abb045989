package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/internal/fifotest"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/safetensors"
	"github.com/polysketch/polysketch/tensor"
)

func tinyConfig() model.Config {
	return model.Config{
		Vocab: 32, Dim: 16, Layers: 1, Heads: 2, Context: 16,
		Attention: attention.PolysketchConfig{Degree: 4, SketchSize: 4, Block: 8, Local: true, Sketch: attention.Gaussian},
		Tied:      true, Seed: 3,
	}
}

// newCheckpoint returns a checkpoint of a tiny model whose weights and
// moments are filled from seed, so that two seeds give different ones.
func newCheckpoint(t *testing.T, seed uint64, step int) *Checkpoint {
	t.Helper()
	m, err := model.New(tinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	opt := make(map[string]*tensor.Tensor)
	for _, p := range m.Params() {
		for i := range p.Value.Data {
			p.Value.Data[i] = float32(rng.NormFloat64())
		}
		mo, v := tensor.New(p.Value.Shape...), tensor.New(p.Value.Shape...)
		for i := range mo.Data {
			mo.Data[i] = float32(rng.NormFloat64())
			v.Data[i] = float32(rng.Float64())
		}
		opt[p.Name+".m"], opt[p.Name+".v"] = mo, v
	}
	return &Checkpoint{
		Model:     m,
		Train:     json.RawMessage(`{"lr":0.001,"batch":4}`),
		Optimizer: opt,
		State:     State{Step: step, Tokenizer: "byte", Data: []byte{1, 2, 3, 255}, Tokens: 1234, Seconds: 5.5},
	}
}

// sameCheckpoint fails the test unless got equals want bit for bit.
func sameCheckpoint(t *testing.T, got, want *Checkpoint) {
	t.Helper()
	if got.Model.Config() != want.Model.Config() {
		t.Errorf("model config %+v, want %+v", got.Model.Config(), want.Model.Config())
	}
	if !jsonEqual(got.Train, want.Train) {
		t.Errorf("train config %s, want %s", got.Train, want.Train)
	}
	if !reflectEqualState(got.State, want.State) {
		t.Errorf("state %+v, want %+v", got.State, want.State)
	}
	gp, wp := got.Model.Params(), want.Model.Params()
	if len(gp) != len(wp) {
		t.Fatalf("%d params, want %d", len(gp), len(wp))
	}
	for i := range gp {
		if gp[i].Name != wp[i].Name || !sameBits(gp[i].Value, wp[i].Value) {
			t.Errorf("param %s differs from %s", gp[i].Name, wp[i].Name)
		}
	}
	if (got.Optimizer == nil) != (want.Optimizer == nil) || len(got.Optimizer) != len(want.Optimizer) {
		t.Fatalf("optimizer state of %d entries, want %d", len(got.Optimizer), len(want.Optimizer))
	}
	for k, w := range want.Optimizer {
		if g := got.Optimizer[k]; g == nil || !sameBits(g, w) {
			t.Errorf("optimizer state %q differs", k)
		}
	}
}

func reflectEqualState(a, b State) bool {
	return a.Step == b.Step && a.Tokenizer == b.Tokenizer && bytes.Equal(a.Data, b.Data) &&
		a.Tokens == b.Tokens && a.Seconds == b.Seconds
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return len(Diff(x, y)) == 0
}

func sameBits(a, b *tensor.Tensor) bool {
	if !tensor.SameShape(a, b) {
		return false
	}
	for i := range a.Data {
		if math.Float32bits(a.Data[i]) != math.Float32bits(b.Data[i]) {
			return false
		}
	}
	return true
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fallback bool // rename aside instead of exchanging
		noOpt    bool
	}{
		{"exchange", false, false},
		{"fallback", true, false},
		{"weights only", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fallback {
				useFallback(t)
			}
			dir := filepath.Join(t.TempDir(), "ckpt")
			for step, seed := range []uint64{1, 2} { // a first save, then a replacement
				want := newCheckpoint(t, seed, 10*step)
				if tc.noOpt {
					want.Optimizer = nil
				}
				if err := Save(dir, want); err != nil {
					t.Fatal(err)
				}
				got, err := Load(dir)
				if err != nil {
					t.Fatal(err)
				}
				sameCheckpoint(t, got, want)
				if names := entries(t, filepath.Dir(dir)); !slices.Equal(names, []string{"ckpt"}) {
					t.Errorf("directory holds %q, want only the checkpoint", names)
				}
			}
		})
	}
}

// useFallback makes saves in this test use the two-rename swap.
func useFallback(t *testing.T) {
	old := exchange
	exchange = func(a, b string) error { return errUnsupported }
	t.Cleanup(func() { exchange = old })
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// TestWeightsAreSafetensors checks that the weights file is a plain
// safetensors file with one tensor per parameter, named as the parameter.
func TestWeightsAreSafetensors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	c := newCheckpoint(t, 1, 0)
	if err := Save(dir, c); err != nil {
		t.Fatal(err)
	}
	ts, _, err := safetensors.Read(filepath.Join(dir, "model.safetensors"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != len(c.Model.Params()) {
		t.Errorf("%d tensors, want %d", len(ts), len(c.Model.Params()))
	}
	for _, p := range c.Model.Params() {
		if got := ts[p.Name]; got == nil || !sameBits(got, p.Value) {
			t.Errorf("tensor %q missing or different", p.Name)
		}
	}
}

// snapshot returns every file under dir with its contents.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := make(map[string]string)
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		files[path] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// rewrite replaces a file of the checkpoint in dir and, if fixManifest,
// updates its size and checksum in the manifest, so that only the checks
// after the checksums can catch the change.
func rewrite(t *testing.T, dir, name string, b []byte, fixManifest bool) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if !fixManifest {
		return
	}
	var man manifest
	mb, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mb, &man); err != nil {
		t.Fatal(err)
	}
	for i := range man.Files {
		if man.Files[i].Name == name {
			sum := sha256.Sum256(b)
			man.Files[i].Size, man.Files[i].SHA256 = int64(len(b)), hex.EncodeToString(sum[:])
		}
	}
	mb, _ = json.Marshal(man)
	if err := os.WriteFile(filepath.Join(dir, manifestFile), mb, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFileT(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// editJSON decodes a JSON file of dir, lets edit change it, and rewrites
// it with a fixed manifest.
func editJSON(t *testing.T, dir, name string, edit func(map[string]any)) {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(readFileT(t, filepath.Join(dir, name)), &v); err != nil {
		t.Fatal(err)
	}
	edit(v)
	b, _ := json.Marshal(v)
	rewrite(t, dir, name, b, true)
}

func TestLoadRejectsDamage(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   string // in the error
	}{
		{"truncated weights", func(t *testing.T, dir string) {
			p := filepath.Join(dir, weightsFile)
			b := readFileT(t, p)
			rewrite(t, dir, weightsFile, b[:len(b)-7], false)
		}, "truncated"},
		{"flipped byte in the weights' data", func(t *testing.T, dir string) {
			p := filepath.Join(dir, weightsFile)
			b := readFileT(t, p)
			b[len(b)-5] ^= 0x10 // a mantissa bit: still a finite float, still parses
			rewrite(t, dir, weightsFile, b, false)
		}, "checksum mismatch"},
		{"flipped byte in the optimizer state", func(t *testing.T, dir string) {
			b := readFileT(t, filepath.Join(dir, optimizerFile))
			b[len(b)/2] ^= 1
			rewrite(t, dir, optimizerFile, b, false)
		}, "optimizer.safetensors: SHA-256 checksum mismatch"},
		{"missing weights", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, weightsFile))
		}, "model.safetensors is missing"},
		{"missing manifest", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, manifestFile))
		}, "no manifest.json"},
		{"missing directory", func(t *testing.T, dir string) {
			os.RemoveAll(dir)
		}, "no checkpoint"},
		{"corrupt manifest", func(t *testing.T, dir string) {
			rewrite(t, dir, manifestFile, []byte(`{"format":`), false)
		}, "manifest.json"},
		{"manifest without the weights", func(t *testing.T, dir string) {
			editJSON(t, dir, manifestFile, func(m map[string]any) {
				files := m["files"].([]any)
				m["files"] = slices.DeleteFunc(files, func(f any) bool { return f.(map[string]any)["name"] == weightsFile })
			})
		}, "does not list model.safetensors"},
		{"future format version", func(t *testing.T, dir string) {
			editJSON(t, dir, manifestFile, func(m map[string]any) { m["version"] = 99 })
		}, "format version 99"},
		{"config of another shape", func(t *testing.T, dir string) {
			editJSON(t, dir, configFile, func(m map[string]any) { m["model"].(map[string]any)["dim"] = 32 })
		}, "has shape [32 16], the model needs [32 32]"},
		{"invalid config", func(t *testing.T, dir string) {
			editJSON(t, dir, configFile, func(m map[string]any) { m["model"].(map[string]any)["heads"] = 3 })
		}, "not divisible by heads 3"},
		{"unknown config field", func(t *testing.T, dir string) {
			editJSON(t, dir, configFile, func(m map[string]any) { m["model"].(map[string]any)["dimm"] = 3 })
		}, `unknown field "dimm"`},
		{"non-finite weight", func(t *testing.T, dir string) {
			ts, md, err := safetensors.Read(filepath.Join(dir, weightsFile), nil)
			if err != nil {
				t.Fatal(err)
			}
			ts["norm.gain"].Data[3] = float32(math.NaN())
			var b bytes.Buffer
			if err := safetensors.Encode(&b, ts, md); err != nil {
				t.Fatal(err)
			}
			rewrite(t, dir, weightsFile, b.Bytes(), true)
		}, "norm.gain"},
		{"extra tensor", func(t *testing.T, dir string) {
			ts, md, _ := safetensors.Read(filepath.Join(dir, weightsFile), nil)
			ts["head.weight"] = tensor.New(16, 32)
			var b bytes.Buffer
			safetensors.Encode(&b, ts, md)
			rewrite(t, dir, weightsFile, b.Bytes(), true)
		}, `"head.weight" is no parameter`},
		{"optimizer of another step", func(t *testing.T, dir string) {
			editJSON(t, dir, stateFile, func(m map[string]any) { m["step"] = 11 })
		}, "optimizer.safetensors is of step \"7\", state.json of step 11"},
		{"state of another version", func(t *testing.T, dir string) {
			editJSON(t, dir, stateFile, func(m map[string]any) { m["version"] = 0 })
		}, "state.json: format version 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "ckpt")
			if err := Save(dir, newCheckpoint(t, 1, 7)); err != nil {
				t.Fatal(err)
			}
			tc.damage(t, dir)
			before := snapshot(t, root)
			c, err := Load(dir)
			if err == nil {
				t.Fatalf("Load succeeded (step %d), want an error containing %q", c.State.Step, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q spans several lines", err)
			}
			if after := snapshot(t, root); !mapsEqual(before, after) {
				t.Error("Load changed files")
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestFailedSaveKeepsPrevious fails a save at each of its stages and checks
// that the previous checkpoint is intact and nothing else is left.
func TestFailedSaveKeepsPrevious(t *testing.T) {
	errInjected := errors.New("injected failure")
	for _, tc := range []struct {
		stage    string
		fallback bool
	}{
		{"write config.json", false},
		{"write model.safetensors", false},
		{"write optimizer.safetensors", false},
		{"write manifest.json", false},
		{"swap", false},
		{"aside", true}, // between the two renames of the fallback swap
	} {
		t.Run(tc.stage, func(t *testing.T) {
			if tc.fallback {
				useFallback(t)
			}
			root := t.TempDir()
			dir := filepath.Join(root, "ckpt")
			old := newCheckpoint(t, 1, 5)
			if err := Save(dir, old); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, root)
			hit := false
			testHook = func(stage string) error {
				if stage == tc.stage {
					hit = true
					return errInjected
				}
				return nil
			}
			defer func() { testHook = nil }()
			err := Save(dir, newCheckpoint(t, 2, 6))
			if !errors.Is(err, errInjected) || !hit {
				t.Fatalf("Save: %v; want the injected failure at %q", err, tc.stage)
			}
			if after := snapshot(t, root); !mapsEqual(before, after) {
				t.Errorf("failed save changed the directory: %q", entries(t, root))
			}
			got, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			sameCheckpoint(t, got, old)
		})
	}
}

// TestSaveCanceled: a save whose context is canceled while it writes (an
// import stopped by Ctrl-C) stops, leaves the previous checkpoint as it
// was, and leaves nothing of the new one behind.
func TestSaveCanceled(t *testing.T) {
	for _, stage := range []string{"write config.json", "write model.safetensors", "swap"} {
		t.Run(stage, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "ckpt")
			old := newCheckpoint(t, 1, 5)
			if err := Save(dir, old); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, root)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			testHook = func(s string) error {
				if s == stage {
					cancel()
				}
				return nil
			}
			defer func() { testHook = nil }()
			if err := SaveContext(ctx, dir, newCheckpoint(t, 2, 6)); !errors.Is(err, context.Canceled) {
				t.Fatalf("SaveContext: %v; want context.Canceled", err)
			}
			if after := snapshot(t, root); !mapsEqual(before, after) {
				t.Errorf("the canceled save changed the directory: %q", entries(t, root))
			}
			got, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			sameCheckpoint(t, got, old)
		})
	}
}

// TestCrashBetweenRenames recreates what a crash between the fallback
// swap's two renames leaves, the old checkpoint aside and a temporary
// directory, and checks that it still loads and that the next save
// cleans up.
func TestCrashBetweenRenames(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ckpt")
	old := newCheckpoint(t, 1, 5)
	if err := Save(dir, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, backupPath(dir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, ".ckpt.tmp-123"), 0o755); err != nil {
		t.Fatal(err)
	}
	if !Exists(dir) {
		t.Error("Exists = false, want true: the old checkpoint is aside")
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, got, old)

	next := newCheckpoint(t, 2, 6)
	if err := Save(dir, next); err != nil {
		t.Fatal(err)
	}
	if names := entries(t, root); !slices.Equal(names, []string{"ckpt"}) {
		t.Errorf("directory holds %q after the next save, want only the checkpoint", names)
	}
	got, err = Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, got, next)
}

func TestSaveRefuses(t *testing.T) {
	t.Run("non-finite weights", func(t *testing.T) {
		root := t.TempDir()
		dir := filepath.Join(root, "ckpt")
		if err := Save(dir, newCheckpoint(t, 1, 5)); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, root)
		bad := newCheckpoint(t, 2, 6)
		bad.Model.Params()[2].Value.Data[0] = float32(math.Inf(1))
		err := Save(dir, bad)
		if err == nil || !strings.Contains(err.Error(), "not finite") {
			t.Errorf("Save: %v, want an error about weights that are not finite", err)
		}
		if after := snapshot(t, root); !mapsEqual(before, after) {
			t.Error("refused save changed the directory")
		}
	})
	t.Run("non-finite moments", func(t *testing.T) {
		bad := newCheckpoint(t, 2, 6)
		bad.Optimizer["norm.bias.v"].Data[0] = float32(math.NaN())
		err := Save(filepath.Join(t.TempDir(), "ckpt"), bad)
		if err == nil || !strings.Contains(err.Error(), "norm.bias.v") {
			t.Errorf("Save: %v, want an error naming norm.bias.v", err)
		}
	})
	t.Run("missing moments", func(t *testing.T) {
		bad := newCheckpoint(t, 2, 6)
		delete(bad.Optimizer, "embed.weight.m")
		err := Save(filepath.Join(t.TempDir(), "ckpt"), bad)
		if err == nil || !strings.Contains(err.Error(), `no entry "embed.weight.m"`) {
			t.Errorf("Save: %v, want an error naming embed.weight.m", err)
		}
	})
	t.Run("a directory that is not a checkpoint", func(t *testing.T) {
		dir := t.TempDir()
		keep := filepath.Join(dir, "notes.txt")
		if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := Save(dir, newCheckpoint(t, 1, 1))
		if err == nil || !strings.Contains(err.Error(), "not a checkpoint") {
			t.Errorf("Save: %v, want a refusal", err)
		}
		if b, _ := os.ReadFile(keep); string(b) != "mine" {
			t.Error("Save touched a file that is not its own")
		}
	})
}

func TestDiff(t *testing.T) {
	a := tinyConfig()
	b := a
	b.Dim = 32
	ps := b.Attention.(attention.PolysketchConfig)
	ps.Block = 16
	b.Attention = ps
	type nested struct {
		Model model.Config `json:"model"`
		LR    float64      `json:"lr"`
	}
	tests := []struct {
		name string
		a, b any
		want []string
	}{
		{"equal", a, a, nil},
		{"two fields", a, b, []string{"attention_options.block: 8 vs 16", "dim: 16 vs 32"}},
		{"nested", nested{a, 1e-3}, nested{b, 1e-3}, []string{"model.attention_options.block: 8 vs 16", "model.dim: 16 vs 32"}},
		{"missing field", map[string]any{"x": 1}, map[string]any{}, []string{"x: 1 vs missing"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Diff(tc.a, tc.b); !slices.Equal(got, tc.want) {
				t.Errorf("Diff = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestTokenizerFile checks that a tokenizer.json saved with a checkpoint
// comes back unchanged, under the manifest's checksum, and that one saved
// without comes back nil.
func TestTokenizerFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	c := newCheckpoint(t, 1, 3)
	if err := Save(dir, c); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil || got.TokenizerJSON != nil {
		t.Fatalf("Load of a checkpoint without a tokenizer file: TokenizerJSON %q, %v; want nil", got.TokenizerJSON, err)
	}
	file := []byte(`{"model": {"type": "BPE"}}` + "\n")
	c.TokenizerJSON = file
	if err := Save(dir, c); err != nil {
		t.Fatal(err)
	}
	if got, err = Load(dir); err != nil || !bytes.Equal(got.TokenizerJSON, file) {
		t.Fatalf("Load: TokenizerJSON %q, %v; want %q", got.TokenizerJSON, err, file)
	}
	os.WriteFile(filepath.Join(dir, tokenizerFile), []byte(`{"model": {"type": "BPX"}}`+"\n"), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tokenizer.json: SHA-256 checksum mismatch") {
		t.Errorf("Load of an edited tokenizer.json: %v, want a checksum mismatch", err)
	}
}

// TestLoadNamedPipe puts named pipes where a checkpoint's files go: Load
// must refuse each at once, naming the file, rather than wait for a
// writer.
func TestLoadNamedPipe(t *testing.T) {
	for _, name := range []string{weightsFile, manifestFile, stateFile} {
		dir := filepath.Join(t.TempDir(), "ck")
		if err := Save(dir, newCheckpoint(t, 1, 3)); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		os.Remove(path)
		fifotest.Make(t, path)
		done := make(chan error, 1)
		go func() {
			_, err := Load(dir)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), name+" is a named pipe, not a regular file") || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s a named pipe: %v, want one line saying so", name, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("Load with %s a named pipe has not returned after a minute: it waits for a writer", name)
		}
	}
}

// TestModelFiles: an imported model's tokenizer_config.json and
// generation_config.json are saved verbatim, checksummed, and loaded back;
// another name is refused.
func TestModelFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	c := newCheckpoint(t, 1, 3)
	c.Files = map[string][]byte{"tokenizer_config.json": []byte(`{"eos_token": "</s>"}`), "generation_config.json": []byte(`{"eos_token_id": [1, 2]}`)}
	if err := Save(dir, c); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range c.Files {
		if !bytes.Equal(got.Files[name], b) {
			t.Errorf("%s: %q, want %q", name, got.Files[name], b)
		}
		if disk, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(disk, b) {
			t.Errorf("%s on disk: %q, want %q", name, disk, b)
		}
	}
	os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id": [1, 3]}`), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "generation_config.json: SHA-256 checksum mismatch") {
		t.Errorf("Load of an edited generation_config.json: %v, want a checksum mismatch", err)
	}
	c.Files = map[string][]byte{"../x.json": nil}
	if err := Save(filepath.Join(t.TempDir(), "other"), c); err == nil || !strings.Contains(err.Error(), `file "../x.json" is none of the model files`) {
		t.Errorf("Save of another file: %v", err)
	}
}

// TestVerify: Verify streams every file against the manifest.
func TestVerify(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	if err := Save(dir, newCheckpoint(t, 1, 3)); err != nil {
		t.Fatal(err)
	}
	if err := Verify(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, weightsFile)
	b := readFileT(t, path)
	b[len(b)/2] ^= 1
	os.WriteFile(path, b, 0o644)
	if err := Verify(dir); err == nil || !strings.Contains(err.Error(), "model.safetensors: SHA-256 checksum mismatch") {
		t.Errorf("Verify of a flipped bit: %v", err)
	}
	os.WriteFile(path, b[:len(b)-1], 0o644)
	if err := Verify(dir); err == nil || !strings.Contains(err.Error(), "the manifest says") {
		t.Errorf("Verify of a truncated file: %v", err)
	}
}
