package blas

import (
	"fmt"
	"math"

	"github.com/polysketch/polysketch/internal/hugepage"
	"github.com/polysketch/polysketch/internal/parallel"
)

// nrBF16 is the width of the column strips op(B) is packed in: two
// AVX-512 vectors of 16 float32 sums, or two AMX tiles of 16 columns.
const nrBF16 = 32

// PackedBF16 is op(B) (k×n) held in bf16 in the layout the kernels read,
// for a weight used by many products: the bf16 copy of a weight made once
// per training step, or a model's weights in bf16 inference, which reads
// half the bytes per token of float32 weights.
//
// The columns are split into strips of 32 (the last padded with zero
// columns); a strip holds, for each pair of rows 2p, 2p+1 of op(B) (k
// padded with zero rows to a multiple of 32), the 32 pairs (b[2p][j],
// b[2p+1][j]) as 32-bit words, the low half from the even row ("VNNI"
// order): a k-pair of 16 columns is one AVX-512 vector, and 16 pairs of
// them one AMX tile.
//
// For the sgemm kernel it holds instead the bf16 values as float32, b as
// stored (t says how to take it), which Sgemm packs as it packs any B.
type PackedBF16 struct {
	k, n int
	data []uint32  // strip s, pair p, column j at s·stripWords() + p·32 + j
	f32  General   // b rounded to bf16, for the sgemm kernel
	t    Transpose // op(B) = op(b) of PackBF16
}

// PackBF16 returns op(b) packed in bf16, each element rounded to nearest
// even (see ToBF16).
func PackBF16(t Transpose, b General) *PackedBF16 {
	checkTrans("PackBF16", "t", t)
	b.check("PackBF16", "b")
	k, n := stored(t, b.Rows, b.Cols)
	p := &PackedBF16{k: k, n: n}
	p.fill(t, b)
	return p
}

// Update packs op(b) into p's storage, without allocating; op(b) must
// have p's shape. It is for the weights of a training step: the same
// matrix, new values.
func (p *PackedBF16) Update(t Transpose, b General) {
	checkTrans("PackedBF16.Update", "t", t)
	b.check("PackedBF16.Update", "b")
	if k, n := stored(t, b.Rows, b.Cols); k != p.k || n != p.n {
		panic(fmt.Sprintf("blas: PackedBF16.Update: op(b) is %d×%d, want the packed %d×%d", k, n, p.k, p.n))
	}
	p.fill(t, b)
}

// Rows returns k, the rows of the packed op(B).
func (p *PackedBF16) Rows() int { return p.k }

// Cols returns n, the columns of the packed op(B).
func (p *PackedBF16) Cols() int { return p.n }

// Bytes returns the memory p's storage takes.
func (p *PackedBF16) Bytes() int { return 4 * (len(p.data) + len(p.f32.Data)) }

// fill packs op(b) into p's storage for the kernel in use, allocating it
// on the first call.
func (p *PackedBF16) fill(t Transpose, b General) {
	p.t = t
	if activeBF16.sgemm {
		if p.f32.Data == nil {
			p.f32 = General{b.Rows, b.Cols, b.Cols, hugepage.Make[float32](b.Rows * b.Cols)}
		}
		p.data = nil
		// Once a step per weight, bound by memory: split by rows.
		rows, cols, threads := b.Rows, b.Cols, parallel.Threads()
		if threads == 1 || rows*cols < 1<<18 {
			roundRows(p.f32.Data, b.Data, b.Stride, rows, cols)
			return
		}
		parts := min(rows, 4*threads)
		parallel.Run(parts, threads, func(_, i int) {
			r0, r1 := i*rows/parts, (i+1)*rows/parts
			roundRows(p.f32.Data[r0*cols:], b.Data[r0*b.Stride:], b.Stride, r1-r0, cols)
		})
		return
	}
	if p.data == nil {
		p.data = hugepage.Make[uint32](packedWords(p.k, p.n))
	}
	p.f32 = General{}
	ws := bf16Pool.Get().(*bf16Workspace)
	ws.a = hugepage.Grow(ws.a, ceilDiv(p.k, 2))
	packStrips(activeBF16, t, b, p.k, p.n, p.data, 0, ceilDiv(p.n, nrBF16), ws.a)
	bf16Pool.Put(ws)
}

// unpack returns op(B) from p's pairs in dst, b as it was stored when
// packed (p.t says how to take it), so that Sgemm takes the path it takes
// for that b.
func (p *PackedBF16) unpack(dst []float32) General {
	sw := p.stripWords()
	r, c := stored(p.t, p.k, p.n)
	for i := 0; i < p.k; i++ {
		for j := 0; j < p.n; j++ {
			w := p.data[j/nrBF16*sw+i/2*nrBF16+j%nrBF16]
			if i%2 == 0 {
				w <<= 16
			}
			x := math.Float32frombits(w & 0xffff0000)
			if p.t == Trans {
				dst[j*c+i] = x
			} else {
				dst[i*c+j] = x
			}
		}
	}
	return General{r, c, c, dst[:r*c]}
}

// pairsPadded returns the pairs a strip holds for k rows: ceil(k/2)
// rounded up to a multiple of 16, so that AMX reads whole tiles of 16
// pairs (the padding is zero; the other kernels stop at ceil(k/2)).
func pairsPadded(k int) int { return ceilDiv(ceilDiv(k, 2), 16) * 16 }

func packedWords(k, n int) int {
	return pairsPadded(k) * nrBF16 * ceilDiv(n, nrBF16)
}

// stripWords returns the words between strips.
func (p *PackedBF16) stripWords() int { return pairsPadded(p.k) * nrBF16 }

// strip returns the words from strip s on.
func (p *PackedBF16) strip(s int) []uint32 {
	return p.data[s*p.stripWords():]
}

// packStrips packs strips [s0, s1) of op(b) (k×n) into dst, laid out as
// PackedBF16.data, converting with kn; tmp holds ceil(k/2) words.
func packStrips(kn *bf16Kernel, t Transpose, b General, k, n int, dst []uint32, s0, s1 int, tmp []uint32) {
	kp, kpp := ceilDiv(k, 2), pairsPadded(k)
	sw := kpp * nrBF16
	if t == NoTrans {
		// Row pair by row pair, each across the strips: B is read in
		// order, as the prefetchers like (strip by strip, each strip's
		// reads jump a row apart and wait on memory).
		j0, j1 := s0*nrBF16, min(s1*nrBF16, n)
		full := 0 // whole strips, whose pairs pairRows packs in one call
		if kn.pairRows != nil && k > 1 {
			full = max(0, min(s1, n/nrBF16)-s0)
		}
		if full > 0 {
			kn.pairRows(dst[s0*sw:], b.Data[j0:], b.Stride, k/2, full, sw)
		}
		for p := 0; p < kp && (s0+full < s1 || k%2 == 1); p++ {
			r0 := b.Data[2*p*b.Stride+j0 : 2*p*b.Stride+j1]
			if 2*p+1 == k {
				for j, x := range r0 {
					dst[(s0+j/nrBF16)*sw+p*nrBF16+j%nrBF16] = uint32(toBF16(x))
				}
				continue
			}
			r1 := b.Data[(2*p+1)*b.Stride+j0 : (2*p+1)*b.Stride+j1]
			for s := s0 + full; s < s1; s++ {
				lo, hi := (s-s0)*nrBF16, min((s-s0+1)*nrBF16, j1-j0)
				kn.inter(dst[s*sw+p*nrBF16:s*sw+p*nrBF16+hi-lo], r0[lo:hi], r1[lo:hi])
			}
		}
	}
	for s := s0; s < s1; s++ {
		j0 := s * nrBF16
		cols := min(nrBF16, n-j0)
		out := dst[s*sw : (s+1)*sw]
		if t == Trans {
			// Row j of b is column j of op(b): its pairs, converted in a
			// run, go one to each pair row of the strip.
			tmp := tmp[:kp]
			for j := 0; j < cols; j++ {
				row := b.Data[(j0+j)*b.Stride : (j0+j)*b.Stride+k]
				kn.cvt(tmp, row[:k&^1])
				if k%2 == 1 {
					tmp[kp-1] = uint32(toBF16(row[k-1]))
				}
				for p, w := range tmp {
					out[p*nrBF16+j] = w
				}
			}
		}
		if cols < nrBF16 {
			for p := 0; p < kp; p++ {
				clear(out[p*nrBF16+cols : (p+1)*nrBF16])
			}
		}
		clear(out[kp*nrBF16:])
	}
}

// packA converts rows [i0, i0+rows) of op(a) (·×k) to bf16 pairs in dst
// and returns the strides (in words) that the kernels read them with:
// the pair p of row i is dst[i·ars + p·aps]. op(a) = a: each row's pairs
// in a run (ars = ceil(k/2), aps = 1); op(a) = aᵀ: each pair's rows in a
// run (ars = 1, aps = rows rounded up to 16).
func packA(kn *bf16Kernel, t Transpose, a General, k, i0, rows int, dst []uint32) (ars, aps int) {
	kp := ceilDiv(k, 2)
	if t == NoTrans {
		ars := rowWords(k)
		for i := 0; i < rows; i++ {
			row := a.Data[(i0+i)*a.Stride : (i0+i)*a.Stride+k]
			d := dst[i*ars : i*ars+kp]
			kn.cvt(d, row[:k&^1])
			if k%2 == 1 {
				d[kp-1] = uint32(toBF16(row[k-1]))
			}
		}
		return ars, 1
	}
	w := ceilDiv(rows, 16) * 16
	for p := 0; p < k/2; p++ {
		r0 := a.Data[2*p*a.Stride+i0 : 2*p*a.Stride+i0+rows]
		r1 := a.Data[(2*p+1)*a.Stride+i0 : (2*p+1)*a.Stride+i0+rows]
		kn.inter(dst[p*w:p*w+rows], r0, r1)
	}
	if k%2 == 1 {
		r0 := a.Data[(k-1)*a.Stride+i0 : (k-1)*a.Stride+i0+rows]
		d := dst[(kp-1)*w:]
		for i, x := range r0 {
			d[i] = uint32(toBF16(x))
		}
	}
	return 1, w
}

// rowWords is the stride of packA's rows of ceil(k/2) pairs: a whole
// number of cache lines and one more, so that the rows a tile reads side
// by side fall in different sets of the L1 cache (at a power-of-two
// stride, 14 rows would compete for the 8 ways of one set).
func rowWords(k int) int { return ceilDiv(ceilDiv(k, 2), 16)*16 + 16 }

// packAWords returns the words packA needs for rows rows.
func packAWords(k, rows int) int { return max(rowWords(k)*rows, ceilDiv(k, 2)*ceilDiv(rows, 16)*16) }

// cvtGo sets dst[i] to the pair (src[2i], src[2i+1]).
func cvtGo(dst []uint32, src []float32) {
	dst = dst[:len(src)/2]
	for i := range dst {
		dst[i] = pairBF16(src[2*i], src[2*i+1])
	}
}

// expandGo sets dst[2i], dst[2i+1] to the float32 bits of the high and
// the low half of src[i].
func expandGo(dst, src []uint32) {
	dst = dst[:2*len(src)]
	for i, w := range src {
		dst[2*i], dst[2*i+1] = w&0xffff0000, w<<16
	}
}

// interGo sets dst[j] to the pair (r0[j], r1[j]).
func interGo(dst []uint32, r0, r1 []float32) {
	r1 = r1[:len(r0)]
	dst = dst[:len(r0)]
	for j := range r0 {
		dst[j] = pairBF16(r0[j], r1[j])
	}
}
