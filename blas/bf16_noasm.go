//go:build !amd64 || purego

package blas

// asmBF16Kernels lists no kernel: bf16 assembly exists for amd64 only.
func asmBF16Kernels() []*bf16Kernel { return nil }
