//go:build !mpi

package main

import (
	"fmt"

	"github.com/polysketch/polysketch/internal/mpi"
)

// startDist returns nil: this build trains in one process. Started by an
// MPI launcher as one of several ranks, it refuses instead of training as
// many independent copies.
func startDist() (*distRun, error) {
	if n, v := mpi.Launched(); n > 1 {
		return nil, fmt.Errorf("this polysketch was built without MPI, but %s=%d says mpirun started it as one of %d ranks: rebuild it with 'go build -tags mpi' (needs libopenmpi-dev), or run it without mpirun", v, n, n)
	}
	return nil, nil
}
