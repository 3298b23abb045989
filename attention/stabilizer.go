package attention

import "github.com/polysketch/polysketch/vec"

// A stabilizer is how the engine keeps the weights of a feature map in
// float32 range, chosen once from the map (featureMap.scaled): plain for
// maps whose features are bounded as they are, logScales (engine_scaled.go)
// for maps whose key features carry a per-key log-scale that the engine
// keeps relative to running maxima (Performer). The engine's loops call it
// at the few points where a scale enters; plain does nothing there, so the
// maps without scales run exactly the arithmetic they would without it.
//
// A stabilizer may return per-row factors (keyScales, suffixScales,
// rowFactors): nil means none, 1 for every row.
type stabilizer interface {
	// bind checks the stabilizer against the engine's projections, built
	// or rebuilt for a head size, and takes what it reads from them.
	bind(a *engine)
	// carve takes the engine's buffers for layout L from c, and
	// carveWorker a worker's.
	carve(L *engineLayout, c *carver)
	carveWorker(w *engineWorker, L *engineLayout, c *carver)

	// keysProjected records what the stabilizer needs of a block's keys
	// from the projection's pre.
	keysProjected(w *engineWorker, pre []float32, rows int)
	// keyBlock records block l's keys (just projected) and returns the
	// reference of their state H_l.
	keyBlock(w *engineWorker, hd, l, rows int) float32
	// keyScales returns the factors of the block's key features relative
	// to ref (into the worker's scratch).
	keyScales(w *engineWorker, rows int, ref float32) []float32
	// suffixScales returns the factors of the block's key features
	// relative to the reference of the suffix state U that bwdKeys reads.
	suffixScales(w *engineWorker, hd, rows int) []float32
	// prepared runs when every block's keys are prepared (blocks mode),
	// before the prefix scan.
	prepared()
	// diagWeights rescales the weights of causal block l's sketched
	// diagonal block, just computed in w.w from w.s, leaving in w.s what
	// diagBackward needs.
	diagWeights(w *engineWorker, hd, l int)
	// diagBackward turns the gradient of the diagonal weights dw into that
	// of the products S, whose power pow they are.
	diagBackward(w *engineWorker, dw []float32, rows, pow int)
	// exactWeights turns the scores S of block l's exact diagonal block
	// (Local), the lower triangle of w.s, into its weights in w.w: S^p,
	// or exp(S) relative to a reference per row (engine_mixed.go).
	// exactBackward turns the gradient of those weights, dw, into that of
	// S, reading w.w as rowFactors left it.
	exactWeights(w *engineWorker, hd, l, rows, p int)
	exactBackward(w *engineWorker, dw []float32, rows, p int)
	// rowFactors returns, for causal block l, the factors fs of its rows'
	// diagonal terms and cs of their cross terms, relative to one
	// reference per row.
	rowFactors(w *engineWorker, hd, l int) (fs, cs []float32)
	// crossGrad takes, for block l with a prefix state, the gradient terms
	// of its cross terms: cross_i = ψ_i·(Zᵀg_i) and the denominator
	// gradients gd, with ψ = phi the query features as rowFactors scaled
	// them and ζ = zeta (a learned weight of the cross terms needs them).
	crossGrad(w *engineWorker, hd, l int, cross, gd, phi, zeta []float32)
	// scan runs a scan of the given kind (scanSum…) over elements lo…hi
	// of head hd's states st.
	scan(kind int, st []float32, L *engineLayout, lo, hi int, w *engineWorker, hd int)

	// Streaming (Remat). The running prefix state is relative to A.
	// addKeyState adds block l's key state to run and returns the new A;
	// setReference records A as the reference of the prefix state block l
	// reads (l = t: of all blocks), keyTotal that of the sum of all key
	// states; suffixState returns the suffix state block l's keys read,
	// from the running w.run; addQueryState adds block l's query state to
	// the running suffix sum.
	addKeyState(run, state []float32, hd, l int, A float32) float32
	setReference(hd, l int, A float32)
	keyTotal(hd int, A float32)
	suffixState(w *engineWorker, hd, l int) []float32
	addQueryState(run, state []float32, hd, l int)

	// CumSum. cumKey returns the features to add to the running state
	// w.run of key i of the block (position pos of head hd), whose
	// features are fk, rescaling the state first if need be; cumSuffix
	// prepares the running suffix state for position pos and returns key
	// pos's factor.
	cumKey(w *engineWorker, fk []float32, hd, pos, i int) []float32
	cumSuffix(w *engineWorker, hd, pos, i int) float32
}

// plain is the stabilizer of maps whose features need none.
type plain struct{}

func (plain) bind(*engine)                                                {}
func (plain) carve(*engineLayout, *carver)                                {}
func (plain) carveWorker(*engineWorker, *engineLayout, *carver)           {}
func (plain) keysProjected(*engineWorker, []float32, int)                 {}
func (plain) keyBlock(*engineWorker, int, int, int) float32               { return 0 }
func (plain) keyScales(*engineWorker, int, float32) []float32             { return nil }
func (plain) suffixScales(*engineWorker, int, int) []float32              { return nil }
func (plain) prepared()                                                   {}
func (plain) diagWeights(*engineWorker, int, int)                         {}
func (plain) rowFactors(*engineWorker, int, int) (fs, cs []float32)       { return nil, nil }
func (plain) setReference(int, int, float32)                              {}
func (plain) keyTotal(int, float32)                                       {}
func (plain) suffixState(w *engineWorker, _, _ int) []float32             { return w.run }
func (plain) cumKey(_ *engineWorker, fk []float32, _, _, _ int) []float32 { return fk }
func (plain) cumSuffix(*engineWorker, int, int, int) float32              { return 1 }
func (plain) crossGrad(*engineWorker, int, int, []float32, []float32, []float32, []float32) {
}

func (plain) exactWeights(w *engineWorker, _, _, rows, p int) {
	lowerPow(w.w[:rows*rows], w.s[:rows*rows], w.tmp, rows, p)
}

func (plain) exactBackward(w *engineWorker, dw []float32, rows, p int) {
	lowerPowGrad(dw, w.s, w.tmp, rows, p)
}

func (plain) diagBackward(w *engineWorker, dw []float32, rows, pow int) {
	lowerPowGrad(dw, w.s, w.tmp, rows, pow)
}

func (plain) scan(kind int, st []float32, L *engineLayout, lo, hi int, w *engineWorker, _ int) {
	switch kind {
	case scanSum, scanSumKeys:
		sumStates(L.stateSum(st, lo, hi), L.stateCols(st, lo, hi))
	case scanPrefix:
		prefixScan(L.stateCols(st, lo, hi), w.run)
	case scanSuffix:
		suffixScan(L.stateCols(st, lo, hi), w.run)
	}
}

func (plain) addKeyState(run, state []float32, _, _ int, A float32) float32 {
	vec.Add(run, run, state)
	return A
}

func (plain) addQueryState(run, state []float32, _, _ int) { vec.Add(run, run, state) }

// scaleColsBy returns src ([F × rows]) with column i scaled by c_i, in
// dst, or src itself when c is nil.
func scaleColsBy(dst, src, c []float32, F, rows int) []float32 {
	if c == nil {
		return src
	}
	return scaleCols(dst, src, c, F, rows)
}

// scaleCols writes into dst ([F × rows]) src with column i scaled by c_i.
func scaleCols(dst, src, c []float32, F, rows int) []float32 {
	for f := 0; f < F; f++ {
		vec.Mul(dst[f*rows:(f+1)*rows], src[f*rows:(f+1)*rows], c[:rows])
	}
	return dst[:F*rows]
}
