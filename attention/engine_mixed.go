package attention

import (
	"fmt"
	"math"

	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/vec"
)

// Fitting a softmax teacher. A pretrained softmax layer weighs key j for
// query i by exp(q_i·k_j/√h); its q and k are not normalized, and nothing
// in polynomial weights (q·k)^p reproduces that. Three options of the
// engine give a linear mechanism what it needs to learn it (linearizing a
// model, see package train), each with parameters of its own:
//
//   - Scale: q̃ = e^{s_h}·q and k̃ = e^{s_h}·k, one learned log-temperature
//     s_h per head, starting at −¼·ln h so that q̃·k̃ = q·k/√h, softmax's
//     scores ("scale", [H]);
//   - Softmax: the local exact blocks weigh by exp(q̃_i·k̃_j) instead of
//     (q̃_i·k̃_j)^p, as LoLCATs' sliding window does;
//   - Mix: the feature weights of the keys before i's block are
//     e^{β_h}·φ(q̃_i)·φ(k̃_j), one learned log-weight β_h per head,
//     starting at 0 ("mix", [H]).
//
// Local and remote weights share one normalizer:
//
//	o_i = (Σ_{j∈l, j≤i} w_ij v_j + e^β·φ(q̃_i)ᵀZ_l) / (c + Σ_{j∈l, j≤i} w_ij + e^β·φ(q̃_i)·ζ_l),
//
// with c = 0 under Softmax (the window always holds i itself, and the
// first block then equals softmax attention exactly) and the mechanism's
// own c (polysketch's 1) otherwise. Non-causal attention has no local
// blocks: its weights are all e^β·φ(q̃_i)·φ(k̃_j), with polysketch's 1.
//
// The stabilizer (mixed). exp(q̃·k̃) overflows float32 above 88, and the
// scores of a pretrained layer are not bounded; the feature weights are
// on an absolute scale of their own. The diagonal block's weights are
// computed relative to the row maximum r_i = max_{j∈l, j≤i} q̃_i·k̃_j, so
// that every exp(s_ij − r_i) ≤ 1; the cross terms (and c) are absolute,
// weighted by e^β. Both are then taken relative to R_i = max(r_i, β): the
// local terms by f_i = e^{r_i − R_i}, the cross terms by c_i = e^{β − R_i},
// which are the engine's row factors (rowFactors), as for Performer's
// key scales (engine_scaled.go); in the first block, which has no cross
// terms, R_i = r_i. Numerator and denominator share the factor e^{−R_i},
// which cancels: the function does not depend on the references, and the
// gradients treat them as constants. Without Softmax no reference is
// needed: f_i = 1 and c_i = e^β. The local terms vanish (f_i underflows)
// only where r_i < β − 87, that is where they are below e^{−87} of e^β:
// negligible unless the query's feature weights are as small, which no
// feature map here gives but for a query of zero features.
//
// Gradients. For the mix, dβ_h = Σ_i c_i·(g_i·φ̃(q_i)ᵀZ + gd_i·φ̃(q_i)·ζ)
// over the rows of head h, g_i = dO_i/D_i and gd_i = −dO_i·o_i/D_i, from
// terms the engine's backward pass already has (crossGrad). For the
// scale, ds_h = Σ (dq̃·q̃ + dk̃·k̃) over the rows of head h. Both are summed
// per block or head row into slots, then in a fixed order, so that they
// do not depend on the number of threads.

// tuning holds the per-head parameters of Scale and Mix.
type tuning struct {
	heads      int
	scale, mix *nn.Param // [heads] each; nil when off

	// Buffers, carved with the engine's.
	qs, ks []float32 // Scale: q̃ and k̃ of the call in progress, [bh × n × h]
	sslots []float32 // Scale: [bh] partial ds, one per head row
	mslots []float32 // Mix: [bh × t] partial dβ, one per block
}

// scaleInit is the initial log-temperature for heads of size h: e^{2s} = 1/√h.
func scaleInit(h int) float32 { return float32(-0.25 * math.Log(float64(h))) }

// tuneFor makes the per-head parameters for H heads of size h, if the
// options ask for any and they do not exist yet; a later Forward with
// another number of heads panics.
func (a *engine) tuneFor(H, h int) {
	o := a.opts
	if !o.Scale && !o.Mix {
		return
	}
	if a.tune != nil {
		if a.tune.heads != H {
			panic(fmt.Sprintf("attention.%s: per-head parameters made for %d heads, given %d", a.kind, a.tune.heads, H))
		}
		return
	}
	t := &tuning{heads: H}
	if o.Scale {
		t.scale = nn.NewParam("scale", false, H)
		t.scale.Value.Fill(scaleInit(h))
	}
	if o.Mix {
		t.mix = nn.NewParam("mix", false, H)
	}
	a.tune = t
}

// params lists the per-head parameters: scale, then mix.
func (t *tuning) params() []*nn.Param {
	var ps []*nn.Param
	if t == nil {
		return nil
	}
	for _, p := range []*nn.Param{t.scale, t.mix} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// carve takes the buffers of layout L.
func (t *tuning) carve(L *engineLayout, c *carver) {
	if t == nil {
		return
	}
	var qs, ks, sslots, mslots []float32
	if t.scale != nil {
		qs, ks, sslots = c.take(L.bh*L.n*L.h), c.take(L.bh*L.n*L.h), c.take(L.bh)
	}
	if t.mix != nil {
		mslots = c.take(L.bh * L.t)
	}
	if c.keep() {
		t.qs, t.ks, t.sslots, t.mslots = qs, ks, sslots, mslots
	}
}

// beta returns β of head row hd (0 without Mix).
func (t *tuning) beta(hd int) float32 {
	if t == nil || t.mix == nil {
		return 0
	}
	return t.mix.Value.Data[hd%t.heads]
}

// factor returns e^{s} of head row hd.
func (t *tuning) factor(hd int) float32 {
	return expf(t.scale.Value.Data[hd%t.heads])
}

// scaleItem writes q̃ and k̃ of head row hd.
func (a *engine) scaleItem(_ *engineWorker, hd int) {
	t, size := a.tune, a.L.n*a.L.h
	f := t.factor(hd)
	lo, hi := hd*size, (hd+1)*size
	copy(t.qs[lo:hi], a.q[lo:hi])
	vec.Scale(f, t.qs[lo:hi])
	copy(t.ks[lo:hi], a.k[lo:hi])
	vec.Scale(f, t.ks[lo:hi])
}

// unscaleItem computes head row hd's part of ds from dq̃ and dk̃ (in dq
// and dk) and turns them into dq and dk.
func (a *engine) unscaleItem(_ *engineWorker, hd int) {
	t, size := a.tune, a.L.n*a.L.h
	lo, hi := hd*size, (hd+1)*size
	t.sslots[hd] = vec.Dot(a.dq[lo:hi], t.qs[lo:hi]) + vec.Dot(a.dk[lo:hi], t.ks[lo:hi])
	f := t.factor(hd)
	vec.Scale(f, a.dq[lo:hi])
	vec.Scale(f, a.dk[lo:hi])
}

// tuneBackward finishes Backward for the per-head parameters: the input
// gradients of Scale, then both parameter gradients from their slots,
// head by head in row order.
func (a *engine) tuneBackward() {
	t := a.tune
	if t == nil {
		return
	}
	L := &a.L
	if t.scale != nil {
		a.pool.run(L.bh, a.stepUnscale)
		g := t.scale.Grad.Data
		for hd, x := range t.sslots {
			g[hd%t.heads] += x
		}
	}
	if t.mix != nil {
		g := t.mix.Grad.Data
		for hd := 0; hd < L.bh; hd++ {
			g[hd%t.heads] += vec.Sum(t.mslots[hd*L.t : (hd+1)*L.t])
		}
	}
}

// mixed is the stabilizer of maps with softmax local blocks or a mix (see
// the top of this file). Everything but the local weights and the row
// factors is plain's.
type mixed struct {
	plain
	e       *engine
	softmax bool
	ref     []float32 // Softmax: [bh × n], the row maxima r_i of the local scores
}

func (s *mixed) bind(a *engine) {
	if a.fm.scaled || !a.opts.Local || a.opts.CumSum {
		panic("attention: softmax local blocks and a mix need unscaled features, local blocks and no cumulative sums")
	}
}

func (s *mixed) carve(L *engineLayout, c *carver) {
	var ref []float32
	if s.softmax && L.causal {
		ref = c.take(L.bh * L.n)
	}
	if c.keep() {
		s.ref = ref
	}
}

// carveWorker takes the row factors, [bs] each.
func (s *mixed) carveWorker(w *engineWorker, L *engineLayout, c *carver) {
	w.fs, w.cs = c.take(L.bs), c.take(L.bs)
}

// exactWeights sets W = lt(exp(S − r)) from the scores S in w.s, r_i the
// maximum of row i, kept in s.ref; without Softmax W = lt(S^p).
func (s *mixed) exactWeights(w *engineWorker, hd, l, rows, p int) {
	if !s.softmax {
		s.plain.exactWeights(w, hd, l, rows, p)
		return
	}
	L := &s.e.L
	lo, _ := L.plan.span(l)
	ref := s.ref[hd*L.n+lo : hd*L.n+lo+rows]
	for i := 0; i < rows; i++ {
		sc, ww := w.s[i*rows:i*rows+i+1], w.w[i*rows:i*rows+i+1]
		r := vec.Max(sc)
		ref[i] = r
		vec.ExpScale(ww, sc, r, 1)
		clear(w.w[i*rows+i+1 : i*rows+min(rows, (i/diagTile+1)*diagTile)])
	}
}

// exactBackward: dS = dW ∗ W for W = exp(S − R), the weights rowFactors
// rescaled in w.w; without Softmax the power's gradient.
func (s *mixed) exactBackward(w *engineWorker, dw []float32, rows, p int) {
	if !s.softmax {
		s.plain.exactBackward(w, dw, rows, p)
		return
	}
	for i := 0; i < rows; i++ {
		vec.Mul(dw[i*rows:i*rows+i+1], dw[i*rows:i*rows+i+1], w.w[i*rows:i*rows+i+1])
	}
}

// rowFactors: f_i = e^{r_i − R_i} and c_i = e^{β − R_i} with
// R_i = max(r_i, β) under Softmax (causal); else no f and c_i = e^β.
func (s *mixed) rowFactors(w *engineWorker, hd, l int) (fs, cs []float32) {
	L := &s.e.L
	lo, rows := L.plan.span(l)
	beta := s.e.tune.beta(hd)
	cs = w.cs[:rows]
	if !s.softmax || !L.causal {
		for i := range cs {
			cs[i] = beta
		}
		vec.Exp(cs, cs)
		return nil, cs
	}
	fs = w.fs[:rows]
	for i, r := range s.ref[hd*L.n+lo : hd*L.n+lo+rows] {
		R := r
		if l > 0 { // the first block has no cross terms, whatever β
			R = max(r, beta)
		}
		fs[i], cs[i] = r-R, beta-R
	}
	vec.Exp(fs, fs)
	vec.Exp(cs, cs)
	return fs, cs
}

// crossGrad keeps block l's part of dβ: Σ_i cross_i + gd_i·(ψ_i·ζ), ψ the
// scaled query features phi.
func (s *mixed) crossGrad(w *engineWorker, hd, l int, cross, gd, phi, zeta []float32) {
	t := s.e.tune
	if t == nil || t.mix == nil {
		return
	}
	rows := len(gd)
	pz := w.tmp[:rows]
	clear(pz)
	for f, z := range zeta {
		vec.Axpy(z, phi[f*rows:(f+1)*rows], pz)
	}
	t.mslots[hd*s.e.L.t+l] = vec.Sum(cross) + vec.Dot(pz, gd)
}
