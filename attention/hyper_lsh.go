package attention

import (
	"slices"

	"github.com/polysketch/polysketch/blas"
)

// HyperAttention's sortLSH (see Hyper): the hashes, the sorts by Gray
// rank, and the blocks and columns each row of a block attends to.

// prepItem hashes one head's queries and keys, sorts them by rank, counts
// the causal rank histograms and draws the samples (sample).
func (a *hyperAttn) prepItem(w, bh int) {
	c := &a.call
	N, h, b, nh := c.N, c.h, a.cfg.Block, a.cfg.Hashes
	R := 1 << nh
	head := bh * N * h
	sc := a.sc[w]
	rq, rk := a.rankQ[bh*N:(bh+1)*N], a.rankK[bh*N:(bh+1)*N]
	a.hash(sc, a.q.Data[head:head+N*h], rq, N, h)
	a.hash(sc, a.k.Data[head:head+N*h], rk, N, h)
	start := a.start[bh*(R+1) : (bh+1)*(R+1)]
	sortK, posK := a.sortK[bh*N:(bh+1)*N], a.posK[bh*N:(bh+1)*N]
	countingSort(rk, R, start, sortK, posK)
	// Keys and values in sorted order, so that key blocks are a few
	// contiguous runs.
	kd, vd := a.k.Data[head:head+N*h], a.v.Data[head:head+N*h]
	ks, vs := a.ksrt[head:head+N*h], a.vsrt[head:head+N*h]
	for at, j := range sortK {
		copy(ks[at*h:(at+1)*h], kd[int(j)*h:])
		copy(vs[at*h:(at+1)*h], vd[int(j)*h:])
	}
	if !a.causal {
		sortQ := a.sortQ[bh*N : (bh+1)*N]
		countingSort(rq, R, sc.cum, sortQ, nil)
	} else {
		hist := a.hist[bh*c.nb*R : (bh+1)*c.nb*R]
		clear(hist[:R])
		for ch := 1; ch < c.nb; ch++ {
			cur := hist[ch*R : (ch+1)*R]
			copy(cur, hist[(ch-1)*R:ch*R])
			for _, r := range rk[(ch-1)*b : ch*b] {
				cur[r]++
			}
		}
	}
	a.sample(bh)
}

// hash sets ranks[i] to the Gray rank of the bucket of row i of x ([n×h]).
func (a *hyperAttn) hash(sc *hyperScratch, x []float32, ranks []int32, n, h int) {
	nh, b := a.cfg.Hashes, len(sc.pos)
	for i0 := 0; i0 < n; i0 += b {
		rows := min(b, n-i0)
		p := sc.proj[:rows*nh]
		blas.SgemmSerial(blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(rows, h, x[i0*h:]), blas.NewGeneral(h, nh, a.proj), 0, blas.NewGeneral(rows, nh, p))
		for r := range rows {
			code := 0
			for u, y := range p[r*nh : (r+1)*nh] {
				if y > 0 {
					code |= 1 << u
				}
			}
			ranks[i0+r] = int32(grayRank(code))
		}
	}
}

// grayRank returns the position of code in the reflected Gray code
// sequence g(r) = r ^ (r>>1): consecutive ranks differ in one bit.
func grayRank(code int) int {
	r := code
	for s := 1; s < 32; s <<= 1 {
		r ^= r >> s
	}
	return r
}

// countingSort writes to order the indices 0…n−1 sorted by rank (stable),
// to start[r] where rank r's indices begin (start has R+1 entries), and,
// if inv is not nil, to inv[i] the index of i in order.
func countingSort(ranks []int32, R int, start, order, inv []int32) {
	clear(start[:R+1])
	for _, r := range ranks {
		start[r+1]++
	}
	for r := range R {
		start[r+1] += start[r]
	}
	for i, r := range ranks {
		at := start[r]
		order[at] = int32(i)
		if inv != nil {
			inv[i] = at
		}
		start[r]++
	}
	// start[r] now holds the end of rank r: shift back to the starts.
	copy(start[1:R+1], start[:R])
	start[0] = 0
}

// rows fills sc.pos (and sc.grp, sc.order) with the query rows of block
// blk, in the order the item processes them, copies them to sc.qg and
// returns their number.
func (a *hyperAttn) rows(sc *hyperScratch, vw *hyperView, blk int) int {
	N, b, h := vw.N, a.cfg.Block, a.call.h
	i0 := blk * b
	lo := max(i0, vw.lo)
	n := min(i0+b, N) - lo
	switch {
	case !a.causal && !a.approx(N), a.causal && !a.chunkApprox(blk):
		for r := range n {
			sc.pos[r] = int32(lo + r)
		}
	case !a.causal:
		copy(sc.pos[:n], vw.sortQ[i0:i0+n])
		for r := range n {
			sc.grp[r] = int32(blk)
		}
	case i0 == 0:
		for r := range n {
			sc.pos[r], sc.grp[r] = int32(lo+r), 0
		}
	default:
		// Each query's key block is where its rank falls among the past
		// keys sorted by rank: the middle of its bucket.
		R := 1 << a.cfg.Hashes
		cnt, cum := vw.cnt, sc.cum
		cum[0] = 0
		for r := range R {
			cum[r+1] = cum[r] + cnt[r]
		}
		last := int32((i0+b-1)/b - 1)
		for r := range n {
			rk := vw.rankQ[lo+r-vw.qOff]
			kb := min((cum[rk]+cnt[rk]/2)/int32(b), last)
			sc.pos[r], sc.grp[r] = int32(lo+r), kb
			sc.keys[r] = int64(kb)<<32 | int64(r)
		}
		slices.Sort(sc.keys[:n])
		for r, key := range sc.keys[:n] {
			sc.order[r] = int32(key & 0xffffffff)
		}
	}
	for r, i := range sc.pos[:n] {
		copy(sc.qg[r*h:(r+1)*h], vw.q[(int(i)-vw.qOff)*h:])
	}
	return n
}

// parts lists the key columns the n rows of block blk attend to.
func (a *hyperAttn) parts(sc *hyperScratch, vw *hyperView, blk, n int) []hyperPart {
	N, b := vw.N, a.cfg.Block
	ps := sc.parts[:0]
	i0 := blk * b
	end := min(i0+b, N)
	switch {
	case !a.causal && !a.approx(N):
		for j0 := 0; j0 < N; j0 += b {
			ps = append(ps, hyperPart{r0: 0, r1: n, kind: partRange, j0: j0, n: min(b, N-j0)})
		}
	case !a.causal:
		ps = append(ps, hyperPart{r0: 0, r1: n, kind: partBlock, j0: blk, n: min(b, N-blk*b)})
		if vw.samp != nil {
			ps = append(ps, hyperPart{r0: 0, r1: n, kind: partSamples, n: a.cfg.Samples})
		}
	case !a.chunkApprox(blk):
		for j0 := 0; j0 < i0; j0 += b {
			ps = append(ps, hyperPart{r0: 0, r1: n, kind: partRange, j0: j0, n: b})
		}
		ps = append(ps, hyperPart{r0: 0, r1: n, kind: partRange, j0: i0, n: end - i0, causal: true})
	default:
		ps = append(ps, hyperPart{r0: 0, r1: n, kind: partRange, j0: i0, n: end - i0, causal: true})
		if i0 == 0 {
			break
		}
		for r0 := 0; r0 < n; {
			kb := sc.grp[sc.order[r0]]
			r1 := r0 + 1
			for r1 < n && sc.grp[sc.order[r1]] == kb {
				r1++
			}
			for s0 := r0; s0 < r1; s0 += hyperRows {
				ps = append(ps, hyperPart{r0: s0, r1: min(s0+hyperRows, r1), kind: partBlock, j0: int(kb),
					n: min(b, i0-int(kb)*b), first: s0 == r0, last: s0+hyperRows >= r1})
			}
			r0 = r1
		}
		if vw.samp != nil {
			ps = append(ps, hyperPart{r0: 0, r1: n, kind: partSamples, n: a.cfg.Samples})
		}
	}
	sc.parts = ps
	return ps
}

// keys returns the keys and values of part p ([p.n × h] each) and, for
// sampled columns, their log-weights; gathered parts leave the key
// positions in sc.kidx and, for samples, the key blocks in sc.blk.
func (a *hyperAttn) keys(sc *hyperScratch, vw *hyperView, p hyperPart) (k, v, lw []float32) {
	h, b := a.call.h, a.cfg.Block
	if p.kind == partRange {
		return vw.k[p.j0*h : (p.j0+p.n)*h], vw.v[p.j0*h : (p.j0+p.n)*h], nil
	}
	idx := sc.kidx[:p.n]
	switch {
	case p.kind == partBlock && !a.causal:
		copy(idx, vw.sortK[p.j0*b:])
		at := p.j0 * b * h
		return vw.ksrt[at : at+p.n*h], vw.vsrt[at : at+p.n*h], nil
	case p.kind == partBlock:
		if !p.first {
			return sc.kg[:p.n*h], sc.vg[:p.n*h], nil // gathered by the first batch
		}
		// Keys [kb·b, kb·b+n) of the past sorted by rank: walk the ranks.
		first := int32(p.j0 * b)
		r := int32(0)
		for sc.cum[r+1] <= first {
			r++
		}
		off := first - sc.cum[r]
		k, v = sc.kg[:p.n*h], sc.vg[:p.n*h]
		for at := 0; at < p.n; r, off = r+1, 0 {
			run := min(int(vw.cnt[r]-off), p.n-at)
			if run <= 0 {
				continue
			}
			from := int(vw.start[r] + off)
			copy(idx[at:at+run], vw.sortK[from:])
			copy(k[at*h:(at+run)*h], vw.ksrt[from*h:])
			copy(v[at*h:(at+run)*h], vw.vsrt[from*h:])
			at += run
		}
		return k, v, nil
	}
	copy(idx, vw.samp)
	for u, j := range idx {
		rk := vw.rankK[j]
		if a.causal {
			// Index among the past keys sorted by rank.
			sc.blk[u] = (sc.cum[rk] + vw.posK[j] - vw.start[rk]) / int32(b)
		} else {
			sc.blk[u] = vw.posK[j] / int32(b)
		}
	}
	k, v = sc.kg[:p.n*h], sc.vg[:p.n*h]
	for u, j := range idx {
		copy(k[u*h:(u+1)*h], vw.k[int(j)*h:])
		copy(v[u*h:(u+1)*h], vw.v[int(j)*h:])
	}
	return k, v, vw.lw
}
