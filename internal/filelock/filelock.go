// Package filelock takes exclusive advisory locks on files, so that
// processes that share a resource (a directory, say) can tell that one of
// them is using it.
//
// A lock is taken through an open file and is released by Unlock or, if
// the process dies first, by the operating system: a crash never leaves a
// stale lock behind. The lock is advisory: it keeps out only those that
// take it too, and nobody is kept from reading or writing the file.
//
// Locks are flock(2) locks on Unix systems and LockFileEx locks on
// Windows. Both belong to the open file, not to the process, so two
// TryLock calls on one path conflict even within one process. Elsewhere
// (AIX, whose flock is not exposed, Plan 9, WebAssembly) TryLock creates
// the file and locks nothing.
package filelock

import (
	"errors"
	"io/fs"
	"os"

	"github.com/polysketch/polysketch/internal/regular"
)

// ErrLocked is the error, wrapped in an *fs.PathError, that TryLock
// returns when another lock on the file is held.
var ErrLocked = errors.New("already locked")

// A Lock is an exclusive lock on a file, held until Unlock.
type Lock struct {
	f *os.File
}

// TryLock creates the file at path if need be and locks it, without
// waiting: if another lock on the file is held, by this process or any
// other, it fails with an error that wraps ErrLocked.
//
// The holder of a lock may remove the file before it unlocks, to tidy up:
// TryLock makes sure the file it locked is still the one at path, so two
// processes never both hold a lock on path.
func TryLock(path string) (*Lock, error) {
	for {
		f, err := regular.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		if testHookOpened != nil {
			testHookOpened()
		}
		if err := lock(f); err != nil {
			f.Close()
			return nil, &fs.PathError{Op: "lock", Path: path, Err: err}
		}
		same, err := isCurrent(f, path)
		if same {
			return &Lock{f: f}, nil
		}
		unlock(f)
		f.Close()
		if err != nil {
			return nil, err
		}
		// Removed or replaced between the open and the lock by a holder
		// that has since let go: lock the file now at path instead.
	}
}

// testHookOpened, if set, is called between the open and the lock.
var testHookOpened func()

// isCurrent reports whether f is the file now at path. An error is
// returned only when that cannot be told: path missing is no error.
func isCurrent(f *os.File, path string) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	pi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(fi, pi), nil
}

// Unlock releases the lock and closes its file, which stays in place. It
// is an error to unlock a lock twice.
func (l *Lock) Unlock() error {
	if l.f == nil {
		return errors.New("filelock: Unlock of an unlocked lock")
	}
	f := l.f
	l.f = nil
	err := unlock(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &fs.PathError{Op: "unlock", Path: f.Name(), Err: err}
	}
	return nil
}
