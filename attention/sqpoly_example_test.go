package attention_test

import (
	"fmt"

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
