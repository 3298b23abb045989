//go:build !amd64 || purego

package blas

const amxBF16Name = "amx"

const peakAMXFlops = 0

// peakAMXLoop returns nil: no AMX without amd64 assembly.
func peakAMXLoop() func() { return nil }
