package attention

import (
	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/vec"
)

// Block lower-triangular multiplication (PolySketchFormer, Sec. 3.1).
//
// For A, B ∈ R^{n×m} and C ∈ R^{n×k}, lt(A·Bᵀ)·C keeps the entries j ≤ i
// of A·Bᵀ and never forms that n×n matrix. With the rows cut into blocks
// of b (the last one may be shorter):
//
//	H_l = B_lᵀ·C_l                    state of block l, m×k      (blocks in parallel)
//	Z_l = Σ_{j<l} H_j                 exclusive prefix sum        (sequential, cheap)
//	Y_l = A_l·Z_l + lt(A_l·B_lᵀ)·C_l  output rows of block l      (blocks in parallel)
//
// for O(n·b·(m+k) + n·m·k) work. The backward pass mirrors it with suffix
// sums: with U_l = Σ_{j>l} A_jᵀ·dY_j,
//
//	dA_l = dY_l·Z_lᵀ + (diagonal part),  dB_l = C_l·U_lᵀ + …,  dC_l = B_l·U_l + ….
//
// The engine (engine.go) runs these three phases with A = φ(Q) and B = φ(K)
// produced block by block and C = V (and the ones of the denominators),
// from the pieces below: the block partition, the scans over per-block
// states, and the diagonal-block kernels, which compute lt(S^p)·C for
// S = A_l·B_lᵀ and p = 1 (features of entrywise maps, kept transposed),
// p = 2 (self-tensored maps: lt((L·Rᵀ)²) with L = M(Q_l), R = M(K_l)) or
// the degree p (exact local blocks, lt((Q_l·K_lᵀ)^p)).

// blocks cuts n rows into blocks of size rows; the last may be shorter.
type blocks struct{ n, size int }

func (p blocks) count() int { return (p.n + p.size - 1) / p.size }

// span returns the first row and the row count of block l.
func (p blocks) span(l int) (lo, rows int) {
	lo = l * p.size
	return lo, min(p.size, p.n-lo)
}

// prefixScan replaces the t states in the rows of states (a view of some
// of their elements) by their exclusive prefix sums: state l becomes
// Σ_{j<l} state j, added in order j = 0, 1, …. run is scratch of a row.
// The last state is not added to anything.
func prefixScan(states blas.General, run []float32) {
	t, w := states.Rows, states.Cols
	run = run[:w]
	clear(run)
	for l := 0; l < t; l++ {
		s := states.Data[l*states.Stride : l*states.Stride+w]
		if l == t-1 {
			copy(s, run)
			break
		}
		vec.SwapAdd(run, s)
	}
}

// suffixScan is prefixScan in the other direction: state l becomes
// Σ_{j>l} state j, added in order j = t-1, t-2, ….
func suffixScan(states blas.General, run []float32) {
	t, w := states.Rows, states.Cols
	run = run[:w]
	clear(run)
	for l := t - 1; l >= 0; l-- {
		s := states.Data[l*states.Stride : l*states.Stride+w]
		if l == 0 {
			copy(s, run)
			break
		}
		vec.SwapAdd(run, s)
	}
}

// sumStates writes into dst (a row) the sum of the rows of states, added
// in order 0, 1, … onto zero.
func sumStates(dst []float32, states blas.General) {
	d := dst[:states.Cols]
	clear(d)
	vec.AddRows(d, states.Data, states.Stride, states.Rows)
}

// stateCols returns elements [lo, hi) of the t states in st (state l at
// offset l·stateSize) as a t×(hi−lo) view.
func (L *engineLayout) stateCols(st []float32, lo, hi int) blas.General {
	return blas.General{Rows: L.t, Cols: hi - lo, Stride: L.stateSize, Data: st[lo:]}
}

// stateSum returns elements [lo, hi) of the slot after the t states in
// st, where the scans leave sums.
func (L *engineLayout) stateSum(st []float32, lo, hi int) []float32 {
	return st[L.t*L.stateSize+lo : L.t*L.stateSize+hi]
}

// Diagonal-block kernels. A block of n rows has the n×n matrices S = A·Bᵀ
// and W = lt(S^p), stored row-major with leading dimension n. Only the
// lower triangle is computed, in stripes of diagTile rows: stripe i spans
// rows [i·t, i·t+t) and columns [0, i·t+t); entries above the diagonal
// inside a stripe are zero, and nothing right of a stripe is ever read.

const diagTile = 64

// lowerABt computes the lower triangle of dst = a·bᵀ (a, b: n×k; dst
// n×n).
func lowerABt(dst, a, b blas.General) {
	n := a.Rows
	for i0 := 0; i0 < n; i0 += diagTile {
		i1 := min(i0+diagTile, n)
		blockGemm(blockScores, blas.NoTrans, blas.Trans, 1, a.Slice(i0, i1, 0, a.Cols), b.Slice(0, i1, 0, b.Cols), 0, dst.Slice(i0, i1, 0, i1))
		for i := i0; i < i1; i++ {
			clear(dst.Data[i*dst.Stride+i+1 : i*dst.Stride+i1])
		}
	}
}

// lowerMul computes dst = L·y (or dst += L·y with beta 1) for the lower
// triangular n×n matrix L and y with k columns.
func lowerMul(dst, L, y blas.General, beta float32) {
	n := L.Rows
	for i0 := 0; i0 < n; i0 += diagTile {
		i1 := min(i0+diagTile, n)
		blockGemm(blockWeighted, blas.NoTrans, blas.NoTrans, 1, L.Slice(i0, i1, 0, i1), y.Slice(0, i1, 0, y.Cols), beta, dst.Slice(i0, i1, 0, dst.Cols))
	}
}

// lowerTMul computes dst = Lᵀ·y (or dst += Lᵀ·y with beta 1).
func lowerTMul(dst, L, y blas.General, beta float32) {
	n := L.Rows
	for j0 := 0; j0 < n; j0 += diagTile {
		j1 := min(j0+diagTile, n)
		// Rows j0..j1 of Lᵀ·y = (L[j0:n, j0:j1])ᵀ · y[j0:n].
		blockGemm(blockWeighted, blas.Trans, blas.NoTrans, 1, L.Slice(j0, n, j0, j1), y.Slice(j0, n, 0, y.Cols), beta, dst.Slice(j0, j1, 0, dst.Cols))
	}
}

// The same products for matrices kept transposed, [k × n], as the engine
// keeps features, so that no transposes are needed.

// lowerAtB computes the lower triangle of dst = aᵀ·b (a, b: k×n; dst
// n×n).
func lowerAtB(dst, a, b blas.General) {
	n := a.Cols
	for i0 := 0; i0 < n; i0 += diagTile {
		i1 := min(i0+diagTile, n)
		blockGemm(blockScores, blas.Trans, blas.NoTrans, 1, a.Slice(0, a.Rows, i0, i1), b.Slice(0, b.Rows, 0, i1), 0, dst.Slice(i0, i1, 0, i1))
		for i := i0; i < i1; i++ {
			clear(dst.Data[i*dst.Stride+i+1 : i*dst.Stride+i1])
		}
	}
}

// lowerMulT computes dstᵀ = (L·y)ᵀ = yᵀ·Lᵀ from yᵀ (or adds it, beta 1).
func lowerMulT(dstT, L, yT blas.General, beta float32) {
	n := L.Rows
	for i0 := 0; i0 < n; i0 += diagTile {
		i1 := min(i0+diagTile, n)
		blockGemm(blockWeighted, blas.NoTrans, blas.Trans, 1, yT.Slice(0, yT.Rows, 0, i1), L.Slice(i0, i1, 0, i1), beta, dstT.Slice(0, dstT.Rows, i0, i1))
	}
}

// lowerTMulT computes dstᵀ = (Lᵀ·y)ᵀ = yᵀ·L from yᵀ (or adds it, beta 1).
func lowerTMulT(dstT, L, yT blas.General, beta float32) {
	n := L.Rows
	for j0 := 0; j0 < n; j0 += diagTile {
		j1 := min(j0+diagTile, n)
		blockGemm(blockWeighted, blas.NoTrans, blas.NoTrans, 1, yT.Slice(0, yT.Rows, j0, n), L.Slice(j0, n, j0, j1), beta, dstT.Slice(0, dstT.Rows, j0, j1))
	}
}

// lowerRowSums adds Σ_{j≤i} w_ij to d[i].
func lowerRowSums(d, w []float32, n int) {
	for i := 0; i < n; i++ {
		d[i] += vec.Sum(w[i*n : i*n+i+1])
	}
}

// lowerRowDots sets d[i] = Σ_{j≤i} x_ij·y_ij.
func lowerRowDots(d, x, y []float32, n int) {
	for i := 0; i < n; i++ {
		d[i] = vec.Dot(x[i*n:i*n+i+1], y[i*n:i*n+i+1])
	}
}

// lowerPow sets w = s^p on the lower triangle (p ≥ 1), and zero above the
// diagonal inside the diagonal tiles; tmp is scratch of n.
func lowerPow(w, s, tmp []float32, n, p int) {
	for i := 0; i < n; i++ {
		clear(w[i*n+i+1 : i*n+min(n, (i/diagTile+1)*diagTile)])
		powInto(w[i*n:i*n+i+1], s[i*n:i*n+i+1], tmp[:i+1], p)
	}
}

// lowerPowGrad replaces dw by p·s^(p-1) ∗ dw on the lower triangle: the
// gradient of S from that of W = S^p. tmp is scratch of 2n.
func lowerPowGrad(dw, s, tmp []float32, n, p int) {
	if p == 1 {
		return
	}
	for i := 0; i < n; i++ {
		d, t := dw[i*n:i*n+i+1], tmp[:i+1]
		powInto(t, s[i*n:i*n+i+1], tmp[n:n+i+1], p-1)
		vec.Mul(d, d, t)
		vec.Scale(float32(p), d)
	}
}

// powInto sets dst = x^p elementwise (p ≥ 1) by repeated squaring, with
// base as scratch; base must not alias dst or x.
func powInto(dst, x, base []float32, p int) {
	copy(base, x)
	first := true
	for {
		if p&1 == 1 {
			if first {
				copy(dst, base)
				first = false
			} else {
				vec.Mul(dst, dst, base)
			}
		}
		if p >>= 1; p == 0 {
			return
		}
		vec.Mul(base, base, base)
	}
}

// ipow returns x^p for p ≥ 0 by repeated squaring.
func ipow(x float32, p int) float32 {
	r := float32(1)
	for p > 0 {
		if p&1 == 1 {
			r *= x
		}
		x *= x
		p >>= 1
	}
	return r
}

// scanChunk is the number of state elements one scan task covers: the
// scans are elementwise, so they split over elements as well as over heads.
const scanChunk = 4096
