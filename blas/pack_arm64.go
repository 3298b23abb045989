//go:build !purego

package blas

// transpose8 and transpose4 are the NEON ones: 4×4 blocks through
// TRN1/TRN2, four per 8×8 block.
func transpose8(dst *float32, dstride int, src *float32, sstride int, blocks int) {
	transpose8NEON(dst, dstride, src, sstride, blocks)
}

func transpose4(dst *float32, dstride int, src *float32, sstride int, blocks int) {
	transpose4NEON(dst, dstride, src, sstride, blocks)
}

// transpose8NEON sets dst[(8b+p)·dstride + i] = src[i·sstride + 8b+p] for
// i, p < 8 and b < blocks.
//
//go:noescape
func transpose8NEON(dst *float32, dstride int, src *float32, sstride int, blocks int)

// transpose4NEON sets dst[(8b+p)·dstride + i] = src[i·sstride + 8b+p] for
// i < 4, p < 8 and b < blocks.
//
//go:noescape
func transpose4NEON(dst *float32, dstride int, src *float32, sstride int, blocks int)
