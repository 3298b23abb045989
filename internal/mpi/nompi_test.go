//go:build !mpi

package mpi

import (
	"errors"
	"testing"
)

func TestWithoutMPI(t *testing.T) {
	if Enabled || Initialized() {
		t.Fatal("a build without the mpi tag claims MPI")
	}
	if err := Init(); err == nil {
		t.Error("Init succeeded without MPI")
	}
	if _, err := World(); !errors.Is(err, ErrNotInitialized) {
		t.Errorf("World: %v, want ErrNotInitialized", err)
	}
}
