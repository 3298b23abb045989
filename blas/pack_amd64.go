//go:build !purego

package blas

// transpose8 and transpose4 are the AVX2 ones: assembly kernels run only
// on CPUs with AVX2.
func transpose8(dst *float32, dstride int, src *float32, sstride int, blocks int) {
	transpose8AVX2(dst, dstride, src, sstride, blocks)
}

func transpose4(dst *float32, dstride int, src *float32, sstride int, blocks int) {
	transpose4AVX2(dst, dstride, src, sstride, blocks)
}
