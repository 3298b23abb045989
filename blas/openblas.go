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
func sgemmOpenBLAS(tA, tB Transpose, alpha float32, a, b General, beta float32, c General) {
	m, n, k := checkGemm("openblas", tA, tB, a, b, c)
	g := gemm{m: m, n: n, k: k, alpha: alpha, beta: beta, c: c.Data, ldc: c.Stride}
	if g.trivial() { // also keeps empty slices away from cgo
		return
	}
	openblas.SetThreads(runtime.GOMAXPROCS(0))
	openblas.Sgemm(tA == Trans, tB == Trans, m, n, k, alpha, a.Data, a.Stride, b.Data, b.Stride, beta, c.Data, c.Stride)
}
