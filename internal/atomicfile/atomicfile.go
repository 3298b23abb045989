// Package atomicfile writes files so that readers, and a crash at any
// moment, see either the old file or the whole new one, never a part.
package atomicfile

import (
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Write writes path through a temporary file in the same directory:
// written by write, synced, closed, then renamed over path, and the
// directory synced so that the rename itself is durable. On failure the
// temporary file is removed and path is untouched.
func Write(path string, write func(io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+strings.TrimPrefix(base, ".")+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = write(f); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	// Not every system can sync a directory; the data itself is synced.
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// WriteBytes is Write of the bytes b.
func WriteBytes(path string, b []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}
