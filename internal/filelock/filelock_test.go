package filelock

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// holdEnv names the lock file a child test process locks and holds until
// its standard input closes; see TestMain.
const holdEnv = "FILELOCK_TEST_HOLD"

func TestMain(m *testing.M) {
	if path := os.Getenv(holdEnv); path != "" {
		if _, err := TryLock(path); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println("locked")
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0) // without Unlock: the system must release the lock
	}
	os.Exit(m.Run())
}

func skipUnsupported(t *testing.T) {
	t.Helper()
	if !supported {
		t.Skipf("no file locks on %s", runtime.GOOS)
	}
}

// wantLocked fails t unless TryLock(path) fails because of another lock.
func wantLocked(t *testing.T, path string) {
	t.Helper()
	l, err := TryLock(path)
	if err == nil {
		l.Unlock()
		t.Fatalf("TryLock(%s) succeeded while another lock is held", path)
	}
	var pe *fs.PathError
	if !errors.Is(err, ErrLocked) || !errors.As(err, &pe) || pe.Path != path {
		t.Fatalf("TryLock(%s): %v, want a *fs.PathError of %[1]s wrapping ErrLocked", path, err)
	}
}

func TestTryLock(t *testing.T) {
	skipUnsupported(t)
	path := filepath.Join(t.TempDir(), ".lock")
	l, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("lock file: %v", err)
	}
	// A second open file of the same process conflicts too.
	wantLocked(t, path)
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(); err == nil {
		t.Error("a second Unlock succeeded")
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("Unlock removed the lock file: %v", err)
	}
	l, err = TryLock(path)
	if err != nil {
		t.Fatalf("relock after Unlock: %v", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}

	// Another path is another lock.
	a, err := TryLock(filepath.Join(t.TempDir(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Unlock()
	b, err := TryLock(filepath.Join(t.TempDir(), "b"))
	if err != nil {
		t.Fatalf("a lock on another file: %v", err)
	}
	b.Unlock()
}

func TestTryLockErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := TryLock(filepath.Join(dir, "nothere", ".lock")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("lock in a missing directory: %v, want fs.ErrNotExist", err)
	}
	// Windows may open a directory for reading; elsewhere it is no file.
	if runtime.GOOS != "windows" {
		if _, err := TryLock(dir); err == nil || errors.Is(err, ErrLocked) {
			t.Errorf("lock of a directory: %v, want an error other than ErrLocked", err)
		}
	}
}

// TestRemovedWhileHeld removes the lock file, as a holder tidying up
// would, between TryLock's open and lock: the lock TryLock returns must
// be on the file now at the path, or two processes would hold "the" lock.
func TestRemovedWhileHeld(t *testing.T) {
	skipUnsupported(t)
	if runtime.GOOS == "windows" {
		t.Skip("an open file cannot be removed on Windows")
	}
	path := filepath.Join(t.TempDir(), ".lock")
	holder, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	testHookOpened = func() {
		calls++
		if calls == 1 {
			if err := os.Remove(path); err != nil {
				t.Error(err)
			}
			if err := holder.Unlock(); err != nil {
				t.Error(err)
			}
		}
	}
	defer func() { testHookOpened = nil }()
	l, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	testHookOpened = nil
	if calls != 2 {
		t.Errorf("TryLock opened the file %d times, want 2: the removed one, then the new one", calls)
	}
	wantLocked(t, path)
}

// TestOtherProcess holds the lock in a child process, which ends by
// exiting without Unlock or by being killed: either way the system
// releases its lock.
func TestOtherProcess(t *testing.T) {
	skipUnsupported(t)
	exe, err := os.Executable()
	if err != nil {
		t.Skipf("cannot re-run the test binary: %v", err)
	}
	for _, end := range []string{"exit", "kill"} {
		t.Run(end, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), ".lock")
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), holdEnv+"="+path)
			cmd.Stderr = os.Stderr
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil || line != "locked\n" {
				t.Fatalf("child printed %q, %v; want locked", line, err)
			}

			wantLocked(t, path)

			if end == "kill" {
				cmd.Process.Kill()
			} else {
				stdin.Close()
			}
			err = cmd.Wait()
			if end == "exit" && err != nil {
				t.Fatalf("child: %v", err)
			}
			l, err := TryLock(path)
			if err != nil {
				t.Fatalf("after the child's %s: %v", end, err)
			}
			l.Unlock()
		})
	}
}
