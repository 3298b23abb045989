package blas

import (
	"fmt"
	"os"
	"sync"

	"github.com/polysketch/polysketch/internal/hugepage"
	"github.com/polysketch/polysketch/internal/parallel"
)

// bf16Kernel is one way of computing bf16 products: tiles of up to mr
// rows by one strip of nrBF16 columns, from op(A) converted to bf16 pairs
// (packA) and op(B) packed in strips (PackedBF16).
type bf16Kernel struct {
	name string
	// tileCode and wideCode name the code of tile and wide (codeFor).
	tileCode, wideCode string
	mr                 int // rows of a tile
	mc                 int // rows of A packed at a time, a multiple of mr
	// tile sets C[i, j] for i < rows ≤ mr, j < cols ≤ nrBF16 from kp
	// pairs of A (pair p of row i at a[i·ars + p·aps]) and of the strip b;
	// see dot2 and finish for the arithmetic.
	tile func(rows, cols, kp int, a []uint32, ars, aps int, b []uint32, c []float32, ldc int, alpha, beta float32)
	// wide, where not nil, is tile for rows ≤ wideRows by 4 whole strips
	// (bs words apart), for products of few rows (decoding).
	wide     func(rows, kp int, a []uint32, ars, aps int, b []uint32, bs int, c []float32, ldc int, alpha, beta float32)
	wideRows int
	// cvt sets dst[i] to the bf16 pair (src[2i], src[2i+1]); inter sets
	// dst[j] to the pair (r0[j], r1[j]). Both round as toBF16.
	cvt   func(dst []uint32, src []float32)
	inter func(dst []uint32, r0, r1 []float32)
	// pairRows, where not nil, is inter for the row pairs (2p, 2p+1) of
	// b (ldb apart) for p < pairs, into pair rows p (nrBF16 words apart)
	// of strips whole strips of 32 columns, stride words apart in dst.
	pairRows func(dst []uint32, b []float32, ldb, pairs, strips, stride int)
	// expand, where not nil, sets dst[2i], dst[2i+1] to the float32 bits
	// of the high and the low half of src[i]: tile reads A's pairs so
	// expanded, at twice the strides (wide reads them as they are).
	expand func(dst, src []uint32)
	// tiles, where not nil, computes the products in blocks of 32 rows
	// (AMX; see bf16_amx.go), from A converted by packTiles; tile and
	// wide then take only what wideTiles gives them, one row by a packed
	// B, and must add in the tiles' order.
	tiles     tilesFunc
	packTiles func(t Transpose, a General, k, i0, rows, c0, c1 int, dst []uint32)
	// sgemm, where set, is all the kernel is: see sgemmBF16.
	sgemm bool
}

// codeFor names the code that computes products of m rows: the tiles,
// the wide tiles of decoding, or the tile (each named after the
// instruction set it uses).
func (kn *bf16Kernel) codeFor(m int) string {
	switch {
	case kn.tiles != nil:
		return "amx" // tiles, or for one row the wide code of their order
	case kn.wide != nil && m <= kn.wideRows:
		return kn.wideCode
	}
	return kn.tileCode
}

var goBF16 = &bf16Kernel{name: "go", tileCode: "go", mr: 4, mc: 64, tile: tileGo, cvt: cvtGo, inter: interGo, packTiles: packTilesGo}

// activeBF16 is the kernel GemmBF16 uses: the fastest this CPU runs, or
// the one named by POLYSKETCH_BF16_KERNEL (go, sgemm, avx512bf16, avx512fma, amx) when
// this CPU runs it; POLYSKETCH_NOASM=1 means go. Tests set it to each of
// bf16Kernels() in turn.
var activeBF16 = chooseBF16()

func chooseBF16() *bf16Kernel {
	ks := bf16Kernels()
	if os.Getenv("POLYSKETCH_NOASM") == "1" {
		return goBF16
	}
	if name := os.Getenv("POLYSKETCH_BF16_KERNEL"); name != "" {
		for _, k := range ks {
			if k.name == name {
				return k
			}
		}
		fmt.Fprintf(os.Stderr, "blas: POLYSKETCH_BF16_KERNEL=%s: this CPU runs only %s; using %s\n", name, bf16Names(ks), ks[0].name)
	}
	return ks[0]
}

// sgemmBF16 computes bf16 products with the float32 kernels of Sgemm, on
// operands rounded to bf16 as they are packed (gemm.roundA, roundB) and
// on weights rounded once (PackedBF16.f32): the bf16 values, multiplied
// and added in float32 by Sgemm's order of addition. Products of bf16
// values are exact in float32, so it differs from the other kernels only
// in that order and in not flushing sums below 2⁻¹²⁶: the same values up
// to rounding, not the same bits. It is for the CPUs whose bf16
// instructions multiply no faster than float32 FMAs (Intel's without
// AMX) or that have none.
var sgemmBF16 = &bf16Kernel{name: "sgemm", tileCode: "sgemm", sgemm: true}

// bf16Kernels lists the bf16 kernels this CPU runs, fastest first: the
// assembly kernels that multiply faster than float32, sgemm, the other
// assembly kernels, go.
func bf16Kernels() []*bf16Kernel {
	asm, fast := asmBF16Kernels()
	ks := append(append(asm[:fast:fast], sgemmBF16), asm[fast:]...)
	return append(ks, goBF16)
}

func bf16Names(ks []*bf16Kernel) string {
	s := ""
	for i, k := range ks {
		if i > 0 {
			s += ", "
		}
		s += k.name
	}
	return s
}

// tileGo is the portable tile: dot2 over the pairs, for each element.
func tileGo(rows, cols, kp int, a []uint32, ars, aps int, b []uint32, c []float32, ldc int, alpha, beta float32) {
	var acc [nrBF16]float32
	for i := 0; i < rows; i++ {
		clear(acc[:])
		for p := 0; p < kp; p++ {
			x := a[i*ars+p*aps]
			bs := b[p*nrBF16 : p*nrBF16+cols]
			for j, y := range bs {
				acc[j] = dot2(acc[j], x, y)
			}
		}
		cr := c[i*ldc : i*ldc+cols]
		for j := range cr {
			cr[j] = finish(acc[j], alpha, beta, cr[j])
		}
	}
}

// gemmBF16 is one bf16 product in flight.
type gemmBF16 struct {
	kn          *bf16Kernel
	tA, tB      Transpose
	alpha, beta float32
	a, b        General
	bp          *PackedBF16 // op(B) when given packed; else b
	c           General
	m, n, k     int
}

func newGemmBF16(fn string, tA, tB Transpose, alpha float32, a, b Operand, beta float32, c General) gemmBF16 {
	checkTrans(fn, "tA", tA)
	checkTrans(fn, "tB", tB)
	g := gemmBF16{kn: activeBF16, tA: tA, tB: tB, alpha: alpha, beta: beta, c: c, m: c.Rows, n: c.Cols}
	c.check(fn, "c")
	switch a := a.(type) {
	case General:
		a.check(fn, "a")
		g.a = a
	case *PackedBF16:
		panic(fmt.Sprintf("blas: %s: a is a *PackedBF16; only b may be packed", fn))
	default:
		panic(fmt.Sprintf("blas: %s: a is nil", fn))
	}
	am, ak := stored(tA, g.a.Rows, g.a.Cols)
	if am != g.m {
		panic(fmt.Sprintf("blas: %s(%c%c): op(a) is %d×%d, c is %d×%d: want %d rows", fn, tA, tB, am, ak, c.Rows, c.Cols, c.Rows))
	}
	g.k = ak
	var bk, bn int
	switch b := b.(type) {
	case General:
		b.check(fn, "b")
		g.b = b
		bk, bn = stored(tB, b.Rows, b.Cols)
	case *PackedBF16:
		if b == nil {
			panic(fmt.Sprintf("blas: %s: b is a nil *PackedBF16", fn))
		}
		if tB != NoTrans {
			panic(fmt.Sprintf("blas: %s: tB=%c with a packed b: the transpose is applied when packing, pass NoTrans", fn, tB))
		}
		bk, bn = b.k, b.n
		if b.f32.Data != nil && !g.kn.sgemm {
			// Rounded for sgemm (the kernel in use when it was packed):
			// packed again as any B, rounding nothing more.
			g.b, g.tB = b.f32, b.t
			break
		}
		g.bp = b
	default:
		panic(fmt.Sprintf("blas: %s: b is nil", fn))
	}
	if bk != g.k || bn != g.n {
		panic(fmt.Sprintf("blas: %s(%c%c): op(a) is %d×%d, op(b) %d×%d, c %d×%d: inner or outer dimensions differ", fn, tA, tB, am, ak, bk, bn, c.Rows, c.Cols))
	}
	return g
}

// bf16Workspace holds a product's packed operands; pooled so that calls
// in a steady state do not allocate.
type bf16Workspace struct {
	a, b, t  []uint32
	ap       []uint32 // all of A, converted before the tiles (gemmBF16.packA)
	next     []uint32 // the next row block of A, converted by the tiles kernel
	bnext    []uint32 // B's next k block, converted by the tiles kernel (tileCall.kBlocks)
	e        []uint32 // A's pairs expanded (bf16Kernel.expand)
	tmp, acc []float32
	pb       PackedBF16
	cv       amxConvert
}

var bf16Pool = sync.Pool{New: func() any { return new(bf16Workspace) }}

// trivial does the products with nothing to multiply (as gemm.trivial)
// and reports whether it did.
func (g *gemmBF16) trivial() bool {
	if g.m == 0 || g.n == 0 {
		return true
	}
	if g.alpha != 0 && g.k != 0 {
		return false
	}
	scaleC(g.c.Data, g.c.Stride, g.m, g.n, g.beta)
	return true
}

// run computes the product on up to threads goroutines of the pool: op(B)
// is packed (unless given packed) and op(A) converted in blocks of mc
// rows, then C is split into items of row blocks by column chunks. Every
// element's k sum runs in one tile call whatever the split, so the split
// changes no bits. Small products use fewer threads (see smallThreads).
func (g *gemmBF16) run(threads int) {
	if g.kn.sgemm {
		g.sgemm(threads)
		return
	}
	if g.trivial() {
		return
	}
	if g.kn.tiles != nil && !g.wideTiles() {
		g.runTiles(threads)
		return
	}
	if g.bp != nil && g.m <= g.kn.wideRows {
		// Decoding from a packed weight, bound by reading it.
		threads = smallThreads(threads, 2*g.k*g.n/4)
	} else if g.m*g.n*g.k < parallelMin {
		threads = 1
	}
	if threads > 1 {
		g.parallel(threads)
		return
	}
	ws := bf16Pool.Get().(*bf16Workspace)
	g.item(ws, g.packB(ws), 0, ceilDiv(g.m, g.kn.mr), 0, ceilDiv(g.n, nrBF16))
	ws.pb = PackedBF16{}
	bf16Pool.Put(ws)
}

// sgemm computes g as Sgemm does, with the operands rounded to bf16: A
// as it is packed, B likewise or, packed, from its rounded copy.
func (g *gemmBF16) sgemm(threads int) {
	h := newGemm(g.tA, g.tB, g.m, g.n, g.k, g.alpha, g.a, g.b, g.beta, g.c)
	h.roundA, h.roundB = true, true
	var ws *workspace
	switch {
	case g.bp != nil && g.bp.f32.Data != nil:
		h.tB, h.b, h.ldb, h.roundB = g.bp.t, g.bp.f32.Data, g.bp.f32.Stride, false
	case g.bp != nil:
		// Packed in pairs for another kernel (the one in use then).
		ws = pool.Get().(*workspace)
		ws.rb = hugepage.Grow(ws.rb, g.k*g.n)
		b := g.bp.unpack(ws.rb)
		h.tB, h.b, h.ldb, h.roundB = g.bp.t, b.Data, b.Stride, false
	}
	h.run(threads)
	if ws != nil {
		pool.Put(ws)
	}
}

// wideTiles reports whether a kernel with tiles computes g with its wide
// and tile codes instead, in the tiles' order of addition: one row by a
// packed B (decoding one sequence, bound by reading B).
func (g *gemmBF16) wideTiles() bool {
	return g.kn.wide != nil && g.bp != nil && g.m <= g.kn.wideRows
}

// packB returns op(B) packed: g.bp, or B packed into ws.
func (g *gemmBF16) packB(ws *bf16Workspace) *PackedBF16 {
	if g.bp != nil {
		return g.bp
	}
	ws.b = hugepage.Grow(ws.b, packedWords(g.k, g.n))
	ws.pb = PackedBF16{k: g.k, n: g.n, data: ws.b}
	ws.t = hugepage.Grow(ws.t, ceilDiv(g.k, 2))
	packStrips(g.kn, g.tB, g.b, g.k, g.n, ws.pb.data, 0, ceilDiv(g.n, nrBF16), ws.t)
	return &ws.pb
}

// packBParallel is packB on up to threads goroutines (a value receiver,
// so that only this path moves the product to the heap).
func (h gemmBF16) packBParallel(ws *bf16Workspace, threads int) *PackedBF16 {
	g := &h
	nStr := ceilDiv(g.n, nrBF16)
	groups := min(nStr, 4*threads)
	if g.bp != nil || groups < 2 || g.k*g.n < 1<<16 { // small: not worth waking the others
		return g.packB(ws)
	}
	ws.b = hugepage.Grow(ws.b, packedWords(g.k, g.n))
	bp := &PackedBF16{k: g.k, n: g.n, data: ws.b}
	parallel.Run(groups, threads, func(_, i int) {
		wt := bf16Pool.Get().(*bf16Workspace)
		wt.t = hugepage.Grow(wt.t, ceilDiv(g.k, 2))
		packStrips(g.kn, g.tB, g.b, g.k, g.n, bp.data, i*nStr/groups, (i+1)*nStr/groups, wt.t)
		bf16Pool.Put(wt)
	})
	return bp
}

// parallel is run on more than one goroutine. It works on a copy of g,
// which its goroutines share, so that only this path moves the product
// to the heap.
func (h gemmBF16) parallel(threads int) {
	g := &h
	kn := g.kn
	ws := bf16Pool.Get().(*bf16Workspace)
	defer bf16Pool.Put(ws)
	bp := g.packBParallel(ws, threads)
	nStr := ceilDiv(g.n, nrBF16)
	// Row blocks of mc rows, or of fewer when there are too few blocks to
	// keep the threads busy, each by column chunks of strips.
	mStr := ceilDiv(g.m, kn.mr)
	if kn.wide != nil && g.m <= kn.wideRows {
		// One or two rows (decoding): columns in whole groups of four
		// strips, which the wide kernel computes together.
		groups := ceilDiv(nStr, 4)
		bf16Grid(threads, mStr, 1, groups, min(groups, itemsPerThread*threads), func(ws *bf16Workspace, r0, r1, s0, s1 int) {
			g.item(ws, bp, r0, r1, 4*s0, min(4*s1, nStr))
		})
		return
	}
	rb, cb := grid(mStr, nStr, kn.mr, nrBF16, ceilDiv(g.m, kn.mc), threads)
	bf16Grid(threads, mStr, rb, nStr, cb, func(ws *bf16Workspace, r0, r1, s0, s1 int) {
		g.item(ws, bp, r0, r1, s0, s1)
	})
}

// bf16Grid runs item on up to threads goroutines of the pool over rb×cb
// items of C: the row units [0, rows) in rb even parts by the strips [0,
// nStr) in cb, each item with a workspace of its own.
func bf16Grid(threads, rows, rb, nStr, cb int, item func(ws *bf16Workspace, r0, r1, s0, s1 int)) {
	parallel.Run(rb*cb, threads, func(_, it int) {
		ib, jb := it/cb, it%cb
		ws := bf16Pool.Get().(*bf16Workspace)
		item(ws, ib*rows/rb, (ib+1)*rows/rb, jb*nStr/cb, (jb+1)*nStr/cb)
		bf16Pool.Put(ws)
	})
}

// item computes the rows of row strips [r0, r1) and the columns of
// column strips [s0, s1) of C, converting op(A) mc rows at a time into
// ws.
func (g *gemmBF16) item(ws *bf16Workspace, bp *PackedBF16, r0, r1, s0, s1 int) {
	kn := g.kn
	mr := kn.mr
	kp := ceilDiv(g.k, 2)
	per := kn.mc / mr // strips per block
	ldc := g.c.Stride
	for rs := r0; rs < r1; rs += per {
		re := min(r1, rs+per)
		i0 := rs * mr
		mb := min(re*mr, g.m) - i0
		ws.a = hugepage.Grow(ws.a, packAWords(g.k, mb))
		ars, aps := packA(kn, g.tA, g.a, g.k, i0, mb, ws.a)
		s := s0
		if kn.wide != nil && mb <= kn.wideRows {
			for ; s+4 <= s1 && (s+4)*nrBF16 <= g.n; s += 4 {
				kn.wide(mb, kp, ws.a, ars, aps, bp.strip(s), bp.stripWords(), g.c.Data[i0*ldc+s*nrBF16:], ldc, g.alpha, g.beta)
			}
		}
		a := ws.a
		if kn.expand != nil && s < s1 {
			ws.e = hugepage.Grow(ws.e, 2*len(ws.a))
			kn.expand(ws.e, ws.a)
			a, ars, aps = ws.e, 2*ars, 2*aps
		}
		for ; s < s1; s++ {
			j0 := s * nrBF16
			cols := min(nrBF16, g.n-j0)
			bs := bp.strip(s)
			for i := 0; i < mb; i += mr {
				rows := min(mr, mb-i)
				kn.tile(rows, cols, kp, a[i*ars:], ars, aps, bs, g.c.Data[(i0+i)*ldc+j0:], ldc, g.alpha, g.beta)
			}
		}
	}
}
