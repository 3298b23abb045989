package blas

import (
	"github.com/polysketch/polysketch/internal/hugepage"
	"github.com/polysketch/polysketch/internal/parallel"
)

// Products with few rows of C, as in decoding a token or a few through a
// weight matrix, or with few columns. Packing op(B) copies all of it for
// 2m flops per element, several times the cost of the product itself when
// m is 1, and the product is bound by reading B from memory anyway; so
// these products read both operands where they lie:
//
//   - op(B) = B (NN, TN): C is computed in tiles of up to srows rows by sw
//     columns held in registers (stream), each k step broadcasting one
//     element of A per row against one row of the tile's columns of B;
//   - op(B) = Bᵀ (NT, and TT after copying the small A): each element of C
//     is a dot product of a row of A with a row of B, computed in blocks
//     of drows×4 (dots);
//   - few columns (NT, and NN after copying the small B): the same dot
//     products with the roles of A and B exchanged;
//   - narrow and short op(B) (up to narrowN columns and narrowK rows),
//     any number of rows: the stream kernel again, split by rows. Such a
//     B stays in cache while the kernel broadcasts A from where it lies,
//     and packing A, a transpose of m·k floats for 2n flops each, costs
//     more than the product saves (BenchmarkSgemmNarrow: 1.1–1.6× on the
//     shapes of polysketch's learned-sketch networks). The kernel reads A
//     once per sw columns, so with more than sw columns A must fit in
//     cache (narrowA floats) and op(B) must be B: the NT products measured
//     slower than packed, except those of exactly sw columns, which copy B
//     transposed first.
//
// An element's k sum runs in one kernel call, in order, whatever the
// split, so results do not depend on the number of threads; they differ
// from the packed path's in rounding only.

// wideGrain is the size of B, in floats, that a product by the wide
// kernel (decoding: one or two rows, bound by reading B) gives each
// thread (128 KB): below it another thread costs more in handing out and
// in sharing the cache than it saves. At 1 << 16 the default model's
// bf16 products (256×256, 256×768) ran on one thread; at 1 << 14 one
// sequence of it decoded 1.3× faster on 2 threads (BatchStepBF16 S=1),
// and SmolLM2-135M's larger products were unchanged; on 16 cores of a
// Xeon, 1 << 15 (8 threads for the 256×2048 product, not 16) decoded one
// sequence 1.03-1.3× faster than 1 << 14 and 16 the same, and on 2
// threads both the same (docs/benchmarks.md).
const wideGrain = 1 << 15

// smallThreads returns how many of threads a product that reads size
// floats of B, bound by reading them, should use: one per wideGrain.
func smallThreads(threads, size int) int {
	return max(1, min(threads, size/wideGrain))
}

// smallForm says how a product avoids packing, if it does.
type smallForm int

const (
	packed     smallForm = iota
	streamRows           // few rows, op(B) = B
	dotRows              // few rows, op(B) = Bᵀ
	dotColumns           // few columns, op(A) = A
	streamTall           // narrow, short op(B) = B, many rows
)

// dotCols is the number of columns of a dots block: four dot products
// share each load of a row of A.
const dotCols = 4

// form picks the way to compute g: without packing when C has few rows
// (or columns) for the kernel and is wide (or tall) enough for one whole
// tile, so that a last partial tile can overlap the one before. TN and TT
// products with few columns are not specialized.
func (g *gemm) form() smallForm {
	kn := g.kn
	switch {
	case g.m <= kn.streamMax && g.tB == NoTrans && g.n >= kn.sw:
		return streamRows
	case g.m <= kn.dotsMax && g.tB == Trans && g.n >= dotCols:
		return dotRows
	case g.n <= kn.dotsMax && g.tA == NoTrans && g.m >= dotCols:
		return dotColumns
	case g.n <= kn.narrowN && g.k <= kn.narrowK && g.n >= kn.sw &&
		(g.n == kn.sw || g.tB == NoTrans && g.m*g.k <= kn.narrowA):
		return streamTall
	}
	return packed
}

// small computes g without packing on up to threads goroutines, splitting
// C's long side into whole tiles, when form allows; it reports whether it
// did. g is not trivial.
func (g *gemm) small(threads int) bool {
	f := g.form()
	if f == packed {
		return false
	}
	var ws *workspace
	h := *g
	if g.roundA || g.roundB {
		// These paths read the operands where they lie: round copies.
		ws = pool.Get().(*workspace)
		h.roundCopies(ws)
	}
	switch {
	case f == dotRows && g.tA == Trans:
		// Copy op(A), m×k, to rows of its own: a small transpose.
		if ws == nil {
			ws = pool.Get().(*workspace)
		}
		ws.a = hugepage.Grow(ws.a, g.m*g.k)
		gatherRows(ws.a, h.a, h.lda, g.m, g.k)
		h.tA, h.a, h.lda = NoTrans, ws.a, g.k
	case f == streamTall && g.tB == Trans:
		// Copy op(B), k×n, to rows of its own: a small transpose.
		if ws == nil {
			ws = pool.Get().(*workspace)
		}
		ws.b = hugepage.Grow(ws.b, g.k*g.n)
		gatherRows(ws.b, h.b, h.ldb, g.k, g.n)
		h.tB, h.b, h.ldb = NoTrans, ws.b, g.n
	case f == dotColumns && g.tB == NoTrans:
		// Copy op(B)ᵀ, n×k, likewise.
		if ws == nil {
			ws = pool.Get().(*workspace)
		}
		ws.b = hugepage.Grow(ws.b, g.n*g.k)
		gatherRows(ws.b, h.b, h.ldb, g.n, g.k)
		h.tB, h.b, h.ldb = Trans, ws.b, g.k
	}
	long, tile := g.n, g.kn.sw
	wide := f == streamRows && g.m <= g.kn.wideRows
	switch {
	case wide:
		tile = g.kn.ww
	case f == dotRows:
		tile = dotCols
	case f == dotColumns:
		long, tile = g.m, dotCols
	case f == streamTall:
		long, tile = g.m, g.kn.srows
	}
	tiles := ceilDiv(long, tile)
	if wide {
		threads = smallThreads(threads, g.n*g.k)
	} else if g.m*g.n*g.k < parallelMin {
		threads = 1
	}
	if threads > 1 && tiles > 1 {
		smallParallel(h, f, threads, long, tile)
	} else {
		h.smallRange(f, 0, long)
	}
	if ws != nil {
		pool.Put(ws)
	}
	return true
}

// roundCopies points g's operands to be rounded at copies of them, as
// stored, rounded to bf16 in ws.ra and ws.rb, and clears the flags.
func (g *gemm) roundCopies(ws *workspace) {
	if g.roundA {
		r, c := stored(g.tA, g.m, g.k)
		ws.ra = hugepage.Grow(ws.ra, r*c)
		roundRows(ws.ra, g.a, g.lda, r, c)
		g.a, g.lda, g.roundA = ws.ra, c, false
	}
	if g.roundB {
		r, c := stored(g.tB, g.k, g.n)
		ws.rb = hugepage.Grow(ws.rb, r*c)
		roundRows(ws.rb, g.b, g.ldb, r, c)
		g.b, g.ldb, g.roundB = ws.rb, c, false
	}
}

// roundRows sets dst[i·cols+j] to src[i·ld+j] rounded to bf16, for i <
// rows, j < cols.
func roundRows(dst, src []float32, ld, rows, cols int) {
	for i := 0; i < rows; i++ {
		roundBF16s(dst[i*cols:(i+1)*cols], src[i*ld:i*ld+cols])
	}
}

// smallParallel splits h's long side (C's columns, or rows for
// dotColumns) into ranges of whole tiles for up to threads goroutines of
// the pool. It takes h by value: only this path moves it to the heap.
func smallParallel(h gemm, f smallForm, threads, long, tile int) {
	tiles := ceilDiv(long, tile)
	chunks := min(tiles, itemsPerThread*threads) // slack for uneven threads
	parallel.Run(chunks, threads, func(_, c int) {
		h.smallRange(f, c*tiles/chunks*tile, min((c+1)*tiles/chunks*tile, long))
	})
}

// smallRange computes columns [lo, hi) of C (rows for dotColumns and
// streamTall) in form f; lo is a multiple of the form's tile.
func (g *gemm) smallRange(f smallForm, lo, hi int) {
	switch f {
	case streamRows:
		g.streamTiles(lo, hi)
	case dotRows:
		g.dotTiles(lo, hi)
	case dotColumns:
		g.dotTilesT(lo, hi)
	case streamTall:
		// Rows [lo, hi) as a product of their own: the same row groups,
		// since lo is a multiple of srows, so the same kernel calls.
		h := *g
		ars, _ := g.aStrides()
		h.a, h.c, h.m = g.a[lo*ars:], g.c[lo*g.ldc:], hi-lo
		h.streamTiles(0, g.n)
	}
}

// gatherRows sets dst[i·k+p] = src[p·ld+i] for i < rows, p < k.
func gatherRows(dst, src []float32, ld, rows, k int) {
	for p := 0; p < k; p++ {
		s := src[p*ld : p*ld+rows]
		for i, v := range s {
			dst[i*k+p] = v
		}
	}
}

// aStrides returns the distances in A between consecutive rows and
// consecutive columns of op(A).
func (g *gemm) aStrides() (rows, cols int) {
	if g.tA == Trans {
		return 1, g.lda
	}
	return g.lda, 1
}

// streamTiles computes columns [j0, j1) of C with the stream kernel; j0
// is a multiple of sw. A last partial tile is computed as the whole tile
// ending at column n, in a copy of C whose new columns are then copied
// back, so that every column sees the same arithmetic.
func (g *gemm) streamTiles(j0, j1 int) {
	kn := g.kn
	w := kn.sw
	ars, aps := g.aStrides()
	accum := g.beta != 0
	if r := g.m % kn.srows; g.m > kn.srows && r > 0 && r <= kn.wideRows {
		// The last row group is one or two rows: wide tiles read B faster.
		top, last := *g, *g
		top.m, last.m = g.m-r, r
		last.a, last.c = g.a[top.m*ars:], g.c[top.m*g.ldc:]
		last.streamTiles(j0, j1)
		top.streamTiles(j0, j1)
		return
	}
	if g.m <= kn.wideRows {
		for ; j0+kn.ww <= j1; j0 += kn.ww {
			kn.stream(kn.ww, g.m, g.k, g.a, ars, aps, g.b[j0:], g.ldb, g.c[j0:], g.ldc, g.alpha, g.beta, accum)
		}
	}
	for j := j0; j < j1; j += w {
		for i := 0; i < g.m; i += kn.srows {
			rows := min(kn.srows, g.m-i)
			a := g.a[i*ars:]
			if j+w <= g.n {
				kn.stream(w, rows, g.k, a, ars, aps, g.b[j:], g.ldb, g.c[i*g.ldc+j:], g.ldc, g.alpha, g.beta, accum)
				continue
			}
			// Only C's columns [j, n) go into tmp: the others belong to
			// the tile before, which another goroutine may be writing,
			// and their sums here are thrown away.
			jj := g.n - w
			var tmp [maxTile]float32
			for r := range rows {
				copy(tmp[r*w+j-jj:(r+1)*w], g.c[(i+r)*g.ldc+j:(i+r)*g.ldc+g.n])
			}
			kn.stream(w, rows, g.k, a, ars, aps, g.b[jj:], g.ldb, tmp[:], w, g.alpha, g.beta, accum)
			for r := range rows {
				copy(g.c[(i+r)*g.ldc+j:(i+r)*g.ldc+g.n], tmp[r*w+j-jj:(r+1)*w])
			}
		}
	}
}

// dotTiles computes columns [j0, j1) of C = alpha·A·Bᵀ + beta·C (A as
// stored) with the dots kernel; j0 is a multiple of dotCols, and a last
// partial block overlaps the one before.
func (g *gemm) dotTiles(j0, j1 int) {
	kn := g.kn
	var out [maxDots]float32
	for j := j0; j < j1; j += dotCols {
		jj := min(j, g.n-dotCols)
		for i := 0; i < g.m; i += kn.drows {
			rows := min(kn.drows, g.m-i)
			kn.dots(rows, g.k, g.a[i*g.lda:], g.lda, g.b[jj*g.ldb:], g.ldb, &out)
			for r := range rows {
				c := g.c[(i+r)*g.ldc+j : (i+r)*g.ldc+min(j+dotCols, g.n)]
				g.store(c, out[r*dotCols+j-jj:])
			}
		}
	}
}

// dotTilesT computes rows [i0, i1) of C = alpha·A·Bᵀ + beta·C (A as
// stored) with the dots kernel on the operands exchanged: blocks of Cᵀ.
func (g *gemm) dotTilesT(i0, i1 int) {
	kn := g.kn
	var out [maxDots]float32
	for i := i0; i < i1; i += dotCols {
		ii := min(i, g.m-dotCols)
		for j := 0; j < g.n; j += kn.drows {
			cols := min(kn.drows, g.n-j)
			kn.dots(cols, g.k, g.b[j*g.ldb:], g.ldb, g.a[ii*g.lda:], g.lda, &out)
			for r := i; r < min(i+dotCols, g.m); r++ {
				c := g.c[r*g.ldc+j : r*g.ldc+j+cols]
				for jc := range c {
					v := g.alpha * out[jc*dotCols+r-ii]
					if g.beta != 0 {
						v += g.beta * c[jc]
					}
					c[jc] = v
				}
			}
		}
	}
}

// store sets c[j] = alpha·s[j] + beta·c[j], overwriting c when beta is 0.
func (g *gemm) store(c, s []float32) {
	s = s[:len(c)]
	if g.beta == 0 {
		for j, v := range s {
			c[j] = g.alpha * v
		}
		return
	}
	for j, v := range s {
		c[j] = g.alpha*v + g.beta*c[j]
	}
}

// maxDots bounds drows·dotCols over all kernels.
const maxDots = 4 * dotCols

// laneMask[16-r:] starts with r lanes of -1 and then 0s: the mask of a
// vector's first r lanes, for the dots kernels' last partial vector.
var laneMask = [32]int32{-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}

// stream computes rows of a w-wide tile of C, w = sw (rows ≤ srows) or
// ww (rows ≤ wideRows, the wide kernel):
// C[i,j] = alpha·Σ_p a[i·ars+p·aps]·b[p·ldb+j] (+ beta·C[i,j] when accum).
func (kn *kernel) stream(w, rows, k int, a []float32, ars, aps int, b []float32, ldb int, c []float32, ldc int, alpha, beta float32, accum bool) {
	// The kernels index through pointers: check the extremes here.
	_ = a[(rows-1)*ars+(k-1)*aps]
	_ = b[(k-1)*ldb+w-1]
	_ = c[(rows-1)*ldc+w-1]
	if kn.asm != 0 {
		acc := 0
		if accum {
			acc = 1
		}
		streamAsm(kn.asm, w != kn.sw, rows, k, &a[0], ars, aps, &b[0], ldb, &c[0], ldc, alpha, beta, acc)
		return
	}
	streamGo(rows, k, a, ars, aps, b, ldb, c, ldc, w, alpha, beta, accum)
}

// dots sets out[i·dotCols+j] = Σ_p a[i·lda+p]·b[j·ldb+p] for i < rows ≤
// drows, j < dotCols, p < k.
func (kn *kernel) dots(rows, k int, a []float32, lda int, b []float32, ldb int, out *[maxDots]float32) {
	_ = a[(rows-1)*lda+k-1]
	_ = b[(dotCols-1)*ldb+k-1]
	if kn.asm != 0 {
		dotsAsm(kn.asm, rows, k, &a[0], lda, &b[0], ldb, &out[0])
		return
	}
	dotsGo(rows, k, a, lda, b, ldb, out)
}

// streamGo is the pure-Go stream kernel, for w ≤ 16 and rows ≤ 4: the
// tile lives in an array the compiler keeps in L1 rather than registers.
func streamGo(rows, k int, a []float32, ars, aps int, b []float32, ldb int, c []float32, ldc, w int, alpha, beta float32, accum bool) {
	var acc [4 * 16]float32
	for p := 0; p < k; p++ {
		bp := b[p*ldb : p*ldb+w]
		for i := 0; i < rows; i++ {
			s := a[i*ars+p*aps]
			t := acc[i*w : i*w+w]
			for j, v := range bp {
				t[j] += s * v
			}
		}
	}
	for i := 0; i < rows; i++ {
		t, cr := acc[i*w:i*w+w], c[i*ldc:i*ldc+w]
		for j, v := range t {
			if accum {
				cr[j] = alpha*v + beta*cr[j]
			} else {
				cr[j] = alpha * v
			}
		}
	}
}

// dotsGo is the pure-Go dots kernel.
func dotsGo(rows, k int, a []float32, lda int, b []float32, ldb int, out *[maxDots]float32) {
	b0, b1, b2, b3 := b[:k], b[ldb:ldb+k], b[2*ldb:2*ldb+k], b[3*ldb:3*ldb+k]
	for i := 0; i < rows; i++ {
		ai := a[i*lda : i*lda+k]
		var s0, s1, s2, s3 float32
		for p, v := range ai {
			s0 += v * b0[p]
			s1 += v * b1[p]
			s2 += v * b2[p]
			s3 += v * b3[p]
		}
		out[i*dotCols], out[i*dotCols+1], out[i*dotCols+2], out[i*dotCols+3] = s0, s1, s2, s3
	}
}
