package hf

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/model"
)

// llamaShaped is a small polysketch model of the Llama layout.
func llamaShaped(spec attention.Config, tied bool) model.Config {
	return model.Config{
		Vocab: 50, Dim: 24, Layers: 2, Heads: 4, KVHeads: 2, Context: 64, Hidden: 40,
		Attention: spec, Tied: tied, Seed: 3,
		Positions: model.PositionsRoPEOnly, Norm: model.NormRMS, FFN: model.FFNSwiGLU,
		NoHeadBias: true, EmbedScale: 1, RoPETheta: 50000,
		RoPEScaling: model.RoPEScaling{Type: model.ScalingLlama3, Factor: 4, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 16},
	}
}

// TestWriteRoundTrip: a model written in the Llama layout and read back
// gives the same logits, bit for bit, and the same parameters.
func TestWriteRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  model.Config
	}{
		{"flash/untied", llamaShaped(attention.FlashConfig{Block: 8}, false)},
		{"softmax/tied/biases", func() model.Config {
			c := llamaShaped(attention.SoftmaxConfig{}, true)
			c.QKVBias, c.OutBias, c.FFNBias, c.HeadDim = true, true, true, 8
			c.RoPEScaling = model.RoPEScaling{Type: model.ScalingLinear, Factor: 2}
			return c
		}()},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := model.New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for _, p := range m.Params() {
				for i := range p.Value.Data {
					p.Value.Data[i] += float32(0.1 * rng.NormFloat64())
				}
			}
			dir := filepath.Join(t.TempDir(), "hf")
			tok := []byte(`{"model": {"type": "BPE"}}`)
			if err := Write(dir, m, map[string][]byte{TokenizerFile: tok}); err != nil {
				t.Fatal(err)
			}
			imp, err := Read(dir, Options{Attention: c.cfg.Attention})
			if err != nil {
				t.Fatal(err)
			}
			if string(imp.Tokenizer) != string(tok) {
				t.Errorf("tokenizer.json %q, want %q", imp.Tokenizer, tok)
			}
			ids := make([]int32, 2*30)
			for i := range ids {
				ids[i] = int32(rng.IntN(c.cfg.Vocab))
			}
			want := slices.Clone(m.Forward(ids, 2, 30).Data)
			if got := imp.Model.Forward(ids, 2, 30).Data; !slices.Equal(got, want) {
				t.Errorf("logits after the round trip differ by %.3g relative RMS; want the same bits", relRMS(got, want))
			}
			if err := Write(dir, m, nil); err == nil || !strings.Contains(err.Error(), "exists") {
				t.Errorf("Write over an existing directory: %v", err)
			}
		})
	}
}

// TestWriteRefuses: a model the Llama layout cannot express is refused,
// naming each field, and nothing is written.
func TestWriteRefuses(t *testing.T) {
	m, err := model.New(model.Config{Vocab: 16, Dim: 8, Layers: 1, Heads: 2, Context: 8, Attention: attention.SoftmaxConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	err = Write(filepath.Join(parent, "out"), m, nil)
	for _, want := range []string{`norm ""`, `ffn ""`, `positions ""`, "embed_scale 0", "no_head_bias false"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one naming %s", err, want)
		}
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Errorf("%d entries left in the directory", len(entries))
	}
}

// stopAfter is a context whose Err reports it canceled from its n-th
// call on: a stop at every point that looks.
type stopAfter struct {
	context.Context
	n atomic.Int64
}

func (c *stopAfter) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// TestWriteCanceled: a write stopped at any point where it checks its
// context (an export interrupted by Ctrl-C) fails with the context's
// error and leaves nothing in the directory.
func TestWriteCanceled(t *testing.T) {
	m, err := model.New(llamaShaped(attention.FlashConfig{Block: 8}, false))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{TokenizerFile: []byte(`{}`)}
	for n := int64(0); ; n++ {
		parent := t.TempDir()
		ctx := &stopAfter{Context: context.Background()}
		ctx.n.Store(n)
		err := WriteContext(ctx, filepath.Join(parent, "hf"), m, files)
		if err == nil {
			if n < 2 {
				t.Errorf("a write stopped at the %d-th look at its context went on", n)
			}
			break
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("stopped at %d: %v, want context.Canceled", n, err)
		}
		if entries, _ := os.ReadDir(parent); len(entries) != 0 {
			t.Errorf("stopped at %d: %d entries left in the directory", n, len(entries))
		}
	}
}
