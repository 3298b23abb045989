package attention

import (
	"math"

	"github.com/polysketch/polysketch/blas"
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

// logScales is the stabilizer of scaled maps: their projection of the
// keys is a logScaled one.
type logScales struct {
	e  *engine
	ls logScaled // the keys' projection

	ref        []float32 // [bh × n]: r_i, the running maximum of key log-scales in i's block (CumSum: over j ≤ i)
	bmax, pmax []float32 // [bh × (t+1)]: m_l, the maximum of block l's, and A_l, that of blocks before l (A_t: all)
}

func (s *logScales) bind(a *engine) {
	s.ls, _ = a.kproj.(logScaled)
	if s.ls == nil || a.fm.lift != (entrywise{}) || a.fm.one != 0 || a.opts.Local {
		panic("attention: a scaled feature map needs a logScaled projection, an entrywise lift, the plain ratio and no local blocks")
	}
}

func (s *logScales) carve(L *engineLayout, c *carver) {
	ref := c.take(L.bh * L.n)
	bmax, pmax := c.take(L.bh*(L.t+1)), c.take(L.bh*(L.t+1))
	if c.keep() {
		s.ref, s.bmax, s.pmax = ref, bmax, pmax
	}
}

// carveWorker takes the key scales, query cross and diagonal factors and
// log-scales of the block's keys ([bs] each), and a state for the suffix
// sums when streaming.
func (s *logScales) carveWorker(w *engineWorker, L *engineLayout, c *carver) {
	bs := L.bs
	w.ks, w.cs, w.fs, w.skeys = c.take(bs), c.take(bs), c.take(bs), c.take(bs)
	if L.mode == modeStream && L.causal {
		w.acc = c.take(L.stateSize)
	}
}

// maxes returns the [t+1] block maxima m_l and references A_l of head hd.
func (s *logScales) maxes(hd int) (bmax, pmax []float32) {
	n := s.e.L.t + 1
	return s.bmax[hd*n : (hd+1)*n], s.pmax[hd*n : (hd+1)*n]
}

// keysProjected copies the log-scales of a block's keys from their pre
// into w.skeys.
func (s *logScales) keysProjected(w *engineWorker, pre []float32, rows int) {
	copy(w.skeys[:rows], s.ls.logScale(pre, rows))
}

// keyBlock records m_l, the maximum log-scale of block l's keys: H_l is
// relative to it.
func (s *logScales) keyBlock(w *engineWorker, hd, l, rows int) float32 {
	ml := vec.Max(w.skeys[:rows])
	bmax, _ := s.maxes(hd)
	bmax[l] = ml
	return ml
}

// keyScales sets w.ks to exp(s_j − ref) for the keys in w.skeys.
func (s *logScales) keyScales(w *engineWorker, rows int, ref float32) []float32 {
	ks := w.ks[:rows]
	for j, s := range w.skeys[:rows] {
		ks[j] = s - ref
	}
	vec.Exp(ks, ks)
	return ks
}

// suffixScales returns the key factors relative to U_l's reference: m_l,
// or A_t when non-causal.
func (s *logScales) suffixScales(w *engineWorker, hd, rows int) []float32 {
	ref := vec.Max(w.skeys[:rows])
	if !s.e.L.causal {
		_, pmax := s.maxes(hd)
		ref = pmax[s.e.L.t]
	}
	return s.keyScales(w, rows, ref)
}

// prepared computes, for the prepared blocks of every head, A_l from the
// block maxima, and A_t, the maximum over all blocks.
func (s *logScales) prepared() {
	for hd := 0; hd < s.e.L.bh; hd++ {
		bmax, pmax := s.maxes(hd)
		A := negInf
		for l := 0; l < s.e.L.t; l++ {
			pmax[l] = A
			A = max(A, bmax[l])
		}
		pmax[s.e.L.t] = A
	}
}

// diagWeights turns the diagonal block's products S (in w.w's lower
// triangle) into weights relative to r_i: w_ij = S_ij·exp(s_j − r_i), with
// the factors exp(s_j − r_i) left in w.s and r_i in s.ref.
func (s *logScales) diagWeights(w *engineWorker, hd, l int) {
	L := &s.e.L
	lo, rows := L.plan.span(l)
	r := s.ref[hd*L.n+lo : hd*L.n+lo+rows]
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

// A scaled map has no exact local blocks (bind refuses them) and no
// learned weight of its cross terms.
func (s *logScales) exactWeights(w *engineWorker, hd, l, rows, p int) {
	plain{}.exactWeights(w, hd, l, rows, p)
}
func (s *logScales) exactBackward(w *engineWorker, dw []float32, rows, p int) {
	plain{}.exactBackward(w, dw, rows, p)
}
func (s *logScales) crossGrad(*engineWorker, int, int, []float32, []float32, []float32, []float32) {}

// diagBackward: dS = dW ∗ exp(s_j − R_i), the factors left in w.s.
func (s *logScales) diagBackward(w *engineWorker, dw []float32, rows, pow int) {
	lowerPowGrad(dw, w.s, w.tmp, rows, pow)
	for i := 0; i < rows; i++ {
		vec.Mul(dw[i*rows:i*rows+i+1], dw[i*rows:i*rows+i+1], w.s[i*rows:i*rows+i+1])
	}
}

// rowFactors sets w.fs to f_i = exp(r_i − R_i) and w.cs to
// c_i = exp(A_l − R_i), R_i = max(A_l, r_i), for the rows of causal block l.
// Non-causal attention has one reference for all, A_t: no factors.
func (s *logScales) rowFactors(w *engineWorker, hd, l int) (fs, cs []float32) {
	L := &s.e.L
	if !L.causal {
		return nil, nil
	}
	lo, rows := L.plan.span(l)
	_, pmax := s.maxes(hd)
	A := pmax[l]
	fs, cs = w.fs[:rows], w.cs[:rows]
	for i, r := range s.ref[hd*L.n+lo : hd*L.n+lo+rows] {
		R := max(A, r)
		fs[i], cs[i] = r-R, A-R
	}
	vec.Exp(fs, fs)
	vec.Exp(cs, cs)
	return fs, cs
}

func (s *logScales) scan(kind int, st []float32, L *engineLayout, lo, hi int, w *engineWorker, hd int) {
	bmax, pmax := s.maxes(hd)
	switch kind {
	case scanSum:
		sumStates(L.stateSum(st, lo, hi), L.stateCols(st, lo, hi))
	case scanSumKeys:
		scaledSum(L.stateSum(st, lo, hi), L.stateCols(st, lo, hi), bmax)
	case scanPrefix:
		scaledPrefixScan(L.stateCols(st, lo, hi), w.run, w.hbuf, bmax)
	case scanSuffix:
		scaledSuffixScan(L.stateCols(st, lo, hi), w.run, w.hbuf, bmax, pmax)
	}
}

func (s *logScales) addKeyState(run, state []float32, hd, l int, A float32) float32 {
	bmax, _ := s.maxes(hd)
	return addScaled(run, state, A, bmax[l])
}

func (s *logScales) setReference(hd, l int, A float32) {
	bmax, pmax := s.maxes(hd)
	if l == s.e.L.t {
		A = max(A, bmax[l-1])
	}
	pmax[l] = A
}

func (s *logScales) keyTotal(hd int, A float32) {
	_, pmax := s.maxes(hd)
	pmax[s.e.L.t] = A
}

// suffixState returns the running suffix state, relative to A_{l+1},
// relative to m_l in w.acc, as scaledSuffixScan makes them.
func (s *logScales) suffixState(w *engineWorker, hd, l int) []float32 {
	bmax, pmax := s.maxes(hd)
	u := w.acc
	copy(u, w.run)
	vec.Scale(expf(bmax[l]-pmax[l+1]), u)
	return u
}

func (s *logScales) addQueryState(run, state []float32, hd, l int) {
	_, pmax := s.maxes(hd)
	suffixAdd(run, state, pmax[l]-pmax[l+1])
}

// CumSum: the state is kept relative to M_i, the running maximum of the
// key log-scales s_j, j ≤ i, and rescaled by exp(M_{i-1} − M_i) when it
// grows; key j enters it weighted by exp(s_j − M_i). Backward's suffix
// sums run relative to M_j, rescaled by exp(M_j − M_{j+1}) ≤ 1 as j
// decreases, and key j's gradients carry exp(s_j − M_j). M_i is kept in
// s.ref between the sweeps.

// cumKey rescales the state to the new M_i and returns key i's features
// relative to it, in row i of w.df.
func (s *logScales) cumKey(w *engineWorker, fk []float32, hd, pos, i int) []float32 {
	at := hd * s.e.L.n
	M := negInf
	if pos > 0 {
		M = s.ref[at+pos-1]
	}
	x := w.skeys[i]
	if x > M {
		vec.Scale(expf(M-x), w.run)
		M = x
	}
	s.ref[at+pos] = M
	F := len(fk)
	kf := w.df[i*F : (i+1)*F]
	copy(kf, fk)
	vec.Scale(expf(x-M), kf)
	return kf
}

// cumSuffix rescales the suffix state from M_{pos+1} to M_pos and returns
// exp(s_pos − M_pos).
func (s *logScales) cumSuffix(w *engineWorker, hd, pos, i int) float32 {
	at, n := hd*s.e.L.n, s.e.L.n
	Mi, next := s.ref[at+pos], s.ref[at+min(pos+1, n-1)]
	if Mi != next {
		vec.Scale(expf(Mi-next), w.run)
	}
	return expf(w.skeys[i] - Mi)
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
func scaledPrefixScan(states blas.General, run, tmp, bmax []float32) {
	t, w := states.Rows, states.Cols
	run, tmp = run[:w], tmp[:w]
	clear(run)
	A := negInf
	for l := 0; l < t; l++ {
		s := states.Data[l*states.Stride : l*states.Stride+w]
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
func scaledSuffixScan(states blas.General, run, tmp, bmax, pmax []float32) {
	t, w := states.Rows, states.Cols
	run, tmp = run[:w], tmp[:w]
	clear(run)
	for l := t - 1; l >= 0; l-- {
		s := states.Data[l*states.Stride : l*states.Stride+w]
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
func scaledSum(dst []float32, states blas.General, bmax []float32) {
	d := dst[:states.Cols]
	clear(d)
	A := negInf
	for l := 0; l < states.Rows; l++ {
		A = addScaled(d, states.Data[l*states.Stride:l*states.Stride+states.Cols], A, bmax[l])
	}
}
