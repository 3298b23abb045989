//go:build !unix

package regular

// nonblock is 0 where the system has no O_NONBLOCK: there the file is
// still checked once open.
const nonblock = 0
