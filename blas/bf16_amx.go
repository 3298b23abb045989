package blas

import (
	"unsafe"

	"github.com/polysketch/polysketch/internal/hugepage"
	"github.com/polysketch/polysketch/internal/parallel"
)

// Products on a kernel with AMX tiles run through tiles, whatever their
// rows: blocks of 32 rows of A by strips of packed B, each 32×32 block of
// C in four tile registers (a block of at most 16 rows, as decoding's,
// in two: amxBF16Half). Each element is the same sequence of TDPBF16PS
// steps in any block, so a row's bits do not depend on the others'.
//
// A tile row holds 16 pairs of k (64 bytes): a chunk. A is converted to
// bf16 in tile order, chunk by chunk (32 rows of 16 pairs, zero beyond m
// and k); PackedBF16 strips are already padded to whole chunks and read
// in place: a B tile is 16 pair rows of 16 columns, 128 bytes apart.
//
// The tile unit multiplies faster than the caches deliver operands that
// are reloaded from L2 for every tile: k is cut into blocks of at most
// amxLimits.chunks chunks, so that a row block of A (one k block of it,
// converted just before use, or by the call before while its tiles
// multiply: amxConvert) stays in L1 while the strips of B stream
// from L2 past it, and the partial sums of C wait in a buffer between k
// blocks (loading and storing them is exact: the bits do not change).

// amxBlock is the rows of A a tiles call multiplies.
const amxBlock = 32

// chunkWords is the words of one chunk of a packed row block of A: 32
// rows of 16 pairs.
const chunkWords = amxBlock * 16

// The modes of a tiles call (as in the generator, blas/_asm).
const (
	amxLoad   = 1 // start from the partial sums in acc, not from zero
	amxStore  = 2 // end by storing the sums to acc, not by finishing C
	amxDirect = 4 // finish by storing the sums into C (alpha 1, beta 0, 32 rows)
	amxBeta   = 8 // finish with beta·C added
)

// tilesFunc computes the sums of 32 rows of A by nstrips strips of B over
// chunks chunks of k: a holds the rows' chunks in tile order (chunkWords
// each: row i, pair p at 32(i mod 16) + 16(i div 16) + p), b the first
// strip's chunks (bs words to the next strip's). The sums of a strip
// (32×32 floats) start from zero, or from acc (amxLoad: 1024 floats a
// strip), and end stored to acc (amxStore), or finish C: C = alpha·sum
// (+ beta·C with amxBeta) in its first rows rows, the last strip's
// columns under mask; amxDirect (alpha 1, beta 0, rows 32) lets the
// kernel store whole strips' sums straight into C. A block of at most 16
// rows reads and writes only the first 16 rows of a strip's sums in acc.
// tmp is a 32×32 scratch. cv, where it is set, is the next call's row
// block of A for the kernel to convert while it computes (amxConvert).
type tilesFunc func(a, b []uint32, bs, nstrips, chunks int, acc []float32, mode int, c []float32, ldc, rows int, alpha, beta float32, mask uint32, tmp []float32, cv *amxConvert)

// amxConvert is the conversion that a tiles call makes, while its tiles
// multiply, of what the next calls read: the next call's row block of A,
// from the float32 rows of op(A) = A (32 rows, whole chunks) to bf16
// pairs in tile order, as packTiles would (set); or some of the row
// pairs of B's next k block, from B as stored to the pair rows of whole
// strips, as packStrips would (setPairs). A call finishes it before it
// returns.
type amxConvert struct {
	// state is the kernel's, addresses and counts: the next chunk's (or
	// strip's) source (0: nothing left) and destination, the chunks
	// (strips) left in the row (pair), the chunks (strips) a row, the
	// rows (pairs) left, the bytes from row to row, the current row's
	// (pair's) first source and destination, 1 for pairs, the bytes
	// from strip to strip of the destination, and the steps (chunks of a
	// row, or pairs of a strip) each chunk of the kernel's loop takes, 1
	// to 4 (see the generator).
	state [11]int
	// What state converts, for tiles written in Go; the slices also keep
	// the arrays that state addresses alive (Go does not move heap
	// arrays, and these are: a's escapes into the kernels' function
	// values, dst is a workspace's).
	a          General // A, or with pairs B's rows (2·pairs) by strips (32 columns each)
	i0, c0, c1 int
	pairs      bool
	stride     int // with pairs: words from strip to strip of dst
	dst        []uint32
}

// set sets cv to convert chunks [c0, c1) of rows [i0, i0+32) of a into
// dst, chunk c0 first, steps (1 to 4) chunks of rows a chunk of the
// kernel's loop (see convertSteps).
func (cv *amxConvert) set(a General, i0, c0, c1 int, dst []uint32, steps int) {
	_ = a.Data[(i0+amxBlock-1)*a.Stride+32*c1-1]
	dst = dst[:(c1-c0)*chunkWords]
	src := int(uintptr(unsafe.Pointer(&a.Data[i0*a.Stride+32*c0])))
	d := int(uintptr(unsafe.Pointer(&dst[0])))
	*cv = amxConvert{state: [11]int{src, d, c1 - c0, c1 - c0, amxBlock, 4 * a.Stride, src, d, 0, 0, steps}, a: a, i0: i0, c0: c0, c1: c1, dst: dst}
}

// convertSteps returns the chunks of rows that a tiles call of nstrips
// strips converts of the next block of A each chunk of its loop: as few
// as finish the block's 32 rows of the call's k block by the end of the
// loop (one for 32 strips or more), at most four. Spread thin, the
// conversion holds the tiles back less than four a chunk did for every
// call (one thread: the default model's GLU input, 64 strips a call,
// 1.38×; 1024³ 1.06×; GPT-2-small's forward and input-gradient products
// 1.05–1.10×; docs/bf16.md); left over for after the loop, it costs more
// than it does in the loop.
func convertSteps(nstrips int) int { return min(4, ceilDiv(amxBlock, nstrips)) }

// setPairs sets cv to convert b, an even number of rows of B as stored
// by whole strips, to its pair rows: pair p of strip s to the 32 words
// at p·32 + s·stride of dst, pair by pair, strip by strip.
func (cv *amxConvert) setPairs(b General, dst []uint32, stride int) {
	pairs, strips := b.Rows/2, b.Cols/nrBF16
	_ = b.Data[(2*pairs-1)*b.Stride+nrBF16*strips-1]
	dst = dst[:(pairs-1)*nrBF16+(strips-1)*stride+nrBF16]
	src := int(uintptr(unsafe.Pointer(&b.Data[0])))
	d := int(uintptr(unsafe.Pointer(&dst[0])))
	*cv = amxConvert{state: [11]int{src, d, strips, strips, pairs, 4 * b.Stride, src, d, 1, 4 * stride, 4}, a: b, pairs: true, stride: stride, dst: dst}
}

// amxLimits are tileItem's budgets: chunks, the chunks of a k block (8
// chunks of A's 32 rows are 16 KB, a third of L1, which leaves room for
// B's lines on their way); panelBytes, the bytes of B's strips (all of k)
// that each row block multiplies in turn, so that they stay in L2 for the
// next; accBytes, the partial sums held between k blocks; aBytes, the
// largest A converted whole before the tiles convert B (see packA). Tests
// make them small, so that small products take every path.
var amxLimits = struct{ chunks, panelBytes, accBytes, aBytes int }{8, 1 << 20, 768 << 10, 32 << 20}

// accFit returns how many strips (row blocks) may share the partial sums
// held between k blocks (amxLimits.accBytes) with n row blocks (strips):
// a strip of a row block holds 4096 bytes of them. At least 1.
func accFit(n int) int { return max(1, amxLimits.accBytes/(n*4096)) }

// tileItem computes row blocks [b0, b1) by strips [s0, s1) of C with
// tiles, in one of two orders:
//
//   - row block by row block (rows): each block of A is converted whole
//     and multiplied by each strip of a group of strips that fits in L2
//     (panelBytes), k block by k block, the partial sums of one block
//     by the group's strips between k blocks. With several groups A is
//     converted once for each.
//   - k block by k block (kBlocks): for each group of row blocks whose
//     partial sums fit in L2 (accBytes), each k block of B's strips
//     is read once from memory for all of the group's blocks. With
//     several groups B is read once for each.
//
// With one k block, and otherwise where it reads less again, the first.
// With ap set, A's blocks are read from it, converted already (packA).
// With bp nil, B is converted as the tiles go (jitB): for each group of
// strips whose partial sums for all the rows fit in L2, k block by k
// block, B's block for those strips and then every row block's.
func (g *gemmBF16) tileItem(ws *bf16Workspace, bp *PackedBF16, ap []uint32, b0, b1, s0, s1 int) {
	if s0 >= s1 || b0 >= b1 {
		return
	}
	nstr := s1 - s0
	chunks := pairsPadded(g.k) / 16
	nk := ceilDiv(chunks, amxLimits.chunks)
	if g.m <= amxBlock/2 {
		// Decoding's few rows: the rows of A take little of L1 whatever
		// k, and storing and reloading the sums between k blocks cost
		// more than the blocks save (576×8192 by one row: 370–383 µs in
		// one call, 495–499 in blocks of 8 chunks).
		nk = 1
	}
	ws.tmp = hugepage.Grow(ws.tmp, amxBlock*nrBF16)
	ws.cv = amxConvert{}
	t := tileCall{g: *g, ws: ws, bp: bp, ap: ap, chunks: chunks, nk: nk}
	switch {
	case g.beta != 0:
		t.finish = amxBeta
	case g.alpha == 1:
		t.finish = amxDirect
	}
	if bp == nil {
		per := min(nstr, accFit(b1-b0))
		for s := s0; s < s1; s += per {
			t.strips(s, min(s1, s+per), s1)
			t.kBlocks(b0, b1, b1-b0)
		}
		return
	}
	// Strips a group of rows holds, and row blocks a group of kBlocks.
	ns := max(1, min(nstr, amxLimits.panelBytes/(chunks*2048)))
	nb := min(b1-b0, accFit(nstr))
	// What each reads again: A's rows, converted once more for each more
	// strip group; B's strips, once more for each more row group.
	againA := (ceilDiv(nstr, ns) - 1) * (b1 - b0) * amxBlock * g.k * 4
	againB := (ceilDiv(b1-b0, nb) - 1) * nstr * chunks * 2048
	if nk == 1 || againA < againB {
		for s := s0; s < s1; s += ns {
			t.strips(s, min(s1, s+ns), s1)
			t.rows(b0, b1)
		}
		return
	}
	t.strips(s0, s1, s1)
	t.kBlocks(b0, b1, nb)
}

// tileCall holds what the calls of the tiles kernel of one item share. It
// holds a copy of the product: the kernel's arguments leak (they go to
// function values), and a pointer would move the caller's product to the
// heap.
type tileCall struct {
	g          gemmBF16
	ws         *bf16Workspace
	bp         *PackedBF16
	ap         []uint32 // A converted whole (packA), or nil
	s0, nstr   int      // the strips multiplied
	chunks, nk int
	finish     int // the mode bits that finish C
	mask       uint32
}

// strips sets the calls to strips [s0, s1) of an item ending at strip
// last.
func (t *tileCall) strips(s0, s1, last int) {
	t.s0, t.nstr = s0, s1-s0
	t.mask = colMask(nrBF16)
	if s1 == last {
		t.mask = colMask(min(nrBF16, t.g.n-(s1-1)*nrBF16))
	}
}

// rows computes row block by row block. Where the next block is 32 rows
// of A as stored, k is whole chunks, and the kernel has the room, it
// converts the next block while it multiplies the current one, into the
// other of two buffers: as few chunks of rows a chunk of its loop as
// finish it in the call, up to four, so that 8 strips convert a block in
// one call (convertSteps), and on rows of at least 8 chunks (1 KB), as
// the model's products (1.02–1.23× their speed on one thread,
// BenchmarkGemmBF16Kernels); the sketch networks' products, of few
// strips or short rows, ran slower so (0.5–0.9×).
func (t *tileCall) rows(b0, b1 int) {
	g, ws := &t.g, t.ws
	if t.ap == nil {
		ws.a = hugepage.Grow(ws.a, t.chunks*chunkWords)
	}
	if t.nk > 1 {
		ws.acc = hugepage.Grow(ws.acc, t.nstr*1024)
	}
	inKernel := t.ap == nil && g.tA == NoTrans && g.k%32 == 0 && g.k >= 256 && t.nstr >= 8 && b1-b0 > 1
	if inKernel {
		ws.next = hugepage.Grow(ws.next, t.chunks*chunkWords)
	}
	converted := false // ws.a holds block blk already
	for blk := b0; blk < b1; blk++ {
		i0 := blk * amxBlock
		rows := min(amxBlock, g.m-i0)
		a := ws.a
		if t.ap != nil {
			a = t.ap[blk*t.chunks*chunkWords:]
		} else if !converted {
			g.kn.packTiles(g.tA, g.a, g.k, i0, rows, 0, t.chunks, a)
		}
		converted = inKernel && blk+1 < b1 && i0+2*amxBlock <= g.m
		for kb := 0; kb < t.nk; kb++ {
			c0, c1 := kb*t.chunks/t.nk, (kb+1)*t.chunks/t.nk
			if converted {
				ws.cv.set(g.a, i0+amxBlock, c0, c1, ws.next[c0*chunkWords:], convertSteps(t.nstr))
			}
			t.call(blk, rows, kb, c0, c1, a[c0*chunkWords:], ws.acc)
		}
		if converted {
			ws.a, ws.next = ws.next, ws.a
		}
	}
}

// kBlocks computes k block by k block, for groups of group row blocks.
// As in rows, the kernel converts the next row block's k block of A
// while it multiplies this one's, where A is as stored, k whole chunks
// and the calls have the room. Where the tiles convert B as they go
// (jitB), the calls of a k block may convert B's next one instead, each
// a share of its pairs, where its strips are whole and its rows within k.
func (t *tileCall) kBlocks(b0, b1, group int) {
	g, ws := &t.g, t.ws
	ws.acc = hugepage.Grow(ws.acc, group*t.nstr*1024)
	words := ceilDiv(t.chunks, t.nk) * chunkWords
	ws.a = hugepage.Grow(ws.a, words)
	jit := t.bp == nil
	nextB := jit && (t.s0+t.nstr)*nrBF16 <= g.n
	nextA := t.ap == nil && g.tA == NoTrans && g.k%32 == 0 && t.nstr >= 8 && group > 1
	if nextA {
		ws.next = hugepage.Grow(ws.next, words)
	}
	for gb := b0; gb < b1; gb += group {
		ge := min(b1, gb+group)
		// Calls that may convert (a block of at most 16 rows converts
		// nothing): all but a last block of so few rows.
		calls := ge - gb
		if g.m-(ge-1)*amxBlock <= amxBlock/2 {
			calls--
		}
		ready := false // ws.b holds this k block of B already
		for kb := 0; kb < t.nk; kb++ {
			c0, c1 := kb*t.chunks/t.nk, (kb+1)*t.chunks/t.nk
			if jit && !ready {
				t.packB(c0, c1)
			}
			// This k block's calls convert the next one's pairs
			// [0, pairs), from chunk n0, strips stride words apart:
			// where that is at most a pair of each strip for each
			// chunk of a call's loop. At two (256 rows by 23 strips,
			// eight calls a k block) the tiles waited on the loads, and
			// the product ran slower than with the pairs converted
			// apart; at a third of one, 8–15% faster (docs/bf16.md).
			// (One conversion a call: A's next block where B's is not.)
			pairs, n0, stride := 0, 0, 0
			if nextB && kb+1 < t.nk && calls > 0 {
				n1 := (kb + 2) * t.chunks / t.nk
				n0 = (kb + 1) * t.chunks / t.nk
				if 32*n1 <= g.k && 16*(n1-n0) <= calls*(c1-c0) {
					pairs, stride = 16*(n1-n0), (n1-n0)*chunkWords
					ws.bnext = hugepage.Grow(ws.bnext, t.nstr*stride)
				}
			}
			converted := false // ws.a holds block blk's k block already
			for blk, j := gb, 0; blk < ge; blk++ {
				i0 := blk * amxBlock
				rows := min(amxBlock, g.m-i0)
				a := ws.a
				if t.ap != nil {
					a = t.ap[(blk*t.chunks+c0)*chunkWords:]
				} else if !converted {
					g.kn.packTiles(g.tA, g.a, g.k, i0, rows, c0, c1, a)
				}
				converted = nextA && pairs == 0 && blk+1 < ge && i0+2*amxBlock <= g.m
				if converted {
					ws.cv.set(g.a, i0+amxBlock, c0, c1, ws.next, convertSteps(t.nstr))
				}
				if pairs > 0 && rows > amxBlock/2 {
					p0, p1 := j*pairs/calls, (j+1)*pairs/calls
					j++
					if p1 > p0 {
						k0, j0 := 32*n0+2*p0, t.s0*nrBF16
						ws.cv.setPairs(g.b.Slice(k0, k0+2*(p1-p0), j0, j0+t.nstr*nrBF16), ws.bnext[p0*nrBF16:], stride)
					}
				}
				acc := ws.acc[(blk-gb)*t.nstr*1024 : (blk-gb+1)*t.nstr*1024]
				t.call(blk, rows, kb, c0, c1, a, acc)
				if converted {
					ws.a, ws.next = ws.next, ws.a
				}
			}
			ready = pairs > 0
			if ready {
				ws.b, ws.bnext = ws.bnext, ws.b
			}
		}
	}
}

// call runs the kernel on row block blk (rows rows) and k block kb
// (chunks [c0, c1)), A's chunks in a, the partial sums in acc.
func (t *tileCall) call(blk, rows, kb, c0, c1 int, a []uint32, acc []float32) {
	g := &t.g
	mode := t.finish
	if kb < t.nk-1 {
		mode = amxStore
	}
	if kb > 0 {
		mode |= amxLoad
	}
	if rows < amxBlock {
		mode &^= amxDirect
	}
	var b []uint32
	var bs int
	if t.bp != nil {
		bs = t.bp.stripWords()
		b = t.bp.data[t.s0*bs+c0*chunkWords:]
	} else {
		b, bs = t.ws.b, (c1-c0)*chunkWords // packB's
	}
	ldc := g.c.Stride
	i0 := blk * amxBlock
	g.kn.tiles(a, b, bs, t.nstr, c1-c0, acc, mode,
		g.c.Data[i0*ldc+t.s0*nrBF16:], ldc, rows, g.alpha, g.beta, t.mask, t.ws.tmp, &t.ws.cv)
}

// packB converts chunks [c0, c1) of k of the strips the calls multiply
// from op(B) = B into the workspace, strip after strip, as PackedBF16
// lays out its strips for that part of k alone (see jitB).
func (t *tileCall) packB(c0, c1 int) {
	g, ws := &t.g, t.ws
	k0, k1 := 32*c0, min(32*c1, g.k)
	j0, j1 := t.s0*nrBF16, min((t.s0+t.nstr)*nrBF16, g.n)
	ws.b = hugepage.Grow(ws.b, t.nstr*(c1-c0)*chunkWords)
	packStrips(g.kn, NoTrans, g.b.Slice(k0, k1, j0, j1), k1-k0, j1-j0, ws.b, 0, t.nstr, nil)
}

// traffic estimates the words a product moves converting its operands,
// split into rb row parts by cb strip parts, with op(B) packed first
// (jit false) or converted k block by k block by the tiles (jit, which
// needs B a General as stored, and more than one k block). Packed first,
// B is read (float32), written and read back for each group of rows
// whose partial sums fit in L2; converted by the tiles it is read once
// for each row part and its packed k block stays in L2, but A is
// converted again for each group of strips whose partial sums fit. A is
// read once for each strip part either way.
func (g *gemmBF16) traffic(rb, cb int, jit bool) int {
	blocks := ceilDiv(ceilDiv(g.m, amxBlock), rb)
	strips := ceilDiv(ceilDiv(g.n, nrBF16), cb)
	a, b := g.m*g.k*cb, g.n*g.k
	if jit {
		return a*ceilDiv(strips, accFit(blocks)) + b*rb
	}
	return a + b*3/2 + b/2*rb*ceilDiv(blocks, accFit(strips))
}

// jitB reports whether the tiles should convert op(B) as they go, in jcb
// strip parts of all the rows, rather than pack it first and split C
// into rb×cb parts: where they can (B a General as stored, as the weight
// gradients' dy, more rows than decoding's, more than one k block) and
// that moves fewer words (traffic).
func (g *gemmBF16) jitB(rb, cb, jcb int) bool {
	return g.bp == nil && g.tB == NoTrans && g.m > amxBlock/2 && pairsPadded(g.k)/16 > amxLimits.chunks &&
		g.traffic(1, jcb, true) < g.traffic(rb, cb, false)
}

// packTilesGo sets dst, chunk by chunk in tile order, to the chunks [c0,
// c1) of rows [i0, i0+rows) of op(a) (k columns) in bf16 pairs, zero
// beyond k and from row rows on. Kernels with assembly for the whole
// chunks call it for the rest.
func packTilesGo(t Transpose, a General, k, i0, rows, c0, c1 int, dst []uint32) {
	dst = dst[:(c1-c0)*chunkWords]
	at := func(i, q int) float32 {
		if q >= k {
			return 0
		}
		if t == NoTrans {
			return a.Data[(i0+i)*a.Stride+q]
		}
		return a.Data[q*a.Stride+i0+i]
	}
	for c := c0; c < c1; c++ {
		d := dst[(c-c0)*chunkWords : (c-c0+1)*chunkWords]
		for i := 0; i < amxBlock; i++ {
			r := d[tileRow(i) : tileRow(i)+16]
			if i >= rows {
				clear(r)
				continue
			}
			for p := range r {
				q := 32*c + 2*p
				r[p] = pairBF16(at(i, q), at(i, q+1))
			}
		}
	}
}

// tileRow returns the offset of row i's pairs in a chunk of A in tile
// order: rows i and i+16 share a line of 128 bytes.
func tileRow(i int) int { return 32*(i%16) + 16*(i/16) }

// runTiles computes g with kn.tiles on up
// to threads goroutines, splitting C into items of row blocks by strip
// chunks.
func (g *gemmBF16) runTiles(threads int) {
	if threads < 2 || g.m*g.n*g.k < parallelMin {
		ws := bf16Pool.Get().(*bf16Workspace)
		var bp *PackedBF16
		var ap []uint32
		if g.jitB(1, 1, 1) {
			ap = g.packA(ws, 1, 1)
		} else {
			bp = g.packB(ws)
		}
		g.tileItem(ws, bp, ap, 0, ceilDiv(g.m, amxBlock), 0, ceilDiv(g.n, nrBF16))
		ws.pb = PackedBF16{}
		bf16Pool.Put(ws)
		return
	}
	g.tilesParallel(threads)
}

// packA converts all of op(A) to bf16 in tile order into ws.ap, row
// block by row block (chunks whole), on up to threads goroutines, for
// tiles that convert B as they go in parts of parts strips, and returns
// it; or nil where A would be converted only once anyway, or is larger
// than amxLimits.aBytes. Such tiles convert A's k blocks for each group
// of strips whose partial sums fit in L2 (tileItem): for a weight
// gradient of many columns, again and again (24 times for a GPT-2-small
// GLU's, 768×4096 by 6144 columns), each time reading A's float32 across
// its rows (op(A) = xᵀ). Converted once, A's tiles are read as they are.
func (g *gemmBF16) packA(ws *bf16Workspace, parts, threads int) []uint32 {
	blocks := ceilDiv(g.m, amxBlock)
	chunks := pairsPadded(g.k) / 16
	if parts*ceilDiv(ceilDiv(ceilDiv(g.n, nrBF16), parts), accFit(blocks)) < 2 || blocks*chunks*chunkWords*4 > amxLimits.aBytes {
		return nil
	}
	ws.ap = hugepage.Grow(ws.ap, blocks*chunks*chunkWords)
	if threads < 2 {
		for blk := range blocks {
			g.packABlock(ws.ap, blk, chunks)
		}
	} else {
		g.packAParallel(ws.ap, blocks, chunks, threads)
	}
	return ws.ap
}

// packABlock converts row block blk of op(A), chunks chunks, into its
// place in ap.
func (g *gemmBF16) packABlock(ap []uint32, blk, chunks int) {
	i0 := blk * amxBlock
	g.kn.packTiles(g.tA, g.a, g.k, i0, min(amxBlock, g.m-i0), 0, chunks, ap[blk*chunks*chunkWords:])
}

// packAParallel is packA's conversion on up to threads goroutines (a
// value receiver, so that only this path moves the product to the heap).
func (h gemmBF16) packAParallel(ap []uint32, blocks, chunks, threads int) {
	parallel.Run(blocks, threads, func(_, blk int) { h.packABlock(ap, blk, chunks) })
}

// tilesParallel is runTiles on more than one goroutine. It works on a
// copy of g, which its goroutines share, so that only this path moves
// the product to the heap.
func (h gemmBF16) tilesParallel(threads int) {
	g := &h
	nStr := ceilDiv(g.n, nrBF16)
	blocks := ceilDiv(g.m, amxBlock)
	rb, cb := grid(blocks, nStr, amxBlock, nrBF16, 1, threads)
	if _, jcb := grid(1, nStr, amxBlock, nrBF16, 1, threads); jcb >= threads && g.jitB(rb, cb, jcb) {
		// Items of all the rows by strips, each converting its strips
		// of B as it goes, none what another does; A converted once for
		// all of them, where it fits, not by each.
		ws := bf16Pool.Get().(*bf16Workspace)
		defer bf16Pool.Put(ws)
		ap := g.packA(ws, jcb, threads)
		bf16Grid(threads, blocks, 1, nStr, jcb, func(ws *bf16Workspace, b0, b1, s0, s1 int) {
			g.tileItem(ws, nil, ap, b0, b1, s0, s1)
		})
		return
	}
	ws := bf16Pool.Get().(*bf16Workspace)
	defer bf16Pool.Put(ws)
	bp := g.packBParallel(ws, threads)
	// Items split by strips too would each convert their rows of A: A
	// converted once for all of them instead, where it fits. (On 16
	// cores, items converting the weight gradients' A = xᵀ across its
	// rows took 5× the time one thread does.)
	var ap []uint32
	if cb > 1 {
		ap = g.packA(ws, cb, threads)
	}
	bf16Grid(threads, blocks, rb, nStr, cb, func(ws *bf16Workspace, b0, b1, s0, s1 int) {
		g.tileItem(ws, bp, ap, b0, b1, s0, s1)
	})
}

// colMask has bit j set for each of the first cols ≤ 32 columns.
func colMask(cols int) uint32 { return uint32(1<<cols - 1) }
