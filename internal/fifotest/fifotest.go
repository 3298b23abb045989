// Package fifotest makes named pipes for tests of code that must refuse
// them: a named pipe where a regular file is expected makes a read wait
// for a writer forever.
package fifotest

import "testing"

// Make makes a named pipe at path, or skips the test, saying why, where
// the system has none.
func Make(t testing.TB, path string) {
	t.Helper()
	if err := mkfifo(path); err != nil {
		t.Skipf("cannot make a named pipe at %s on this system: %v", path, err)
	}
}
