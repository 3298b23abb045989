//go:build mpi

package main

import (
	"github.com/polysketch/polysketch/internal/mpi"
	"github.com/polysketch/polysketch/train"
)

// startDist starts MPI when an MPI launcher started this process, and
// returns its part of the job; nil when it runs alone (or as the only
// rank).
func startDist() (*distRun, error) {
	if n, _ := mpi.Launched(); n == 0 {
		return nil, nil
	}
	if err := mpi.Init(); err != nil {
		return nil, err
	}
	w, err := mpi.World()
	if err != nil {
		mpi.Finalize()
		return nil, err
	}
	if w.Size() == 1 {
		return nil, mpi.Finalize()
	}
	return &distRun{comm: mpiComm{w}, abort: w.Abort, finalize: mpi.Finalize}, nil
}

// mpiComm is the train.Comm of MPI_COMM_WORLD.
type mpiComm struct{ *mpi.Comm }

func (c mpiComm) Ialltoallv(send []float32, sc, sd []int, recv []float32, rc, rd []int) (train.Request, error) {
	r, err := c.Comm.Ialltoallv(send, sc, sd, recv, rc, rd)
	if err != nil {
		return nil, err
	}
	return r, nil
}
