//go:build unix

package vec

import "syscall"

// cpuTime returns the CPU time of the process in nanoseconds, which on a
// shared, busy machine says more about a kernel's speed than the wall
// clock.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
