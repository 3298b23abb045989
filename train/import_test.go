package train

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/checkpoint"
	"github.com/polysketch/polysketch/hf"
	"github.com/polysketch/polysketch/model"
)

// imported returns a checkpoint of a model imported from a Hugging Face
// directory of the Llama layout (grouped-query attention, RMSNorm,
// SwiGLU, rotary embeddings alone), over bytes.
func imported(t *testing.T) *checkpoint.Checkpoint {
	t.Helper()
	m, err := model.New(model.Config{
		Vocab: 256, Dim: 16, Layers: 2, Heads: 4, KVHeads: 2, Context: 16, Hidden: 24,
		Attention: attention.FlashConfig{Block: 8}, Positions: model.PositionsRoPEOnly, Norm: model.NormRMS,
		FFN: model.FFNSwiGLU, NoHeadBias: true, EmbedScale: 1, QKVBias: true, OutBias: true, Seed: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	for _, p := range m.Params() {
		for i := range p.Value.Data {
			p.Value.Data[i] += float32(0.05 * rng.NormFloat64())
		}
	}
	dir := filepath.Join(t.TempDir(), "hf")
	gen := []byte(`{"eos_token_id": [3, 4]}`)
	if err := hf.Write(dir, m, map[string][]byte{hf.GenerationFile: gen}); err != nil {
		t.Fatal(err)
	}
	imp, err := hf.Read(dir, hf.Options{Attention: attention.FlashConfig{Block: 8}})
	if err != nil {
		t.Fatal(err)
	}
	return &checkpoint.Checkpoint{Model: imp.Model, State: checkpoint.State{Tokenizer: "byte"}, Files: imp.Files}
}

// TestFineTuneImported fine-tunes an imported model (Run.Init Weights,
// Run.Files), interrupted at step 10 and resumed from disk, and requires
// the steps and weights of a run straight through, and the model's files
// kept in its checkpoints.
func TestFineTuneImported(t *testing.T) {
	tc := tinyTrain()
	tc.SaveEvery = 5
	start := func(dir string, mode Mode) *Trainer {
		t.Helper()
		c := imported(t)
		train, val := tinyData(t)
		tr, err := Start(context.Background(), dir, Run{Model: c.Model.Config(), Recipe: tc, Source: &Corpus{Train: train, Val: val}, Mode: mode,
			Init: Weights(c.Model), Files: c.Files})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	straightDir := t.TempDir()
	straight := start(straightDir, New)
	if _, err := runTrainer(t, straight, 0); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	if _, err := runTrainer(t, start(dir, New), 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	s, _, err := OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Files[hf.GenerationFile]) != `{"eos_token_id": [3, 4]}` {
		t.Errorf("the run's checkpoint keeps generation_config.json as %q", s.Files[hf.GenerationFile])
	}
	second, err := resume(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runTrainer(t, second, 0); err != nil {
		t.Fatal(err)
	}
	sameRun(t, readMetrics(t, straightDir), readMetrics(t, dir))
	sameWeights(t, straight.Model, second.Model)
	if ms := readMetrics(t, dir); !(ms[len(ms)-1].Loss < ms[0].Loss) {
		t.Errorf("loss went from %.4f to %.4f", ms[0].Loss, ms[len(ms)-1].Loss)
	}
	c, _ := checkpoint.Load(filepath.Join(dir, CheckpointDir))
	if string(c.Files[hf.GenerationFile]) != `{"eos_token_id": [3, 4]}` {
		t.Errorf("the resumed run's checkpoint keeps generation_config.json as %q", c.Files[hf.GenerationFile])
	}
}
