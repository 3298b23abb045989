package tensor_test

import (
	"fmt"

	"github.com/polysketch/polysketch/tensor"
)

// A [B,H,N,h] activation is viewed per head without copying.
func ExampleTensor_Index() {
	x := tensor.New(2, 4, 3, 8) // batch 2, 4 heads, 3 positions, head size 8
	head := x.Index(1).Index(3) // batch 1, head 3
	head.Data[0] = 1
	fmt.Println(head.Shape, x.Data[(1*4+3)*3*8])
	// Output: [3 8] 1
}
