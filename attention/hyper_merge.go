package attention

import (
	"math"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/vec"
)

// HyperAttention's merge (see Hyper): every part of a row, blocks and
// samples, goes through one online softmax, the log-sum-exp merge.

// scores computes the logits of part p for its rows, α·q·k + log-weight,
// with −∞ where a column is masked, into sc.s ([rows × p.n]).
func (a *hyperAttn) scores(sc *hyperScratch, p hyperPart, k, lw []float32) []float32 {
	h := a.call.h
	rows, n := p.r1-p.r0, p.n
	s := sc.s[:rows*n]
	blas.SgemmSerial(blas.NoTrans, blas.Trans, float32(1/math.Sqrt(float64(h))), blas.NewGeneral(rows, h, sc.qg[p.r0*h:]), blas.NewGeneral(n, h, k), 0, blas.NewGeneral(rows, n, s))
	for r := range rows {
		row := s[r*n : (r+1)*n]
		switch {
		case p.causal:
			vis := min(max(int(sc.pos[p.r0+r])-p.j0+1, 0), n)
			for j := vis; j < n; j++ {
				row[j] = negInf
			}
		case p.kind == partSamples:
			g := sc.grp[p.r0+r]
			for u, x := range lw {
				if sc.blk[u] == g {
					row[u] = negInf
				} else {
					row[u] = x + row[u]
				}
			}
		}
	}
	return s
}

// forwardItem computes the output rows of one block of one head. Causal
// items run from the last chunk to the first, so that the long exact
// chunks do not start last.
func (a *hyperAttn) forwardItem(w, item int) {
	c := &a.call
	bh, blk := item%(c.B*c.H), c.nb-1-item/(c.B*c.H)
	N, h := c.N, c.h
	head := bh * N * h
	sc := a.sc[w]
	vw := a.view(bh, blk)
	n := a.forwardRows(sc, &vw, blk)
	for r, i := range sc.pos[:n] {
		row := sc.og[r*h : (r+1)*h]
		copy(c.out[head+int(i)*h:], row)
		copy(a.o[head+int(i)*h:], row)
		a.lse[bh*N+int(i)] = sc.m[r]
	}
}

// forwardRows computes the output rows of block blk into sc.og, their
// positions in sc.pos and their log-sum-exps in sc.m, and returns their
// number.
func (a *hyperAttn) forwardRows(sc *hyperScratch, vw *hyperView, blk int) int {
	h := a.call.h
	n := a.rows(sc, vw, blk)
	og := sc.og[:n*h]
	clear(og)
	for r := range n {
		sc.m[r], sc.l[r] = negInf, 0
	}
	for _, p := range a.parts(sc, vw, blk, n) {
		k, v, lw := a.keys(sc, vw, p)
		if a.causal && p.kind == partBlock {
			a.forwardBatch(sc, p, k, v)
			continue
		}
		s := a.scores(sc, p, k, lw)
		for r := p.r0; r < p.r1; r++ {
			sc.online(r, s[(r-p.r0)*p.n:(r-p.r0+1)*p.n], og, h)
		}
		blas.SgemmSerial(blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(p.r1-p.r0, p.n, s), blas.NewGeneral(p.n, h, v), 1, blas.NewGeneral(p.r1-p.r0, h, og[p.r0*h:]))
	}
	for r := range n {
		vec.Scale(1/sc.l[r], og[r*h:(r+1)*h])
		sc.m[r] += float32(math.Log(float64(sc.l[r])))
	}
	return n
}

// online folds the logits row (of row r) into the running statistics and
// replaces them by their weights exp(logit − m), by the step of flash's
// online softmax (onlineShift); it reports false, leaving nothing changed,
// for a row whose columns are all masked.
func (sc *hyperScratch) online(r int, row, og []float32, h int) bool {
	mx := vec.Max(row)
	if mx == negInf {
		clear(row)
		return false
	}
	onlineShift(row, sc.ones, mx, &sc.m[r], &sc.l[r], og[r*h:(r+1)*h])
	vec.Exp(row, row)
	sc.l[r] += vec.Sum(row)
	return true
}

// forwardBatch runs one batch of a causal chunk's rows against their past
// key block, in products of hyperRows rows whatever the batch's size.
func (a *hyperAttn) forwardBatch(sc *hyperScratch, p hyperPart, k, v []float32) {
	h := a.call.h
	rows := sc.order[p.r0:p.r1]
	qb := sc.qb[:hyperRows*h]
	clear(qb)
	for u, r := range rows {
		copy(qb[u*h:(u+1)*h], sc.qg[int(r)*h:])
	}
	s := sc.s[:hyperRows*p.n]
	blas.SgemmSerial(blas.NoTrans, blas.Trans, float32(1/math.Sqrt(float64(h))), blas.NewGeneral(hyperRows, h, qb), blas.NewGeneral(p.n, h, k), 0, blas.NewGeneral(hyperRows, p.n, s))
	og := sc.og
	for u := range hyperRows {
		if u >= len(rows) || !sc.online(int(rows[u]), s[u*p.n:(u+1)*p.n], og, h) {
			clear(s[u*p.n : (u+1)*p.n])
		}
	}
	tb := sc.tb[:hyperRows*h]
	blas.SgemmSerial(blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(hyperRows, p.n, s), blas.NewGeneral(p.n, h, v), 0, blas.NewGeneral(hyperRows, h, tb))
	for u, r := range rows {
		vec.Add(og[int(r)*h:int(r+1)*h], og[int(r)*h:int(r+1)*h], tb[u*h:(u+1)*h])
	}
}
