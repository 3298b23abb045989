package attention

import "github.com/polysketch/polysketch/blas"

// blockProduct is a kind of the block products of the engine of linear
// mechanisms (engine.go, lt.go, featuremap.go, sketch.go). They all run in
// float32, in bf16 models too (see docs/bf16.md for why); bf16Blocks,
// the kinds that run as bf16 products instead, exists to measure what
// bf16 would cost each kind in accuracy and time (BenchmarkBlockBF16),
// and only that benchmark sets it.
type blockProduct uint8

const (
	// blockScores are the dot products inside the diagonal blocks:
	// S = Q_l·K_lᵀ (or of the sketches), and dW = dO_l·V_lᵀ.
	blockScores blockProduct = 1 << iota
	// blockWeighted are the weighted sums inside the diagonal blocks:
	// W·V_l, and Wᵀ·dO_l, dS·K_l, dSᵀ·Q_l in the backward pass.
	blockWeighted
	// blockStates are the products with the per-block states:
	// φ(K_l)ᵀ·V_l, φ(Q_l)·Z_l and their gradients.
	blockStates
	// blockTensor is the self-tensoring's backward product Ψ(u)·Mᵀ.
	blockTensor
	// blockSketch are the random sketches' projections (not learned).
	blockSketch
)

var bf16Blocks blockProduct

// blockGemm is blas.SgemmSerial, or blas.GemmBF16Serial for the kinds in
// bf16Blocks.
func blockGemm(kind blockProduct, tA, tB blas.Transpose, alpha float32, a, b blas.General, beta float32, c blas.General) {
	if bf16Blocks&kind != 0 {
		blas.GemmBF16Serial(tA, tB, alpha, a, b, beta, c)
		return
	}
	blas.SgemmSerial(tA, tB, alpha, a, b, beta, c)
}
