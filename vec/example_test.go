package vec_test

import (
	"fmt"
	"math"

	"github.com/polysketch/polysketch/vec"
)

// Attention weights of one query over four keys, the third masked out.
func ExampleSoftmax() {
	scores := []float32{1, 2, float32(math.Inf(-1)), 3}
	vec.Softmax(scores)
	fmt.Printf("%.4f\n", scores)

	// A fully masked row attends to nothing.
	masked := []float32{float32(math.Inf(-1)), float32(math.Inf(-1))}
	vec.Softmax(masked)
	fmt.Println(masked)
	// Output:
	// [0.0900 0.2447 0.0000 0.6652]
	// [0 0]
}

// Layer normalization of one row: the statistics from MeanVar, then a
// scaling and a shift.
func ExampleMeanVar() {
	x := []float32{1, 2, 3, 4, 5}
	mean, variance := vec.MeanVar(x)
	rstd := float32(1 / math.Sqrt(float64(variance)+1e-5))
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = (v - mean) * rstd
	}
	fmt.Println(mean, variance)
	fmt.Printf("%.3f\n", y)
	// Output:
	// 3 2
	// [-1.414 -0.707 0.000 0.707 1.414]
}

func ExampleGELU() {
	x := []float32{-3, -1, 0, 1, 3}
	y := make([]float32, len(x))
	vec.GELU(y, x)
	fmt.Printf("%.4f\n", y)

	// The gradient with respect to x of Σ GELU(x[i]): dy = 1.
	dy := []float32{1, 1, 1, 1, 1}
	dx := make([]float32, len(x))
	vec.GELUBackward(dx, x, dy)
	fmt.Printf("%.4f\n", dx)
	// Output:
	// [-0.0036 -0.1588 0.0000 0.8412 2.9964]
	// [-0.0116 -0.0830 0.5000 1.0830 1.0116]
}

// The weights of softmax(logits/T) at T = 0.5 and their total, from the
// largest logit.
func ExampleExpScale() {
	logits := []float32{1, 3, 2, 3}
	w := make([]float32, len(logits))
	total := vec.ExpScale(w, logits, vec.Max(logits), 1/0.5)
	fmt.Printf("%.4f %.3f\n", w, total)
	// Output:
	// [0.0183 1.0000 0.1353 1.0000] 2.154
}

// A look at the tokens near a cut by value: those with logits in [0, 2),
// and the count and weight of those at or above 2.
func ExampleBand() {
	logits := []float32{2.5, -1, 0.5, 1.5, 3, 0}
	weights := []float32{0.5, 0.01, 0.05, 0.2, 1, 0.02}
	in := make([]int32, len(logits))
	n, above, weight := vec.Band(in, logits, weights, 0, 2)
	fmt.Println(in[:n], above, weight)
	// Output:
	// [2 3 5] 2 1.5
}

// The self-tensored features of two columns, (1, 3) and (2, 4): m_0²,
// √2·m_0·m_1 and m_1², whose dot products are the squares of the
// columns' (the first with itself: 1 + 18 + 81 = 10²); then the gradient
// of their sum.
func ExampleSymOuter() {
	const r, n = 2, 2
	m := []float32{1, 2, 3, 4} // row c holds coordinate c of each column
	t := make([]float32, len(m))
	copy(t, m)
	vec.Scale(math.Sqrt2, t)
	phi := make([]float32, r*(r+1)/2*n)
	vec.SymOuter(phi, m, t, r, n)
	fmt.Printf("%.4f\n", phi)
	dphi := []float32{1, 1, 1, 1, 1, 1}
	dm := make([]float32, r*n)
	vec.SymOuterBackward(dm, dphi, m, t, r, n)
	fmt.Printf("%.4f\n", dm)
	// Output:
	// [1.0000 4.0000 4.2426 11.3137 9.0000 16.0000]
	// [6.2426 9.6569 7.4142 10.8284]
}
