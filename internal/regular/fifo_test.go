package regular_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/polysketch/polysketch/internal/fifotest"
	"github.com/polysketch/polysketch/internal/regular"
)

// TestNamedPipe opens a named pipe that no one writes: without
// O_NONBLOCK the open would wait for a writer forever.
func TestNamedPipe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fifo")
	fifotest.Make(t, path)
	for _, c := range []struct {
		name string
		open func() error
	}{
		{"ReadFile", func() error { _, err := regular.ReadFile(path); return err }},
		{"OpenFile for reading and writing", func() error {
			_, err := regular.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
			return err
		}},
		// Opening a pipe for writing alone fails (ENXIO), no reader
		// being there: an error, which is what matters.
		{"OpenFile for appending", func() error {
			_, err := regular.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
			return err
		}},
	} {
		done := make(chan error, 1)
		go func() { done <- c.open() }()
		select {
		case err := <-done:
			var nr *regular.NotRegularError
			switch {
			case err == nil:
				t.Errorf("%s of a named pipe succeeded", c.name)
			case errors.As(err, &nr) && err.Error() != path+" is a named pipe, not a regular file":
				t.Errorf("%s: %q, want %q", c.name, err, path+" is a named pipe, not a regular file")
			case !errors.As(err, &nr) && c.name != "OpenFile for appending":
				t.Errorf("%s of a named pipe: %v, want a NotRegularError", c.name, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s of a named pipe has not returned after a minute: it waits for a writer", c.name)
		}
	}
}
