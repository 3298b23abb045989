package attention_test

import (
	"fmt"
	"maps"
	"slices"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/tensor"
)

// Squared polynomial attention with the coefficients set by hand:
// (1 + x)², x = q·k. The query of position 1 scores x = 0 against key 0
// (weight 1) and x = 1 against key 1 (weight 4), so its output is
// (1·v_0 + 4·v_1)/5. Frozen, the coefficients are no parameter; without
// --frozen a model trains them (attention.Trainable).
func Example_sqpoly() {
	cfg := attention.SquarePolynomialConfig{Degree: 1, Init: "ones", Coefficients: "1,1", Frozen: true, Block: 256}
	m, err := attention.New(cfg, attention.Setup{Causal: true})
	if err != nil {
		panic(err)
	}
	q, k, v := tensor.New(1, 1, 2, 2), tensor.New(1, 1, 2, 2), tensor.New(1, 1, 2, 2)
	copy(q.Data, []float32{0, 1, 1, 0})
	copy(k.Data, []float32{0, 1, 1, 0})
	copy(v.Data, []float32{1, 0, 0, 1})
	o := tensor.New(q.Shape...)
	m.Forward(o, q, k, v)
	fmt.Println(o.Data)
	fmt.Println("parameters:", len(m.(attention.Trainable).Params()))
	// Output:
	// [1 0 0.2 0.8]
	// parameters: 0
}

// The linear-time form, sqpolysketch, with the thesis's best degree and
// its coefficients frozen: it exports every random vector it drew and the
// coefficients (what polysketch attend writes beside the output), enough
// for another implementation to reproduce its output exactly.
func Example_sqpolysketch() {
	cfg := attention.SquareSketchConfig{Degree: 3, SketchSize: 4, Init: "uniform", Coefficients: "0.5 -2 1 3", Frozen: true, Block: 256}
	m, err := attention.New(cfg, attention.Setup{Causal: true, Seed: 7, HeadSize: 16})
	if err != nil {
		panic(err)
	}
	mats := m.(attention.Sketched).SketchMatrices()
	for _, name := range slices.Sorted(maps.Keys(mats)) {
		fmt.Println(name, mats[name].Shape)
	}
	fmt.Println("coefficients:", mats["coefficients"].Data)
	// Output:
	// coefficients [4]
	// g1.1 [16 4]
	// g2.1 [16 4]
	// g2.2 [16 4]
	// g3.1 [16 4]
	// g3.2 [16 4]
	// g3.3 [16 4]
	// coefficients: [0.5 -2 1 3]
}
