package blas_test

import (
	"fmt"

	"github.com/polysketch/polysketch/blas"
)

func ExampleSgemm() {
	// C = A·B for a 2×3 A and a 3×2 B, all row-major.
	a := []float32{
		1, 2, 3,
		4, 5, 6,
	}
	b := []float32{
		7, 8,
		9, 10,
		11, 12,
	}
	c := make([]float32, 2*2)
	blas.Sgemm(blas.NoTrans, blas.NoTrans, 1,
		blas.General{Rows: 2, Cols: 3, Stride: 3, Data: a},
		blas.General{Rows: 3, Cols: 2, Stride: 2, Data: b},
		0, blas.General{Rows: 2, Cols: 2, Stride: 2, Data: c})
	fmt.Println(c)

	// Add Aᵀ·A (3×3) into the left 3 columns of a 3×4 matrix: a strided
	// view with Stride 4, and beta = 1 to keep what is there.
	g := []float32{
		100, 100, 100, -1,
		100, 100, 100, -1,
		100, 100, 100, -1,
	}
	av := blas.General{Rows: 2, Cols: 3, Stride: 3, Data: a}
	blas.Sgemm(blas.Trans, blas.NoTrans, 1, av, av, 1, blas.General{Rows: 3, Cols: 3, Stride: 4, Data: g})
	fmt.Println(g)
	// Output:
	// [58 64 139 154]
	// [117 122 127 -1 122 129 136 -1 127 136 145 -1]
}
