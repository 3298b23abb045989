// Package mpi is the small binding of MPI (the Message Passing Interface,
// as OpenMPI implements it) that data-parallel training needs: start-up
// and shut-down, rank and size, a barrier, abort, and the few collectives
// a fixed-order gradient reduction is built from.
//
// The binding uses cgo and is built only with the build tag mpi (Debian:
// openmpi-bin and libopenmpi-dev). Without the tag the package holds no
// MPI at all: Enabled is false, and Launched tells whether the process was
// nevertheless started by mpirun (or another MPI launcher) as one of
// several ranks, which such a binary must refuse.
//
// All calls are made from one goroutine, locked to its thread by Init.
package mpi

import (
	"errors"
	"os"
	"strconv"
)

// ErrNotInitialized is returned by every call made before Init or after
// Finalize.
var ErrNotInitialized = errors.New("mpi: not initialized (call mpi.Init first)")

// launcherVars are the environment variables in which MPI launchers tell
// a process the number of ranks: OpenMPI, MPICH's Hydra (and Slurm's PMI),
// MVAPICH.
var launcherVars = []string{"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"}

// Launched returns the number of ranks an MPI launcher started this
// process as one of, and the variable that says so; 0 and "" when no
// launcher did. It reads the environment only, so it works in every build.
func Launched() (size int, variable string) {
	for _, v := range launcherVars {
		if n, err := strconv.Atoi(os.Getenv(v)); err == nil && n > 0 {
			return n, v
		}
	}
	return 0, ""
}
