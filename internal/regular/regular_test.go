package regular_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/polysketch/polysketch/internal/regular"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("text"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	for _, path := range []string{file, link} {
		b, err := regular.ReadFile(path)
		if err != nil || string(b) != "text" {
			t.Errorf("ReadFile(%s) = %q, %v; want the file's text", path, b, err)
		}
	}
	var nr *regular.NotRegularError
	if _, err := regular.ReadFile(dir); !errors.As(err, &nr) || nr.Error() != dir+" is a directory, not a regular file" {
		t.Errorf("ReadFile of a directory: %v", err)
	}
	if _, err := regular.ReadFile(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFile of a missing file: %v, want an error that is os.ErrNotExist", err)
	}
}

func TestOpenFileCreates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new")
	f, err := regular.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("x"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, _ := os.ReadFile(path); string(b) != "x" {
		t.Errorf("file holds %q, want x", b)
	}
}
