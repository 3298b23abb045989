package checkpoint

import (
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

// hashWriter writes to a file while hashing and counting what it writes,
// until its context is done. It does not buffer: every file of a
// checkpoint is written in one call or through safetensors.Encode's
// buffer.
type hashWriter struct {
	ctx context.Context
	w   io.Writer
	h   hash.Hash
	n   int64
}

// parallelHash is the size of a write from which the hash runs beside
// the write: a weights file's chunks are hashed while the kernel copies
// them, on a second core where there is one.
const parallelHash = 256 << 10

func (w *hashWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	if len(p) < parallelHash {
		n, err := w.w.Write(p)
		w.h.Write(p[:n])
		w.n += int64(n)
		return n, err
	}
	hashed := make(chan struct{})
	go func() {
		w.h.Write(p)
		close(hashed)
	}()
	n, err := w.w.Write(p)
	<-hashed
	w.n += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite // what was hashed is not what was written: the save fails
	}
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
	w := &hashWriter{ctx: ctx, w: f, h: sha256.New()}
	if err := encode(w); err != nil {
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
		r, err := openHashed(dir, s)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		err = r.verify()
		r.close()
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", dir, err)
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

// readVerified reads the file that s describes in dir whole, checking
// its size and checksum: for the small files of a checkpoint.
func readVerified(dir string, s fileSum) ([]byte, error) {
	b, err := readFile(filepath.Join(dir, s.Name), s.Size)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != s.Size {
		return nil, sizeError(s, int64(len(b)))
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != s.SHA256 {
		return nil, sumError(s)
	}
	return b, nil
}

func sizeError(s fileSum, size int64) error {
	return fmt.Errorf("%s has %d bytes, the manifest says %d: the file is truncated or was changed after saving", s.Name, size, s.Size)
}

func sumError(s fileSum) error {
	return fmt.Errorf("%s: SHA-256 checksum mismatch: the file is corrupted or was changed after saving", s.Name)
}

// readFile reads the file at path, refusing to read more than one byte
// past the size expected, so a huge file cannot exhaust memory.
func readFile(path string, size int64) ([]byte, error) {
	f, err := openFile(path)
	if err != nil {
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

// openFile opens the file of a checkpoint at path, saying which is
// missing if it is.
func openFile(path string) (*os.File, error) {
	f, err := regular.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s is missing", filepath.Base(path))
	}
	return f, err
}

// hashReader reads a file of a checkpoint front to back through its
// SHA-256, as the io.ReaderAt of a safetensors.File: what is read of the
// file is what the checksum is computed over, so that the data loaded is
// the data verified, and it is read once.
type hashReader struct {
	f    *os.File
	sum  fileSum // what the manifest says
	h    hash.Hash
	next int64 // bytes hashed, the offset of the next read
	done bool  // verified, or failed to
	err  error // of verify
}

// openHashed opens the file that s describes in dir, checking its size.
func openHashed(dir string, s fileSum) (*hashReader, error) {
	f, err := openFile(filepath.Join(dir, s.Name))
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && st.Size() != s.Size {
		err = sizeError(s, st.Size())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &hashReader{f: f, sum: s, h: sha256.New()}, nil
}

func (r *hashReader) close() { r.f.Close() }

// ReadAt reads the bytes at off, which must follow those read before.
func (r *hashReader) ReadAt(p []byte, off int64) (int, error) {
	if off != r.next || r.done {
		return 0, fmt.Errorf("%s: read at byte %d out of order, after byte %d", r.sum.Name, off, r.next)
	}
	n, err := r.f.ReadAt(p, off)
	r.h.Write(p[:n])
	r.next += int64(n)
	return n, err
}

// verify reads the rest of the file through the checksum and checks it
// against the manifest's.
func (r *hashReader) verify() error {
	if r.done {
		return r.err
	}
	r.done = true
	n, err := io.Copy(r.h, io.NewSectionReader(r.f, r.next, r.sum.Size-r.next))
	r.next += n
	switch {
	case err != nil:
		r.err = fmt.Errorf("reading %s: %w", r.sum.Name, err)
	case r.next != r.sum.Size:
		r.err = sizeError(r.sum, r.next)
	case hex.EncodeToString(r.h.Sum(nil)) != r.sum.SHA256:
		r.err = sumError(r.sum)
	}
	return r.err
}

// check returns err, something found wrong in what was read of the file,
// unless the file fails to verify: a file that is not what was saved is
// reported as such, whatever its damage made it look like.
func (r *hashReader) check(err error) error {
	if verr := r.verify(); verr != nil {
		return verr
	}
	return err
}
