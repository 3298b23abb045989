package attention

import (
	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/vec"
)

// A projector is how the engine gets Mᵀ of a block's rows and where it
// sends their dMᵀ, chosen once per projection (projectorFor): perBlock
// applies the feature map's projections to each block as the phases reach
// it, and sums a trainedProjection's parameter gradient per block; a
// learned sketch's netPass (sketch_learned.go) runs its networks on all
// rows before the phases and backward after them.
type projector interface {
	// layout sizes L for the projector and returns the number of items
	// its own passes need, at least items.
	layout(L *engineLayout, items int) int
	// carve takes the engine's buffers for layout L from c.
	carve(L *engineLayout, c *carver)
	// scratchRows returns the rows the workers' sketch scratch must hold.
	scratchRows(L *engineLayout) int
	// forward runs before Forward's phases.
	forward()
	// apply computes Mᵀ of block l of head hd, of the keys (key) or the
	// queries, into mT, keeping the projection's pre; output recomputes it
	// from pre, bitwise equal.
	apply(w *engineWorker, key bool, hd, l int, pre, mT []float32)
	output(w *engineWorker, key bool, hd, l int, pre, mT []float32)
	// backward takes dmT = dMᵀ of block l of head hd (nil: zero) and
	// writes (or with accumulate adds) the gradient of the keys or
	// queries into dk or dq, or keeps it for backwardEnd.
	backward(w *engineWorker, key bool, hd, l int, accumulate bool, dmT, pre []float32)
	// backwardEnd runs after Backward's phases.
	backwardEnd()
	// params lists the parameters the engine's Params reports.
	params() []*nn.Param
}

// projectorFor returns the projector of the queries' projection p and the
// keys' kp.
func (a *engine) projectorFor(p, kp projection) projector {
	if sk, _ := p.(*sketch); sk != nil && sk.net != nil {
		return newNetPass(a, sk.net)
	}
	tp, _ := p.(trainedProjection)
	return &perBlock{e: a, p: p, kp: kp, tp: tp}
}

// perBlock applies the projections block by block.
type perBlock struct {
	e      *engine
	p, kp  projection
	tp     trainedProjection // p when it has parameters, else nil
	pslots []float32         // [bh × t × paramSize]: tp's parameter gradient per block
}

func (b *perBlock) layout(_ *engineLayout, items int) int { return items }
func (b *perBlock) scratchRows(L *engineLayout) int       { return L.bs }
func (b *perBlock) forward()                              {}
func (b *perBlock) params() []*nn.Param                   { return nil }

func (b *perBlock) carve(L *engineLayout, c *carver) {
	if b.tp == nil {
		return
	}
	pslots := c.take(L.bh * L.t * b.tp.paramSize())
	if c.keep() {
		b.pslots = pslots
	}
}

// side returns the input of the keys (key) or queries and its projection.
func (b *perBlock) side(key bool) ([]float32, projection) {
	if key {
		return b.e.k, b.kp
	}
	return b.e.q, b.p
}

func (b *perBlock) apply(w *engineWorker, key bool, hd, l int, pre, mT []float32) {
	x, p := b.side(key)
	_, rows := b.e.L.plan.span(l)
	p.apply(blas.NewGeneral(rows, b.e.L.h, b.e.rows(x, hd, l)), pre, mT, &w.sks)
}

func (b *perBlock) output(w *engineWorker, key bool, hd, l int, pre, mT []float32) {
	x, p := b.side(key)
	_, rows := b.e.L.plan.span(l)
	p.output(blas.NewGeneral(rows, b.e.L.h, b.e.rows(x, hd, l)), pre, mT)
}

func (b *perBlock) backward(w *engineWorker, key bool, hd, l int, accumulate bool, dmT, pre []float32) {
	L := &b.e.L
	_, rows := L.plan.span(l)
	p, dx := b.p, b.e.dq
	if key {
		p, dx = b.kp, b.e.dk
	}
	if !key && b.tp != nil { // this block's slot of the parameter gradient
		n := b.tp.paramSize()
		w.sks.dparam = b.pslots[(hd*L.t+l)*n : (hd*L.t+l+1)*n]
		clear(w.sks.dparam)
	}
	if dmT == nil {
		return
	}
	p.backward(blas.NewGeneral(rows, L.h, b.e.rows(dx, hd, l)), accumulate, dmT, pre, &w.sks)
}

// backwardEnd adds the per-block parameter gradients of a
// trainedProjection to its parameters' gradients, in block order.
func (b *perBlock) backwardEnd() {
	if b.tp == nil {
		return
	}
	L := &b.e.L
	off := 0
	for _, p := range b.tp.params() {
		g := p.Grad.Data
		vec.AddRows(g, b.pslots[off:], b.tp.paramSize(), L.bh*L.t)
		off += len(p.Grad.Data)
	}
}
