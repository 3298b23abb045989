package data

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"

	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/internal/regular"
)

// A token file holds a header and then the ids, little-endian, in the
// narrowest width that fits the vocabulary:
//
//	offset size
//	0      8    magic "PSKTOKS\x00"
//	8      4    format version
//	12     4    bytes per token: 1, 2 or 4
//	16     4    vocabulary size
//	20     4    zero
//	24     8    number of tokens
//	32     32   tokenizer name, zero-padded
//	64          the tokens
//
// Version 2 puts the tokenizer's end-of-text token, if it has one, between
// documents (see encodeFiles); version 1 files, which do not, are never
// read.
const (
	magic       = "PSKTOKS\x00"
	version     = 2
	headerSize  = 64
	maxNameSize = 32
)

// tokenWidth returns the bytes per token for a vocabulary.
func tokenWidth(vocab int) int {
	switch {
	case vocab <= 1<<8:
		return 1
	case vocab <= 1<<16:
		return 2
	}
	return 4
}

// Tokens is a stream of token ids stored in a file, read on demand: only
// the windows asked for are in memory. Its methods are safe for concurrent
// use.
type Tokens struct {
	f         *tokenFile
	closed    atomic.Bool
	desc      string
	tokenizer string
	vocab     int
	width     int
	// The stream is tokens [start, start+n) of the file.
	start, n int64
}

// Len returns the number of tokens.
func (t *Tokens) Len() int64 { return t.n }

// VocabSize returns the vocabulary size of the tokenizer that made the
// tokens.
func (t *Tokens) VocabSize() int { return t.vocab }

// Tokenizer returns the name of the tokenizer that made the tokens.
func (t *Tokens) Tokenizer() string { return t.tokenizer }

// Path returns the file the tokens are stored in. Another Load of the same
// corpus, after a change to it, may remove the file, but the tokens stay
// readable until closed.
func (t *Tokens) Path() string { return t.f.path }

// String describes the tokens for messages.
func (t *Tokens) String() string { return t.desc }

// Close closes the tokens, and their file once all the tokens Load
// returned from it are closed. Closing them again is an error.
func (t *Tokens) Close() error {
	if t.closed.Swap(true) {
		return fmt.Errorf("close tokens %s: %w", t.f.path, os.ErrClosed)
	}
	return t.f.release()
}

// A tokenFile is an open token file, shared by the Tokens that view it, so
// that a view never opens the file again by name: a Load of the same
// corpus, changed, in another process may have removed the name.
type tokenFile struct {
	file *os.File
	path string       // the file's name in the cache
	refs atomic.Int64 // open views; the last to close closes the file
}

func newTokenFile(f *os.File, path string) *tokenFile {
	tf := &tokenFile{file: f, path: path}
	tf.refs.Store(1)
	return tf
}

func (f *tokenFile) acquire() { f.refs.Add(1) }

func (f *tokenFile) release() error {
	if f.refs.Add(-1) == 0 {
		return f.file.Close()
	}
	return nil
}

// Copy reads tokens [off, off+len(dst)) into dst. It panics if they are
// not all within [0, Len()).
func (t *Tokens) Copy(dst []int32, off int64) error {
	_, err := t.copy(dst, off, nil)
	return err
}

// copy is Copy with a scratch buffer, returned grown for reuse.
func (t *Tokens) copy(dst []int32, off int64, scratch []byte) ([]byte, error) {
	if off < 0 || off+int64(len(dst)) > t.n {
		panic(fmt.Sprintf("data: reading tokens [%d, %d) of a stream of %d", off, off+int64(len(dst)), t.n))
	}
	if t.closed.Load() {
		return scratch, fmt.Errorf("read tokens from %s: %w", t.f.path, os.ErrClosed)
	}
	nb := len(dst) * t.width
	scratch = slices.Grow(scratch[:0], nb)[:nb]
	if _, err := t.f.file.ReadAt(scratch, headerSize+(t.start+off)*int64(t.width)); err != nil {
		return scratch, fmt.Errorf("read tokens from %s: %w", t.f.path, err)
	}
	switch t.width {
	case 1:
		for i, b := range scratch {
			dst[i] = int32(b)
		}
	case 2:
		for i := range dst {
			dst[i] = int32(binary.LittleEndian.Uint16(scratch[2*i:]))
		}
	default:
		for i := range dst {
			dst[i] = int32(binary.LittleEndian.Uint32(scratch[4*i:]))
		}
	}
	for i, id := range dst {
		if uint32(id) >= uint32(t.vocab) {
			return scratch, fmt.Errorf("token file %s is corrupt: token %d at %d is outside the vocabulary of %d; delete the file to rebuild it",
				t.f.path, id, t.start+off+int64(i), t.vocab)
		}
	}
	return scratch, nil
}

// slice returns a view of tokens [lo, hi) of t, to be closed on its own.
func (t *Tokens) slice(lo, hi int64, desc string) *Tokens {
	if lo < 0 || lo > hi || hi > t.n {
		panic(fmt.Sprintf("data: slicing tokens [%d, %d) of a stream of %d", lo, hi, t.n))
	}
	t.f.acquire()
	return &Tokens{f: t.f, desc: desc, tokenizer: t.tokenizer, vocab: t.vocab, width: t.width, start: t.start + lo, n: hi - lo}
}

// errBadFile marks a token file that exists but cannot be used.
var errBadFile = errors.New("invalid token file")

// openTokens opens a token file written for tok and checks its header
// against tok and the file's size.
func openTokens(path string, tok tokenizer.Tokenizer, desc string) (*Tokens, error) {
	f, err := regular.Open(path)
	if err != nil {
		return nil, err
	}
	return useTokens(f, path, tok, desc)
}

// useTokens checks the header of the open token file f, named path, against
// tok and the file's size and returns its tokens, which own f; on failure
// it closes f.
func useTokens(f *os.File, path string, tok tokenizer.Tokenizer, desc string) (*Tokens, error) {
	t, err := checkHeader(f, tok)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w %s: %v", errBadFile, path, err)
	}
	t.f, t.desc = newTokenFile(f, path), desc
	return t, nil
}

// checkHeader returns the Tokens that f's header describes, without the
// file.
func checkHeader(f *os.File, tok tokenizer.Tokenizer) (*Tokens, error) {
	var h [headerSize]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return nil, fmt.Errorf("reading header: %v", err)
	}
	if string(h[:8]) != magic {
		return nil, errors.New("bad magic number")
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v != version {
		return nil, fmt.Errorf("format version %d, want %d", v, version)
	}
	width := int(binary.LittleEndian.Uint32(h[12:]))
	vocab := int(binary.LittleEndian.Uint32(h[16:]))
	n := binary.LittleEndian.Uint64(h[24:])
	name := string(bytes.TrimRight(h[32:], "\x00"))
	if name != tok.Name() || vocab != tok.VocabSize() {
		return nil, fmt.Errorf("tokens of %s with vocabulary %d, want %s with %d", name, vocab, tok.Name(), tok.VocabSize())
	}
	if width != tokenWidth(vocab) {
		return nil, fmt.Errorf("%d bytes per token, want %d", width, tokenWidth(vocab))
	}
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if size := info.Size(); n > uint64(size) || headerSize+int64(n)*int64(width) != size {
		return nil, fmt.Errorf("header says %d tokens of %d bytes but the file has %d bytes", n, width, size)
	}
	return &Tokens{tokenizer: name, vocab: vocab, width: width, n: int64(n)}, nil
}

// tokenWriter writes a token file.
type tokenWriter struct {
	f     *os.File
	w     *bufio.Writer
	name  string
	vocab int
	width int
	n     int64
	buf   []byte
}

func newTokenWriter(f *os.File, tok tokenizer.Tokenizer) (*tokenWriter, error) {
	if len(tok.Name()) > maxNameSize {
		panic(fmt.Sprintf("data: tokenizer name %q longer than %d bytes", tok.Name(), maxNameSize))
	}
	w := &tokenWriter{f: f, w: bufio.NewWriterSize(f, 1<<20), name: tok.Name(), vocab: tok.VocabSize(), width: tokenWidth(tok.VocabSize())}
	// The header is written last, when the count is known.
	if _, err := w.w.Write(make([]byte, headerSize)); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *tokenWriter) write(ids []int32) error {
	nb := len(ids) * w.width
	w.buf = slices.Grow(w.buf[:0], nb)[:nb]
	for _, id := range ids {
		if uint32(id) >= uint32(w.vocab) {
			panic(fmt.Sprintf("data: tokenizer %s made id %d outside its vocabulary of %d", w.name, id, w.vocab))
		}
	}
	switch w.width {
	case 1:
		for i, id := range ids {
			w.buf[i] = byte(id)
		}
	case 2:
		for i, id := range ids {
			binary.LittleEndian.PutUint16(w.buf[2*i:], uint16(id))
		}
	default:
		for i, id := range ids {
			binary.LittleEndian.PutUint32(w.buf[4*i:], uint32(id))
		}
	}
	w.n += int64(len(ids))
	_, err := w.w.Write(w.buf)
	return err
}

// finish writes the header and flushes the file to disk.
func (w *tokenWriter) finish() error {
	if err := w.w.Flush(); err != nil {
		return err
	}
	var h [headerSize]byte
	copy(h[:], magic)
	binary.LittleEndian.PutUint32(h[8:], version)
	binary.LittleEndian.PutUint32(h[12:], uint32(w.width))
	binary.LittleEndian.PutUint32(h[16:], uint32(w.vocab))
	binary.LittleEndian.PutUint64(h[24:], uint64(w.n))
	copy(h[32:], w.name)
	if _, err := w.f.WriteAt(h[:], 0); err != nil {
		return err
	}
	return w.f.Sync()
}
