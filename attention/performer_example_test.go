package attention_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/tensor"
)

// Performer's FAVOR+ attention, causal, with 256 orthogonal random
// features drawn again every 1000 training steps. The training loop tells
// it the step (attention.Stepper); the features depend on the seed and the
// step only, and can be read back to reproduce its output elsewhere.
func Example_performer() {
	cfg := attention.PerformerConfig{Features: 256, Redraw: 1000, Block: 256}
	m, err := attention.New(cfg, attention.Setup{Causal: true, Seed: 1})
	if err != nil {
		panic(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	q, k, v := tensor.New(1, 2, 1000, 64), tensor.New(1, 2, 1000, 64), tensor.New(1, 2, 1000, 64)
	for _, t := range []*tensor.Tensor{q, k, v} {
		for i := range t.Data {
			t.Data[i] = float32(rng.NormFloat64())
		}
	}
	m.(attention.Stepper).SetStep(2500) // the third draw
	o := tensor.New(q.Shape...)
	m.Forward(o, q, k, v)

	w := m.(attention.Sketched).SketchMatrices()["w"]
	fmt.Println("features", w.Shape)
	fmt.Println("finite:", o.CheckFinite("o") == nil)
	// Output:
	// features [256 64]
	// finite: true
}

// ELU+1 linear attention: features elu(x)+1 and the plain ratio, with no
// options but the engine's.
func Example_elu() {
	m, err := attention.New(attention.ELUConfig{Block: 256}, attention.Setup{Causal: true})
	if err != nil {
		panic(err)
	}
	q, k, v := tensor.New(1, 1, 3, 2), tensor.New(1, 1, 3, 2), tensor.New(1, 1, 3, 2)
	copy(v.Data, []float32{1, 0, 0, 1, 1, 1})
	o := tensor.New(q.Shape...)
	m.Forward(o, q, k, v) // q = k = 0: equal weights, so o_i is the mean of v_0…v_i
	fmt.Println(o.Data)
	// Output:
	// [1 0 0.5 0.5 0.6666667 0.6666667]
}
