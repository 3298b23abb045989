//go:build (!amd64 && !arm64) || purego

package blas

// asmKernels lists no kernel: this build has no assembly.
func asmKernels() []*kernel { return nil }

func callAsm(id, k int, a, b, c *float32, ldc int, alpha, beta float32, accum int) {
	panic("blas: no assembly kernels in this build")
}

func transpose8(dst *float32, dstride int, src *float32, sstride int, blocks int) {
	panic("blas: no assembly in this build")
}

func transpose4(dst *float32, dstride int, src *float32, sstride int, blocks int) {
	panic("blas: no assembly in this build")
}

func streamAsm(id int, wide bool, rows, k int, a *float32, ars, aps int, b *float32, ldb int, c *float32, ldc int, alpha, beta float32, accum int) {
	panic("blas: no assembly kernels in this build")
}

func dotsAsm(id, rows, k int, a *float32, lda int, b *float32, ldb int, out *float32) {
	panic("blas: no assembly kernels in this build")
}
