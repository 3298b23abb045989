package safetensors

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"slices"

	"github.com/polysketch/polysketch/internal/regular"
)

// File is a safetensors file opened to read its tensors one at a time, in
// any order, into buffers the caller owns: the way to load a model larger
// than a copy of it in memory, or to check every shard of a checkpoint
// against a configuration before reading any data. Open checks the whole
// header, as Read does, and that the tensors tile the rest of the file.
type File struct {
	path    string
	f       *os.File
	start   int64 // offset of the data buffer
	entries []entry
	byName  map[string]int
	meta    map[string]string
}

// Info describes a tensor of a File.
type Info struct {
	Name  string
	DType string // "F32", "BF16", "I64", …
	Shape []int
}

// Len returns the number of elements of the tensor.
func (i Info) Len() int64 {
	n, _ := volume(i.Shape) // checked by Open
	return n
}

// Open opens the safetensors file at path and reads its header. Every
// dtype of the format with a whole number of bytes is accepted; reading a
// tensor checks that it converts. Errors name the file.
func Open(path string) (*File, error) {
	f, err := open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	return f, nil
}

func open(path string) (*File, error) {
	osf, err := regular.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := osf.Stat()
	if err != nil {
		osf.Close()
		return nil, err
	}
	f := &File{path: path, f: osf}
	if err := f.readHeader(st.Size()); err != nil {
		osf.Close()
		return nil, err
	}
	return f, nil
}

// readHeader reads and checks the header of a file of size bytes.
func (f *File) readHeader(size int64) error {
	var lenBuf [8]byte
	if _, err := io.ReadFull(f.f, lenBuf[:]); err != nil {
		return fmt.Errorf("file too short for the 8-byte header length: %w", unexpectedEOF(err))
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	switch {
	case n > MaxHeaderSize:
		return fmt.Errorf("header length %d exceeds the %d-byte limit (not a safetensors file?)", n, MaxHeaderSize)
	case int64(n) > size-8:
		return fmt.Errorf("header length %d exceeds the %d bytes after the length field (truncated, or not a safetensors file?)", n, size-8)
	}
	header := make([]byte, n)
	if _, err := io.ReadFull(f.f, header); err != nil {
		return fmt.Errorf("reading the %d-byte header: %w", n, unexpectedEOF(err))
	}
	entries, meta, err := parseHeader(header)
	if err != nil {
		return err
	}
	bufLen, err := layout(entries)
	if err != nil {
		return err
	}
	if bufLen != size-8-int64(n) {
		return fmt.Errorf("tensors cover %d bytes of data, the file has %d after the header (truncated or trailing bytes)", bufLen, size-8-int64(n))
	}
	f.start, f.entries, f.meta = 8+int64(n), entries, meta
	f.byName = make(map[string]int, len(entries))
	for i, e := range entries {
		f.byName[e.name] = i
	}
	return nil
}

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// Metadata returns the header's metadata, nil if it has none.
func (f *File) Metadata() map[string]string { return f.meta }

// Tensors describes every tensor of the file, in the order of their data.
func (f *File) Tensors() []Info {
	infos := make([]Info, len(f.entries))
	for i, e := range f.entries {
		infos[i] = Info{Name: e.name, DType: e.dtype, Shape: slices.Clone(e.shape)}
	}
	return infos
}

// Lookup describes the tensor called name.
func (f *File) Lookup(name string) (Info, bool) {
	i, ok := f.byName[name]
	if !ok {
		return Info{}, false
	}
	e := f.entries[i]
	return Info{Name: e.name, DType: e.dtype, Shape: slices.Clone(e.shape)}, true
}

// chunkBytes is how much of a tensor ReadFloat32 reads at a time.
const chunkBytes = 1 << 20

// ReadFloat32 reads the tensor called name, of dtype F32, F16, BF16 or
// F64, into dst as float32 (as Options.Convert converts); dst must have
// its number of elements.
func (f *File) ReadFloat32(name string, dst []float32) error {
	e, err := f.entry(name, len(dst))
	if err != nil {
		return err
	}
	dt := dtypes[e.dtype]
	if dt.convert == nil {
		return fmt.Errorf("safetensors: %s: tensor %q: dtype %s is not a float (F32, F16, BF16, F64)", f.path, name, e.dtype)
	}
	buf := make([]byte, min(e.end-e.begin, chunkBytes))
	for at := e.begin; at < e.end; {
		b := buf[:min(int64(len(buf)), e.end-at)]
		if _, err := f.f.ReadAt(b, f.start+at); err != nil {
			return fmt.Errorf("safetensors: %s: tensor %q: %w", f.path, name, unexpectedEOF(err))
		}
		out := dst[(at-e.begin)/int64(dt.size):]
		switch e.dtype {
		case "F32":
			for i := range len(b) / 4 {
				out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			}
		case "BF16":
			for i := range len(b) / 2 {
				out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
			}
		default:
			for i := range len(b) / dt.size {
				out[i] = dt.convert(b[i*dt.size:])
			}
		}
		at += int64(len(b))
	}
	return nil
}

// ReadInt64 reads the tensor called name, of an integer dtype (I8 … I64,
// U8 … U32, BOOL; U64 within int64), as int64.
func (f *File) ReadInt64(name string) ([]int64, error) {
	i, ok := f.byName[name]
	if !ok {
		return nil, fmt.Errorf("safetensors: %s: no tensor %q", f.path, name)
	}
	e := f.entries[i]
	size := dtypes[e.dtype].size
	b := make([]byte, e.end-e.begin)
	if _, err := f.f.ReadAt(b, f.start+e.begin); err != nil {
		return nil, fmt.Errorf("safetensors: %s: tensor %q: %w", f.path, name, unexpectedEOF(err))
	}
	out := make([]int64, len(b)/max(size, 1))
	for i := range out {
		p := b[i*size:]
		switch e.dtype {
		case "I64":
			out[i] = int64(binary.LittleEndian.Uint64(p))
		case "U64":
			v := binary.LittleEndian.Uint64(p)
			if v > math.MaxInt64 {
				return nil, fmt.Errorf("safetensors: %s: tensor %q: element %d = %d exceeds int64", f.path, name, i, v)
			}
			out[i] = int64(v)
		case "I32":
			out[i] = int64(int32(binary.LittleEndian.Uint32(p)))
		case "U32":
			out[i] = int64(binary.LittleEndian.Uint32(p))
		case "I16":
			out[i] = int64(int16(binary.LittleEndian.Uint16(p)))
		case "U16":
			out[i] = int64(binary.LittleEndian.Uint16(p))
		case "I8":
			out[i] = int64(int8(p[0]))
		case "U8", "BOOL":
			out[i] = int64(p[0])
		default:
			return nil, fmt.Errorf("safetensors: %s: tensor %q: dtype %s is not an integer", f.path, name, e.dtype)
		}
	}
	return out, nil
}

// entry returns the entry of name, which must have n elements.
func (f *File) entry(name string, n int) (entry, error) {
	i, ok := f.byName[name]
	if !ok {
		return entry{}, fmt.Errorf("safetensors: %s: no tensor %q", f.path, name)
	}
	e := f.entries[i]
	if count, _ := volume(e.shape); count != int64(n) {
		return entry{}, fmt.Errorf("safetensors: %s: tensor %q of shape %v into a buffer of %d elements", f.path, name, e.shape, n)
	}
	return e, nil
}
