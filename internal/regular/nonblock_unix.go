//go:build unix

package regular

import "syscall"

// nonblock opens a named pipe for reading without waiting for a writer;
// regular files ignore it.
const nonblock = syscall.O_NONBLOCK
