//go:build !amd64 || purego

package blas

const amxBF16Name = "amx"

const peakAMXFlops = 0

// peakAMXLoop returns nil: no AMX without amd64 assembly.
func peakAMXLoop() func() { return nil }

// roundings lists roundBF16s, which has no assembly here.
func roundings() map[string]func(dst, src []float32) {
	return map[string]func(dst, src []float32){"roundBF16s": roundBF16s}
}

// isAMDForTest is false: the vendor is read on amd64 assembly builds only.
func isAMDForTest() bool { return false }
