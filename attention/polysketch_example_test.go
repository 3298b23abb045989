package attention_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/tensor"
)

// PolySketch attention with the paper's settings: causal, degree 4,
// sketch size 32, blocks of 256 with exact attention inside each block.
// Its random sketch is fixed by the seed and can be read back.
func Example_polysketch() {
	cfg, _ := attention.DefaultConfig("polysketch") // degree 4, r = 32, b = 256, local
	m, err := attention.New(cfg, attention.Setup{Causal: true, Seed: 1})
	if err != nil {
		panic(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	q, k, v := tensor.New(1, 2, 1000, 64), tensor.New(1, 2, 1000, 64), tensor.New(1, 2, 1000, 64)
	for _, t := range []*tensor.Tensor{q, k, v} {
		for i := range t.Data {
			t.Data[i] = float32(rng.NormFloat64() / 8)
		}
	}
	o := tensor.New(q.Shape...)
	m.Forward(o, q, k, v)

	dq, dk, dv := tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...)
	m.Backward(dq, dk, dv, o) // gradients of ½‖o‖²

	mats := m.(attention.Sketched).SketchMatrices()
	for _, n := range slices.Sorted(maps.Keys(mats)) {
		fmt.Println(n, mats[n].Shape)
	}
	// Output:
	// g1 [64 32]
	// g2 [64 32]
}
