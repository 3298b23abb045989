//go:build !purego

package blas

// asmBF16Kernels lists the bf16 assembly kernels this CPU runs, fastest
// first.
func asmBF16Kernels() []*bf16Kernel { return nil }
