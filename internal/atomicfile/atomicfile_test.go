package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesWholeOrNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.bin")
	if err := Write(path, func(w io.Writer) error { _, err := io.WriteString(w, "good"); return err }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error {
		io.WriteString(w, "half-written bad data")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want the writer's", err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "good" {
		t.Fatalf("after a failed write the file holds %q (%v), want the old contents", got, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
	if err := Write(filepath.Join(dir, "missing", "f"), func(io.Writer) error { return nil }); err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
}

// TestWriteBytes: the file holds the bytes, readable by all as a file
// os.WriteFile makes is, and no temporary file is left.
func TestWriteBytes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokenizer.json")
	for _, b := range []string{"first", "second, longer"} {
		if err := WriteBytes(path, []byte(b)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != b {
			t.Fatalf("file holds %q (%v), want %q", got, err, b)
		}
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v (%v), want 0644", st.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("files left beside it: %v", entries)
	}
}
