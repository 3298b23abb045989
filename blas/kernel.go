package blas

import (
	"os"
	"unsafe"
)

// kernel is one micro-kernel with the cache blocking tuned for it: it
// computes mr×nr tiles of C from mr-tall strips of A and nr-wide strips of
// B, packed in blocks of mc×kc and panels of kc×nc.
type kernel struct {
	name       string
	mr, nr     int
	mc, kc, nc int // mc a multiple of mr, nc of nr
	asm        int // which assembly kernel (see callAsm); 0 for pure Go
}

// maxTile bounds mr·nr over all kernels, for the edge-tile buffer.
const maxTile = 14 * 32

// goKernel is the portable fallback.
var goKernel = &kernel{name: "go4x4", mr: 4, nr: 4, mc: 128, kc: 256, nc: 4096}

// active is the kernel that Sgemm uses: the fastest this CPU runs, or the
// pure-Go one when POLYSKETCH_NOASM=1. Tests set it to each of kernels()
// in turn.
var active = choose()

func choose() *kernel {
	if os.Getenv("POLYSKETCH_NOASM") == "1" {
		return goKernel
	}
	return kernels()[0]
}

// kernels lists the kernels this CPU can run, fastest first.
func kernels() []*kernel {
	return append(asmKernels(), goKernel)
}

// call computes one tile: C = alpha·Σ_p a[p·mr+i]·b[p·nr+j] (+ beta·C
// when accum), with C's rows ldc elements apart.
func (kn *kernel) call(k int, a, b, c *float32, ldc int, alpha, beta float32, accum bool) {
	if kn.asm != 0 {
		acc := 0
		if accum {
			acc = 1
		}
		callAsm(kn.asm, k, a, b, c, ldc, alpha, beta, acc)
		return
	}
	kernelGo(k, unsafe.Slice(a, 4*k), unsafe.Slice(b, 4*k), unsafe.Slice(c, 3*ldc+4), ldc, alpha, beta, accum)
}

// kernelGo is the pure-Go 4×4 micro-kernel: sixteen scalar accumulators.
// The compiler spills some of them, but smaller tiles measured no faster
// and cost more calls and packing.
func kernelGo(k int, a, b, c []float32, ldc int, alpha, beta float32, accum bool) {
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	var c20, c21, c22, c23, c30, c31, c32, c33 float32
	a = a[:4*k]
	b = b[:4*k]
	for p := 0; p < k; p++ {
		as := a[4*p : 4*p+4 : 4*p+4]
		bs := b[4*p : 4*p+4 : 4*p+4]
		b0, b1, b2, b3 := bs[0], bs[1], bs[2], bs[3]
		a0 := as[0]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		a1 := as[1]
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		a2 := as[2]
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		a3 := as[3]
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	rows := [4][4]float32{
		{c00, c01, c02, c03},
		{c10, c11, c12, c13},
		{c20, c21, c22, c23},
		{c30, c31, c32, c33},
	}
	for i := range rows {
		cr := c[i*ldc : i*ldc+4 : i*ldc+4]
		for j, v := range rows[i] {
			if accum {
				cr[j] = alpha*v + beta*cr[j]
			} else {
				cr[j] = alpha * v
			}
		}
	}
}
