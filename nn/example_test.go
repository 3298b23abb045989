package nn_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
)

// A Linear layer maps rows of In features to rows of Out features;
// Backward writes the input gradient and accumulates parameter gradients.
func ExampleLinear() {
	l := nn.NewLinear("proj", 2, 3, true, rand.New(rand.NewPCG(1, 2)))
	copy(l.Weight.Value.Data, []float32{ // W is [In, Out]
		1, 0, 2,
		0, 1, -1,
	})
	copy(l.Bias.Value.Data, []float32{0.5, 0, 0})

	x := tensor.From([]float32{1, 2, 3, 4}, 2, 2) // two rows
	y := tensor.New(2, 3)
	l.Forward(y, x)
	fmt.Println("y  =", y.Data)

	dy := tensor.From([]float32{1, 0, 0, 0, 0, 1}, 2, 3) // ∂loss/∂y
	dx := tensor.New(2, 2)
	l.Backward(dx, dy)
	fmt.Println("dx =", dx.Data)
	fmt.Println("dW =", l.Weight.Grad.Data)
	fmt.Println("db =", l.Bias.Grad.Data)
	// Output:
	// y  = [1.5 2 0 3.5 4 2]
	// dx = [1 0 2 -1]
	// dW = [1 0 3 2 0 4]
	// db = [1 0 1]
}
