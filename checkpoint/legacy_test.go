package checkpoint

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/polysketch/polysketch/attention"
)

// TestLoadVersion1 loads checkpoints written before the attention registry
// (testdata/v1, made by `polysketch train` at commit 4d7d8ef, when the
// attention options stood beside the model's fields) and requires the
// configuration they meant and the logits that code computed from them
// (logits.json, positions 0, 15 and 31 of a fixed 32-token input); then
// saves each in today's format and loads it back.
func TestLoadVersion1(t *testing.T) {
	b, err := os.ReadFile("testdata/v1/logits.json")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string][]float32
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  attention.Config
	}{
		{"polysketch", attention.PolysketchConfig{Degree: 4, SketchSize: 4, Block: 8, Local: true, Sketch: attention.Gaussian, Learned: true}},
		{"flash", attention.FlashConfig{Block: 16}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ck, err := Load(filepath.Join("testdata/v1", c.name))
			if err != nil {
				t.Fatal(err)
			}
			if got := ck.Model.Config().Attention; got != c.cfg {
				t.Fatalf("attention config %#v, want %#v", got, c.cfg)
			}
			check := func(ck *Checkpoint) {
				t.Helper()
				tokens := make([]int32, 32)
				for i := range tokens {
					tokens[i] = int32("func (m *Model) Forward(tokens []"[(i*7)%31])
				}
				logits := ck.Model.Forward(tokens, 1, 32)
				V := ck.Model.Config().Vocab
				for i, pos := range []int{0, 15, 31} {
					for v := range V {
						got, w := logits.Data[pos*V+v], want[c.name][i*V+v]
						if math.Abs(float64(got-w)) > 1e-4*max(1, math.Abs(float64(w))) {
							t.Fatalf("position %d, logit %d: %v, the code that wrote the checkpoint computed %v", pos, v, got, w)
						}
					}
				}
			}
			check(ck)
			dir := filepath.Join(t.TempDir(), "ck")
			if err := Save(dir, ck); err != nil {
				t.Fatal(err)
			}
			again, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := again.Model.Config().Attention; got != c.cfg {
				t.Fatalf("after a save in today's format: attention config %#v, want %#v", got, c.cfg)
			}
			check(again)
		})
	}
}
