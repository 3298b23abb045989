package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// A save writes the new checkpoint into a temporary directory beside the
// target, ".<name>.tmp-*", and then swaps it in. Where the system can
// exchange two directories atomically (Linux renameat2), the swap is one
// step. Elsewhere the old directory is first renamed aside to
// ".<name>.old", then the new one renamed in, then the old one removed:
// a crash between the two renames leaves the old checkpoint complete under
// the aside name, where Load and Exists find it and the next Save
// replaces it.

// errUnsupported is what exchange returns where atomic exchange is not
// available.
var errUnsupported = errors.New("atomic exchange of directories not supported")

// exchange atomically swaps the directories a and b; a variable so that
// tests can exercise the fallback.
var exchange = exchangeDirs

// testHook, if set, is called at each stage of a save and may fail it.
var testHook func(stage string) error

func hook(stage string) error {
	if testHook != nil {
		return testHook(stage)
	}
	return nil
}

// backupPath is where the fallback swap puts the old checkpoint.
func backupPath(dir string) string {
	dir = filepath.Clean(dir)
	return filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".old")
}

// prepare checks that dir may be replaced, removes what failed saves left
// behind, and returns a fresh temporary directory beside dir.
func prepare(dir string) (string, error) {
	dir = filepath.Clean(dir)
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", err
	case !st.IsDir():
		return "", fmt.Errorf("%s exists and is not a directory", dir)
	default:
		if _, err := os.Stat(filepath.Join(dir, manifestFile)); err != nil {
			entries, rerr := os.ReadDir(dir)
			if rerr != nil {
				return "", rerr
			}
			if len(entries) > 0 {
				return "", fmt.Errorf("%s is a directory but not a checkpoint (no %s): refusing to replace it", dir, manifestFile)
			}
		}
		// A complete checkpoint is in place, so an aside copy is stale.
		if err := os.RemoveAll(backupPath(dir)); err != nil {
			return "", err
		}
	}
	stale, _ := filepath.Glob(filepath.Join(parent, "."+base+".tmp-*"))
	for _, s := range stale {
		os.RemoveAll(s)
	}
	tmp, err := os.MkdirTemp(parent, "."+base+".tmp-")
	if err != nil {
		return "", err
	}
	// MkdirTemp makes it private; a checkpoint is as readable as its files.
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	return tmp, nil
}

// swap puts the complete checkpoint in tmp at dir, removing the one that
// was there.
func swap(tmp, dir string) error {
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	backup := backupPath(dir)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		// A first save, or one after a crash that left the old checkpoint
		// aside: the backup goes only once the new one is in place.
		if err := os.Rename(tmp, dir); err != nil {
			return err
		}
		syncDir(parent)
		return os.RemoveAll(backup)
	}
	err := exchange(tmp, dir)
	if err == nil {
		syncDir(parent)
		return os.RemoveAll(tmp) // now the old checkpoint
	}
	if !errors.Is(err, errUnsupported) {
		return err
	}
	if err := os.Rename(dir, backup); err != nil {
		return err
	}
	err = hook("aside")
	if err == nil {
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		if rerr := os.Rename(backup, dir); rerr != nil {
			return fmt.Errorf("%w; the previous checkpoint is in %s", err, backup)
		}
		return err
	}
	syncDir(parent)
	return os.RemoveAll(backup)
}

// syncDir makes the entries of dir durable. Not every system can sync a
// directory, so its error is only reported, for callers that care.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
