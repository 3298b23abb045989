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
	blas.Sgemm(blas.NoTrans, blas.NoTrans, 2, 2, 3, 1, a, 3, b, 2, 0, c, 2)
	fmt.Println(c)

	// Add Aᵀ·A (3×3) into the left 3 columns of a 3×4 matrix: a strided
	// view with ldc = 4, and beta = 1 to keep what is there.
	g := []float32{
		100, 100, 100, -1,
		100, 100, 100, -1,
		100, 100, 100, -1,
	}
	blas.Sgemm(blas.Trans, blas.NoTrans, 3, 3, 2, 1, a, 3, a, 3, 1, g, 4)
	fmt.Println(g)
	// Output:
	// [58 64 139 154]
	// [117 122 127 -1 122 129 136 -1 127 136 145 -1]
}

func ExampleGemmBF16() {
	// The product of ExampleSgemm in bf16: these small integers are exact
	// in bf16, so the result is exact too.
	a := blas.General{Rows: 2, Cols: 3, Stride: 3, Data: []float32{1, 2, 3, 4, 5, 6}}
	b := blas.General{Rows: 3, Cols: 2, Stride: 2, Data: []float32{7, 8, 9, 10, 11, 12}}
	c := blas.General{Rows: 2, Cols: 2, Stride: 2, Data: make([]float32, 4)}
	blas.GemmBF16(blas.NoTrans, blas.NoTrans, 1, a, b, 0, c)
	fmt.Println(c.Data)

	// A weight used by many products is packed once; 1.00390625 = 1+2⁻⁸
	// is not a bf16 number and rounds (to even) to 1.
	w := blas.PackBF16(blas.NoTrans, blas.General{Rows: 3, Cols: 1, Stride: 1, Data: []float32{1.00390625, 1, 1}})
	x := blas.General{Rows: 1, Cols: 3, Stride: 3, Data: []float32{1, 1, 1}}
	y := blas.General{Rows: 1, Cols: 1, Stride: 1, Data: make([]float32, 1)}
	blas.GemmBF16(blas.NoTrans, blas.NoTrans, 1, x, w, 0, y)
	fmt.Println(y.Data, w.Rows(), w.Cols())
	// Output:
	// [58 64 139 154]
	// [3] 3 1
}
