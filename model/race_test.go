//go:build race

package model

// raceEnabled: the race detector makes sync.Pool drop items on purpose and
// allocates for its own bookkeeping, so allocation counts mean nothing.
const raceEnabled = true
