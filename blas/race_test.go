//go:build race

package blas

// raceEnabled: the race detector makes sync.Pool drop items on purpose,
// so pooled buffers are reallocated now and then.
const raceEnabled = true
