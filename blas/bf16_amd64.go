//go:build !purego

package blas

import "golang.org/x/sys/cpu"

// avx512BF16 computes with VDPBF16PS: 14×32 tiles (28 accumulators of 16
// lanes), and for one or two rows 128-column tiles that read four strips
// of B at once. Its arithmetic is dot2's, so it matches the portable
// kernel to the bit.
var avx512BF16 = &bf16Kernel{name: "avx512bf16", mr: 14, mc: 168, tile: tileBF16, wide: wideBF16, wideRows: 2,
	cvt: cvtBF16, inter: interBF16}

// asmBF16Kernels lists the bf16 assembly kernels this CPU runs, fastest
// first.
func asmBF16Kernels() []*bf16Kernel {
	var ks []*bf16Kernel
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512BF16 {
		ks = append(ks, avx512BF16)
	}
	return ks
}

// colMask has bit j set for each of the first cols ≤ 32 columns.
func colMask(cols int) uint32 { return uint32(1<<cols - 1) }

func accumFlag(beta float32) int {
	if beta != 0 {
		return 1
	}
	return 0
}

func tileBF16(rows, cols, kp int, a []uint32, ars, aps int, b []uint32, c []float32, ldc int, alpha, beta float32) {
	_ = a[(rows-1)*ars+(kp-1)*aps]
	_ = b[kp*nrBF16-1]
	_ = c[(rows-1)*ldc+cols-1]
	tileBF16AVX512(rows, kp, &a[0], ars, aps, &b[0], 0, &c[0], ldc, alpha, beta, accumFlag(beta), colMask(cols))
}

func wideBF16(rows, kp int, a []uint32, ars, aps int, b []uint32, bs int, c []float32, ldc int, alpha, beta float32) {
	_ = a[(rows-1)*ars+(kp-1)*aps]
	_ = b[3*bs+kp*nrBF16-1]
	_ = c[(rows-1)*ldc+4*nrBF16-1]
	wideBF16AVX512(rows, kp, &a[0], ars, aps, &b[0], bs, &c[0], ldc, alpha, beta, accumFlag(beta), colMask(32))
}

func cvtBF16(dst []uint32, src []float32) {
	n := len(src) / 32
	if n > 0 {
		_ = dst[16*n-1]
		cvtBF16AVX512(&dst[0], &src[0], n)
	}
	cvtGo(dst[16*n:], src[32*n:])
}

func interBF16(dst []uint32, r0, r1 []float32) {
	r1 = r1[:len(r0)]
	n := len(r0) / 16
	if n > 0 {
		_ = dst[16*n-1]
		interleaveBF16AVX512(&dst[0], &r0[0], &r1[0], n)
	}
	interGo(dst[16*n:len(r0)], r0[16*n:], r1[16*n:])
}
