package attention_test

import (
	"fmt"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/tensor"
)

// With all queries zero every visible key gets the same weight, so causal
// attention averages the values seen so far.
func ExampleNew_flash() {
	m, err := attention.New(attention.FlashConfig{Block: 256}, attention.Setup{Causal: true})
	if err != nil {
		panic(err)
	}
	// One sequence, one head, N = 3 positions, h = 2.
	q := tensor.New(1, 1, 3, 2)
	k := tensor.From([]float32{1, 2, 3, 4, 5, 6}, 1, 1, 3, 2)
	v := tensor.From([]float32{1, 0, 0, 1, 3, 3}, 1, 1, 3, 2)
	o := tensor.New(1, 1, 3, 2)
	m.Forward(o, q, k, v)
	for i := 0; i < 3; i++ {
		fmt.Printf("o[%d] = %.3f\n", i, o.Data[2*i:2*i+2])
	}

	// The gradients of Σ o with respect to q, k and v.
	do := tensor.New(1, 1, 3, 2)
	do.Fill(1)
	dq, dk, dv := tensor.New(1, 1, 3, 2), tensor.New(1, 1, 3, 2), tensor.New(1, 1, 3, 2)
	m.Backward(dq, dk, dv, do)
	fmt.Printf("dv = %.3f\n", dv.Data)
	// Output:
	// o[0] = [1.000 0.000]
	// o[1] = [0.500 0.500]
	// o[2] = [1.333 1.333]
	// dv = [1.833 1.833 0.833 0.833 0.333 0.333]
}
