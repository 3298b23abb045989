package attention

import (
	"math"

	"github.com/polysketch/polysketch/vec"
)

// Scaled feature maps (Performer). The features of key j are
// exp(s_j)·φ̃(k_j), with φ̃ ∈ (0,1] and s_j a log-scale that may be large;
// those of query i are φ̃(q_i) (their own scale cancels in the ratio). The
// engine weights φ̃(q_i)·φ̃(k_j) by exp(s_j − R_i), where the query's
// reference R_i = max_{j≤i} s_j also cancels in the ratio and keeps every
// factor ≤ 1. Every reference is a running maximum over positions ≤ i, so
// nothing after i changes o_i, bit for bit:
//
//   - block l's state H_l = Σ_{j∈l} exp(s_j − m_l)·φ̃(k_j)v_jᵀ is relative to
//     m_l, the maximum over block l, and the prefix state Z_l to A_l, the
//     maximum over blocks before l: the prefix scan rescales the running
//     sum by exp(A_l − A_{l+1}) ≤ 1 whenever the maximum grows, as online
//     softmax does;
//   - inside block l the diagonal weights are first relative to r_i, the
//     running maximum over the block up to i (exp(s_j − r_i), j ≤ i), then
//     rescaled by f_i = exp(r_i − R_i) with R_i = max(A_l, r_i), and the
//     cross term φ̃(q_i)·Z_l by c_i = exp(A_l − R_i);
//   - backward, the suffix states U_l of the keys of block l are relative
//     to m_l, through the same rescaling in the other direction.
//
// The references are constants for the gradients: the function computed
// does not depend on them.

// expf is exp in float32, the one way every factor here is computed, so
// that the block, streaming and scan paths agree bit for bit.
func expf(x float32) float32 { return float32(math.Exp(float64(x))) }

// maxes returns the [t+1] block maxima m_l and references A_l of head hd.
func (a *engine) maxes(hd int) (bmax, pmax []float32) {
	n := a.L.t + 1
	return a.bmax[hd*n : (hd+1)*n], a.pmax[hd*n : (hd+1)*n]
}

// keyLogScales copies the log-scales of a block's keys from their pre
// into w.skeys and returns them with their maximum.
func (a *engine) keyLogScales(w *psWorker, pre []float32, rows int) ([]float32, float32) {
	s := w.skeys[:rows]
	copy(s, a.ls.logScale(pre, rows))
	return s, vec.Max(s)
}

// keyScales sets w.ks to exp(s_j − ref) for the keys in w.skeys.
func (a *engine) keyScales(w *psWorker, rows int, ref float32) []float32 {
	ks := w.ks[:rows]
	for j, s := range w.skeys[:rows] {
		ks[j] = s - ref
	}
	vec.Exp(ks, ks)
	return ks
}

// scaleCols writes into dst ([F × rows]) src with column i scaled by c_i.
func scaleCols(dst, src, c []float32, F, rows int) []float32 {
	for f := 0; f < F; f++ {
		vec.Mul(dst[f*rows:(f+1)*rows], src[f*rows:(f+1)*rows], c[:rows])
	}
	return dst[:F*rows]
}

// references computes, for the prepared blocks of every head, A_l from the
// block maxima, and A_t, the maximum over all blocks.
func (a *engine) references() {
	for hd := 0; hd < a.L.bh; hd++ {
		bmax, pmax := a.maxes(hd)
		A := negInf
		for l := 0; l < a.L.t; l++ {
			pmax[l] = A
			A = max(A, bmax[l])
		}
		pmax[a.L.t] = A
	}
}

// scaledWeights turns the diagonal block's products S (in w.w's lower
// triangle) into weights relative to r_i: w_ij = S_ij·exp(s_j − r_i), with
// the factors exp(s_j − r_i) left in w.s and r_i in a.ref.
func (a *engine) scaledWeights(w *psWorker, hd, l int) {
	L := &a.L
	lo, rows := L.plan.span(l)
	r := a.ref[hd*L.n+lo : hd*L.n+lo+rows]
	sk := w.skeys[:rows]
	run := negInf
	for i := range r {
		run = max(run, sk[i])
		r[i] = run
	}
	for i := 0; i < rows; i++ {
		e := w.s[i*rows : i*rows+i+1]
		for j := range e {
			e[j] = sk[j] - r[i]
		}
		vec.Exp(e, e)
		ww := w.w[i*rows : i*rows+i+1]
		vec.Mul(ww, ww, e)
	}
}

// rowFactors sets w.fs to f_i = exp(r_i − R_i) and w.cs to
// c_i = exp(A_l − R_i), R_i = max(A_l, r_i), for the rows of causal block l.
func (a *engine) rowFactors(w *psWorker, hd, l int) {
	L := &a.L
	lo, rows := L.plan.span(l)
	_, pmax := a.maxes(hd)
	A := pmax[l]
	fs, cs := w.fs[:rows], w.cs[:rows]
	for i, r := range a.ref[hd*L.n+lo : hd*L.n+lo+rows] {
		R := max(A, r)
		fs[i], cs[i] = r-R, A-R
	}
	vec.Exp(fs, fs)
	vec.Exp(cs, cs)
}

// scaleRows multiplies the lower-triangle rows of the n×n matrix m by f.
func scaleRows(m, f []float32, n int) {
	for i, fi := range f[:n] {
		if fi != 1 {
			vec.Scale(fi, m[i*n:i*n+i+1])
		}
	}
}

// addScaled adds a state relative to m onto run, relative to A, leaving
// run relative to max(A, m), which it returns.
func addScaled(run, state []float32, A, m float32) float32 {
	A2 := max(A, m)
	vec.Scale(expf(A-A2), run)
	vec.Axpy(expf(m-A2), state, run)
	return A2
}

// scaledPrefixScan is prefixScan for states relative to their block
// maxima: state l becomes Z_l = Σ_{j<l} exp(m_j − A_l)·H_j.
func scaledPrefixScan(states []float32, t, stride, lo, hi int, run, tmp, bmax []float32) {
	w := hi - lo
	run, tmp = run[:w], tmp[:w]
	clear(run)
	A := negInf
	for l := 0; l < t; l++ {
		s := states[l*stride+lo : l*stride+hi]
		if l == t-1 {
			copy(s, run)
			break
		}
		copy(tmp, s)
		copy(s, run)
		A = addScaled(run, tmp, A, bmax[l])
	}
}

// scaledSuffixScan is suffixScan for the query states G_l of a causal
// scaled map: state l becomes U_l = Σ_{j>l} exp(m_l − A_j)·G_j, the suffix
// state of block l's keys relative to m_l. The running sum is relative to
// A_{l+1}, rescaled by exp(A_l − A_{l+1}) ≤ 1 as l decreases.
func scaledSuffixScan(states []float32, t, stride, lo, hi int, run, tmp, bmax, pmax []float32) {
	w := hi - lo
	run, tmp = run[:w], tmp[:w]
	clear(run)
	for l := t - 1; l >= 0; l-- {
		s := states[l*stride+lo : l*stride+hi]
		copy(tmp, s)
		copy(s, run)
		vec.Scale(expf(bmax[l]-pmax[l+1]), s)
		if l == 0 {
			break
		}
		suffixAdd(run, tmp, pmax[l]-pmax[l+1])
	}
}

// suffixAdd adds a query state to the running suffix sum, rescaled by
// exp(d) first.
func suffixAdd(run, state []float32, d float32) {
	vec.Scale(expf(d), run)
	vec.Add(run, run, state)
}

// scaledSum writes into dst the states relative to their block maxima,
// summed relative to the maximum of all, as addScaled adds them.
func scaledSum(dst, states []float32, t, stride, lo, hi int, bmax []float32) {
	d := dst[lo:hi]
	clear(d)
	A := negInf
	for l := 0; l < t; l++ {
		A = addScaled(d, states[l*stride+lo:l*stride+hi], A, bmax[l])
	}
}
