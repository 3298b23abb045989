//go:build (amd64 || arm64) && !purego

package parallel

// pause executes n spin-wait hints (PAUSE, YIELD): a spinning thread
// that waits for memory another core writes, without taking the
// execution units, the memory bus or the runtime's locks from the
// threads that work.
//
//go:noescape
func pause(n int)
