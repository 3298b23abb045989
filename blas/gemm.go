package blas

import (
	"sync"

	"github.com/polysketch/polysketch/internal/hugepage"
	"github.com/polysketch/polysketch/internal/parallel"
)

// gemm is one product in flight: the arguments of Sgemm and the kernel
// that computes it.
type gemm struct {
	kn     *kernel
	tA, tB Transpose
	m, n   int
	k      int
	alpha  float32
	a      []float32
	lda    int
	b      []float32
	ldb    int
	beta   float32
	c      []float32
	ldc    int
	// roundA and roundB round op(A) and op(B) to bf16 as they are packed
	// (or copied, by the paths that do not pack): the sgemm kernel of
	// GemmBF16.
	roundA, roundB bool
}

// workspace holds packing buffers; pooled so that steady-state calls do
// not allocate.
type workspace struct {
	a, b   []float32
	ra, rb []float32 // the operands rounded to bf16, for the paths that do not pack
}

var pool = sync.Pool{New: func() any { return new(workspace) }}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// trivial does the products that need no multiplication (empty C, or
// alpha or k zero: C = beta·C without reading A and B) and reports whether
// it did.
func (g *gemm) trivial() bool {
	if g.m == 0 || g.n == 0 {
		return true
	}
	if g.alpha != 0 && g.k != 0 {
		return false
	}
	scaleC(g.c, g.ldc, g.m, g.n, g.beta)
	return true
}

// scaleC sets the m×n matrix c (leading dimension ldc) to beta·c, as a
// product with nothing to add does: beta 0 clears it (NaNs included).
func scaleC(c []float32, ldc, m, n int, beta float32) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		switch beta {
		case 0:
			clear(row)
		case 1:
		default:
			for j := range row {
				row[j] *= beta
			}
		}
	}
}

// betaFor returns the beta to apply to the k block starting at pc: the
// caller's for the first block, 1 after, since earlier blocks have already
// scaled C.
func (g *gemm) betaFor(pc int) (beta float32, accum bool) {
	if pc == 0 {
		return g.beta, g.beta != 0
	}
	return 1, true
}

// serial runs the whole product on the calling goroutine.
func (g *gemm) serial() {
	if g.trivial() || g.small(1) {
		return
	}
	kn := g.kn
	ws := pool.Get().(*workspace)
	for jc := 0; jc < g.n; jc += kn.nc {
		nb := min(kn.nc, g.n-jc)
		nStr := ceilDiv(nb, kn.nr)
		for pc := 0; pc < g.k; pc += kn.kc {
			kb := min(kn.kc, g.k-pc)
			ws.b = hugepage.Grow(ws.b, nStr*kn.nr*kb)
			g.packB(ws.b, jc, nb, pc, kb, 0, nStr)
			for ic := 0; ic < g.m; ic += kn.mc {
				mb := min(kn.mc, g.m-ic)
				ws.a = hugepage.Grow(ws.a, ceilDiv(mb, kn.mr)*kn.mr*kb)
				g.packA(ws.a, ic, mb, pc, kb)
				g.macro(ws.a, ws.b, ic, mb, jc, nb, 0, nStr, pc, kb)
			}
		}
	}
	pool.Put(ws)
}

// Below this many multiply-adds a product runs on one goroutine: starting
// others costs more than it saves.
const parallelMin = 1 << 18

// bBudget bounds the packed B that run holds at once, in floats (16 MiB),
// and aBudget the packed A shared by the items of a product split into
// columns as well as rows.
const (
	bBudget = 4 << 20
	aBudget = 4 << 20
)

// kBudget is the packed panel of B, in floats (4 MiB), above which a
// parallel product of several k blocks packs and multiplies one k block
// at a time (byK).
const kBudget = 1 << 20

// itemsPerThread is how many items a parallel product aims for per
// thread: the pool hands them out one at a time, so a thread slowed by
// others finishes fewer.
const itemsPerThread = 3

// run computes the product on up to threads goroutines of the pool, in
// two phases per panel of C's columns: first all of B's panel is packed
// (split by k block and strip), then C is split into items of row blocks
// by column chunks, each of which runs through every k block. When there
// are too few row blocks for the threads, C's columns are split too, and
// A is packed once in the first phase and shared, not once per column
// chunk. Block edges are multiples of mr and nr, and each item goes
// through the k blocks in order, so every element of C sees the same
// kernel calls whatever the split.
func (g *gemm) run(threads int) {
	if g.trivial() || g.small(threads) {
		return
	}
	if threads <= 1 || g.m*g.n*g.k < parallelMin {
		g.serial()
		return
	}
	g.parallel(threads)
}

// parallel is the body of run for products worth splitting. It works on
// a copy of g, which its goroutines share, so that only this path moves
// the product to the heap.
func (h gemm) parallel(threads int) {
	g := &h
	kn := g.kn
	ws := pool.Get().(*workspace)
	defer pool.Put(ws)

	mStr := ceilDiv(g.m, kn.mr)
	want := itemsPerThread * threads
	nc := min(kn.nc, max(kn.nr, bBudget/g.k/kn.nr*kn.nr))
	rb, _ := grid(mStr, ceilDiv(min(nc, g.n), kn.nr), kn.mr, kn.nr, ceilDiv(g.m, kn.mc), threads)
	kBlocks := ceilDiv(g.k, kn.kc)
	// A packed once, shared by the column chunks, when they are several
	// and it fits: the packed block of the k block at pc starts at
	// pc·mStr·mr, its strip s at s·mr·kb from there.
	shareA := rb < want && mStr*kn.mr*g.k <= aBudget
	if kBlocks > 1 && min(nc, g.n)*g.k > kBudget {
		g.byK(ws, threads, rb)
		return
	}
	for jc := 0; jc < g.n; jc += nc {
		pn := panel{g: g, jc: jc, nb: min(nc, g.n-jc), mStr: mStr, rb: rb}
		pn.nStr = ceilDiv(pn.nb, kn.nr)
		_, pn.cb = grid(mStr, pn.nStr, kn.mr, kn.nr, rb, threads)
		// The panel for the k block at pc starts at pc·nStr·nr.
		ws.b = hugepage.Grow(ws.b, pn.nStr*kn.nr*g.k)
		pn.bp = ws.b
		pn.groups = max(1, min(pn.nStr, 4*threads/kBlocks))
		if jc == 0 && pn.cb == 1 {
			shareA = false // the first panel is the widest: none has chunks
		}
		if shareA && jc == 0 {
			ws.a = hugepage.Grow(ws.a, mStr*kn.mr*g.k)
			pn.packA = true
		}
		pn.ap, pn.shareA = ws.a, shareA
		pn.run(threads)
	}
}

// byK is parallel for products whose panel of B, packed for all of k,
// would hold more than kBudget floats (the weight gradients, xᵀ·dy, k the
// tokens of a step): per panel of C's columns, one k block at a time, B's
// block is packed (split by strip) and A's too when shared, then every
// item multiplies it into its part of C, so that what the items read was
// packed just before and is still in the caches. Packing all of k first
// left megabytes between packing and use: on one thread that path ran
// these products 8–21% slower than serial, byK 1–3%. The packing of the
// next k block runs in the same phase as the products of this one (see
// panel.stream). Each element of C sees the same kernel calls, in the
// same order, as in parallel and serial.
func (g *gemm) byK(ws *workspace, threads, rb int) {
	kn := g.kn
	mStr := ceilDiv(g.m, kn.mr)
	nc := min(kn.nc, max(kn.nr, bBudget/kn.kc/kn.nr*kn.nr))
	for jc := 0; jc < g.n; jc += nc {
		pn := panel{g: g, jc: jc, nb: min(nc, g.n-jc), mStr: mStr, rb: rb}
		pn.nStr = ceilDiv(pn.nb, kn.nr)
		_, pn.cb = grid(mStr, pn.nStr, kn.mr, kn.nr, rb, threads)
		pn.shareA = rb < itemsPerThread*threads && pn.cb > 1 && mStr*kn.mr*kn.kc <= aBudget
		pn.packA = pn.shareA
		// Two k blocks' buffers: one multiplied while the next is packed.
		ws.b = hugepage.Grow(ws.b, 2*pn.nStr*kn.nr*kn.kc)
		if pn.shareA {
			ws.a = hugepage.Grow(ws.a, 2*mStr*kn.mr*kn.kc)
		}
		pn.bp, pn.ap = ws.b, ws.a
		pn.groups = max(1, min(pn.nStr, 2*threads))
		pn.stream(threads)
	}
}

// panel is one panel of C's columns of a parallel product, split into rb
// row blocks (of mStr strips) by cb column chunks (of nStr strips), with
// the buffers its phases pack into: bp for B's k blocks, from the first
// of the phase on, each split into groups items; ap for A's, where the
// items share them (shareA) and the phase packs them (packA).
type panel struct {
	g             *gemm
	jc, nb, nStr  int
	mStr, rb, cb  int
	groups        int
	ap, bp        []float32
	packA, shareA bool
}

// packItems returns the items of packing one k block: B's groups, then
// A's row blocks with packA.
func (pn *panel) packItems() int {
	if pn.packA {
		return pn.groups + pn.rb
	}
	return pn.groups
}

// pack runs packing item i of the k block at pc, into the block's
// buffers at the offsets ao in ap and bo in bp.
func (pn *panel) pack(i, pc, ao, bo int) {
	g, kn := pn.g, pn.g.kn
	kb := min(kn.kc, g.k-pc)
	if i >= pn.groups { // a row block of A
		ib := i - pn.groups
		s0, s1 := ib*pn.mStr/pn.rb, (ib+1)*pn.mStr/pn.rb
		g.packA(pn.ap[ao+s0*kn.mr*kb:], s0*kn.mr, min(s1*kn.mr, g.m)-s0*kn.mr, pc, kb)
		return
	}
	g.packB(pn.bp[bo:], pn.jc, pn.nb, pc, kb, i*pn.nStr/pn.groups, (i+1)*pn.nStr/pn.groups)
}

// multiply runs item of C over the k blocks from p0 to p1, whose packed
// blocks follow one another from ao in ap and bo in bp (A's only with
// shareA: else the item packs its own into a workspace).
func (pn *panel) multiply(item, p0, p1, ao, bo int) {
	g, kn := pn.g, pn.g.kn
	ib, jb := item/pn.cb, item%pn.cb
	s0, s1 := ib*pn.mStr/pn.rb, (ib+1)*pn.mStr/pn.rb
	ic, mb := s0*kn.mr, min(s1*kn.mr, g.m)-s0*kn.mr
	var wa *workspace
	if !pn.shareA {
		wa = pool.Get().(*workspace)
		defer pool.Put(wa)
	}
	for pc := p0; pc < p1; pc += kn.kc {
		kb := min(kn.kc, g.k-pc)
		var a []float32
		if pn.shareA {
			a = pn.ap[ao+(pc-p0)*pn.mStr*kn.mr+s0*kn.mr*kb:]
		} else {
			wa.a = hugepage.Grow(wa.a, (s1-s0)*kn.mr*kb)
			g.packA(wa.a, ic, mb, pc, kb)
			a = wa.a
		}
		g.macro(a, pn.bp[bo+(pc-p0)*pn.nStr*kn.nr:], ic, mb, pn.jc, pn.nb, jb*pn.nStr/pn.cb, (jb+1)*pn.nStr/pn.cb, pc, kb)
	}
}

// run packs every k block (B's, and A's with packA), then multiplies
// them into every item's part of C, k block by k block: two phases of
// the pool. The packed block of the k block at pc starts at pc·nStr·nr in
// bp and pc·mStr·mr in ap, its strip s at s·nr·kb (s·mr·kb) from there.
func (pn *panel) run(threads int) {
	g, kn := pn.g, pn.g.kn
	per := pn.packItems()
	parallel.Run(ceilDiv(g.k, kn.kc)*per, threads, func(_, i int) {
		pc := i / per * kn.kc
		pn.pack(i%per, pc, pc*pn.mStr*kn.mr, pc*pn.nStr*kn.nr)
	})
	parallel.Run(pn.rb*pn.cb, threads, func(_, item int) {
		pn.multiply(item, 0, g.k, 0, 0)
	})
}

// stream is run for all of k, one k block at a time, in two halves of
// the buffers: the phase that multiplies block b (from one half) also
// packs block b+1 (into the other), so that a product of K blocks is K+1
// phases, not 2K, and each phase's items, the products first, the smaller
// packing after them, even out the threads' ends. No item of a phase
// writes what another reads: the packing writes the half that the
// products of the phase before read.
func (pn *panel) stream(threads int) {
	g, kn := pn.g, pn.g.kn
	blocks := ceilDiv(g.k, kn.kc)
	packs, mults := pn.packItems(), pn.rb*pn.cb
	aHalf, bHalf := pn.mStr*kn.mr*kn.kc, pn.nStr*kn.nr*kn.kc
	for b := 0; b <= blocks; b++ {
		nm, np := 0, 0
		if b > 0 {
			nm = mults
		}
		if b < blocks {
			np = packs
		}
		parallel.Run(nm+np, threads, func(_, i int) {
			if i < nm {
				pc := (b - 1) * kn.kc
				h := (b - 1) % 2
				pn.multiply(i, pc, min(g.k, pc+kn.kc), h*aHalf, h*bHalf)
				return
			}
			pn.pack(i-nm, b*kn.kc, b%2*aHalf, b%2*bHalf)
		})
	}
}

// grid chooses how a parallel product on threads goroutines splits C:
// into rb row blocks of whole strips of mr rows (of mStr, at least rb0
// blocks) by cb column chunks of whole strips of nr columns (of nStr). It
// aims for itemsPerThread items a thread, and among the splits that reach
// it takes the one whose items are the squarest, reading the fewest
// operand floats per multiply-add; with fewer strips than that, every
// strip pair is an item. Items come in a multiple of threads where the
// strips allow (row blocks rounded up when rb0 are already enough), so
// that the last round of items leaves no thread idle: 7 blocks on 2
// threads, or 49 on 16, had the product wait at its end for one block
// (a weight gradient of 1024 rows ran 5–15% faster on 2 threads as 8
// blocks than as 7).
func grid(mStr, nStr, mr, nr, rb0, threads int) (rb, cb int) {
	want := itemsPerThread * threads
	rb0 = max(1, min(rb0, mStr))
	if rb0 >= want {
		return min(mStr, ceilDiv(rb0, threads)*threads), 1
	}
	// The best split whose items are a multiple of threads, else the
	// best of all.
	rb, cb = mStr, nStr
	even, best := false, 0.0
	for r := rb0; r <= mStr; r++ {
		c := min(nStr, ceilDiv(want, r))
		if r*c < want {
			continue
		}
		for m := c; m <= nStr; m++ {
			if r*m%threads == 0 {
				c = m
				break
			}
		}
		rows, cols := float64(ceilDiv(mStr, r)*mr), float64(ceilDiv(nStr, c)*nr)
		q := rows * cols / (rows + cols)
		if e := r*c%threads == 0; e && !even || e == even && q > best {
			even, best, rb, cb = e, q, r, c
		}
		if c == 1 {
			break // more row blocks only make items smaller
		}
	}
	return rb, cb
}

// macro multiplies the packed mb×kb block of A by strips [s0, s1) of the
// packed kb×nb panel of B into C[ic:ic+mb, jc+s0·nr : jc+s1·nr].
func (g *gemm) macro(ap, bp []float32, ic, mb, jc, nb, s0, s1, pc, kb int) {
	kn := g.kn
	mr, nr := kn.mr, kn.nr
	beta, accum := g.betaFor(pc)
	var tmp [maxTile]float32
	for s := s0; s < s1; s++ {
		jr := s * nr
		cols := min(nr, nb-jr)
		bs := bp[s*nr*kb:]
		for ir := 0; ir < mb; ir += mr {
			rows := min(mr, mb-ir)
			as := ap[ir*kb:]
			off := (ic+ir)*g.ldc + jc + jr
			if rows == mr && cols == nr {
				kn.call(kb, &as[0], &bs[0], &g.c[off], g.ldc, g.alpha, beta, accum)
				continue
			}
			// Edge tile: compute it whole into tmp, then add the part
			// that lies inside C.
			kn.call(kb, &as[0], &bs[0], &tmp[0], nr, g.alpha, 0, false)
			for i := 0; i < rows; i++ {
				t := tmp[i*nr : i*nr+cols]
				c := g.c[off+i*g.ldc : off+i*g.ldc+cols]
				if accum {
					for j, v := range t {
						c[j] = v + beta*c[j]
					}
				} else {
					copy(c, t)
				}
			}
		}
	}
}
