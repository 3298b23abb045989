//go:build !(amd64 || arm64) || purego

package parallel

import "sync/atomic"

var spinSink atomic.Int32

// pause is a short busy wait where no spin-wait hint is written.
func pause(n int) {
	for i := 0; i < n; i++ {
		spinSink.Load()
	}
}
