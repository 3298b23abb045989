package blas

// Impl is one SGEMM implementation, named so that benchmarks can compare
// them side by side.
type Impl struct {
	Name   string // "go", or "openblas" when built with the openblas tag
	Detail string // the micro-kernel or library build in use
	// Sgemm has the semantics of the package's Sgemm, on the threads
	// GOMAXPROCS allows at the time of the call.
	Sgemm func(tA, tB Transpose, alpha float32, a, b General, beta float32, c General)
}

// extraImpls are the implementations added by build tags.
var extraImpls []Impl

// Impls returns the available implementations, this package's first.
func Impls() []Impl {
	return append([]Impl{{Name: "go", Detail: active.name, Sgemm: Sgemm}}, extraImpls...)
}
