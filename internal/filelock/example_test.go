package filelock_test

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/polysketch/polysketch/internal/filelock"
)

// A program that owns a directory while it runs locks a file in it first,
// and stops if another one got there before it.
func ExampleTryLock() {
	dir := "run"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(dir, ".lock")
	l, err := filelock.TryLock(path)
	if errors.Is(err, filelock.ErrLocked) {
		log.Fatalf("%s is in use by another program (lock %s held)", dir, path)
	}
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock()

	fmt.Println("working in", dir)
}
