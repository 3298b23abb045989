package attention

import (
	"fmt"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/internal/hugepage"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// engine is the block lower-triangular engine of every linear mechanism:
// attention with weights w_ij = φ(q_i)·φ(k_j) ≥ 0 for a feature map φ
// (featuremap.go: a projection, then a lift). Causal outputs are
//
//	o_i = Σ_{j≤i} w_ij v_j / (c + Σ_{j≤i} w_ij),
//
// c = 1 for polysketch and 0 (the plain ratio) for the others, computed
// by the block algorithm (see lt.go) with blocks of b = Block rows: for
// keys in earlier blocks w_ij = φ(q_i)·φ(k_j) through the prefix
// states Z_l = Σ_{j<l} φ(K_j)ᵀV_j and ζ_l = Σ_{j<l} φ(K_j)ᵀ1; inside the
// diagonal block the weights are exact, (q_i·k_j)^p, with Local
// (polysketch), or the same feature weights, computed for a self-tensored
// map as lt((L·Rᵀ)²) from the r-dimensional projections without forming
// features, else as lt(Φ(Q_l)·Φ(K_l)ᵀ). Denominators use the separate
// vector states ζ_l, not a column of ones appended to V.
// Non-causal attention is φ(Q)·(φ(K)ᵀV) / (c + φ(Q)·φ(K)ᵀ1) over all
// positions; Local and the diagonal blocks apply to causal attention only.
// With CumSum the causal sums run token by token instead (Performer's
// prefix sums: the slow baseline, feature weights everywhere, Local and
// Remat ignored; see cumsum.go).
//
// Polysketch (polysketch.go) runs it with M its random sketch and
// features the r(r+1)/2 symmetric entries of M^⊗2 (M_c² and √2·M_c·M_d
// for c < d), 528 for r = 32: the same dot products as the r² entries of
// M^⊗2 at half the work. All heavy work is GEMMs on one block at a time
// (features are kept transposed, [F × rows], so that the elementwise
// work runs along rows), in parallel over batch×heads×blocks; only the
// prefix scan of the per-block states is sequential over blocks, and it
// splits over state elements instead. Results do not depend on GOMAXPROCS.
//
// What Backward needs: without Remat, Forward keeps the per-block prefix
// states (F·(h+1) floats per block), the projections of q and k (pre),
// and the denominators; Backward then runs the same three phases
// backwards (suffix sums of φ(Q_l)ᵀ·dO_l/D_l) and recomputes only the
// cheap parts (features from the kept projections, the diagonal blocks).
// With Remat ("checkpoint attention") Forward keeps nothing; each head
// streams over its blocks with one running state, in parallel over
// batch×heads only, and Backward recomputes everything in two sweeps
// (forward for the prefix states, backward for the suffix states),
// keeping only the denominators and one gradient term per token between
// them. Both compute every value with the same operations in the same
// order, so their gradients are bitwise identical.
//
// The engine keeps the loops, the block schedule, the local blocks and the
// parallelism; what differs between feature maps are three strategies,
// chosen once:
//
//   - the lift (featuremap.go): tensored, symmetric self-tensoring done
//     by the engine, or entrywise, a lift the projection applied itself;
//   - the projector (projector.go): perBlock applies the map's projections
//     (the keys' may differ from the queries', as sqpolysketch's) to each
//     block as the phases reach it, summing a trainedProjection's parameter
//     gradient per block, then in block order; with Learned (polysketch,
//     degree ≥ 4) netPass (sketch_learned.go) runs the networks of
//     Algorithm 2 on all rows of q and k before the phases and keeps M(Q),
//     M(K) (also with Remat), which the phases read, leaving dM; Backward
//     ends by running the networks backward, into dq, dk and the parameter
//     gradients;
//   - the stabilizer (stabilizer.go): plain, logScales for maps whose
//     key features carry per-key log-scales, kept relative to running
//     maxima (Performer; engine_scaled.go), or mixed for softmax local
//     blocks and a learned mix, which keeps the local and the sketched
//     terms relative to one reference per row (engine_mixed.go, with the
//     per-head temperature of Scale).
type engine struct {
	kind  Kind
	opts  kernelOptions
	fm    featureMap
	proj  projection   // fm's projection for the head size, built from opts.Seed on first use
	kproj projection   // the keys' projection: proj, or fm.projectKeys's
	sk    *sketch      // proj when it is a sketch (polysketch), else nil
	src   projector    // of proj and kproj (nil before the first)
	stab  stabilizer   // fm's: plain, logScales when fm.scaled, or mixed with Softmax or Mix
	tune  *tuning      // per-head parameters of Scale and Mix (engine_mixed.go); nil without
	bf16  blockProduct // the kinds of block products that run in bf16 (SetPrecision)

	L engineLayout // sizes for the last Forward's shape

	// Inputs and outputs of the call in progress, and the output gradient.
	q, k, v, o     []float32
	dq, dk, dv, do []float32
	ready          bool // a Forward ran, so Backward may
	statesValid    bool // states hold Forward's prefix states (non-Remat)

	// Buffers, carved from mem (see carve).
	mem        []float32
	states     []float32 // [bh × slots × stateSize]: per block H_l/Z_l/G_l/U_l, each F×h then F
	preQ, preK []float32 // [bh × n × preW]: sketch projections, block l at row l·b as [preW × rows]
	den        []float32 // [bh × n]: denominators
	gd         []float32 // [bh × n]: gradient of the denominators (Remat and CumSum)
	dmk        []float32 // [bh × n × ro]: gradient of M(K) from sketched diagonal blocks

	pool    workPool
	cv      carver       // of carve
	counted engineWorker // the workers of a carve that only counts
	// Steps of the phases, bound once so that running them allocates nothing.
	stepPrepare, stepFinish, stepBwdQueries, stepBwdKeys func(w *engineWorker, i int)
	stepScan, stepStreamFwd, stepStreamBwd               func(w *engineWorker, i int)
	stepCumFwd, stepCumBwd                               func(w *engineWorker, i int)
	stepScale, stepUnscale                               func(w *engineWorker, i int)
	scanKind                                             int // scanSum, scanPrefix or scanSuffix
}

// engineLayout is the shape of one problem and everything sized from it.
type engineLayout struct {
	bh, n, h  int
	plan      blocks
	t, bs     int // blocks per head, rows of the largest block
	slots     int // states per head: t, or t+1 when non-causal (the total)
	ro, F     int // columns of M, features per token
	stateSize int // F·h + F
	preW      int // rows of sketch projections per token
	workers   int
	causal    bool
	sketched  bool // causal diagonal blocks use sketched weights
	mode      engineMode
	// A learned sketch runs on chunks of rows of q, then of k; see
	// netPass.
	chunk  int // rows per chunk
	chunks int // chunks of q (and of k)
	groups int // partial sums of the parameter gradients
}

type engineMode int

const (
	modeBlocks engineMode = iota // phases over all blocks; keeps states for Backward
	modeStream                   // Remat: each head streams over its blocks
	modeCumSum                   // per-token prefix sums
)

// newEngine returns the engine of mechanism kind with feature map fm.
func newEngine(kind Kind, o kernelOptions, fm featureMap) *engine {
	if fm.lift == nil {
		fm.lift = entrywise{}
	}
	a := &engine{kind: kind, opts: o, fm: fm, stab: plain{}}
	switch {
	case fm.scaled:
		a.stab = &logScales{e: a}
	case o.Softmax || o.Mix:
		a.stab = &mixed{e: a, softmax: o.Softmax}
	}
	a.pool.init()
	a.stepPrepare = a.prepareItem
	a.stepFinish = a.finishItem
	a.stepBwdQueries = a.bwdQueriesItem
	a.stepBwdKeys = a.bwdKeysItem
	a.stepScan = a.scanItem
	a.stepStreamFwd = a.streamForward
	a.stepStreamBwd = a.streamBackward
	a.stepCumFwd = a.cumsumForward
	a.stepCumBwd = a.cumsumBackward
	a.stepScale, a.stepUnscale = a.scaleItem, a.unscaleItem
	return a
}

func (a *engine) Kind() Kind { return a.kind }

// projFor returns the projection for heads of size h, building it on
// first use; a learned sketch keeps its head size.
func (a *engine) projFor(h int) projection {
	if a.proj != nil {
		if in, _, _ := a.proj.dims(); in == h {
			return a.proj
		}
		if a.sk != nil && a.sk.net != nil {
			panic(fmt.Sprintf("attention.%s: learned sketch built for head size %d, given %d", a.kind, a.sk.in, h))
		}
	}
	a.proj, a.kproj = a.fm.project(h, a.opts.Seed), nil
	if a.fm.projectKeys != nil {
		a.kproj = a.fm.projectKeys(h, a.opts.Seed)
	}
	if a.kproj == nil {
		a.kproj = a.proj
	}
	a.sk, _ = a.proj.(*sketch)
	a.src = a.projectorFor(a.proj, a.kproj)
	a.stab.bind(a)
	if a.opts.Heads > 0 {
		a.tuneFor(a.opts.Heads, h)
	}
	return a.proj
}

// SketchMatrices returns every random matrix of the feature map by name
// (see each mechanism's documentation), so that another implementation
// can reproduce the outputs exactly. Nil before the head size is known
// (Setup.HeadSize or the first Forward), and nil for maps without random
// matrices.
func (a *engine) SketchMatrices() map[string]*tensor.Tensor {
	if a.proj == nil {
		return nil
	}
	return a.proj.matrices()
}

// setHeadSize fixes the head size, building the feature map's projection
// (and a learned sketch's parameters) deterministically from the seed.
func (a *engine) setHeadSize(h int) {
	if h <= 0 {
		panic(fmt.Sprintf("attention.%s: head size %d: must be positive", a.kind, h))
	}
	a.projFor(h)
}

// layout computes the sizes for inputs [B,H,N,h] with the given number of
// workers, projection p and its projector src, into L.
func (a *engine) layout(L *engineLayout, B, H, N, h, workers int, p projection, src projector) {
	o := a.opts
	*L = engineLayout{bh: B * H, n: N, h: h, plan: blocks{N, o.Block}, causal: o.Causal}
	L.t = L.plan.count()
	L.bs = min(o.Block, N)
	_, L.ro, L.preW = p.dims()
	L.F = a.fm.lift.features(L.ro)
	L.stateSize = L.F*h + L.F
	L.slots = L.t
	if !o.Causal {
		L.slots++
	}
	L.sketched = o.Causal && !o.Local
	switch {
	case o.CumSum && o.Causal:
		L.mode = modeCumSum
		L.sketched = false
	case o.Remat:
		L.mode = modeStream
	}
	items := L.bh
	if L.mode == modeBlocks {
		items = L.bh * L.t
	}
	items = src.layout(L, items)
	L.workers = max(1, min(workers, items))
}

// carve lays the buffers of layout L out in mem, or with mem nil only
// counts them; it returns the number of floats.
func (a *engine) carve(L *engineLayout, p projection, src projector, mem []float32) int {
	c := &a.cv // the engine's, so that the strategies' carving allocates nothing
	*c = carver{mem: mem}
	take := c.take
	n := L.bh * L.n
	var states, preQ, preK, gd, dmk []float32
	if L.mode == modeBlocks {
		states = take(L.bh * L.slots * L.stateSize)
		preQ = take(n * L.preW)
		preK = take(n * L.preW)
	}
	den := take(n)
	if L.mode != modeBlocks && L.causal {
		gd = take(n)
	}
	if L.sketched {
		dmk = take(n * L.ro)
	}
	src.carve(L, c)
	a.stab.carve(L, c)
	a.tune.carve(L, c)
	if mem != nil {
		a.states, a.preQ, a.preK, a.den, a.gd, a.dmk = states, preQ, preK, den, gd, dmk
	}
	for wi := 0; wi < L.workers; wi++ {
		w := &a.counted
		if mem != nil {
			w = a.pool.workers[wi]
		}
		w.carve(L, p, src.scratchRows(L), &a.fm, a.stab, c)
	}
	return c.off
}

// carver hands out consecutive buffers of mem, or with mem nil only
// counts them.
type carver struct {
	mem []float32
	off int
}

// take returns the next n floats (nil when counting).
func (c *carver) take(n int) []float32 {
	c.off += n
	if c.mem == nil {
		return nil
	}
	return c.mem[c.off-n : c.off : c.off]
}

// keep reports whether the buffers are real ones, not a count.
func (c *carver) keep() bool { return c.mem != nil }

// setup sizes everything for q's shape, drawing the sketch on first use.
func (a *engine) setup(q *tensor.Tensor) {
	B, H, N, h := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	p := a.projFor(h)
	a.tuneFor(H, h)
	a.layout(&a.L, B, H, N, h, parallel.Threads(), p, a.src)
	for len(a.pool.workers) < a.L.workers {
		a.pool.workers = append(a.pool.workers, new(engineWorker))
	}
	size := a.carve(&a.L, a.proj, a.src, nil)
	if cap(a.mem) < size {
		a.mem = hugepage.Make[float32](size) // exactly what Workspace reports
	}
	a.carve(&a.L, a.proj, a.src, a.mem)
	a.pool.active = a.L.workers
}

// Workspace returns the bytes of the buffers Forward and Backward use for
// inputs [B,H,N,h] at the current GOMAXPROCS: exactly what setup carves,
// plus the projection's own memory (sketch matrices, or a learned
// sketch's parameters, their gradients and the transposed weights of its
// networks).
func (a *engine) Workspace(B, H, N, h int) int64 {
	p, kp, src := a.proj, a.kproj, a.src
	if in := 0; p != nil {
		in, _, _ = p.dims()
		if in != h {
			p = nil
		}
	}
	if p == nil {
		p, kp = a.fm.project(h, a.opts.Seed), nil
		if a.fm.projectKeys != nil {
			kp = a.fm.projectKeys(h, a.opts.Seed)
		}
		src = a.projectorFor(p, kp)
	}
	floats := p.floats()
	if kp != nil && kp != p {
		floats += kp.floats()
	}
	if a.tune == nil { // the per-head parameters and gradients made at the first Forward
		for _, on := range []bool{a.opts.Scale, a.opts.Mix} {
			if on {
				floats += 2 * H
			}
		}
	}
	var L engineLayout
	a.layout(&L, B, H, N, h, parallel.Threads(), p, src)
	return int64(a.carve(&L, p, src, nil)+floats) * 4
}

// Forward computes o = PolySketch attention of q, k, v.
func (a *engine) Forward(o, q, k, v *tensor.Tensor) {
	mustMatch("Polysketch.Forward", q, k, v, o)
	a.setup(q)
	a.q, a.k, a.v, a.o = q.Data, k.Data, v.Data, o.Data
	if a.tune != nil && a.tune.scale != nil {
		a.pool.run(a.L.bh, a.stepScale)
		a.q, a.k = a.tune.qs, a.tune.ks
	}
	a.ready, a.statesValid = true, false
	a.src.forward()
	switch a.L.mode {
	case modeCumSum:
		a.pool.run(a.L.bh, a.stepCumFwd)
	case modeStream:
		a.pool.run(a.L.bh, a.stepStreamFwd)
	default:
		a.forwardBlocks()
		a.statesValid = true
	}
	a.o = nil
}

// forwardBlocks runs the three phases over all blocks; with a.o nil it
// only rebuilds what Backward needs.
func (a *engine) forwardBlocks() {
	L := &a.L
	a.pool.run(L.bh*L.t, a.stepPrepare)
	a.stab.prepared()
	if L.causal {
		a.scan(scanPrefix)
	} else {
		a.scan(scanSumKeys)
	}
	a.pool.run(L.bh*L.t, a.stepFinish)
}

// Backward computes dq, dk, dv of the last Forward from do.
func (a *engine) Backward(dq, dk, dv, do *tensor.Tensor) {
	if !a.ready {
		panic("attention.Polysketch.Backward: no Forward before")
	}
	mustMatch("Polysketch.Backward", dq, dk, dv, do)
	if dq.Shape[0]*dq.Shape[1] != a.L.bh || dq.Shape[2] != a.L.n || dq.Shape[3] != a.L.h {
		panic(fmt.Sprintf("attention.Polysketch.Backward: gradients %v for a Forward of [%d,%d,%d]", dq.Shape, a.L.bh, a.L.n, a.L.h))
	}
	a.dq, a.dk, a.dv, a.do = dq.Data, dk.Data, dv.Data, do.Data
	L := &a.L
	if a.tune != nil && a.tune.mix != nil {
		clear(a.tune.mslots)
	}
	switch L.mode {
	case modeCumSum:
		a.pool.run(L.bh, a.stepCumBwd)
	case modeStream:
		a.pool.run(L.bh, a.stepStreamBwd)
	default:
		if !a.statesValid { // a second Backward: the first consumed the states
			a.forwardBlocks()
		}
		a.statesValid = false
		a.pool.run(L.bh*L.t, a.stepBwdQueries)
		if L.causal {
			a.scan(scanSuffix)
		} else {
			a.scan(scanSum)
		}
		a.pool.run(L.bh*L.t, a.stepBwdKeys)
	}
	a.src.backwardEnd()
	a.tuneBackward()
	a.dq, a.dk, a.dv, a.do = nil, nil, nil, nil
}

// Scans over the per-block states of each head.
const (
	scanSum     = iota // sum states 0..t-1 into state t (non-causal)
	scanSumKeys        // the same for key states (relative to their blocks' maxima when scaled)
	scanPrefix         // exclusive prefix sums (prefixScan)
	scanSuffix         // exclusive suffix sums (suffixScan)
)

// scan runs a scan of the given kind over each head's states, in parallel
// over heads and chunks of state elements.
func (a *engine) scan(kind int) {
	a.scanKind = kind
	chunks := (a.L.stateSize + scanChunk - 1) / scanChunk
	a.pool.run(a.L.bh*chunks, a.stepScan)
}

func (a *engine) scanItem(w *engineWorker, i int) {
	L := &a.L
	chunks := (L.stateSize + scanChunk - 1) / scanChunk
	hd, ch := i/chunks, i%chunks
	lo, hi := ch*scanChunk, min((ch+1)*scanChunk, L.stateSize)
	st := a.states[hd*L.slots*L.stateSize : (hd+1)*L.slots*L.stateSize]
	a.stab.scan(a.scanKind, st, L, lo, hi, w, hd)
}

// Per-item steps of the block phases. Item i is block i%t of head i/t.

func (a *engine) slot(hd, l int) []float32 {
	L := &a.L
	at := (hd*L.slots + l) * L.stateSize
	return a.states[at : at+L.stateSize]
}

// pre returns the kept sketch projections of block l of head hd.
func (a *engine) pre(p []float32, hd, l int) []float32 {
	L := &a.L
	lo, rows := L.plan.span(l)
	at := (hd*L.n + lo) * L.preW
	return p[at : at+rows*L.preW]
}

func (a *engine) prepareItem(w *engineWorker, i int) {
	L := &a.L
	hd, l := i/L.t, i%L.t
	var state []float32
	if !L.causal || l < L.t-1 { // the last block's state is never used
		state = a.slot(hd, l)
	}
	if state != nil || L.sketched {
		a.keysPrep(w, hd, l, a.pre(a.preK, hd, l), state)
	}
	a.queriesPrep(w, hd, l, a.pre(a.preQ, hd, l), a.o)
}

func (a *engine) finishItem(w *engineWorker, i int) {
	L := &a.L
	hd, l := i/L.t, i%L.t
	var z []float32
	switch {
	case !L.causal:
		z = a.slot(hd, L.t)
	case l > 0:
		z = a.slot(hd, l)
	}
	a.finish(w, hd, l, a.pre(a.preQ, hd, l), z, a.o)
}

func (a *engine) bwdQueriesItem(w *engineWorker, i int) {
	L := &a.L
	hd, l := i/L.t, i%L.t
	var z, g []float32
	switch {
	case !L.causal:
		z, g = a.slot(hd, L.t), a.slot(hd, l)
	case l > 0:
		z = a.slot(hd, l)
		g = z // G_l replaces Z_l once Z_l is used
	}
	if L.sketched {
		a.skOutput(w, true, hd, l, a.pre(a.preK, hd, l), w.mk)
	}
	a.bwdQueries(w, hd, l, a.pre(a.preQ, hd, l), z, g, false)
}

func (a *engine) bwdKeysItem(w *engineWorker, i int) {
	L := &a.L
	hd, l := i/L.t, i%L.t
	var u []float32
	switch {
	case !L.causal:
		u = a.slot(hd, L.t)
	case l < L.t-1:
		u = a.slot(hd, l)
	}
	a.bwdKeys(w, hd, l, a.pre(a.preK, hd, l), u)
}

// rows returns the rows of block l of head hd of an [bh, n, h] tensor.
func (a *engine) rows(x []float32, hd, l int) []float32 {
	L := &a.L
	lo, rows := L.plan.span(l)
	at := (hd*L.n + lo) * L.h
	return x[at : at+rows*L.h]
}

// Streaming (Remat): one head per item, blocks in sequence.

// sumKeyStates adds every block's key state of head hd to w.run (which
// callers clear): the whole state a non-causal query sees.
func (a *engine) sumKeyStates(w *engineWorker, hd int) {
	A := negInf
	for l := 0; l < a.L.t; l++ {
		a.keysPrep(w, hd, l, w.preK, w.hbuf)
		A = a.stab.addKeyState(w.run, w.hbuf, hd, l, A)
	}
	a.stab.keyTotal(hd, A)
}

func (a *engine) streamForward(w *engineWorker, hd int) {
	L := &a.L
	clear(w.run)
	if !L.causal {
		a.sumKeyStates(w, hd)
		for l := 0; l < L.t; l++ {
			a.queriesPrep(w, hd, l, w.preQ, a.o)
			a.finish(w, hd, l, w.preQ, w.run, a.o)
		}
		return
	}
	A := negInf
	for l := 0; l < L.t; l++ {
		var state, z []float32
		if l < L.t-1 {
			state = w.hbuf
		}
		if l > 0 {
			z = w.run
		}
		if state != nil || L.sketched {
			a.keysPrep(w, hd, l, w.preK, state)
		}
		a.stab.setReference(hd, l, A)
		a.queriesPrep(w, hd, l, w.preQ, a.o)
		a.finish(w, hd, l, w.preQ, z, a.o)
		if state != nil {
			A = a.stab.addKeyState(w.run, w.hbuf, hd, l, A)
		}
	}
}

func (a *engine) streamBackward(w *engineWorker, hd int) {
	L := &a.L
	clear(w.run)
	if !L.causal {
		a.sumKeyStates(w, hd)
		clear(w.acc)
		for l := 0; l < L.t; l++ {
			a.queriesPrep(w, hd, l, w.preQ, nil)
			a.finish(w, hd, l, w.preQ, w.run, nil)
			a.bwdQueries(w, hd, l, w.preQ, w.run, w.hbuf, false)
			vec.Add(w.acc, w.acc, w.hbuf)
		}
		for l := 0; l < L.t; l++ {
			a.sketchKeys(w, hd, l, w.preK)
			a.bwdKeys(w, hd, l, w.preK, w.acc)
		}
		return
	}
	// Sweep 1, forward: prefix states, denominators, dq, local terms.
	A := negInf
	for l := 0; l < L.t; l++ {
		var state, z []float32
		if l < L.t-1 {
			state = w.hbuf
		}
		if l > 0 {
			z = w.run
		}
		if state != nil || L.sketched {
			a.keysPrep(w, hd, l, w.preK, state)
		}
		a.stab.setReference(hd, l, A)
		a.queriesPrep(w, hd, l, w.preQ, nil)
		a.finish(w, hd, l, w.preQ, z, nil)
		a.bwdQueries(w, hd, l, w.preQ, z, nil, true)
		lo, rows := L.plan.span(l)
		copy(a.gd[hd*L.n+lo:hd*L.n+lo+rows], w.gd[:rows])
		if state != nil {
			A = a.stab.addKeyState(w.run, w.hbuf, hd, l, A)
		}
	}
	a.stab.setReference(hd, L.t, A)
	// Sweep 2, backward: suffix states U_l = Σ_{j>l} φ(Q_j)ᵀ·dO_j/D_j, dk, dv
	// (for a scaled map relative to m_l, as scaledSuffixScan makes them).
	clear(w.run)
	for l := L.t - 1; l >= 0; l-- {
		var u []float32
		if l < L.t-1 {
			u = a.stab.suffixState(w, hd, l)
		}
		if u != nil || L.sketched {
			a.sketchKeys(w, hd, l, w.preK)
		}
		a.bwdKeys(w, hd, l, w.preK, u)
		if l > 0 {
			a.queryStateAgain(w, hd, l, w.preQ, w.hbuf)
			a.stab.addQueryState(w.run, w.hbuf, hd, l)
		}
	}
}

// Block steps, shared by all modes so that they compute the same bits.

// skApply computes Mᵀ of block l of head hd, of the keys (key) or the
// queries, into mT, keeping the projection's pre (see projector).
func (a *engine) skApply(w *engineWorker, key bool, hd, l int, pre, mT []float32) {
	a.src.apply(w, key, hd, l, pre, mT)
	if key {
		_, rows := a.L.plan.span(l)
		a.stab.keysProjected(w, pre, rows)
	}
}

// skOutput is skApply from the kept pre: the same bits.
func (a *engine) skOutput(w *engineWorker, key bool, hd, l int, pre, mT []float32) {
	a.src.output(w, key, hd, l, pre, mT)
	if key {
		_, rows := a.L.plan.span(l)
		a.stab.keysProjected(w, pre, rows)
	}
}

// skBackward takes dmT = dMᵀ of block l of head hd (nil: zero) to the
// projector, which writes (or with accumulate adds) the gradient of the
// keys (key) or queries into dk or dq, or keeps it.
func (a *engine) skBackward(w *engineWorker, key bool, hd, l int, accumulate bool, dmT, pre []float32) {
	a.src.backward(w, key, hd, l, accumulate, dmT, pre)
}

// sketchKeys computes the sketch of block l's keys into pre and w.mk.
func (a *engine) sketchKeys(w *engineWorker, hd, l int, pre []float32) {
	a.skApply(w, true, hd, l, pre, w.mk)
}

// keysPrep sketches block l's keys and, if state is not nil, computes the
// block's state H_l = φ(K_l)ᵀV_l and z_l = φ(K_l)ᵀ1 into it.
func (a *engine) keysPrep(w *engineWorker, hd, l int, pre, state []float32) {
	L := &a.L
	_, rows := L.plan.span(l)
	a.sketchKeys(w, hd, l, pre)
	ref := a.stab.keyBlock(w, hd, l, rows)
	if state == nil {
		return
	}
	F, h := L.F, L.h
	phi := a.fm.lift.apply(w.phi[:F*rows], w.mk, w.tk, L.ro, rows)
	phi = scaleColsBy(w.phi, phi, a.stab.keyScales(w, rows, ref), F, rows) // H_l relative to ref
	a.gemm(blockStates, blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(F, rows, phi), blas.NewGeneral(rows, h, a.rows(a.v, hd, l)), 0, blas.NewGeneral(F, h, state))
	z := state[F*h : F*h+F]
	for f := range z {
		z[f] = vec.Sum(phi[f*rows : (f+1)*rows])
	}
}

// queriesPrep sketches block l's queries into pre and w.mq, sets the
// denominators to c (fm.one) plus the diagonal block's row sums, and, if o is not
// nil, the block's outputs to its diagonal block's weighted values.
func (a *engine) queriesPrep(w *engineWorker, hd, l int, pre, o []float32) {
	L := &a.L
	lo, rows := L.plan.span(l)
	a.skApply(w, false, hd, l, pre, w.mq)
	d := a.den[hd*L.n+lo : hd*L.n+lo+rows]
	for i := range d {
		d[i] = a.fm.one
	}
	if !L.causal {
		return
	}
	a.localWeights(w, hd, l)
	lowerRowSums(d, w.w, rows)
	if o != nil {
		lowerMul(blas.NewGeneral(rows, L.h, a.rows(o, hd, l)), blas.NewGeneral(rows, rows, w.w), blas.NewGeneral(rows, L.h, a.rows(a.v, hd, l)), 0)
	}
}

// localWeights computes S and W = lt(S^p) of block l's diagonal block into
// w.s and w.w: S = Q_l·K_lᵀ and the degree p with Local (or W the
// stabilizer's exp(S) relative to each row's maximum, with Softmax), else
// S = M(Q_l)·M(K_l)ᵀ (from w.mq and w.mk) and p = fm.diagPow().
func (a *engine) localWeights(w *engineWorker, hd, l int) {
	L := &a.L
	_, rows := L.plan.span(l)
	s, ww := w.s[:rows*rows], w.w[:rows*rows]
	if !L.sketched {
		lowerABt(blas.NewGeneral(rows, rows, s), blas.NewGeneral(rows, L.h, a.rows(a.q, hd, l)), blas.NewGeneral(rows, L.h, a.rows(a.k, hd, l)))
		a.stab.exactWeights(w, hd, l, rows, a.opts.Degree)
		return
	}
	a.fm.lift.diagScores(w, s, rows, L.ro)
	lowerPow(ww, s, w.tmp, rows, a.fm.lift.diagPow())
	a.stab.diagWeights(w, hd, l)
}

// finish adds the cross-block terms with prefix state z (nil for none) to
// the denominators of block l and, if o is not nil, computes its outputs.
func (a *engine) finish(w *engineWorker, hd, l int, pre, z, o []float32) {
	L := &a.L
	lo, rows := L.plan.span(l)
	F, h := L.F, L.h
	d := a.den[hd*L.n+lo : hd*L.n+lo+rows]
	var out []float32
	if o != nil {
		out = a.rows(o, hd, l)
	}
	fs, cs := a.stab.rowFactors(w, hd, l)
	for i, f := range fs { // the diagonal block's terms relative to the rows' references
		d[i] *= f
		if out != nil {
			vec.Scale(f, out[i*h:(i+1)*h])
		}
	}
	if z != nil {
		a.skOutput(w, false, hd, l, pre, w.mq)
		phi := a.fm.lift.apply(w.phi[:F*rows], w.mq, w.tq, L.ro, rows)
		phi = scaleColsBy(w.phi, phi, cs, F, rows)
		c := w.cross[:rows]
		clear(c)
		zeta := z[F*h : F*h+F]
		for f, zf := range zeta {
			vec.Axpy(zf, phi[f*rows:(f+1)*rows], c)
		}
		vec.Add(d, d, c)
		if out != nil {
			beta := float32(0)
			if L.causal {
				beta = 1
			}
			a.gemm(blockStates, blas.Trans, blas.NoTrans, 1, blas.NewGeneral(F, rows, phi), blas.NewGeneral(F, h, z), beta, blas.NewGeneral(rows, h, out))
		}
	}
	if a.fm.one == 0 {
		floorDenominators(d)
	}
	if out != nil {
		for i, di := range d {
			vec.Scale(1/di, out[i*h:(i+1)*h])
		}
	}
}

// loadGrad sets w.g to dO/D for block l: the gradient of its numerators.
func (a *engine) loadGrad(w *engineWorker, hd, l int) {
	L := &a.L
	lo, rows := L.plan.span(l)
	h := L.h
	g := w.g[:rows*h]
	copy(g, a.rows(a.do, hd, l))
	for i, di := range a.den[hd*L.n+lo : hd*L.n+lo+rows] {
		vec.Scale(1/di, g[i*h:(i+1)*h])
	}
}

// bwdQueries computes, for block l with prefix state z (nil for none), the
// denominator gradients w.gd, dq, and the diagonal block's contributions
// to dv and dk (or to the gradient of M(K), a.dmk). With g not nil it
// writes the block's state G_l = φ(Q_l)ᵀ·dO_l/D_l and γ_l = φ(Q_l)ᵀ·gd
// into it. weightsValid says w.s and w.w already hold the diagonal block.
//
// The gradient of the denominator D_i needs dO_i·o_i, which it gets without
// o: dO_i·o_i = g_i·num_i = (g_i·Z_lᵀ)·φ(q_i) + Σ_j W_ij (g_i·v_j), both
// already at hand as dφ(q_i) and dW.
func (a *engine) bwdQueries(w *engineWorker, hd, l int, pre, z, g []float32, weightsValid bool) {
	L := &a.L
	lo, rows := L.plan.span(l)
	F, h, ro := L.F, L.h, L.ro
	d := a.den[hd*L.n+lo : hd*L.n+lo+rows]
	a.loadGrad(w, hd, l)
	gr := w.g[:rows*h]
	cross, gd := w.cross[:rows], w.gd[:rows]
	clear(cross)
	a.skOutput(w, false, hd, l, pre, w.mq)
	phi, dphi := w.phi[:F*rows], w.dphi[:F*rows]
	fs, cs := a.stab.rowFactors(w, hd, l)
	if z != nil {
		phi = a.fm.lift.apply(phi, w.mq, w.tq, ro, rows)
		phi = scaleColsBy(w.phi, phi, cs, F, rows) // ψ_i = c_i·φ̃(q_i), as finish used it
		a.gemm(blockStateGrads, blas.NoTrans, blas.Trans, 1, blas.NewGeneral(F, h, z), blas.NewGeneral(rows, h, gr), 0, blas.NewGeneral(F, rows, dphi))
		tmp := w.tmp[:rows]
		for f := 0; f < F; f++ {
			vec.Mul(tmp, phi[f*rows:(f+1)*rows], dphi[f*rows:(f+1)*rows])
			vec.Add(cross, cross, tmp)
		}
	}
	var s, ww, dw []float32
	v := a.rows(a.v, hd, l)
	if L.causal {
		s, ww, dw = w.s[:rows*rows], w.w[:rows*rows], w.dw[:rows*rows]
		if !weightsValid {
			a.localWeights(w, hd, l)
		}
		if fs != nil { // weights, and what diagWeights left in s, relative to the rows' references
			scaleRows(ww, fs, rows)
			scaleRows(s, fs, rows)
		}
		lowerABt(blas.NewGeneral(rows, rows, dw), blas.NewGeneral(rows, h, gr), blas.NewGeneral(rows, h, v))
		lowerRowDots(gd, ww, dw, rows)
	} else {
		clear(gd)
	}
	for i := range gd {
		gd[i] = -(cross[i] + gd[i]) / d[i]
	}
	if z != nil {
		a.stab.crossGrad(w, hd, l, cross, gd, phi, z[F*h:F*h+F])
	}
	dq := a.rows(a.dq, hd, l)
	if L.causal {
		for i, gi := range gd {
			row := dw[i*rows : i*rows+i+1]
			for j := range row {
				row[j] += gi
			}
		}
		lowerTMul(blas.NewGeneral(rows, h, a.rows(a.dv, hd, l)), blas.NewGeneral(rows, rows, ww), blas.NewGeneral(rows, h, gr), 0)
		if L.sketched {
			a.stab.diagBackward(w, dw, rows, a.fm.lift.diagPow())
			dmk := a.dmk[(hd*L.n+lo)*ro : (hd*L.n+lo+rows)*ro]
			a.fm.lift.diagBackward(w, dw, dmk, rows, ro)
		} else {
			a.stab.exactBackward(w, dw, rows, a.opts.Degree)
			lowerMul(blas.NewGeneral(rows, h, dq), blas.NewGeneral(rows, rows, dw), blas.NewGeneral(rows, h, a.rows(a.k, hd, l)), 0)
			lowerTMul(blas.NewGeneral(rows, h, a.rows(a.dk, hd, l)), blas.NewGeneral(rows, rows, dw), blas.NewGeneral(rows, h, a.rows(a.q, hd, l)), 0)
		}
	}
	dm := w.dmq[:ro*rows]
	have := false
	if z != nil {
		rs := gd
		if cs != nil { // dφ̃(q_i) = c_i·dψ_i
			scaleCols(dphi, dphi, cs, F, rows)
			rs = w.cross[:rows]
			vec.Mul(rs, gd, cs)
		}
		a.fm.lift.backward(dm, dphi, w.mq, w.tq, ro, rows, false)
		// The term ζ_l·gdᵀ of dφ(Q_l), ζ_l scaled per row, reaches M
		// without forming it per row.
		a.fm.lift.sharedBackward(dm, z[F*h:F*h+F], rs, w.mq, w.psi, w.aux, ro, rows)
		have = true
	}
	if L.sketched {
		a.fm.lift.addDiagonal(dm, w.dmr, rows, ro, have)
		have = true
	}
	if !have {
		dm = nil
	}
	a.skBackward(w, false, hd, l, L.causal && !L.sketched, dm, pre)
	if g != nil {
		a.queryState(w, phi, rows, g)
	}
}

// queryState writes G = φ(Q_l)ᵀ·g and γ = φ(Q_l)ᵀ·gd into state, from
// phi = Φ(Q_l)ᵀ, w.g and w.gd.
func (a *engine) queryState(w *engineWorker, phi []float32, rows int, state []float32) {
	F, h := a.L.F, a.L.h
	phi = phi[:F*rows]
	a.gemm(blockStateGrads, blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(F, rows, phi), blas.NewGeneral(rows, h, w.g), 0, blas.NewGeneral(F, h, state))
	gd := w.gd[:rows]
	for f := 0; f < F; f++ {
		state[F*h+f] = vec.Dot(phi[f*rows:(f+1)*rows], gd)
	}
}

// queryStateAgain recomputes block l's G_l and γ_l into state (streaming),
// from the kept denominators and denominator gradients.
func (a *engine) queryStateAgain(w *engineWorker, hd, l int, pre, state []float32) {
	L := &a.L
	lo, rows := L.plan.span(l)
	a.skApply(w, false, hd, l, pre, w.mq)
	phi := a.fm.lift.apply(w.phi[:L.F*rows], w.mq, w.tq, L.ro, rows)
	_, cs := a.stab.rowFactors(w, hd, l)
	phi = scaleColsBy(w.phi, phi, cs, L.F, rows)
	a.loadGrad(w, hd, l)
	copy(w.gd[:rows], a.gd[hd*L.n+lo:hd*L.n+lo+rows])
	a.queryState(w, phi, rows, state)
}

// bwdKeys computes block l's dk and adds to its dv, with suffix state u
// (nil for none): dV_l += φ(K_l)·U_l, dφ(K_l) = V_l·U_lᵀ + 1·u_lᵀ.
func (a *engine) bwdKeys(w *engineWorker, hd, l int, pre, u []float32) {
	L := &a.L
	lo, rows := L.plan.span(l)
	F, h, ro := L.F, L.h, L.ro
	dm := w.dmk[:ro*rows]
	have := false
	if u != nil {
		a.skOutput(w, true, hd, l, pre, w.mk)
		phi, dphi := a.fm.lift.apply(w.phi[:F*rows], w.mk, w.tk, ro, rows), w.dphi[:F*rows]
		ks := a.stab.suffixScales(w, hd, rows) // keys relative to U_l's reference
		phi = scaleColsBy(w.phi, phi, ks, F, rows)
		beta := float32(0)
		if L.causal {
			beta = 1
		}
		v := a.rows(a.v, hd, l)
		a.gemm(blockStateGrads, blas.Trans, blas.NoTrans, 1, blas.NewGeneral(F, rows, phi), blas.NewGeneral(F, h, u), beta, blas.NewGeneral(rows, h, a.rows(a.dv, hd, l)))
		a.gemm(blockStateGrads, blas.NoTrans, blas.Trans, 1, blas.NewGeneral(F, h, u), blas.NewGeneral(rows, h, v), 0, blas.NewGeneral(F, rows, dphi))
		if ks != nil {
			scaleCols(dphi, dphi, ks, F, rows)
		}
		a.fm.lift.backward(dm, dphi, w.mk, w.tk, ro, rows, false)
		// The term 1·u_lᵀ of dφ(K_l), the same for every row (times ks),
		// reaches M without forming it per row.
		a.fm.lift.sharedBackward(dm, u[F*h:F*h+F], ks, w.mk, w.psi, w.aux, ro, rows)
		have = true
	}
	if L.sketched {
		a.fm.lift.addDiagonal(dm, a.dmk[(hd*L.n+lo)*ro:(hd*L.n+lo+rows)*ro], rows, ro, have)
		have = true
	}
	if !have {
		dm = nil
	}
	a.skBackward(w, true, hd, l, L.causal && !L.sketched, dm, pre)
}

// engineWorker is one goroutine's scratch for one block of up to bs rows.
type engineWorker struct {
	mq, mk, tq, tk []float32 // Mᵀ of queries and keys and √2·Mᵀ: [ro × bs]
	dmq, dmk       []float32 // their gradients
	phi, dphi      []float32 // Φᵀ and its gradient: [F × bs]
	s, w, dw       []float32 // diagonal block S, W and gradient: [bs × bs]
	mqr, mkr, dmr  []float32 // row-major M for sketched diagonal blocks: [bs × ro]
	psi, aux       []float32 // Ψ(u) [ro × ro] and Ψ(u)·Mᵀ [ro × bs]
	g              []float32 // dO/D: [bs × h]
	gd, cross, tmp []float32 // [bs], tmp [2·bs]
	preQ, preK     []float32 // sketch projections when not kept: [preW × bs]
	run, hbuf, acc []float32 // running, block and total states; scan scratch
	fq, fk, df     []float32 // CumSum: row-major features and gradient [bs × F]
	ks, cs, fs     []float32 // scaled maps: key scales, query cross and diagonal factors [bs]
	skeys          []float32 // scaled maps: log-scales of the block's keys [bs]
	sks            sketchScratch
}

// carve takes the worker's buffers for layout L from c, with a sketch
// scratch for scratchRows rows.
func (w *engineWorker) carve(L *engineLayout, p projection, scratchRows int, fm *featureMap, stab stabilizer, c *carver) {
	take := c.take
	bs, ro, F := L.bs, L.ro, L.F
	w.mq, w.mk = take(ro*bs), take(ro*bs)
	w.dmq, w.dmk = take(ro*bs), take(ro*bs)
	w.phi, w.dphi = take(F*bs), take(F*bs)
	w.tq, w.tk, w.psi, w.aux, w.mqr, w.mkr = nil, nil, nil, nil, nil, nil
	fm.lift.carveWorker(w, L, c)
	w.ks, w.cs, w.fs, w.skeys, w.acc = nil, nil, nil, nil, nil
	stab.carveWorker(w, L, c)
	w.g = take(bs * L.h)
	w.gd, w.cross, w.tmp = take(bs), take(bs), take(2*bs)
	ab, buf := p.scratchSize(scratchRows)
	w.sks = sketchScratch{a: take(ab), b: take(ab), buf: take(buf)}
	w.s, w.w, w.dw, w.dmr = nil, nil, nil, nil
	w.preQ, w.preK, w.fq, w.fk, w.df = nil, nil, nil, nil, nil
	if L.causal && L.mode != modeCumSum {
		w.s, w.w, w.dw = take(bs*bs), take(bs*bs), take(bs*bs)
	}
	if L.sketched {
		w.dmr = take(bs * ro)
	}
	switch L.mode {
	case modeBlocks:
		n := min(scanChunk, L.stateSize)
		w.run, w.hbuf = take(n), take(n)
	case modeStream:
		w.preQ, w.preK = take(L.preW*bs), take(L.preW*bs)
		w.run, w.hbuf = take(L.stateSize), take(L.stateSize)
		if !L.causal {
			w.acc = take(L.stateSize)
		}
	case modeCumSum:
		w.preQ, w.preK = take(L.preW*bs), take(L.preW*bs)
		w.run = take(L.stateSize)
		w.fq, w.fk, w.df = take(bs*F), take(bs*F), take(bs*F)
	}
}

// workPool runs the items of a phase on up to active goroutines of the
// process's pool, each with the worker scratch of its index, taking items
// in order. Which goroutine runs an item never changes its result.
type workPool struct {
	workers []*engineWorker
	active  int
	step    func(w *engineWorker, i int)
	body    func(w, i int) // bound once: handing it to the pool allocates nothing
}

func (p *workPool) init() {
	p.body = func(w, i int) { p.step(p.workers[w], i) }
}

func (p *workPool) run(items int, step func(w *engineWorker, i int)) {
	p.step = step
	parallel.Run(items, p.active, p.body)
}
