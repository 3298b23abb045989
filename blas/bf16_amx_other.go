//go:build amd64 && !linux && !purego

package blas

import "errors"

// requestAMX refuses: the tiles are used on Linux only, the one OS whose
// way of granting them (arch_prctl) this package knows.
func requestAMX() error { return errors.New("AMX tiles are used on Linux only") }
