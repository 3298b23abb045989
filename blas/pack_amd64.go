//go:build !purego

package blas

// transpose8 is transpose8AVX2: assembly kernels run only on CPUs with
// AVX2.
func transpose8(dst *float32, dstride int, src *float32, sstride int, blocks int) {
	transpose8AVX2(dst, dstride, src, sstride, blocks)
}
