// Package regular opens files by name only when they are regular files.
// A named pipe, a device, a socket or a directory where polysketch
// expects a file (a checkpoint's weights, a tokenizer.json, a cache file)
// is an error at once, naming the path and what it is, never a read that
// waits forever for a writer that will not come.
//
// The file is opened without blocking (O_NONBLOCK, where the system has
// it: opening a named pipe for reading otherwise waits for a writer) and
// checked through the open descriptor, so that the check and the read are
// of the same file even if the path changes in between.
package regular

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
)

// A NotRegularError is a path that names something other than a regular
// file.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not a regular file", e.Path, Kind(e.Mode))
}

// Kind names the kind of file of mode, for messages: "a named pipe",
// "a directory"...
func Kind(mode fs.FileMode) string {
	switch {
	case mode.IsRegular():
		return "a regular file"
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeSymlink != 0:
		return "a symbolic link"
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}

// Open opens the named regular file for reading.
func Open(name string) (*os.File, error) {
	return OpenFile(name, os.O_RDONLY, 0)
}

// OpenFile is os.OpenFile for a file that must be a regular file: it
// fails with a *NotRegularError, without blocking, if name is anything
// else.
func OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(name, flag|nonblock, perm)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, &NotRegularError{Path: name, Mode: info.Mode()}
	}
	return f, nil
}

// ReadFile reads the named regular file, as os.ReadFile does.
func ReadFile(name string) ([]byte, error) {
	f, err := Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	if info, err := f.Stat(); err == nil && info.Size() > 0 {
		buf.Grow(int(info.Size()) + bytes.MinRead) // the size is a hint: the file may change meanwhile
	}
	_, err = buf.ReadFrom(f)
	return buf.Bytes(), err
}
