//go:build !purego

package blas

import "golang.org/x/sys/cpu"

const (
	asmAVX2 = 1 + iota
	asmAVX512
)

var (
	avx512Kernel = &kernel{name: "avx512-14x32", mr: 14, nr: 32, mc: 168, kc: 256, nc: 4096, asm: asmAVX512,
		streamMax: 32, srows: 14, sw: 32, dotsMax: 16, drows: 4, narrowN: 256, narrowK: 1024, narrowA: 1 << 17,
		wideRows: 2, ww: 128}
	avx2Kernel = &kernel{name: "avx2-6x16", mr: 6, nr: 16, mc: 144, kc: 256, nc: 4096, asm: asmAVX2,
		streamMax: 32, srows: 6, sw: 16, dotsMax: 16, drows: 2, narrowN: 256, narrowK: 512, narrowA: 1 << 15,
		wideRows: 2, ww: 32}
)

// asmKernels lists the assembly kernels this CPU runs, fastest first.
func asmKernels() []*kernel {
	var ks []*kernel
	if cpu.X86.HasAVX512F {
		ks = append(ks, avx512Kernel)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, avx2Kernel)
	}
	return ks
}

func callAsm(id, k int, a, b, c *float32, ldc int, alpha, beta float32, accum int) {
	switch id {
	case asmAVX512:
		kernelAVX512(k, a, b, c, ldc, alpha, beta, accum)
	case asmAVX2:
		kernelAVX2(k, a, b, c, ldc, alpha, beta, accum)
	default:
		panic("blas: unknown assembly kernel")
	}
}

func streamAsm(id int, wide bool, rows, k int, a *float32, ars, aps int, b *float32, ldb int, c *float32, ldc int, alpha, beta float32, accum int) {
	switch {
	case id == asmAVX512 && wide:
		wideAVX512(rows, k, a, ars, aps, b, ldb, c, ldc, alpha, beta, accum)
	case id == asmAVX512:
		streamAVX512(rows, k, a, ars, aps, b, ldb, c, ldc, alpha, beta, accum)
	case id == asmAVX2 && wide:
		wideAVX2(rows, k, a, ars, aps, b, ldb, c, ldc, alpha, beta, accum)
	case id == asmAVX2:
		streamAVX2(rows, k, a, ars, aps, b, ldb, c, ldc, alpha, beta, accum)
	default:
		panic("blas: unknown assembly kernel")
	}
}

func dotsAsm(id, rows, k int, a *float32, lda int, b *float32, ldb int, out *float32) {
	switch id {
	case asmAVX512:
		dotsAVX512(rows, k, a, lda, b, ldb, out, &laneMask[16-k%16])
	case asmAVX2:
		dotsAVX2(rows, k, a, lda, b, ldb, out, &laneMask[16-k%8])
	default:
		panic("blas: unknown assembly kernel")
	}
}
