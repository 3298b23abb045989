package hf

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/safetensors"
)

// The fixtures (testdata/*/, see testdata/README.md) are tiny random
// models written by transformers 5.17 with its own float32 logits on
// fixed ids and a greedy continuation.
var fixtures = []string{"llama", "qwen2", "gpt2"}

// reference is a fixture's expected outputs.
type reference struct {
	ids    []int32   // [B·N]
	B, N   int       //
	logits []float32 // [B, N, V]
	Prompt []int32   `json:"prompt_ids"`
	Greedy []int32   `json:"greedy_ids"`
}

func readReference(t *testing.T, dir string) reference {
	t.Helper()
	var r reference
	b, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(filepath.Join(dir, "reference.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ids, err := f.ReadInt64("input_ids")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := f.Lookup("input_ids")
	r.B, r.N = info.Shape[0], info.Shape[1]
	for _, id := range ids {
		r.ids = append(r.ids, int32(id))
	}
	li, _ := f.Lookup("logits")
	r.logits = make([]float32, li.Len())
	if err := f.ReadFloat32("logits", r.logits); err != nil {
		t.Fatal(err)
	}
	return r
}

// relRMS returns ‖got − want‖ / ‖want‖.
func relRMS(got, want []float32) float64 {
	var d, w float64
	for i := range want {
		e := float64(got[i]) - float64(want[i])
		d += e * e
		w += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(d / w)
}

// greedy continues prompt by n tokens of highest logit, through a
// Decoder, as transformers' generate(do_sample=False) does.
func greedy(t *testing.T, m *model.Model, prompt []int32, n int) []int32 {
	t.Helper()
	dec, err := m.NewDecoder(1)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := dec.Prefill(prompt)
	if err != nil {
		t.Fatal(err)
	}
	out := slices.Clone(prompt)
	for range n {
		next := int32(0)
		for i, v := range logits.Data {
			if v > logits.Data[next] {
				next = int32(i)
			}
		}
		out = append(out, next)
		if logits, err = dec.Step([]int32{next}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestFixtures imports each fixture and requires transformers' logits
// within 1e-4 relative RMS error, and its greedy tokens.
func TestFixtures(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", name)
			imp, err := Read(dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			ref := readReference(t, dir)
			got := imp.Model.Forward(ref.ids, ref.B, ref.N)
			if e := relRMS(got.Data, ref.logits); !(e <= 1e-4) {
				t.Errorf("logits differ from transformers' by %.3g relative RMS, want ≤ 1e-4", e)
			} else {
				t.Logf("logits within %.2g relative RMS of transformers'", e)
			}
			if g := greedy(t, imp.Model, ref.Prompt, len(ref.Greedy)-len(ref.Prompt)); !slices.Equal(g, ref.Greedy) {
				t.Errorf("greedy continuation\n%v, transformers'\n%v", g, ref.Greedy)
			}
		})
	}
}
