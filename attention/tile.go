package attention

import (
	"fmt"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// The tiled mechanisms (flash and polynomial) use square score tiles of
// --block queries × --block keys. BenchmarkTileSize measured
// the default, 256 × 256, as the fastest of 32…512 on a 2-core Xeon
// (48 KiB L1d, 2 MiB L2 per core; h = 64; one thread): at N = 4096
// forward 4.6 and backward 10.6 CPU-µs per token, against 6.4 and 13.0
// for 64 × 64, 4.9 and 11.2 for 128 × 128, 4.5 and 11.8 for 512 × 512;
// at N = 1024, where the diagonal tiles waste more, 256 still ties 128.
// Larger tiles amortize the packing inside each product; a 256 KiB tile
// stays in L2.

// backwardItems is the number of independent work items the backward pass
// of a tiled mechanism aims for. With fewer than this many heads (B·H) it
// splits each head's key tiles into interleaved groups, each with its own
// partial dQ, summed in a fixed order afterwards. The split depends on the
// shape alone, never on GOMAXPROCS, so gradients are bitwise identical
// whatever the number of threads.
const backwardItems = 8

// A weighting is the part of a tiled mechanism that differs between
// softmax and polynomial attention: how a tile of scores S = α·Q·Kᵀ turns
// into attention weights, and how the gradient flows back through them.
// The driver (tiled) owns the loops, the products and the parallelism.
type weighting interface {
	// scoreScale is α in S = α·Q·Kᵀ for heads of size h.
	scoreScale(h int) float32
	// gradScale multiplies dS in dQ = gradScale·dS·K and dK = gradScale·dSᵀ·Q.
	gradScale(h int) float32
	// scaledUpstream reports whether the backward pass works with a
	// row-rescaled copy of dO (prepared by backwardRows) instead of dO.
	scaledUpstream() bool
	// spare reports whether it uses the spare tile buffer sc.t.
	spare() bool

	// forwardStart resets the running row statistics of a query tile.
	forwardStart(sc *scratch, rows int)
	// forwardTile turns the scores in sc.s into the weights that multiply
	// V, updating the running statistics and, if it must, rescaling the
	// rows of the partial output o (rows×h).
	forwardTile(sc *scratch, t tile, o []float32, h int)
	// forwardEnd normalizes o and stores the per-row statistic that the
	// backward pass needs.
	forwardEnd(sc *scratch, rows int, o, stat []float32, h int)

	// backwardRows prepares rows of one head for the backward pass:
	// delta[i] and, if scaledUpstream, up = the rescaled dO.
	backwardRows(do, o, stat, delta, up []float32, h int)
	// backwardWeights recomputes the weights of a tile from the scores in
	// sc.s, in place (and whatever else backwardScores needs).
	backwardWeights(sc *scratch, t tile, stat []float32)
	// backwardScores turns dP = up·Vᵀ in sc.dp into the score gradient
	// dS, in place.
	backwardScores(sc *scratch, t tile, delta []float32)
}

// An accumulator is a weighting with parameters of its own (learned
// coefficients): besides dS, its backwardScores adds the gradient of a
// loss with respect to them into sc.acc. The driver gives every backward
// work item (head, key-tile group) its own zeroed sc.acc, so that the
// mechanism can sum the items' gradients in a fixed order (accumulated)
// whatever the number of threads.
type accumulator interface {
	// accumulates returns how many float64 gradients each item adds to.
	accumulates() int
}

// tile locates a score tile: query rows [i0, i0+rows), key columns
// [j0, j0+cols). Its scores are stored row-major with stride cols.
type tile struct {
	i0, rows, j0, cols int
	causal             bool
}

// span returns how many leading columns row r of the tile may attend to.
func (t tile) span(r int) int {
	if !t.causal {
		return t.cols
	}
	return min(max(t.i0+r+1-t.j0, 0), t.cols)
}

// masked reports whether some entry of the tile is masked.
func (t tile) masked() bool { return t.causal && t.j0+t.cols-1 > t.i0 }

// clearMasked zeroes the masked entries of every row of x (a tile).
func (t tile) clearMasked(x []float32) {
	if !t.masked() {
		return
	}
	for r := 0; r < t.rows; r++ {
		clear(x[r*t.cols+t.span(r) : (r+1)*t.cols])
	}
}

// exp replaces the visible entries of x (a tile) by their exponentials
// and zeroes the masked ones, without computing exponentials for them.
func (t tile) exp(x []float32) {
	if !t.masked() {
		vec.Exp(x, x)
		return
	}
	for r := 0; r < t.rows; r++ {
		row := x[r*t.cols : (r+1)*t.cols]
		n := t.span(r)
		vec.Exp(row[:n], row[:n])
		clear(row[n:])
	}
}

// scratch is one worker's tile buffers.
type scratch struct {
	s, dp, t []float32 // br×bc tiles: scores/weights, dP/dS, a spare (polynomial)
	m, l     []float32 // br running row statistics
	ones     []float32 // bc ones, for subtracting a scalar with vec.Axpy
	acc      []float64 // the running backward item's slice of tiled.accs (accumulators)
}

// tiled is the driver shared by flash and polynomial attention: the
// FlashAttention-2 loop structure with O(N) memory. Forward runs over
// (head, query tile) items, each streaming over key tiles; Backward
// recomputes the score tiles, running over (head, key-tile group) items
// so that dK and dV rows have one writer, and sums the groups' partial
// dQ in a fixed order.
type tiled struct {
	name    string // mechanism, for panics
	fwdOp   string // name+".Forward", made once: concatenating per call allocates
	bwdOp   string
	causal  bool
	br, bc  int // tile rows (queries) and columns (keys)
	weights weighting

	// Saved by Forward for Backward.
	q, k, v *tensor.Tensor
	o       []float32 // copy of the output: callers may reuse theirs
	stat    []float32 // [B·H·N] per-row statistic (logsumexp, denominator)

	// Backward buffers.
	delta []float32  // [B·H·N] per-row dO·O (scaled)
	up    []float32  // [B·H·N·h] rescaled dO (polynomial only)
	dqs   []float32  // [B·H·(groups−1)·N·h] partial dQ of key-tile groups 1…
	accN  int        // floats each backward item accumulates (see accumulator), or 0
	accs  []float64  // [B·H·groups·accN]: the items' parameter gradients
	sc    []*scratch // one per worker
	call  tiledCall  // arguments of the running call

	// The work items as bound method values, made once so that handing
	// them to the pool allocates nothing.
	forwardFn, prepareFn, backwardFn, reduceFn func(w, i int)
}

// tiledCall holds the tensors of the Forward or Backward call in progress,
// read by the work items.
type tiledCall struct {
	B, H, N, h     int
	groups         int
	out            []float32 // Forward: o
	dq, dk, dv, do []float32 // Backward
	up             []float32 // dO or its rescaled copy
}

func newTiled(name string, causal bool, block int, w weighting) *tiled {
	t := &tiled{name: name, fwdOp: name + ".Forward", bwdOp: name + ".Backward",
		causal: causal, br: block, bc: block, weights: w}
	t.forwardFn, t.prepareFn, t.backwardFn, t.reduceFn = t.forwardItem, t.prepareItem, t.backwardItem, t.reduceItem
	if a, ok := w.(accumulator); ok {
		t.accN = a.accumulates()
	}
	return t
}

// accumulated returns the parameter gradients of the last Backward's
// items, accN floats per item, in item order (see accumulator).
func (t *tiled) accumulated() []float64 {
	if t.q == nil {
		return nil
	}
	B, H, N := t.q.Shape[0], t.q.Shape[1], t.q.Shape[2]
	return t.accs[:B*H*t.groups(B, H, N)*t.accN]
}

// groups returns how many interleaved key-tile groups Backward splits each
// head into (see backwardItems).
func (t *tiled) groups(B, H, N int) int {
	keyTiles := (N + t.bc - 1) / t.bc
	g := 1
	if bh := B * H; bh > 0 && bh < backwardItems {
		g = (backwardItems + bh - 1) / bh
	}
	return max(min(g, keyTiles), 1)
}

// workers returns how many goroutines a call uses for a shape.
func (t *tiled) workers(B, H, N int) int {
	items := max(B*H*((N+t.br-1)/t.br), B*H*t.groups(B, H, N))
	return max(min(parallel.Threads(), items), 1)
}

// tileDims returns the largest tile used for sequences of length N.
func (t *tiled) tileDims(N int) (rows, cols int) { return min(t.br, N), min(t.bc, N) }

// sizes returns the float32 counts of the buffers held for a shape, in one
// place so that Workspace and the allocation cannot disagree.
func (t *tiled) sizes(B, H, N, h int) (rows, heads, up, dqs, perWorker, workers int) {
	rows = B * H * N
	heads = rows * h
	if t.weights.scaledUpstream() {
		up = heads
	}
	dqs = (t.groups(B, H, N) - 1) * heads
	tiles := 2
	if t.weights.spare() {
		tiles = 3
	}
	br, bc := t.tileDims(N)
	perWorker = tiles*br*bc + 2*br + bc
	return rows, heads, up, dqs, perWorker, t.workers(B, H, N)
}

func (t *tiled) workspace(B, H, N, h int) int64 {
	rows, heads, up, dqs, perWorker, workers := t.sizes(B, H, N, h)
	// stat, delta; saved o; rescaled dO; partial dQ; tile buffers.
	accs := int64(B*H*t.groups(B, H, N)) * int64(t.accN)
	return 4*(2*int64(rows)+int64(heads)+int64(up)+int64(dqs)+int64(perWorker)*int64(workers)) + 8*accs
}

// held returns the float32 count of the buffers the driver holds now, to
// test that Workspace is honest.
func (t *tiled) held() int64 {
	n := len(t.o) + len(t.stat) + len(t.delta) + len(t.up) + len(t.dqs)
	for _, s := range t.sc {
		n += len(s.s) + len(s.dp) + len(s.t) + len(s.m) + len(s.l) + len(s.ones)
	}
	return 4*int64(n) + 8*int64(len(t.accs))
}

// ensure sizes the buffers for a shape; it allocates only when they grow.
func (t *tiled) ensure(B, H, N, h int) {
	rows, heads, up, dqs, _, workers := t.sizes(B, H, N, h)
	t.o = tensor.Grow(t.o, heads)
	t.stat = tensor.Grow(t.stat, rows)
	t.delta = tensor.Grow(t.delta, rows)
	t.up = tensor.Grow(t.up, up)
	t.dqs = tensor.Grow(t.dqs, dqs)
	if need := B * H * t.groups(B, H, N) * t.accN; len(t.accs) < need {
		t.accs = make([]float64, need)
	}
	for len(t.sc) < workers {
		t.sc = append(t.sc, &scratch{})
	}
	br, bc := t.tileDims(N)
	for _, s := range t.sc[:workers] {
		s.s = tensor.Grow(s.s, br*bc)
		s.dp = tensor.Grow(s.dp, br*bc)
		if t.weights.spare() {
			s.t = tensor.Grow(s.t, br*bc)
		}
		s.m = tensor.Grow(s.m, br)
		s.l = tensor.Grow(s.l, br)
		if len(s.ones) != bc {
			s.ones = tensor.Grow(s.ones, bc)
			for i := range s.ones {
				s.ones[i] = 1
			}
		}
	}
}

// forward computes o = Attention(q, k, v) and saves what Backward needs.
func (t *tiled) forward(o, q, k, v *tensor.Tensor) {
	mustMatch(t.fwdOp, q, k, v, o)
	B, H, N, h := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	t.ensure(B, H, N, h)
	t.q, t.k, t.v = q, k, v
	t.call = tiledCall{B: B, H: H, N: N, h: h, out: o.Data}
	items := B * H * ((N + t.br - 1) / t.br)
	parallel.Run(items, t.workers(B, H, N), t.forwardFn)
	t.call = tiledCall{}
}

// forwardItem computes the output rows of one query tile of one head.
// Items run from the last query tile to the first, so that the longest
// causal tiles start first and the short ones fill the gaps.
func (t *tiled) forwardItem(w, item int) {
	c := &t.call
	N, h := c.N, c.h
	bh := item % (c.B * c.H)
	i0 := ((N+t.br-1)/t.br - 1 - item/(c.B*c.H)) * t.br
	rows := min(t.br, N-i0)
	head := bh * N * h
	q, k, v := t.q.Data[head:head+N*h], t.k.Data[head:head+N*h], t.v.Data[head:head+N*h]
	o := c.out[head+i0*h : head+(i0+rows)*h]
	sc := t.sc[w]
	clear(o)
	t.weights.forwardStart(sc, rows)
	end := N
	if t.causal {
		end = i0 + rows
	}
	alpha := t.weights.scoreScale(h)
	for j0 := 0; j0 < end; j0 += t.bc {
		cols := min(t.bc, end-j0)
		blas.SgemmSerial(blas.NoTrans, blas.Trans, alpha, blas.NewGeneral(rows, h, q[i0*h:]), blas.NewGeneral(cols, h, k[j0*h:]), 0, blas.NewGeneral(rows, cols, sc.s))
		t.weights.forwardTile(sc, tile{i0: i0, rows: rows, j0: j0, cols: cols, causal: t.causal}, o, h)
		blas.SgemmSerial(blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(rows, cols, sc.s), blas.NewGeneral(cols, h, v[j0*h:]), 1, blas.NewGeneral(rows, h, o))
	}
	t.weights.forwardEnd(sc, rows, o, t.stat[bh*N+i0:bh*N+i0+rows], h)
	copy(t.o[head+i0*h:], o)
}

// backward computes dq, dk, dv from do for the last forward.
func (t *tiled) backward(dq, dk, dv, do *tensor.Tensor) {
	if t.q == nil {
		panic(fmt.Sprintf("attention.%s.Backward: called before Forward", t.name))
	}
	mustMatch(t.bwdOp, t.q, dq, dk, dv, do)
	B, H, N, h := t.q.Shape[0], t.q.Shape[1], t.q.Shape[2], t.q.Shape[3]
	t.ensure(B, H, N, h)
	c := tiledCall{B: B, H: H, N: N, h: h, groups: t.groups(B, H, N),
		dq: dq.Data, dk: dk.Data, dv: dv.Data, do: do.Data, up: do.Data}
	if t.weights.scaledUpstream() {
		c.up = t.up
	}
	t.call = c
	workers := t.workers(B, H, N)
	parallel.Run(B*H, workers, t.prepareFn)
	parallel.Run(B*H*c.groups, workers, t.backwardFn)
	if c.groups > 1 {
		parallel.Run(B*H*((N+t.br-1)/t.br), workers, t.reduceFn)
	}
	t.call = tiledCall{}
}

// prepareItem computes the per-row quantities of one head's backward pass.
func (t *tiled) prepareItem(_, bh int) {
	c := &t.call
	rows := bh * c.N
	head := rows * c.h
	n := c.N * c.h
	var up []float32 // stays nil unless the weighting rescales dO
	if len(t.up) > 0 {
		up = t.up[head : head+n]
	}
	t.weights.backwardRows(c.do[head:head+n], t.o[head:head+n], t.stat[rows:rows+c.N], t.delta[rows:rows+c.N], up, c.h)
}

// backwardItem runs the key tiles of one group of one head: it owns their
// rows of dK and dV, and its own partial dQ (dq itself for group 0).
func (t *tiled) backwardItem(w, item int) {
	c := &t.call
	N, h, G := c.N, c.h, c.groups
	bh, g := item/G, item%G
	head := bh * N * h
	q, k, v := t.q.Data[head:head+N*h], t.k.Data[head:head+N*h], t.v.Data[head:head+N*h]
	up := c.up[head : head+N*h]
	dq := c.dq[head : head+N*h]
	if g > 0 {
		at := (bh*(G-1) + g - 1) * N * h
		dq = t.dqs[at : at+N*h]
	}
	clear(dq)
	stat, delta := t.stat[bh*N:bh*N+N], t.delta[bh*N:bh*N+N]
	sc := t.sc[w]
	if t.accN > 0 {
		sc.acc = t.accs[item*t.accN : (item+1)*t.accN]
		clear(sc.acc)
	}
	alpha, gradAlpha := t.weights.scoreScale(h), t.weights.gradScale(h)
	for j0 := g * t.bc; j0 < N; j0 += G * t.bc {
		cols := min(t.bc, N-j0)
		dk, dv := c.dk[head+j0*h:head+(j0+cols)*h], c.dv[head+j0*h:head+(j0+cols)*h]
		clear(dk)
		clear(dv)
		start := 0
		if t.causal {
			start = j0 / t.br * t.br
		}
		for i0 := start; i0 < N; i0 += t.br {
			rows := min(t.br, N-i0)
			tl := tile{i0: i0, rows: rows, j0: j0, cols: cols, causal: t.causal}
			blas.SgemmSerial(blas.NoTrans, blas.Trans, alpha, blas.NewGeneral(rows, h, q[i0*h:]), blas.NewGeneral(cols, h, k[j0*h:]), 0, blas.NewGeneral(rows, cols, sc.s))
			t.weights.backwardWeights(sc, tl, stat[i0:i0+rows])
			blas.SgemmSerial(blas.Trans, blas.NoTrans, 1, blas.NewGeneral(rows, cols, sc.s), blas.NewGeneral(rows, h, up[i0*h:]), 1, blas.NewGeneral(cols, h, dv))
			blas.SgemmSerial(blas.NoTrans, blas.Trans, 1, blas.NewGeneral(rows, h, up[i0*h:]), blas.NewGeneral(cols, h, v[j0*h:]), 0, blas.NewGeneral(rows, cols, sc.dp))
			t.weights.backwardScores(sc, tl, delta[i0:i0+rows])
			blas.SgemmSerial(blas.NoTrans, blas.NoTrans, gradAlpha, blas.NewGeneral(rows, cols, sc.dp), blas.NewGeneral(cols, h, k[j0*h:]), 1, blas.NewGeneral(rows, h, dq[i0*h:]))
			blas.SgemmSerial(blas.Trans, blas.NoTrans, gradAlpha, blas.NewGeneral(rows, cols, sc.dp), blas.NewGeneral(rows, h, q[i0*h:]), 1, blas.NewGeneral(cols, h, dk))
		}
	}
}

// reduceItem adds the partial dQ of groups 1… to one query tile of dq, in
// group order.
func (t *tiled) reduceItem(_, item int) {
	c := &t.call
	tiles := (c.N + t.br - 1) / t.br
	bh, i0 := item/tiles, item%tiles*t.br
	rows := min(t.br, c.N-i0)
	n := c.N * c.h
	lo, hi := bh*n+i0*c.h, bh*n+(i0+rows)*c.h
	dq := c.dq[lo:hi]
	if c.groups > 1 {
		vec.AddRows(dq, t.dqs[bh*(c.groups-1)*n+i0*c.h:], n, c.groups-1)
	}
}
