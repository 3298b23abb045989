package checkpoint

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/polysketch/polysketch/internal/regular"
)

// formatName marks a manifest as a polysketch checkpoint's.
const formatName = "polysketch-checkpoint"

// manifest is manifest.json: what the other files must be. Safetensors
// and JSON parsers catch most damage by themselves, but not a flipped bit
// in the middle of the weights, which still parse; the checksums do.
type manifest struct {
	Format  string    `json:"format"`
	Version int       `json:"version"`
	Files   []fileSum `json:"files"`
}

// fileSum is the size and SHA-256 of one file.
type fileSum struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// hashWriter writes to a file through a buffer while hashing and counting
// what it writes, until its context is done.
type hashWriter struct {
	ctx context.Context
	w   *bufio.Writer
	h   hash.Hash
	n   int64
}

func (w *hashWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := w.w.Write(p)
	w.h.Write(p[:n])
	w.n += int64(n)
	return n, err
}

// writeFile creates the file at path, fills it with encode, syncs it to
// disk, and returns its size and checksum; it stops when ctx is done.
func writeFile(ctx context.Context, path string, encode func(w *hashWriter) error) (s fileSum, err error) {
	if err := ctx.Err(); err != nil {
		return s, err
	}
	f, err := regular.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return s, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	w := &hashWriter{ctx: ctx, w: bufio.NewWriterSize(f, 1<<20), h: sha256.New()}
	if err := encode(w); err != nil {
		return s, err
	}
	if err := w.w.Flush(); err != nil {
		return s, err
	}
	if err := f.Sync(); err != nil {
		return s, err
	}
	return fileSum{Size: w.n, SHA256: hex.EncodeToString(w.h.Sum(nil))}, nil
}

// required lists the files every checkpoint has besides the manifest;
// optimizerFile and tokenizerFile are optional.
var required = []string{configFile, stateFile, weightsFile}

// Verify checks every file of the checkpoint in dir against its
// manifest's size and SHA-256, reading each as a stream: a checkpoint is
// verified in constant memory however large its weights. Load checks all
// this and more (shapes, finite values) on the way in.
func Verify(dir string) error {
	man, err := readManifest(dir)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	for _, s := range man.Files {
		f, err := regular.Open(filepath.Join(dir, s.Name))
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		switch {
		case err != nil:
			return fmt.Errorf("checkpoint %s: reading %s: %w", dir, s.Name, err)
		case n != s.Size:
			return fmt.Errorf("checkpoint %s: %s has %d bytes, the manifest says %d: the file is truncated or was changed after saving", dir, s.Name, n, s.Size)
		case hex.EncodeToString(h.Sum(nil)) != s.SHA256:
			return fmt.Errorf("checkpoint %s: %s: SHA-256 checksum mismatch: the file is corrupted or was changed after saving", dir, s.Name)
		}
	}
	return nil
}

// readManifest reads and checks the manifest of dir: its format, and
// that it lists every required file once and no file a checkpoint does
// not have.
func readManifest(dir string) (*manifest, error) {
	b, err := regular.ReadFile(filepath.Join(dir, manifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		if _, derr := os.Stat(dir); derr != nil {
			return nil, fmt.Errorf("no checkpoint: %w", derr)
		}
		return nil, fmt.Errorf("no %s: not a checkpoint, or one whose save never finished", manifestFile)
	}
	if err != nil {
		return nil, err
	}
	var man manifest
	if err := decodeJSON(b, &man); err != nil {
		return nil, fmt.Errorf("%s: %w", manifestFile, err)
	}
	switch {
	case man.Format != formatName:
		return nil, fmt.Errorf("%s: format %q, want %q", manifestFile, man.Format, formatName)
	case man.Version != Version:
		return nil, fmt.Errorf("%s: format version %d, this program reads version %d", manifestFile, man.Version, Version)
	}
	allowed := map[string]bool{optimizerFile: true, tokenizerFile: true}
	for _, name := range ModelFiles {
		allowed[name] = true
	}
	for _, name := range required {
		allowed[name] = true
	}
	listed := map[string]bool{}
	for _, s := range man.Files {
		if !allowed[s.Name] {
			return nil, fmt.Errorf("%s lists unexpected file %q", manifestFile, s.Name)
		}
		if listed[s.Name] {
			return nil, fmt.Errorf("%s lists %q twice", manifestFile, s.Name)
		}
		listed[s.Name] = true
	}
	for _, name := range required {
		if !listed[name] {
			return nil, fmt.Errorf("%s does not list %s", manifestFile, name)
		}
	}
	return &man, nil
}

// readVerified reads the manifest of dir and every file it lists, checking
// each file's size and checksum, and returns the files' contents by name.
func readVerified(dir string) (map[string][]byte, error) {
	man, err := readManifest(dir)
	if err != nil {
		return nil, err
	}
	files := make(map[string][]byte, len(man.Files))
	for _, s := range man.Files {
		b, err := readFile(filepath.Join(dir, s.Name), s.Size)
		if err != nil {
			return nil, err
		}
		if int64(len(b)) != s.Size {
			return nil, fmt.Errorf("%s has %d bytes, the manifest says %d: the file is truncated or was changed after saving", s.Name, len(b), s.Size)
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != s.SHA256 {
			return nil, fmt.Errorf("%s: SHA-256 checksum mismatch: the file is corrupted or was changed after saving", s.Name)
		}
		files[s.Name] = b
	}
	return files, nil
}

// readFile reads the file at path, refusing to read more than one byte
// past the size expected, so a huge file cannot exhaust memory.
func readFile(path string, size int64) ([]byte, error) {
	f, err := regular.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s is missing", filepath.Base(path))
		}
		return nil, err
	}
	defer f.Close()
	if size < 0 {
		return nil, fmt.Errorf("%s: negative size in the manifest", filepath.Base(path))
	}
	b, err := io.ReadAll(io.LimitReader(f, size+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", filepath.Base(path), err)
	}
	return b, nil
}
