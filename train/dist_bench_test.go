package train

import (
	"testing"

	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/optim"
)

// BenchmarkAccumulateMicroBatch is what summing micro-batch gradients in
// order costs a single process per micro-batch beyond accumulating in
// place: zeroing the gradients and adding them to the running sum, on the
// default model (compare with a training step: polysketch bench dp).
func BenchmarkAccumulateMicroBatch(b *testing.B) {
	m, err := model.New(model.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	t := &Trainer{Model: m}
	t.addLocal(true)
	n := 0
	for _, p := range m.Params() {
		n += p.Value.Len()
	}
	b.SetBytes(int64(4 * n))
	b.ResetTimer()
	for range b.N {
		optim.ZeroGrad(m.Params())
		t.addLocal(false)
	}
}
