package attention

import (
	"math"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// Feature maps. Every linear mechanism is the block lower-triangular
// engine (engine.go) run on features φ(q), φ(k) ≥ 0 with weights
// w_ij = φ(q_i)·φ(k_j). A feature map is a projection of each row of q or
// k to r numbers, then a lift of those to the F features:
//
//	polysketch    random sketch or learned network      →  symmetric self-tensoring (F = r(r+1)/2)
//	elu           identity                              →  elu(x)+1, entrywise (F = h)
//	performer     orthogonal random features            →  positive exponential (F = m)
//	sqpolysketch  per-degree sketches, coefficients on  →  symmetric self-tensoring (F = D(D+1)/2,
//	              the queries' side (asymmetric)            D = 1 + p·r)
//
// The lift is a strategy (lift, below). Self-tensoring (tensored) is done
// by the engine itself, which exploits it: the diagonal blocks are
// lt((L·Rᵀ)²) from the r-dimensional projections, never features, and a
// feature gradient shared by every row reaches the projection through an
// r×r matrix (symmetricOf). An entrywise lift keeps F = r and is applied
// by the projection, forward and backward side by side with it; the
// engine then uses the projection's output as the features and the
// diagonal blocks are lt(Φ(Q_l)·Φ(K_l)ᵀ).
//
// A new linear mechanism is one file: its projection (dims, apply,
// output, backward, …), a featureMap naming it and its lift, and its
// registration; then a row in the conformance table.

// A projection maps rows of q or k, a block at a time, to the transposed
// matrix Mᵀ ([out × n]) the lift reads. *sketch (random or learned) is
// one.
type projection interface {
	// dims returns the input size h, the output size r and the rows of
	// pre, what apply keeps per row for output and backward.
	dims() (in, out, preW int)
	// scratchSize returns the sizes of the buffers of a sketchScratch for
	// blocks of n rows.
	scratchSize(n int) (ab, buf int)
	// apply computes Mᵀ ([out × n]) of the n rows of x ([n × in]),
	// keeping what output and backward need in pre ([preW × n]).
	apply(x blas.General, pre, mT []float32, scr *sketchScratch)
	// output recomputes Mᵀ from pre (or x), bitwise equal to apply's.
	output(x blas.General, pre, mT []float32)
	// backward computes dx (or with accumulate adds to it) from dMᵀ and
	// the pre of apply.
	backward(dx blas.General, accumulate bool, dmT, pre []float32, scr *sketchScratch)
	// matrices returns every random matrix of the projection by name,
	// for reproducing its output elsewhere (nil if none).
	matrices() map[string]*tensor.Tensor
	// floats is the memory of the projection's own matrices, in floats,
	// for Workspace.
	floats() int
}

// A trainedProjection has parameters: its backward adds their gradient
// over the rows to scr.dparam ([paramSize()]), which the engine points
// at one slot per block so that the sums do not depend on the threads.
type trainedProjection interface {
	params() []*nn.Param
	paramSize() int
}

// newScratch allocates the scratch of p for blocks of n rows.
func newScratch(p projection, n int) sketchScratch {
	ab, buf := p.scratchSize(n)
	return sketchScratch{a: make([]float32, ab), b: make([]float32, ab), buf: make([]float32, buf)}
}

// featureMap describes the features of one linear mechanism.
type featureMap struct {
	// project builds the projection for heads of size h from the seed.
	project func(h int, seed uint64) projection
	// projectKeys, if not nil, builds a different projection for the
	// keys, of the same dimensions (an asymmetric map: weights
	// φ_Q(q)·φ_K(k)).
	projectKeys func(h int, seed uint64) projection
	// lift makes the features of the projections: tensored, or
	// entrywise (nil) when the projection applied a lift of its own.
	lift lift
	// one is added to every denominator: 1 for polysketch (1 + Σ w),
	// 0 for the plain ratio Σ w v / Σ w.
	one float32
	// scaled: the keys' projection is a logScaled one whose features
	// carry a log-scale, which the engine's stabilizer logScales keeps
	// relative to running maxima (see engine_scaled.go); needs the plain
	// ratio and an entrywise lift. Else the stabilizer is plain.
	scaled bool
}

// A logScaled projection's features of a row are exp(s)·Mᵀ, s a log-scale
// per row that it keeps in pre (Performer's stabilizer).
type logScaled interface {
	logScale(pre []float32, n int) []float32
}

// denFloor bounds the denominators of the plain ratio from below. They
// are sums of positive weights, zero only where every weight of a row
// underflowed; there the output is 0 instead of NaN. It changes nothing
// else: real denominators are far larger.
const denFloor = 1e-30

// floorDenominators applies denFloor to d.
func floorDenominators(d []float32) {
	for i, x := range d {
		d[i] = max(x, denFloor)
	}
}

// A lift turns the projections Mᵀ ([r × n]) of a block into its features
// Φᵀ ([F × n]), forward and backward, and computes the diagonal blocks'
// products from the projections: selfTensor (symmetric self-tensoring,
// done by the engine) or entrywise (a lift the projection applied itself:
// the features are M).
type lift interface {
	// features returns F for an r-dimensional projection.
	features(r int) int
	// diagPow is the power of the dot products of projections inside
	// diagonal blocks that gives the features' dot products.
	diagPow() int
	// apply returns Φᵀ of Mᵀ, in phi or Mᵀ itself; tilde is scratch the
	// backward pass reads.
	apply(phi, mT, tilde []float32, r, n int) []float32
	// backward computes dMᵀ (or with accumulate adds to it) from dΦᵀ.
	backward(dmT, dphiT, mT, tilde []float32, r, n int, accumulate bool)
	// sharedBackward adds to dMᵀ ([r × n]) the gradient of a feature
	// gradient u ([F]) scaled per row by s ([n], nil for 1): dΦ_i += s_i·u,
	// with psi ([r × r]) and aux ([r × n]) as scratch.
	sharedBackward(dmT, u, s, mT, psi, aux []float32, r, n int)
	// diagScores computes the lower triangle of S = M(Q_l)·M(K_l)ᵀ into s
	// from w.mq and w.mk; diagBackward takes its gradient dS and writes
	// that of M(Q_l) into w.dmr and that of M(K_l) into dmk, in the layout
	// addDiagonal adds (or with accumulate false writes) to a dMᵀ.
	diagScores(w *engineWorker, s []float32, rows, r int)
	diagBackward(w *engineWorker, dS, dmk []float32, rows, r int)
	addDiagonal(dm, src []float32, rows, r int, accumulate bool)
	// carveWorker takes the worker's buffers the lift needs.
	carveWorker(w *engineWorker, L *engineLayout, c *carver)
}

// tensored is the lift φ = M^⊗2, its r(r+1)/2 symmetric entries (M_c²
// and √2·M_c·M_d for c < d). The diagonal blocks are lt((L·Rᵀ)²) from the
// projections, never features, and a feature gradient shared by every row
// reaches the projection through an r×r matrix (symmetricOf).
type tensored struct{}

func (tensored) features(r int) int { return featureDim(r) }
func (tensored) diagPow() int       { return 2 }

func (tensored) apply(phi, mT, tilde []float32, r, n int) []float32 {
	selfTensor(phi, mT, tilde, r, n)
	return phi
}

func (tensored) backward(dmT, dphiT, mT, tilde []float32, r, n int, accumulate bool) {
	selfTensorBackward(dmT, dphiT, mT, tilde, r, n, accumulate)
}

// sharedBackward: dMᵀ += Ψ(u)·Mᵀ∗s (see symmetricOf), r² work per row
// instead of F.
func (tensored) sharedBackward(dmT, u, s, mT, psi, aux []float32, r, n int) {
	symmetricOf(psi, u, r)
	if s == nil {
		blockGemm(blockTensor, blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(r, r, psi), blas.NewGeneral(r, n, mT), 1, blas.NewGeneral(r, n, dmT))
		return
	}
	aux = aux[:r*n]
	blockGemm(blockTensor, blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(r, r, psi), blas.NewGeneral(r, n, mT), 0, blas.NewGeneral(r, n, aux))
	for c := 0; c < r; c++ {
		x := aux[c*n : (c+1)*n]
		vec.Mul(x, x, s[:n])
		vec.Add(dmT[c*n:(c+1)*n], dmT[c*n:(c+1)*n], x)
	}
}

// diagScores multiplies row-major copies of the projections (w.mqr, w.mkr),
// which diagBackward reuses.
func (tensored) diagScores(w *engineWorker, s []float32, rows, r int) {
	blas.Copy(blas.Trans, blas.NewGeneral(r, rows, w.mq), blas.NewGeneral(rows, r, w.mqr))
	blas.Copy(blas.Trans, blas.NewGeneral(r, rows, w.mk), blas.NewGeneral(rows, r, w.mkr))
	lowerABt(blas.NewGeneral(rows, rows, s), blas.NewGeneral(rows, r, w.mqr), blas.NewGeneral(rows, r, w.mkr))
}

// diagBackward leaves its gradients row-major.
func (tensored) diagBackward(w *engineWorker, dS, dmk []float32, rows, r int) {
	lowerMul(blas.NewGeneral(rows, r, w.dmr), blas.NewGeneral(rows, rows, dS), blas.NewGeneral(rows, r, w.mkr), 0)
	lowerTMul(blas.NewGeneral(rows, r, dmk), blas.NewGeneral(rows, rows, dS), blas.NewGeneral(rows, r, w.mqr), 0)
}

func (tensored) addDiagonal(dm, src []float32, rows, r int, accumulate bool) {
	addTransposed(dm, src, rows, r, accumulate)
}

// carveWorker takes √2·Mᵀ of queries and keys, Ψ(u) and Ψ(u)·Mᵀ, and
// with sketched diagonal blocks row-major M of queries and keys.
func (tensored) carveWorker(w *engineWorker, L *engineLayout, c *carver) {
	bs, ro := L.bs, L.ro
	w.tq, w.tk = c.take(ro*bs), c.take(ro*bs)
	w.psi, w.aux = c.take(ro*ro), c.take(ro*bs)
	if L.sketched {
		w.mqr, w.mkr = c.take(bs*ro), c.take(bs*ro)
	}
}

// entrywise is the lift of maps whose projection applied an entrywise
// lift itself (elu, performer): Φ = M, F = r, and the diagonal blocks are
// lt(Φ(Q_l)·Φ(K_l)ᵀ), computed from the transposed features.
type entrywise struct{}

func (entrywise) features(r int) int { return r }
func (entrywise) diagPow() int       { return 1 }

func (entrywise) apply(_, mT, _ []float32, r, n int) []float32 { return mT[:r*n] }

func (entrywise) backward(dmT, dphiT, _, _ []float32, r, n int, accumulate bool) {
	if accumulate {
		vec.Add(dmT[:r*n], dmT[:r*n], dphiT[:r*n])
	} else {
		copy(dmT[:r*n], dphiT[:r*n])
	}
}

func (entrywise) sharedBackward(dmT, u, s, _, _, _ []float32, r, n int) {
	for c, uc := range u[:r] {
		d := dmT[c*n : (c+1)*n]
		if s == nil {
			for i := range d {
				d[i] += uc
			}
		} else {
			vec.Axpy(uc, s[:n], d)
		}
	}
}

func (entrywise) diagScores(w *engineWorker, s []float32, rows, r int) {
	lowerAtB(blas.NewGeneral(rows, rows, s), blas.NewGeneral(r, rows, w.mq), blas.NewGeneral(r, rows, w.mk))
}

// diagBackward leaves its gradients transposed, as the features are.
func (entrywise) diagBackward(w *engineWorker, dS, dmk []float32, rows, r int) {
	lowerMulT(blas.NewGeneral(r, rows, w.dmr), blas.NewGeneral(rows, rows, dS), blas.NewGeneral(r, rows, w.mk), 0)
	lowerTMulT(blas.NewGeneral(r, rows, dmk), blas.NewGeneral(rows, rows, dS), blas.NewGeneral(r, rows, w.mq), 0)
}

func (entrywise) addDiagonal(dm, src []float32, rows, r int, accumulate bool) {
	if accumulate {
		vec.Add(dm[:r*rows], dm[:r*rows], src[:r*rows])
	} else {
		copy(dm[:r*rows], src[:r*rows])
	}
}

func (entrywise) carveWorker(*engineWorker, *engineLayout, *carver) {}

// addTransposed adds (or with accumulate false writes) srcᵀ, src an n×c
// row-major matrix, into dst, a [c × n] matrix.
func addTransposed(dst, src []float32, n, c int, accumulate bool) {
	for i := 0; i < n; i++ {
		row := src[i*c : (i+1)*c]
		if accumulate {
			for t, x := range row {
				dst[t*n+i] += x
			}
		} else {
			for t, x := range row {
				dst[t*n+i] = x
			}
		}
	}
}

// symmetricOf writes into psi ([r × r]) the matrix Ψ(u) through which a
// feature gradient u, the same for every row, reaches M: selfTensorBackward
// maps dφ_cc = u_cc to dM_c = 2·u_cc·M_c and dφ_cd = u_cd (c < d) to
// dM_c = √2·u_cd·M_d, dM_d = √2·u_cd·M_c, so dMᵀ = Ψ(u)·Mᵀ with Ψ_cc = 2u_cc
// and Ψ_cd = Ψ_dc = √2·u_cd.
func symmetricOf(psi, u []float32, r int) {
	f := 0
	for c := 0; c < r; c++ {
		psi[c*r+c] = 2 * u[f]
		f++
		for d := c + 1; d < r; d++ {
			x := math.Sqrt2 * u[f]
			psi[c*r+d], psi[d*r+c] = x, x
			f++
		}
	}
}
