package attention

import (
	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/vec"
)

// The cumulative-sum algorithm (PolySketchFormer v1, Sec. 3; Performer's
// causal prefix sums): the state S_i = Σ_{j≤i} φ(k_j)v_jᵀ and
// s_i = Σ_{j≤i} φ(k_j) are updated token by token, and
// o_i = φ(q_i)ᵀS_i / (c + φ(q_i)·s_i). Each token costs two F×h
// matrix-vector operations on a state that must be revisited for every
// token, with no matrix products: the sequential baseline the block
// algorithm is measured against. Heads run in parallel; tokens cannot.
//
// Backward takes two sweeps: forward again for S_i (giving dφ(q_i) =
// S_i·g_i + gd_i·s_i with g_i = dO_i/D_i), then backward with the suffix
// sums R_j = Σ_{i≥j} φ(q_i)g_iᵀ and ρ_j = Σ_{i≥j} gd_i·φ(q_i), giving
// dv_j = R_jᵀφ(k_j) and dφ(k_j) = R_j·v_j + ρ_j. No state is subtracted, so
// nothing cancels. Features are computed per block of rows (GEMMs for the
// sketch), then read token by token.

// cumsumFeatures computes the row-major features of block l's keys and
// queries into w.fk and w.fq (with the sketches in w.preK, w.preQ and
// M in w.mk, w.mq, w.tk, w.tq for the backward pass).
func (a *engine) cumsumFeatures(w *engineWorker, hd, l int) {
	L := &a.L
	_, rows := L.plan.span(l)
	F := L.F
	a.sketchKeys(w, hd, l, w.preK)
	blas.Copy(blas.Trans, blas.NewGeneral(F, rows, a.fm.lift.apply(w.phi[:F*rows], w.mk, w.tk, L.ro, rows)), blas.NewGeneral(rows, F, w.fk))
	a.skApply(w, false, hd, l, w.preQ, w.mq)
	blas.Copy(blas.Trans, blas.NewGeneral(F, rows, a.fm.lift.apply(w.phi[:F*rows], w.mq, w.tq, L.ro, rows)), blas.NewGeneral(rows, F, w.fq))
}

// cumsumDen returns the denominator for the weights' sum x.
func (a *engine) cumsumDen(x float32) float32 {
	if a.fm.one == 0 {
		return max(x, denFloor)
	}
	return a.fm.one + x
}

// cumsumAdd adds token i's key and value to the state.
func cumsumAdd(S, s, fk, vi []float32, h int) {
	for f, x := range fk {
		vec.Axpy(x, vi, S[f*h:(f+1)*h])
	}
	vec.Add(s, s, fk)
}

func (a *engine) cumsumForward(w *engineWorker, hd int) {
	L := &a.L
	F, h := L.F, L.h
	S, s := w.run[:F*h], w.run[F*h:F*h+F]
	clear(w.run)
	for l := 0; l < L.t; l++ {
		lo, rows := L.plan.span(l)
		a.cumsumFeatures(w, hd, l)
		v, o := a.rows(a.v, hd, l), a.rows(a.o, hd, l)
		for i := 0; i < rows; i++ {
			fk := a.stab.cumKey(w, w.fk[i*F:(i+1)*F], hd, lo+i, i)
			cumsumAdd(S, s, fk, v[i*h:(i+1)*h], h)
			fq, oi := w.fq[i*F:(i+1)*F], o[i*h:(i+1)*h]
			clear(oi)
			for f, x := range fq {
				vec.Axpy(x, S[f*h:(f+1)*h], oi)
			}
			vec.Scale(1/a.cumsumDen(vec.Dot(fq, s)), oi)
		}
	}
}

// cumsumBackward runs the two sweeps. For a scaled map (see
// logScales.cumKey) the state and the suffix sums are kept relative to
// running maxima, which the stabilizer rescales between positions, and
// key j's gradients carry its factor ks; for other maps ks is 1.
func (a *engine) cumsumBackward(w *engineWorker, hd int) {
	L := &a.L
	F, h, ro := L.F, L.h, L.ro
	S, s := w.run[:F*h], w.run[F*h:F*h+F]
	clear(w.run)
	for l := 0; l < L.t; l++ {
		lo, rows := L.plan.span(l)
		a.cumsumFeatures(w, hd, l)
		v, do := a.rows(a.v, hd, l), a.rows(a.do, hd, l)
		for i := 0; i < rows; i++ {
			fk := a.stab.cumKey(w, w.fk[i*F:(i+1)*F], hd, lo+i, i)
			cumsumAdd(S, s, fk, v[i*h:(i+1)*h], h)
			fq := w.fq[i*F : (i+1)*F]
			den := a.cumsumDen(vec.Dot(fq, s))
			gi := w.g[i*h : (i+1)*h]
			copy(gi, do[i*h:(i+1)*h])
			vec.Scale(1/den, gi)
			dfq := w.df[i*F : (i+1)*F]
			for f := range dfq {
				dfq[f] = vec.Dot(S[f*h:(f+1)*h], gi)
			}
			gd := -vec.Dot(fq, dfq) / den
			vec.Axpy(gd, s, dfq)
			a.den[hd*L.n+lo+i], a.gd[hd*L.n+lo+i] = den, gd
		}
		blas.Copy(blas.Trans, blas.NewGeneral(rows, F, w.df), blas.NewGeneral(F, rows, w.dphi))
		a.fm.lift.backward(w.dmq, w.dphi, w.mq, w.tq, ro, rows, false)
		a.skBackward(w, false, hd, l, false, w.dmq, w.preQ)
	}
	R, rho := S, s
	clear(w.run)
	for l := L.t - 1; l >= 0; l-- {
		lo, rows := L.plan.span(l)
		a.cumsumFeatures(w, hd, l)
		v, do, dv := a.rows(a.v, hd, l), a.rows(a.do, hd, l), a.rows(a.dv, hd, l)
		for i := rows - 1; i >= 0; i-- {
			ks := a.stab.cumSuffix(w, hd, lo+i, i)
			den, gd := a.den[hd*L.n+lo+i], a.gd[hd*L.n+lo+i]
			gi := w.g[i*h : (i+1)*h]
			copy(gi, do[i*h:(i+1)*h])
			vec.Scale(1/den, gi)
			fq := w.fq[i*F : (i+1)*F]
			for f, x := range fq {
				vec.Axpy(x, gi, R[f*h:(f+1)*h])
			}
			vec.Axpy(gd, fq, rho)
			fk, vi, dvi := w.fk[i*F:(i+1)*F], v[i*h:(i+1)*h], dv[i*h:(i+1)*h]
			clear(dvi)
			for f, x := range fk {
				vec.Axpy(ks*x, R[f*h:(f+1)*h], dvi)
			}
			dfk := w.df[i*F : (i+1)*F]
			for f := range dfk {
				dfk[f] = ks * (vec.Dot(R[f*h:(f+1)*h], vi) + rho[f])
			}
		}
		blas.Copy(blas.Trans, blas.NewGeneral(rows, F, w.df), blas.NewGeneral(F, rows, w.dphi))
		a.fm.lift.backward(w.dmk, w.dphi, w.mk, w.tk, ro, rows, false)
		a.skBackward(w, true, hd, l, false, w.dmk, w.preK)
	}
}
