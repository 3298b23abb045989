//go:build race

package attention

// The race detector allocates on its own; allocation counts mean nothing.
func init() { raceEnabled = true }
