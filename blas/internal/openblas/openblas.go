//go:build openblas && cgo

// Package openblas binds cblas_sgemm from the system OpenBLAS (Debian
// package libopenblas-dev). It is its own package because Go does not
// allow cgo in a package with Go assembly, as package blas has.
package openblas

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
*/
import "C"

import (
	"sync"
	"unsafe"
)

// Version describes the library build and the kernel it chose for this
// CPU (set OPENBLAS_CORETYPE to override its choice).
func Version() string {
	return C.GoString(C.openblas_get_config()) + " core " + C.GoString(C.openblas_get_corename())
}

var (
	mu      sync.Mutex
	threads int
)

// SetThreads sets the number of OpenBLAS threads, when it changed.
func SetThreads(n int) {
	mu.Lock()
	defer mu.Unlock()
	if n != threads {
		C.openblas_set_num_threads(C.int(n))
		threads = n
	}
}

// Sgemm calls cblas_sgemm for row-major operands. The caller checks the
// arguments; slices must be non-empty.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	C.cblas_sgemm(C.CblasRowMajor, trans(transA), trans(transB), C.blasint(m), C.blasint(n), C.blasint(k),
		C.float(alpha), (*C.float)(unsafe.Pointer(&a[0])), C.blasint(lda),
		(*C.float)(unsafe.Pointer(&b[0])), C.blasint(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.blasint(ldc))
}

func trans(t bool) C.enum_CBLAS_TRANSPOSE {
	if t {
		return C.CblasTrans
	}
	return C.CblasNoTrans
}
