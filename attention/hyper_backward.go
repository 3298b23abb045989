package attention

import (
	"math"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// HyperAttention's backward pass (see Hyper): the approximation as
// computed, differentiated block by block in groups, then reduced.

// Backward computes dq, dk, dv from do for the last Forward.
func (a *hyperAttn) Backward(dq, dk, dv, do *tensor.Tensor) {
	if a.q == nil {
		panic("attention.hyper.Backward: called before Forward")
	}
	mustMatch("hyper.Backward", a.q, dq, dk, dv, do)
	B, H, N, h := a.q.Shape[0], a.q.Shape[1], a.q.Shape[2], a.q.Shape[3]
	a.ensure(B, H, N, h)
	nb, sets := a.blocks(N)
	a.call = hyperCall{B: B, H: H, N: N, h: h, nb: nb, sets: sets, groups: a.groups(B, H, N),
		exact: !a.causal && !a.approx(N), dq: dq.Data, dk: dk.Data, dv: dv.Data, do: do.Data}
	workers := a.workers(B, H, N)
	parallel.Run(B*H*a.call.groups, workers, a.backwardFn)
	parallel.Run(B*H*nb, workers, a.reduceFn)
	a.call = hyperCall{}
}

// backwardItem runs blocks g, g+G, … of one head, writing their rows of
// dQ and accumulating into the group's dK and dV. Where the sequence is
// approximated, every group accumulates in dkp, dvp in the keys' sorted
// order, in which key blocks are contiguous runs, and reduceItem puts the
// rows back in place; otherwise group 0 accumulates in dk, dv and the
// others in dkp, dvp in position order.
func (a *hyperAttn) backwardItem(w, item int) {
	c := &a.call
	G := c.groups
	bh, g := item/G, item%G
	N, h := c.N, c.h
	head := bh * N * h
	sorted := a.approx(N)
	var dk, dv []float32
	switch {
	case sorted:
		at := (g*c.B*c.H + bh) * N * h
		dk, dv = a.dkp[at:at+N*h], a.dvp[at:at+N*h]
	case g == 0:
		dk, dv = c.dk[head:head+N*h], c.dv[head:head+N*h]
	default:
		at := ((g-1)*c.B*c.H + bh) * N * h
		dk, dv = a.dkp[at:at+N*h], a.dvp[at:at+N*h]
	}
	clear(dk)
	clear(dv)
	kg := keyGrads{dk: dk, dv: dv, h: h}
	if sorted {
		kg.posK = a.posK[bh*N : (bh+1)*N]
	}
	sc := a.sc[w]
	do := c.do[head : head+N*h]
	for blk := g; blk < c.nb; blk += G {
		vw := a.view(bh, blk)
		n := a.rows(sc, &vw, blk)
		for r, i := range sc.pos[:n] {
			copy(sc.dog[r*h:(r+1)*h], do[int(i)*h:])
			sc.m[r] = a.lse[bh*N+int(i)]
			sc.delta[r] = vec.Dot(sc.dog[r*h:(r+1)*h], a.o[head+int(i)*h:head+int(i+1)*h])
		}
		dqg := sc.dqg[:n*h]
		clear(dqg)
		if a.cfg.Sampling == SampleVNorm && !c.exact {
			a.gz[bh*c.nb+blk] = 0
		}
		for _, p := range a.parts(sc, &vw, blk, n) {
			k, vv, lw := a.keys(sc, &vw, p)
			if a.causal && p.kind == partBlock {
				a.backwardBatch(sc, p, k, vv)
				if p.last {
					kg.addRuns(sc.kidx[:p.n], sc.dkg, sc.dvg)
				}
				continue
			}
			a.backwardPart(sc, &kg, p, k, vv, lw, bh, blk)
		}
		for r, i := range sc.pos[:n] {
			copy(c.dq[head+int(i)*h:head+int(i+1)*h], dqg[r*h:(r+1)*h])
		}
	}
}

// backwardPart runs the backward pass of one part of a block's rows (not
// a causal past block, see backwardBatch): it adds to the rows' dQ in
// sc.dqg and to the keys' dK and dV in kg.
func (a *hyperAttn) backwardPart(sc *hyperScratch, kg *keyGrads, p hyperPart, k, vv, lw []float32, bh, blk int) {
	c := &a.call
	h := c.h
	alpha := float32(1 / math.Sqrt(float64(h)))
	s := a.scores(sc, p, k, lw)
	rows := p.r1 - p.r0
	for r := p.r0; r < p.r1; r++ {
		vec.Axpy(-sc.m[r], sc.ones[:p.n], s[(r-p.r0)*p.n:(r-p.r0+1)*p.n])
	}
	vec.Exp(s, s) // P; masked columns are exp(−∞) = 0
	// Contiguous rows accumulate in place; others are scattered below.
	dks, dvs := kg.dk[p.j0*h:], kg.dv[p.j0*h:]
	var beta float32 = 1
	direct := p.kind == partRange && kg.posK == nil
	if p.kind == partBlock && !a.causal {
		dks, dvs = kg.dk[p.j0*a.cfg.Block*h:], kg.dv[p.j0*a.cfg.Block*h:] // sorted block p.j0
		direct = true
	} else if !direct {
		dks, dvs, beta = sc.dkg, sc.dvg, 0
	}
	dog := sc.dog[p.r0*h:]
	blas.SgemmSerial(blas.Trans, blas.NoTrans, 1, blas.NewGeneral(rows, p.n, s), blas.NewGeneral(rows, h, dog), beta, blas.NewGeneral(p.n, h, dvs))
	dp := sc.dp[:rows*p.n]
	blas.SgemmSerial(blas.NoTrans, blas.Trans, 1, blas.NewGeneral(rows, h, dog), blas.NewGeneral(p.n, h, vv), 0, blas.NewGeneral(rows, p.n, dp))
	for r := p.r0; r < p.r1; r++ {
		vec.Axpy(-sc.delta[r], sc.ones[:p.n], dp[(r-p.r0)*p.n:(r-p.r0+1)*p.n])
	}
	vec.Mul(dp, dp, s) // dS, the gradient of the logits
	blas.SgemmSerial(blas.NoTrans, blas.NoTrans, alpha, blas.NewGeneral(rows, p.n, dp), blas.NewGeneral(p.n, h, k), 1, blas.NewGeneral(rows, h, sc.dqg[p.r0*h:]))
	blas.SgemmSerial(blas.Trans, blas.NoTrans, alpha, blas.NewGeneral(rows, p.n, dp), blas.NewGeneral(rows, h, sc.qg[p.r0*h:]), beta, blas.NewGeneral(p.n, h, dks))
	if direct {
		return
	}
	if p.kind == partRange {
		for u := range p.n {
			kg.add(int32(p.j0+u), sc.dkg[u*h:(u+1)*h], sc.dvg[u*h:(u+1)*h])
		}
		return
	}
	if p.kind == partSamples && a.cfg.Sampling == SampleVNorm && !c.exact && a.vnormDrawn(bh, blk) {
		a.logWeightGrads(sc, p.n, rows, dp, bh, blk)
	}
	for u, j := range sc.kidx[:p.n] {
		kg.add(j, sc.dkg[u*h:(u+1)*h], sc.dvg[u*h:(u+1)*h])
	}
}

// keyGrads is where a backward item accumulates the gradients of its
// head's keys and values: in position order, or in the keys' sorted
// order (posK: key j's index there).
type keyGrads struct {
	dk, dv []float32
	posK   []int32
	h      int
}

// row returns where key j's gradient row starts in dk, dv.
func (g *keyGrads) row(j int32) int {
	if g.posK != nil {
		return int(g.posK[j]) * g.h
	}
	return int(j) * g.h
}

// add adds gradient rows dkj, dvj of key j.
func (g *keyGrads) add(j int32, dkj, dvj []float32) {
	at, h := g.row(j), g.h
	vec.Add(g.dk[at:at+h], g.dk[at:at+h], dkj)
	vec.Add(g.dv[at:at+h], g.dv[at:at+h], dvj)
}

// addRuns adds the gradient rows of the keys idx (sorted, a causal past
// block): a few runs of keys consecutive in sorted order, each added at
// once.
func (g *keyGrads) addRuns(idx []int32, dkg, dvg []float32) {
	h, posK := g.h, g.posK
	for u0 := 0; u0 < len(idx); {
		u1 := u0 + 1
		for u1 < len(idx) && posK[idx[u1]] == posK[idx[u1-1]]+1 {
			u1++
		}
		at, n := g.row(idx[u0]), (u1-u0)*h
		vec.Add(g.dk[at:at+n], g.dk[at:at+n], dkg[u0*h:u1*h])
		vec.Add(g.dv[at:at+n], g.dv[at:at+n], dvg[u0*h:u1*h])
		u0 = u1
	}
}

// backwardBatch is the backward pass of forwardBatch: it adds to the
// rows' dQ and to the key block's dK and dV in sc.dkg, sc.dvg (cleared by
// the block's first batch).
func (a *hyperAttn) backwardBatch(sc *hyperScratch, p hyperPart, k, v []float32) {
	h := a.call.h
	alpha := float32(1 / math.Sqrt(float64(h)))
	rows := sc.order[p.r0:p.r1]
	qb, db := sc.qb[:hyperRows*h], sc.db[:hyperRows*h]
	clear(qb)
	clear(db)
	for u, r := range rows {
		copy(qb[u*h:(u+1)*h], sc.qg[int(r)*h:])
		copy(db[u*h:(u+1)*h], sc.dog[int(r)*h:])
	}
	s := sc.s[:hyperRows*p.n]
	blas.SgemmSerial(blas.NoTrans, blas.Trans, alpha, blas.NewGeneral(hyperRows, h, qb), blas.NewGeneral(p.n, h, k), 0, blas.NewGeneral(hyperRows, p.n, s))
	for u := range hyperRows {
		row := s[u*p.n : (u+1)*p.n]
		if u >= len(rows) {
			clear(row)
			continue
		}
		vec.Axpy(-sc.m[rows[u]], sc.ones[:p.n], row)
		vec.Exp(row, row)
	}
	if p.first {
		clear(sc.dkg[:p.n*h])
		clear(sc.dvg[:p.n*h])
	}
	blas.SgemmSerial(blas.Trans, blas.NoTrans, 1, blas.NewGeneral(hyperRows, p.n, s), blas.NewGeneral(hyperRows, h, db), 1, blas.NewGeneral(p.n, h, sc.dvg))
	dp := sc.dp[:hyperRows*p.n]
	blas.SgemmSerial(blas.NoTrans, blas.Trans, 1, blas.NewGeneral(hyperRows, h, db), blas.NewGeneral(p.n, h, v), 0, blas.NewGeneral(hyperRows, p.n, dp))
	for u, r := range rows {
		vec.Axpy(-sc.delta[r], sc.ones[:p.n], dp[u*p.n:(u+1)*p.n])
	}
	vec.Mul(dp, dp, s)
	tb := sc.tb[:hyperRows*h]
	blas.SgemmSerial(blas.NoTrans, blas.NoTrans, alpha, blas.NewGeneral(hyperRows, p.n, dp), blas.NewGeneral(p.n, h, k), 0, blas.NewGeneral(hyperRows, h, tb))
	for u, r := range rows {
		vec.Add(sc.dqg[int(r)*h:int(r+1)*h], sc.dqg[int(r)*h:int(r+1)*h], tb[u*h:(u+1)*h])
	}
	blas.SgemmSerial(blas.Trans, blas.NoTrans, alpha, blas.NewGeneral(hyperRows, p.n, dp), blas.NewGeneral(hyperRows, h, qb), 1, blas.NewGeneral(p.n, h, sc.dkg))
}

// reduceItem adds the partial dK and dV of groups 1… to one block of rows
// of a head, in group order, and with vnorm the gradient through the
// normalizers Z of the sampling distributions.
func (a *hyperAttn) reduceItem(_, item int) {
	c := &a.call
	bh, blk := item/c.nb, item%c.nb
	N, h, b := c.N, c.h, a.cfg.Block
	i0 := blk * b
	rows := min(b, N-i0)
	lo, hi := (bh*N+i0)*h, (bh*N+i0+rows)*h
	dk, dv := c.dk[lo:hi], c.dv[lo:hi]
	stride, more := c.B*c.H*N*h, c.groups-1 // between the groups' partial sums
	if !a.approx(N) {
		if more > 0 {
			vec.AddRows(dk, a.dkp[lo:], stride, more)
			vec.AddRows(dv, a.dvp[lo:], stride, more)
		}
		return
	}
	// Gather each key's rows from the groups' sorted buffers, in group order.
	posK := a.posK[bh*N+i0 : bh*N+i0+rows]
	for r, p := range posK {
		d, e := dk[r*h:(r+1)*h], dv[r*h:(r+1)*h]
		at := (bh*N + int(p)) * h
		copy(d, a.dkp[at:at+h])
		copy(e, a.dvp[at:at+h])
		if more > 0 {
			vec.AddRows(d, a.dkp[at+stride:], stride, more)
			vec.AddRows(e, a.dvp[at+stride:], stride, more)
		}
	}
	if a.cfg.Sampling == SampleVNorm {
		a.normalizerGrads(bh, i0, a.v.Data[lo:hi], dv)
	}
}
