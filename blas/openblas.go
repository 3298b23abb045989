//go:build openblas && cgo

package blas

import (
	"runtime"

	"github.com/polysketch/polysketch/blas/internal/openblas"
)

// With the openblas tag, Impls also offers the system OpenBLAS for
// comparison. Sgemm stays this package's own code.
func init() {
	extraImpls = append(extraImpls, Impl{Name: "openblas", Detail: openblas.Version(), Sgemm: sgemmOpenBLAS})
}

// sgemmOpenBLAS is Sgemm computed by OpenBLAS, on as many OpenBLAS threads
// as GOMAXPROCS.
func sgemmOpenBLAS(tA, tB Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	check("openblas", tA, tB, m, n, k, a, lda, b, ldb, c, ldc)
	g := gemm{m: m, n: n, k: k, alpha: alpha, beta: beta, c: c, ldc: ldc}
	if g.trivial() { // also keeps empty slices away from cgo
		return
	}
	openblas.SetThreads(runtime.GOMAXPROCS(0))
	openblas.Sgemm(tA == Trans, tB == Trans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
