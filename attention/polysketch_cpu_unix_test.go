//go:build unix

package attention

import (
	"syscall"
	"time"
)

// psCPUTime returns the CPU time this process has used, user and system,
// all threads together.
func psCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
