package blas

// Products of more than RowBlockBF16 rows on a kernel with AMX tiles
// (prefill, training) run through tiles: blocks of 32 rows of A by
// strips of packed B, each 32×32 block of C in four tile registers.
//
// A tile row holds 16 pairs of k (64 bytes), so A is converted to rows of
// pairsPadded(k) pairs (zero beyond k) and blocks to 32 rows (zero beyond
// m); PackedBF16 strips are already padded to 16 pairs and read in place:
// a B tile is 16 pair rows of 16 columns, 128 bytes apart.

// amxBlock is the rows of A a tiles call multiplies.
const amxBlock = 32

// tilesFunc computes rows ≤ 32 rows by 32·nstrips columns of C, C[i,
// 32t+j] = finish(Σ pairs of a's row i and column j of strip t) for the
// first rows rows, the last strip's columns under mask; a is 32 rows of
// chunks·16 pairs, lda words apart, b the strips (bs words apart), tmp a
// 32×32 scratch.
type tilesFunc func(a []uint32, lda int, b []uint32, bs, nstrips, chunks int, tmp []float32, rows int, c []float32, ldc int, alpha, beta float32, mask uint32)

// packAMX converts rows [i0, i0+rows) of op(a) to bf16 pairs in dst, as
// 32 rows of kpp pairs (rows and pairs past the ends zero).
func packAMX(kn *bf16Kernel, t Transpose, a General, k, i0, rows int, dst, tmp []uint32) {
	kp, kpp := ceilDiv(k, 2), pairsPadded(k)
	dst = dst[:amxBlock*kpp]
	if t == NoTrans {
		for i := 0; i < rows; i++ {
			row := a.Data[(i0+i)*a.Stride : (i0+i)*a.Stride+k]
			d := dst[i*kpp : (i+1)*kpp]
			kn.cvt(d, row[:k&^1])
			if k%2 == 1 {
				d[kp-1] = uint32(toBF16(row[k-1]))
			}
			clear(d[kp:])
		}
	} else {
		// op(a)'s rows are a's columns: the pairs of rows i0.. for one p
		// lie in two rows of a; convert them in a run, then scatter.
		tmp = tmp[:rows]
		for p := 0; p < kp; p++ {
			r0 := a.Data[2*p*a.Stride+i0 : 2*p*a.Stride+i0+rows]
			if 2*p+1 < k {
				kn.inter(tmp, r0, a.Data[(2*p+1)*a.Stride+i0:(2*p+1)*a.Stride+i0+rows])
			} else {
				for i, x := range r0 {
					tmp[i] = uint32(toBF16(x))
				}
			}
			for i, w := range tmp {
				dst[i*kpp+p] = w
			}
		}
		for i := 0; i < rows; i++ {
			clear(dst[i*kpp+kp : (i+1)*kpp])
		}
	}
	clear(dst[rows*kpp:])
}

// runTiles computes g (more than RowBlockBF16 rows) with kn.tiles on up
// to threads goroutines, splitting C into items of row blocks by strip
// chunks. It works on a copy of g, which its goroutines share, so that
// only this path moves the product to the heap.
func (h gemmBF16) runTiles(threads int) {
	g := &h
	ws := bf16Pool.Get().(*bf16Workspace)
	defer bf16Pool.Put(ws)
	bp := g.packBParallel(ws, threads)
	nStr := ceilDiv(g.n, nrBF16)
	blocks := ceilDiv(g.m, amxBlock)
	want := 3 * threads
	rb := min(blocks, want)
	cb := min(nStr, ceilDiv(want, rb))
	bf16Grid(threads, blocks, rb, nStr, cb, func(ws *bf16Workspace, b0, b1, s0, s1 int) {
		g.tileItem(ws, bp, b0, b1, s0, s1)
	})
}

// tileItem computes row blocks [b0, b1) by strips [s0, s1) with tiles.
func (g *gemmBF16) tileItem(ws *bf16Workspace, bp *PackedBF16, b0, b1, s0, s1 int) {
	if s0 >= s1 {
		return
	}
	kpp := pairsPadded(g.k)
	ws.a = growWords(ws.a, amxBlock*kpp)
	ws.t = growWords(ws.t, amxBlock)
	ws.tmp = growFloats(ws.tmp, amxBlock*nrBF16)
	ldc := g.c.Stride
	last := min(nrBF16, g.n-(s1-1)*nrBF16)
	for blk := b0; blk < b1; blk++ {
		i0 := blk * amxBlock
		rows := min(amxBlock, g.m-i0)
		packAMX(g.kn, g.tA, g.a, g.k, i0, rows, ws.a, ws.t)
		g.kn.tiles(ws.a, kpp, bp.strip(s0), bp.stripWords(), s1-s0, kpp/16, ws.tmp, rows,
			g.c.Data[i0*ldc+s0*nrBF16:], ldc, g.alpha, g.beta, colMask(last))
	}
}

// colMask has bit j set for each of the first cols ≤ 32 columns.
func colMask(cols int) uint32 { return uint32(1<<cols - 1) }

func growFloats(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}
