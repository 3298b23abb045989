package attention

import "github.com/polysketch/polysketch/blas"

// blockProduct is a kind of the block products of the engine of linear
// mechanisms (engine.go, lt.go, featuremap.go, sketch.go). They run in
// float32 but for the backward state products of a learned polysketch in
// a bf16 model (blockStateGrads in engine.bf16, set by SetPrecision): the
// only kind measured faster in bf16, at a tenth of the error of the sketch
// networks' bf16, and in the backward pass alone, so that Forward still
// computes what the decoders do (see docs/bf16.md); bf16Blocks, kinds that run as bf16 products in every
// engine, exists to measure what bf16 would cost each kind in accuracy
// and time (BenchmarkBlockBF16), and only that benchmark sets it.
type blockProduct uint8

const (
	// blockScores are the dot products inside the diagonal blocks:
	// S = Q_l·K_lᵀ (or of the sketches), and dW = dO_l·V_lᵀ.
	blockScores blockProduct = 1 << iota
	// blockWeighted are the weighted sums inside the diagonal blocks:
	// W·V_l, and Wᵀ·dO_l, dS·K_l, dSᵀ·Q_l in the backward pass.
	blockWeighted
	// blockStates are the forward products with the per-block states:
	// φ(K_l)ᵀ·V_l and φ(Q_l)·Z_l.
	blockStates
	// blockTensor is the self-tensoring's backward product Ψ(u)·Mᵀ.
	blockTensor
	// blockSketch are the random sketches' projections (not learned).
	blockSketch
	// blockStateGrads are the backward pass's products with the states
	// and their gradients: φ(Q_l)ᵀ·G_l for the query states' gradients,
	// Z_l·G_lᵀ for φ(Q_l)'s, φ(K_l)·U_l for dV_l and U_l·V_lᵀ for φ(K_l)'s.
	blockStateGrads
)

// bf16Blocks are kinds that run in bf16 in every engine, for
// BenchmarkBlockBF16 alone.
var bf16Blocks blockProduct

// blockGemm is blas.SgemmSerial, or blas.GemmBF16Serial for the kinds in
// bf16Blocks.
func blockGemm(kind blockProduct, tA, tB blas.Transpose, alpha float32, a, b blas.General, beta float32, c blas.General) {
	gemmIn(bf16Blocks, kind, tA, tB, alpha, a, b, beta, c)
}

// gemm is blockGemm for the engine's own products, which are also bf16
// for the kinds in e.bf16 (SetPrecision).
func (e *engine) gemm(kind blockProduct, tA, tB blas.Transpose, alpha float32, a, b blas.General, beta float32, c blas.General) {
	gemmIn(bf16Blocks|e.bf16, kind, tA, tB, alpha, a, b, beta, c)
}

// gemmIn is blas.SgemmSerial, or blas.GemmBF16Serial for the kinds in
// bf16.
func gemmIn(bf16, kind blockProduct, tA, tB blas.Transpose, alpha float32, a, b blas.General, beta float32, c blas.General) {
	if bf16&kind != 0 {
		blas.GemmBF16Serial(tA, tB, alpha, a, b, beta, c)
		return
	}
	blas.SgemmSerial(tA, tB, alpha, a, b, beta, c)
}
