// Package blas is the float32 matrix-multiply core of polysketch: SGEMM in
// the BLAS calling convention (row-major), cache-blocked with packing and
// parallel over output tiles.
//
// PLACEHOLDER: the fast implementation (packing, AVX2 micro-kernel, parallel
// tiles, OpenBLAS tag) replaces the naive loops below; the API is fixed.
package blas

import "fmt"

// Transpose says whether an operand is used as stored or transposed.
type Transpose byte

const (
	NoTrans Transpose = 'N'
	Trans   Transpose = 'T'
)

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices,
// where op(A) is m×k, op(B) is k×n and C is m×n with leading dimensions
// lda, ldb, ldc. It uses up to GOMAXPROCS goroutines, splitting C into
// tiles (never the k sum), so results do not depend on the thread count.
// When beta is 0, C need not be initialized (NaNs in C are overwritten).
// Bad shapes or short buffers panic with a message naming them.
func Sgemm(tA, tB Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	check(tA, tB, m, n, k, a, lda, b, ldb, c, ldc)
	naive(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SgemmSerial is Sgemm on the calling goroutine alone, for callers that
// already run many independent products in parallel.
func SgemmSerial(tA, tB Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	check(tA, tB, m, n, k, a, lda, b, ldb, c, ldc)
	naive(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func check(tA, tB Transpose, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	_ = fmt.Sprint
}

func naive(tA, tB Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			for p := 0; p < k; p++ {
				var x, y float32
				if tA == NoTrans {
					x = a[i*lda+p]
				} else {
					x = a[p*lda+i]
				}
				if tB == NoTrans {
					y = b[p*ldb+j]
				} else {
					y = b[j*ldb+p]
				}
				s += x * y
			}
			if beta == 0 {
				c[i*ldc+j] = alpha * s
			} else {
				c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
			}
		}
	}
}
