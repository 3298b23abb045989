//go:build race

package attention

// decodeRace reports a -race build, whose instrumentation allocates.
const decodeRace = true
