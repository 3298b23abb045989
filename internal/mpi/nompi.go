//go:build !mpi

package mpi

import "errors"

// Enabled reports whether this build has MPI (the build tag mpi).
const Enabled = false

// errNoMPI is the error of every call in a build without MPI.
var errNoMPI = errors.New("mpi: this binary was built without MPI support (rebuild with -tags mpi)")

// Init fails: this build has no MPI.
func Init() error { return errNoMPI }

// Initialized reports false: this build has no MPI.
func Initialized() bool { return false }

// Finalize does nothing in a build without MPI.
func Finalize() error { return nil }

// Comm is a communicator; in a build without MPI there is none.
type Comm struct{}

// World returns ErrNotInitialized: this build has no MPI.
func World() (*Comm, error) { return nil, ErrNotInitialized }
