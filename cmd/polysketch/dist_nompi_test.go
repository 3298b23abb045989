//go:build !mpi

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusesUnderMPI: a binary without MPI started by mpirun as one of
// several ranks says so in one line and writes nothing.
func TestRefusesUnderMPI(t *testing.T) {
	for _, c := range []struct{ variable, size string }{{"OMPI_COMM_WORLD_SIZE", "2"}, {"PMI_SIZE", "4"}} {
		t.Setenv(c.variable, c.size)
		out := filepath.Join(t.TempDir(), "run")
		var stdout bytes.Buffer
		err := run([]string{"train", "--out", out, "--steps", "1"}, &stdout)
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "built without MPI") ||
			!strings.Contains(err.Error(), c.variable+"="+c.size) {
			t.Errorf("%s=%s: %v", c.variable, c.size, err)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s was made", out)
		}
		t.Setenv(c.variable, "")
	}
}
