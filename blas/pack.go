package blas

import "unsafe"

// Packing runs once per element of A and B per block, against 2·nr (or
// 2·mr) flops per element in the micro-kernel, so it must be cheap. The
// loops below index through unsafe pointers, after checking the first and
// last element of each block; every pointer they form lies inside the
// block (checkptr, on under -race, verifies that).

// packA copies rows [ic, ic+mb) and columns [pc, pc+kb) of op(A) into dst
// as mr-tall strips, each stored column by column (dst[s·mr·kb + p·mr + i]
// is op(A)[ic+s·mr+i, pc+p]), zero-padding the last strip to mr rows.
func (g *gemm) packA(dst []float32, ic, mb, pc, kb int) {
	mr := g.kn.mr
	for s := 0; s*mr < mb; s++ {
		rows := min(mr, mb-s*mr)
		d := dst[s*mr*kb : (s+1)*mr*kb]
		i0 := ic + s*mr
		if g.tA == Trans {
			// op(A)[i, p] = a[p·lda + i]: each k step is a contiguous run.
			packCopy(d, mr, g.a[(pc)*g.lda+i0:], g.lda, rows, kb)
		} else {
			// op(A)[i, p] = a[i·lda + p]: a transpose.
			packGather(d, mr, g.a[i0*g.lda+pc:], g.lda, rows, kb, g.kn.asm != 0)
		}
		if g.roundA {
			roundBF16s(d, d) // while the strip is in L1
		}
	}
}

// packB copies strips [s0, s1) of the kb×nb panel of op(B) at rows pc and
// columns jc into dst as nr-wide strips, each stored row by row
// (dst[s·nr·kb + p·nr + j] is op(B)[pc+p, jc+s·nr+j]), zero-padding the
// last strip to nr columns.
func (g *gemm) packB(dst []float32, jc, nb, pc, kb, s0, s1 int) {
	nr := g.kn.nr
	for s := s0; s < s1; s++ {
		cols := min(nr, nb-s*nr)
		d := dst[s*nr*kb : (s+1)*nr*kb]
		j0 := jc + s*nr
		if g.tB == NoTrans {
			packCopy(d, nr, g.b[pc*g.ldb+j0:], g.ldb, cols, kb)
		} else {
			packGather(d, nr, g.b[j0*g.ldb+pc:], g.ldb, cols, kb, g.kn.asm != 0)
		}
		if g.roundB {
			roundBF16s(d, d)
		}
	}
}

// packCopy sets dst[p·w : p·w+w] to src[p·ld : p·ld+n] followed by zeros,
// for p < kb: n ≤ w contiguous elements per step.
func packCopy(dst []float32, w int, src []float32, ld, n, kb int) {
	_ = dst[kb*w-1]
	_ = src[(kb-1)*ld+n-1]
	d0, s0 := unsafe.Pointer(&dst[0]), unsafe.Pointer(&src[0])
	dstep, sstep := 4*w, 4*ld
	if n == w {
		// Whole strips, the common case: inline moves (a copy call per k
		// step would cost more than the move).
		switch w {
		case 32:
			for p := range kb {
				d, s := unsafe.Add(d0, p*dstep), unsafe.Add(s0, p*sstep)
				move16(d, s, 0)
				move16(d, s, 16)
				move16(d, s, 32)
				move16(d, s, 48)
				move16(d, s, 64)
				move16(d, s, 80)
				move16(d, s, 96)
				move16(d, s, 112)
			}
			return
		case 16:
			for p := range kb {
				d, s := unsafe.Add(d0, p*dstep), unsafe.Add(s0, p*sstep)
				move16(d, s, 0)
				move16(d, s, 16)
				move16(d, s, 32)
				move16(d, s, 48)
			}
			return
		case 14:
			for p := range kb {
				d, s := unsafe.Add(d0, p*dstep), unsafe.Add(s0, p*sstep)
				move16(d, s, 0)
				move16(d, s, 16)
				move16(d, s, 32)
				*(*[2]float32)(unsafe.Add(d, 48)) = *(*[2]float32)(unsafe.Add(s, 48))
			}
			return
		case 6:
			for p := range kb {
				d, s := unsafe.Add(d0, p*dstep), unsafe.Add(s0, p*sstep)
				move16(d, s, 0)
				*(*[2]float32)(unsafe.Add(d, 16)) = *(*[2]float32)(unsafe.Add(s, 16))
			}
			return
		case 4:
			for p := range kb {
				d, s := unsafe.Add(d0, p*dstep), unsafe.Add(s0, p*sstep)
				move16(d, s, 0)
			}
			return
		}
	}
	for p := 0; p < kb; p++ {
		copy(dst[p*w:p*w+n], src[p*ld:p*ld+n])
		clear(dst[p*w+n : p*w+w])
	}
}

// move16 copies 16 bytes at offset off; the compiler turns it into one
// load and one store where a larger array copy would call memmove.
func move16(d, s unsafe.Pointer, off uintptr) {
	*(*[4]float32)(unsafe.Add(d, off)) = *(*[4]float32)(unsafe.Add(s, off))
}

// packGather sets dst[p·w + i] = src[i·ld + p] for i < n and 0 for
// n ≤ i < w, for p < kb: a transpose of n rows of kb elements (see
// transposeRows).
func packGather(dst []float32, w int, src []float32, ld, n, kb int, simd bool) {
	transposeRows(dst, w, src, ld, n, kb, simd)
	if n < w {
		for p := 0; p < kb; p++ {
			clear(dst[p*w+n : p*w+w])
		}
	}
}

// transposeRows sets dst[p·w + i] = src[i·ld + p] for i < n, p < kb: a
// transpose of n rows of kb elements, leaving the rest of dst's rows (w
// apart) as they are. With simd (assembly kernels only) strips of 8 rows
// or more go through 8×8 register transposes, the last group of 8
// overlapping the one before when n is not a multiple of 8 (strips of 4
// to 7 rows likewise through 4×8 ones); k steps past the last multiple of
// 8 go one by one.
func transposeRows(dst []float32, w int, src []float32, ld, n, kb int, simd bool) {
	_ = dst[(kb-1)*w+n-1]
	_ = src[(n-1)*ld+kb-1]
	d0, s0 := unsafe.Pointer(&dst[0]), unsafe.Pointer(&src[0])
	dstep := 4 * w
	p0 := 0
	if simd && n >= 4 && kb >= 8 {
		p0 = kb &^ 7
		g := 8 // rows per group
		if n < 8 {
			g = 4
		}
		for i0 := 0; i0 < n; i0 += g {
			i0 = min(i0, n-g)
			if g == 8 {
				transpose8(&dst[i0], w, &src[i0*ld], ld, p0/8)
			} else {
				transpose4(&dst[i0], w, &src[i0*ld], ld, p0/8)
			}
		}
	}
	if p0 < kb {
		for i := 0; i < n; i++ {
			s := unsafe.Add(s0, 4*(i*ld+p0))
			d := unsafe.Add(d0, 4*(p0*w+i))
			for p := range kb - p0 {
				*(*float32)(unsafe.Add(d, p*dstep)) = *(*float32)(unsafe.Add(s, 4*p))
			}
		}
	}
}
