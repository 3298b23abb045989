//go:build race

package attention

// psRace reports a -race build, whose instrumentation allocates.
const psRace = true
