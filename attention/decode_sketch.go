package attention

import (
	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

func (a *engine) NewDecoder(B, H, h int) (Decoder, error) {
	if !a.opts.Causal {
		return nil, errNotCausal(a.Kind())
	}
	return newSketchDecoder(a, B, H, h), nil
}

// sketchDecoder decodes causal attention of the engine (engine.go), for
// any feature map, with the state of the block algorithm (lt.go), blocks
// being positions [l·b, (l+1)·b) exactly as in Forward. For position i in
// block l,
//
//	o_i = (φ(q_i)ᵀ·Z_l + Σ_{j∈l, j≤i} w_ij v_j) / (c + φ(q_i)·ζ_l + Σ_{j∈l, j≤i} w_ij),
//
// with Z_l = Σ_{j<l·b} φ(k_j)v_jᵀ and ζ_l = Σ_{j<l·b} φ(k_j) over the
// completed blocks, c = 1 for polysketch and 0 for the plain ratio, and
// the local weights w_ij = (q_i·k_j)^p with Local, else the feature
// weights φ(q_i)·φ(k_j), for a self-tensored map (M(q_i)·M(k_j))² (also
// for CumSum, whose weights are feature weights everywhere). The
// projections M and features φ are those of the mechanism (its projection
// and lift), random or learned. The current block's keys (or their
// sketches) and values are kept, and when the block completes its
// features are computed and added to Z and ζ as one product,
// Z += Φ(K)ᵀV: a position reads the F×(h+1) prefix state once and writes
// nothing of its size, computing the projections of one q and one k and
// at most 2b weights. A head folds a completed block (b·F·h multiply-adds,
// a few times one position's cost) at a position of the next block that
// depends on the head (foldAt), weighing the block's keys explicitly with
// φ(q)·φ(k_j) = (M(q)·M(k_j))^p until then, so that the heads of a
// sequence, and sequences stepped together in step, do not all fold on
// one step. For a scaled map (Performer)
// the current block's φ(K)ᵀV and φ(K)ᵀ1 accumulate in a block state
// instead, and both states keep the references of engine_scaled.go, the
// running maxima of the key log-scales, rescaled when they grow; its
// Steps of one position take the path of several.
//
// A Step of several positions cuts each head's chunk into segments, the
// runs of positions within one block, and computes a segment as the
// positions one by one would, with matrix products: the local weights
// against the block's keys so far, and Φ(Q)·Z and Φ(Q)·ζ for the prefix.
type sketchDecoder struct {
	fm        *featureMap
	proj      projection // of the queries
	kproj     projection // of the keys
	ls        logScaled  // proj of a scaled map, whose states keep references:
	ref, bref []float32  // [bh]: of the prefix state and of the current block's
	ks        []float32  // [bh × b]: log-scales of the current block's keys
	bh, h     int
	b, p      int  // block size and degree
	local     bool // exact weights inside the current block
	softmax   bool // exact weights exp(q·k) instead of (q·k)^p (engine_mixed.go)
	mixed     bool // Softmax or Mix: local and cross terms relative to a reference per row
	tune      *tuning
	qs, kt    []float32 // Scale: the Step's q̃ and k̃
	ro, F, kw int       // sketch width, features, floats kept per key in the block
	stateSize int       // F·h + F
	n         int

	prefix []float32 // [bh × stateSize]: Z_l (F×h) then ζ_l (F)
	block  []float32 // scaled maps: [bh × stateSize], the current block's φ(K)ᵀV and φ(K)ᵀ1

	// Other maps fold a completed block into the prefix state a few
	// positions into the next one, at a position that depends on the head
	// (foldAt), so that the folds of a sequence's heads, and of sequences
	// stepped together, do not all land on one step; until then the
	// block's keys are weighed explicitly, φ(q)·φ(k_j) = (M(q)·M(k_j))^p.
	cm      []float32 // Local: [bh × b × ro], M(k) of the current block's keys
	pm      []float32 // [bh × b × ro]: M(k) of the previous block's keys
	pv      []float32 // [bh × b × h]: its values
	pending []bool    // [bh]: the previous block is not in the prefix state yet
	H       int       // heads per sequence
	keys    []float32 // [bh × b × kw]: the current block's k (Local) or M(k)
	vals    []float32 // [bh × b × h]
	wts     []float32 // [bh × b]: local weights of the step

	// The step's sketches and features of all bh heads, transposed as the
	// sketch works: [rows × bh].
	preQ, preK []float32     // [preW × bh]
	mq, mk, tq []float32     // [ro × bh]
	phiQ       []float32     // [F × bh]
	mqr, mkr   []float32     // [bh × ro]: M(q), M(k) row-major
	fq         []float32     // [bh × F]: φ(q) row-major
	sks, sksK  sketchScratch // for q's sketch and k's, which may run at once

	chunk  int            // positions of the Step in progress, when more than one
	chunks []chunkScratch // per worker

	o, q, k, v []float32 // the Step in progress
	stepFn     func(w, i int)
	chunkFn    func(w, i int)
	sideFn     func(w, i int)
}

// chunkScratch is one worker's memory for Steps of several positions: the
// sketches and features of one head's chunk of n positions, transposed as
// the sketch works ([rows × n]), and the local weights of one segment.
type chunkScratch struct {
	n             int       // positions it has room for
	pre           []float32 // [preW × n], for q and then k
	mq, mk, tilde []float32 // [ro × n]
	phiQ, phiK    []float32 // [F × n]
	wts           []float32 // [min(n,b) × b]: a segment's local weights
	den           []float32 // [min(n,b)]: their denominators
	sk, cf        []float32 // scaled maps: [n] log-scales of the chunk's keys, [min(n,b)] cross factors
	sks           sketchScratch

	// Maps without scale: the fold of a completed block (b positions).
	fm, ftilde []float32 // [ro × b]
	fphi       []float32 // [F × b]
}

func newSketchDecoder(a *engine, B, H, h int) *sketchDecoder {
	o := a.opts
	proj := a.projFor(h) // the mechanism's own: drawn (or built) now if no Forward ran yet
	_, ro, preW := proj.dims()
	bh := B * H
	a.tuneFor(H, h)
	d := &sketchDecoder{fm: &a.fm, proj: proj, kproj: a.kproj, bh: bh, h: h, b: o.Block, p: o.Degree, local: o.Local && !o.CumSum,
		softmax: o.Softmax, mixed: o.Softmax || o.Mix, tune: a.tune, ro: ro, F: a.fm.lift.features(ro)}
	if d.tune != nil && d.tune.scale != nil {
		d.qs, d.kt = make([]float32, bh*h), make([]float32, bh*h)
	}
	d.stateSize = d.F*h + d.F
	d.kw = h
	if !d.local {
		d.kw = d.ro
	}
	d.prefix = make([]float32, bh*d.stateSize)
	d.H = H
	if a.fm.scaled {
		d.block = make([]float32, bh*d.stateSize)
		d.ls = a.kproj.(logScaled)
		d.ref, d.bref, d.ks = make([]float32, bh), make([]float32, bh), make([]float32, bh*d.b)
	} else {
		d.pm, d.pv, d.pending = make([]float32, bh*d.b*d.ro), make([]float32, bh*d.b*h), make([]bool, bh)
		if d.local {
			d.cm = make([]float32, bh*d.b*d.ro)
		}
	}
	d.keys, d.vals = make([]float32, bh*d.b*d.kw), make([]float32, bh*d.b*h)
	d.wts = make([]float32, bh*d.b)
	d.preQ, d.preK = make([]float32, preW*bh), make([]float32, preW*bh)
	d.mq, d.mk, d.tq = make([]float32, d.ro*bh), make([]float32, d.ro*bh), make([]float32, d.ro*bh)
	d.phiQ, d.fq = make([]float32, d.F*bh), make([]float32, bh*d.F)
	d.mqr, d.mkr = make([]float32, bh*d.ro), make([]float32, bh*d.ro)
	d.sks, d.sksK = newScratch(proj, bh), newScratch(proj, bh)
	// Write the states once now: fresh memory faults its pages in at the
	// first write, which would otherwise land on the step of the first
	// fold, one spike per new sequence.
	for _, x := range [][]float32{d.prefix, d.keys, d.vals, d.cm, d.pm, d.pv} {
		clear(x)
	}
	d.Reset()
	d.stepFn, d.chunkFn, d.sideFn = d.stepHead, d.chunkHead, d.side
	return d
}

func (d *sketchDecoder) Len() int { return d.n }

func (d *sketchDecoder) Reset() {
	d.n = 0
	clear(d.prefix)
	clear(d.block)
	clear(d.pending)
	for i := range d.ref {
		d.ref[i], d.bref[i] = negInf, negInf
	}
}

func (d *sketchDecoder) Step(o, q, k, v *tensor.Tensor) {
	n := checkStep("Decoder.Step", d.bh, d.h, o, q, k, v)
	d.o, d.q, d.k, d.v = o.Data, q.Data, k.Data, v.Data
	if d.qs != nil {
		d.scaleInputs(n)
	}
	if n == 1 && d.ls == nil {
		d.step()
	} else {
		workers := stepWorkers(d.bh, d.bh*n*2*d.stateSize)
		d.scratch(workers)
		for w := range workers {
			d.chunks[w].size(d, n)
		}
		d.chunk = n
		parallel.Run(d.bh, workers, d.chunkFn)
	}
	d.o, d.q, d.k, d.v = nil, nil, nil, nil
	d.n += n
}

// scaleInputs points d.q and d.k at q̃ and k̃ of the Step's n positions
// (Scale).
func (d *sketchDecoder) scaleInputs(n int) {
	size := n * d.h
	if len(d.qs) < d.bh*size {
		d.qs, d.kt = make([]float32, d.bh*size), make([]float32, d.bh*size)
	}
	for i := range d.bh {
		f := d.tune.factor(i)
		qs, ks := d.qs[i*size:(i+1)*size], d.kt[i*size:(i+1)*size]
		copy(qs, d.q[i*size:(i+1)*size])
		copy(ks, d.k[i*size:(i+1)*size])
		vec.Scale(f, qs)
		vec.Scale(f, ks)
	}
	d.q, d.k = d.qs[:d.bh*size], d.kt[:d.bh*size]
}

// weigh turns the scores x of one query against the current block's keys
// of head i into their weights, relative to the query's reference (see
// engine_mixed.go; first says the query is in the first block, which has
// no cross terms), and returns the factor of its cross terms relative to
// the same reference: 1 for plain polynomial weights.
func (d *sketchDecoder) weigh(x []float32, i, p int, first bool) float32 {
	if !d.softmax {
		for j, s := range x {
			x[j] = ipow(s, p)
		}
		if !d.mixed {
			return 1
		}
		return expf(d.tune.beta(i))
	}
	beta := d.tune.beta(i)
	r := vec.Max(x)
	R := r
	if !first {
		R = max(r, beta)
	}
	vec.ExpScale(x, x, r, 1)
	if f := expf(r - R); f != 1 {
		vec.Scale(f, x)
	}
	return expf(beta - R)
}

// step advances every head by the one position of d.q, d.k, d.v.
func (d *sketchDecoder) step() {
	bh := d.bh
	// Sketches of every head's q and k, one product each, q's and k's on
	// two goroutines where there are (a learned sketch's networks are
	// most of a step of one sequence's attention).
	parallel.Run(2, min(parallel.Threads(), 2), d.sideFn)
	workers := stepWorkers(bh, bh*d.stateSize)
	d.scratch(workers)
	parallel.Run(bh, workers, d.stepFn)
}

// side computes the step's sketches of every head's q (i = 0), with the
// queries' features, or of its k (i = 1); the keys' features wait for the
// fold of their block.
func (d *sketchDecoder) side(_, i int) {
	bh, h, ro, F := d.bh, d.h, d.ro, d.F
	if i == 0 {
		d.proj.apply(blas.NewGeneral(bh, h, d.q), d.preQ, d.mq, &d.sks)
		blas.Copy(blas.Trans, blas.NewGeneral(F, bh, d.fm.lift.apply(d.phiQ, d.mq, d.tq, ro, bh)), blas.NewGeneral(bh, F, d.fq))
		blas.Copy(blas.Trans, blas.NewGeneral(ro, bh, d.mq), blas.NewGeneral(bh, ro, d.mqr))
		return
	}
	d.kproj.apply(blas.NewGeneral(bh, h, d.k), d.preK, d.mk, &d.sksK)
	blas.Copy(blas.Trans, blas.NewGeneral(ro, bh, d.mk), blas.NewGeneral(bh, ro, d.mkr))
}

// scratch makes sure the first workers of d.chunks exist, with room for
// the fold of a block.
func (d *sketchDecoder) scratch(workers int) {
	for len(d.chunks) < workers {
		d.chunks = append(d.chunks, chunkScratch{})
	}
	for w := range workers {
		d.chunks[w].sizeFold(d)
	}
}

// stepHead advances head i by one position.
func (d *sketchDecoder) stepHead(w, i int) {
	h, F, kw, b := d.h, d.F, d.kw, d.b
	pos := d.n % b // index within the current block
	prefix := d.prefix[i*d.stateSize : (i+1)*d.stateSize]
	c := &d.chunks[w]
	if pos == 0 && d.n > 0 { // the previous block is complete
		if d.pending[i] {
			d.fold(c, i)
		}
		d.retire(i)
	}
	if d.pending[i] && pos == d.foldAt(i) {
		d.fold(c, i)
	}

	// Keep this position's key (or its sketch) and value in the block.
	keys := d.keys[i*b*kw : (i*b+pos+1)*kw]
	vals := d.vals[i*b*h : (i*b+pos+1)*h]
	var q []float32
	if d.local {
		q = d.q[i*h : (i+1)*h]
		copy(keys[pos*kw:], d.k[i*h:(i+1)*h])
		copy(d.cm[(i*b+pos)*d.ro:(i*b+pos+1)*d.ro], d.mkr[i*d.ro:(i+1)*d.ro])
	} else {
		q = d.mqr[i*kw : (i+1)*kw]
		copy(keys[pos*kw:], d.mkr[i*kw:(i+1)*kw])
	}
	v := d.v[i*h : (i+1)*h]
	copy(vals[pos*h:], v)

	// Local weights inside the block, exact or sketched.
	wts := d.wts[i*b : i*b+pos+1]
	for j := range wts {
		wts[j] = vec.Dot(q, keys[j*kw:(j+1)*kw])
	}
	fc := d.weigh(wts, i, d.localDegree(), d.n < b) // the cross terms' factor
	den := d.fm.one + vec.Sum(wts)
	o := d.o[i*h : (i+1)*h]
	clear(o)
	for j, wj := range wts {
		vec.Axpy(wj, vals[j*h:(j+1)*h], o)
	}

	// The previous block, until it is folded: its feature weights.
	if d.pending[i] {
		mq := d.mqr[i*d.ro : (i+1)*d.ro]
		pm, pv := d.pm[i*b*d.ro:(i+1)*b*d.ro], d.pv[i*b*h:(i+1)*b*h]
		dp := d.fm.lift.diagPow()
		for j := range b {
			x := fc * ipow(vec.Dot(mq, pm[j*d.ro:(j+1)*d.ro]), dp)
			vec.Axpy(x, pv[j*h:(j+1)*h], o)
			den += x
		}
	}

	// Completed blocks, through the prefix state.
	fq := d.fq[i*F : (i+1)*F]
	if d.n >= b {
		// One row times F×h: the stream kernel keeps o in registers.
		blas.SgemmSerial(blas.NoTrans, blas.NoTrans, fc, blas.NewGeneral(1, F, fq), blas.NewGeneral(F, h, prefix), 1, blas.NewGeneral(1, h, o))
		den += fc * vec.Dot(fq, prefix[F*h:])
	}
	if d.fm.one == 0 {
		den = max(den, denFloor)
	}
	vec.Scale(1/den, o)
}

// retire keeps the completed block of head i, whose keys (or their
// sketches) and values are in d.keys and d.vals, as the previous block:
// the sketches of its keys in d.pm and its values in d.pv, pending its
// fold.
func (d *sketchDecoder) retire(i int) {
	h, b, ro := d.h, d.b, d.ro
	pm := d.pm[i*b*ro : (i+1)*b*ro]
	if d.local {
		copy(pm, d.cm[i*b*ro:(i+1)*b*ro])
	} else {
		copy(pm, d.keys[i*b*ro:(i+1)*b*ro])
	}
	vals := d.vals[i*b*h : (i+1)*b*h]
	copy(d.pv[i*b*h:(i+1)*b*h], vals)
	d.pending[i] = true
}

// foldAt is the position inside a block at which head i folds the
// previous block: the heads of a sequence spread over the block.
func (d *sketchDecoder) foldAt(i int) int {
	return (i % d.H) * max(1, d.b/d.H) % d.b
}

// fold adds the previous block of head i (d.pm, d.pv) to its prefix
// state: Z += Φ(K)ᵀV and ζ += Φ(K)ᵀ1, with the features of the block's
// keys computed here, in c's fold scratch. Once per block as matrix
// products, rather than a rank-one update of a block state per position,
// so that a position reads the prefix state and writes nothing of its
// size, and computes no key features (maps without scale).
func (d *sketchDecoder) fold(c *chunkScratch, i int) {
	h, F, b, ro := d.h, d.F, d.b, d.ro
	prefix := d.prefix[i*d.stateSize : (i+1)*d.stateSize]
	blas.Copy(blas.Trans, blas.NewGeneral(b, ro, d.pm[i*b*ro:(i+1)*b*ro]), blas.NewGeneral(ro, b, c.fm))
	phiK := d.fm.lift.apply(c.fphi, c.fm, c.ftilde, ro, b)
	blas.SgemmSerial(blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(F, b, phiK), blas.NewGeneral(b, h, d.pv[i*b*h:(i+1)*b*h]), 1, blas.NewGeneral(F, h, prefix))
	zeta := prefix[F*h:]
	for f := range zeta {
		zeta[f] += vec.Sum(phiK[f*b : (f+1)*b])
	}
	d.pending[i] = false
}

// localDegree is the power of the dot products inside the current block:
// p of the exact weights, or that of the feature weights (fm.diagPow).
func (d *sketchDecoder) localDegree() int {
	if d.local {
		return d.p
	}
	return d.fm.lift.diagPow()
}

// size makes sure c has room for chunks of n positions of d.
func (c *chunkScratch) size(d *sketchDecoder, n int) {
	if c.n >= n {
		return
	}
	seg := min(n, d.b)
	c.n = n
	_, _, preW := d.proj.dims()
	c.pre = make([]float32, preW*n)
	c.mq, c.mk, c.tilde = make([]float32, d.ro*n), make([]float32, d.ro*n), make([]float32, d.ro*n)
	c.phiQ, c.phiK = make([]float32, d.F*n), make([]float32, d.F*n)
	c.wts, c.den = make([]float32, seg*d.b), make([]float32, seg)
	c.cf = make([]float32, seg)
	if d.ls != nil {
		c.sk = make([]float32, n)
	}
	c.sks = newScratch(d.proj, n)
}

// sizeFold makes sure c has room for the fold of a block of d.
func (c *chunkScratch) sizeFold(d *sketchDecoder) {
	if d.ls != nil || c.fphi != nil {
		return
	}
	c.fm, c.ftilde = make([]float32, d.ro*d.b), make([]float32, d.ro*d.b)
	c.fphi = make([]float32, d.F*d.b)
}

// chunkHead advances head i by the d.chunk positions of the Step, worker
// w's scratch holding the head's sketches and features.
func (d *sketchDecoder) chunkHead(w, i int) {
	h, F, kw, b, n := d.h, d.F, d.kw, d.b, d.chunk
	c := &d.chunks[w]
	q, k := d.q[i*n*h:(i+1)*n*h], d.k[i*n*h:(i+1)*n*h]
	v, o := d.v[i*n*h:(i+1)*n*h], d.o[i*n*h:(i+1)*n*h]
	d.proj.apply(blas.NewGeneral(n, h, q), c.pre, c.mq, &c.sks)
	phiQ := d.fm.lift.apply(c.phiQ, c.mq, c.tilde, d.ro, n)
	d.kproj.apply(blas.NewGeneral(n, h, k), c.pre, c.mk, &c.sks)
	var phiK, sk []float32
	if d.ls != nil { // the keys' features now; other maps' wait for the fold
		phiK = d.fm.lift.apply(c.phiK, c.mk, c.tilde, d.ro, n)
		sk = c.sk[:n]
		copy(sk, d.ls.logScale(c.pre, n))
	}

	prefix := d.prefix[i*d.stateSize : (i+1)*d.stateSize]
	var block []float32
	if sk != nil {
		block = d.block[i*d.stateSize : (i+1)*d.stateSize]
	}
	keys, vals := d.keys[i*b*kw:(i+1)*b*kw], d.vals[i*b*h:(i+1)*b*h]
	p := d.localDegree()
	if sk == nil && d.pending[i] { // a chunk folds at once
		d.fold(c, i)
	}
	for t0 := 0; t0 < n; {
		at := d.n + t0 // position of the segment's first row
		pos := at % b  // its index within the block
		s := min(n-t0, b-pos)
		if pos == 0 && at > 0 { // the previous block is complete
			if sk != nil {
				d.ref[i] = addScaled(prefix, block, d.ref[i], d.bref[i])
				d.bref[i] = negInf
				clear(block)
			} else {
				d.retire(i)
				d.fold(c, i)
			}
		}
		if sk != nil {
			copy(d.ks[i*b+pos:], sk[t0:t0+s])
		}

		// Keep the segment's keys (or their sketches) and values.
		if d.local {
			copy(keys[pos*kw:], k[t0*h:(t0+s)*h])
		}
		if sk == nil || !d.local { // the sketches, for the local weights or the fold
			sketches := keys
			if d.local {
				sketches = d.cm[i*b*d.ro : (i+1)*b*d.ro]
			}
			for t := range s {
				row := sketches[(pos+t)*d.ro : (pos+t+1)*d.ro]
				for j := range row {
					row[j] = c.mk[j*n+t0+t]
				}
			}
		}
		copy(vals[pos*h:], v[t0*h:(t0+s)*h])

		// Local weights: the segment's queries against the block's keys
		// so far, [s × m], row t seeing keys 0…pos+t.
		m := pos + s
		wts, den := c.wts[:s*m], c.den[:s]
		if d.local {
			blas.SgemmSerial(blas.NoTrans, blas.Trans, 1, blas.General{Rows: s, Cols: kw, Stride: h, Data: q[t0*h:]}, blas.NewGeneral(m, kw, keys), 0, blas.NewGeneral(s, m, wts))
		} else {
			blas.SgemmSerial(blas.Trans, blas.Trans, 1, blas.General{Rows: kw, Cols: s, Stride: n, Data: c.mq[t0:]}, blas.NewGeneral(m, kw, keys), 0, blas.NewGeneral(s, m, wts))
		}
		for t := range s {
			row := wts[t*m : (t+1)*m]
			live := row[:pos+t+1]
			if sk == nil {
				c.cf[t] = d.weigh(live, i, p, at < b)
			} else { // as the engine: relative to r_t, then to R_t
				for j, x := range live {
					live[j] = ipow(x, p)
				}
				kl := d.ks[i*b : i*b+pos+t+1]
				r := negInf
				for _, x := range kl {
					r = max(r, x)
				}
				for j, x := range kl {
					live[j] *= expf(x - r)
				}
				R := max(d.ref[i], r)
				if f := expf(r - R); f != 1 {
					vec.Scale(f, live)
				}
				c.cf[t] = expf(d.ref[i] - R)
			}
			den[t] = d.fm.one + vec.Sum(live)
			clear(row[pos+t+1:])
		}
		out := o[t0*h : (t0+s)*h]
		blas.SgemmSerial(blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(s, m, wts), blas.NewGeneral(m, h, vals), 0, blas.NewGeneral(s, h, out))

		// Completed blocks, through the prefix state: Φ(Q)·Z and Φ(Q)·ζ.
		if at >= b {
			if sk != nil || d.mixed { // ψ = c·φ̃(q)
				for f := 0; f < F; f++ {
					vec.Mul(phiQ[f*n+t0:f*n+t0+s], phiQ[f*n+t0:f*n+t0+s], c.cf[:s])
				}
			}
			blas.SgemmSerial(blas.Trans, blas.NoTrans, 1, blas.General{Rows: F, Cols: s, Stride: n, Data: phiQ[t0:]}, blas.NewGeneral(F, h, prefix), 1, blas.NewGeneral(s, h, out))
			for f, z := range prefix[F*h:] {
				vec.Axpy(z, phiQ[f*n+t0:f*n+t0+s], den)
			}
		}
		if d.fm.one == 0 {
			floorDenominators(den)
		}
		for t := range s {
			vec.Scale(1/den[t], out[t*h:(t+1)*h])
		}

		// A scaled map adds Φ(K)ᵀV and Φ(K)ᵀ1 to the block's state,
		// relative to the block's maximum so far; the others fold the block
		// at its end.
		if sk == nil {
			t0 += s
			continue
		}
		mx := max(d.bref[i], vec.Max(sk[t0:t0+s]))
		vec.Scale(expf(d.bref[i]-mx), block)
		d.bref[i] = mx
		ks := c.cf[:s]
		for t := range ks {
			ks[t] = expf(sk[t0+t] - mx)
		}
		for f := 0; f < F; f++ {
			vec.Mul(phiK[f*n+t0:f*n+t0+s], phiK[f*n+t0:f*n+t0+s], ks)
		}
		blas.SgemmSerial(blas.NoTrans, blas.NoTrans, 1, blas.General{Rows: F, Cols: s, Stride: n, Data: phiK[t0:]}, blas.NewGeneral(s, h, v[t0*h:]), 1, blas.NewGeneral(F, h, block))
		zeta := block[F*h:]
		for f := range zeta {
			zeta[f] += vec.Sum(phiK[f*n+t0 : f*n+t0+s])
		}
		t0 += s
	}
}
