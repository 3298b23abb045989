package blas

import "fmt"

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
// padded with a zero row to even), the 32 pairs (b[2p][j], b[2p+1][j]) as
// 32-bit words, the low half from the even row ("VNNI" order): a k-pair
// of 16 columns is one AVX-512 vector, and 16 pairs of them one AMX tile
// row after row.
type PackedBF16 struct {
	k, n int
	data []uint32 // strip s, pair p, column j at s·kp·32 + p·32 + j
}

// PackBF16 returns op(b) packed in bf16, each element rounded to nearest
// even (see ToBF16).
func PackBF16(t Transpose, b General) *PackedBF16 {
	checkTrans("PackBF16", "t", t)
	b.check("PackBF16", "b")
	k, n := stored(t, b.Rows, b.Cols)
	p := &PackedBF16{k: k, n: n, data: make([]uint32, packedWords(k, n))}
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
func (p *PackedBF16) Bytes() int { return 4 * len(p.data) }

// fill packs op(b) into p.data, splitting the strips over goroutines when
// b is large.
func (p *PackedBF16) fill(t Transpose, b General) {
	nStr := ceilDiv(p.n, nrBF16)
	packStrips(t, b, p.k, p.n, p.data, 0, nStr)
}

func packedWords(k, n int) int {
	return ceilDiv(k, 2) * nrBF16 * ceilDiv(n, nrBF16)
}

// strip returns the words of strip s.
func (p *PackedBF16) strip(s int) []uint32 {
	sz := ceilDiv(p.k, 2) * nrBF16
	return p.data[s*sz : (s+1)*sz]
}

// packStrips packs strips [s0, s1) of op(b) (k×n) into dst, laid out as
// PackedBF16.data.
func packStrips(t Transpose, b General, k, n int, dst []uint32, s0, s1 int) {
	kp := ceilDiv(k, 2)
	for s := s0; s < s1; s++ {
		j0 := s * nrBF16
		cols := min(nrBF16, n-j0)
		out := dst[s*kp*nrBF16 : (s+1)*kp*nrBF16]
		for p := 0; p < kp; p++ {
			w := out[p*nrBF16 : (p+1)*nrBF16]
			k0 := 2 * p
			switch {
			case t == NoTrans && k0+1 < k:
				r0 := b.Data[k0*b.Stride+j0 : k0*b.Stride+j0+cols]
				r1 := b.Data[(k0+1)*b.Stride+j0 : (k0+1)*b.Stride+j0+cols]
				for j := range r0 {
					w[j] = pairBF16(r0[j], r1[j])
				}
			case t == NoTrans:
				r0 := b.Data[k0*b.Stride+j0 : k0*b.Stride+j0+cols]
				for j := range r0 {
					w[j] = uint32(toBF16(r0[j]))
				}
			case k0+1 < k: // op(b) = bᵀ: row j of b holds column j
				for j := 0; j < cols; j++ {
					at := (j0+j)*b.Stride + k0
					w[j] = pairBF16(b.Data[at], b.Data[at+1])
				}
			default:
				for j := 0; j < cols; j++ {
					w[j] = uint32(toBF16(b.Data[(j0+j)*b.Stride+k0]))
				}
			}
			clear(w[cols:])
		}
	}
}

// packPairs packs rows [r0, r0+rows) of op(a) (·×k) for a kernel with
// tiles of mr rows: for each pair p of k, mr words pairing (a[i][2p],
// a[i][2p+1]), rows past the end zero. dst holds ceil(k/2)·mr words.
func packPairs(t Transpose, a General, k, r0, rows, mr int, dst []uint32) {
	kp := ceilDiv(k, 2)
	dst = dst[:kp*mr]
	for i := 0; i < mr; i++ {
		if i >= rows {
			for p := 0; p < kp; p++ {
				dst[p*mr+i] = 0
			}
			continue
		}
		r := r0 + i
		if t == NoTrans {
			row := a.Data[r*a.Stride : r*a.Stride+k]
			for p := 0; p < k/2; p++ {
				dst[p*mr+i] = pairBF16(row[2*p], row[2*p+1])
			}
			if k%2 == 1 {
				dst[(kp-1)*mr+i] = uint32(toBF16(row[k-1]))
			}
			continue
		}
		for p := 0; p < k/2; p++ {
			dst[p*mr+i] = pairBF16(a.Data[2*p*a.Stride+r], a.Data[(2*p+1)*a.Stride+r])
		}
		if k%2 == 1 {
			dst[(kp-1)*mr+i] = uint32(toBF16(a.Data[(k-1)*a.Stride+r]))
		}
	}
}
