//go:build !amd64 || purego

package blas

// asmBF16Kernels lists no kernel: bf16 assembly exists for amd64 only.
func asmBF16Kernels() (ks []*bf16Kernel, fast int) { return nil, 0 }

// roundBF16s is roundGo: the rounding has no assembly here.
func roundBF16s(dst, src []float32) { roundGo(dst, src) }
