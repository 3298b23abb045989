package safetensors

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"unsafe"

	"github.com/polysketch/polysketch/internal/regular"
)

// File is a safetensors file opened to read its tensors one at a time, in
// any order, into buffers the caller owns: the way to load a model larger
// than a copy of it in memory, or to check every shard of a checkpoint
// against a configuration before reading any data. Open checks the whole
// header, as Read does, and that the tensors tile the rest of the file.
type File struct {
	path    string // in errors; "" for NewFile's
	r       io.ReaderAt
	closer  io.Closer // nil for NewFile's
	start   int64     // offset of the data buffer
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
	f := &File{path: path, r: osf, closer: osf}
	if err := f.readHeader(st.Size()); err != nil {
		osf.Close()
		return nil, err
	}
	return f, nil
}

// NewFile reads the header of the safetensors file of size bytes that r
// reads, as Open does. Reads of r go front to back: the header, then each
// tensor that is read, in the order asked, in pieces of at most 1 MiB; a
// reader that hashes what it serves (a checkpoint checking its files'
// checksums) sees the whole file in order when the tensors are read in the
// order Tensors lists them. Errors do not name the file: the caller does.
func NewFile(r io.ReaderAt, size int64) (*File, error) {
	f := &File{r: r}
	if err := f.readHeader(size); err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	return f, nil
}

// readHeader reads and checks the header of a file of size bytes.
func (f *File) readHeader(size int64) error {
	var lenBuf [8]byte
	if _, err := f.r.ReadAt(lenBuf[:], 0); err != nil {
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
	if _, err := f.r.ReadAt(header, 8); err != nil {
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

// Close closes the file that Open opened; for NewFile's, it does nothing.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	return f.closer.Close()
}

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

// chunkBytes is how much of a tensor ReadFloat32At reads at a time: small
// enough to stay in cache between the read and its conversion (or a
// hashing reader's pass over it).
const chunkBytes = 1 << 20

// chunks are the buffers of the conversions, shared by every File: a
// goroutine reading a tensor holds one.
var chunks = sync.Pool{New: func() any { return new([chunkBytes]byte) }}

// littleEndian reports whether float32 is stored as safetensors stores
// it, so that F32 data can be read straight into a []float32.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// ReadFloat32 reads the tensor called name, of dtype F32, F16, BF16 or
// F64, into dst as float32 (as Options.Convert converts); dst must have
// its number of elements.
func (f *File) ReadFloat32(name string, dst []float32) error {
	e, err := f.entry(name)
	if err != nil {
		return err
	}
	if count, _ := volume(e.shape); count != int64(len(dst)) {
		return f.errorf("tensor %q of shape %v into a buffer of %d elements", name, e.shape, len(dst))
	}
	return f.readFloat32(e, dst, 0)
}

// ReadFloat32At reads elements off to off+len(dst) of the tensor called
// name, in its row-major order, as ReadFloat32 reads them all: a tensor
// read in parts, such as the rows of a matrix that is transposed on the
// way in, needs no buffer of its size.
func (f *File) ReadFloat32At(name string, dst []float32, off int64) error {
	e, err := f.entry(name)
	if err != nil {
		return err
	}
	if count, _ := volume(e.shape); off < 0 || off > count || int64(len(dst)) > count-off {
		return f.errorf("tensor %q of shape %v: elements %d to %d are outside it", name, e.shape, off, off+int64(len(dst)))
	}
	return f.readFloat32(e, dst, off)
}

func (f *File) readFloat32(e entry, dst []float32, off int64) error {
	dt := dtypes[e.dtype]
	if dt.convert == nil {
		return f.errorf("tensor %q: dtype %s is not a float (F32, F16, BF16, F64)", e.name, e.dtype)
	}
	at := f.start + e.begin + off*int64(dt.size)
	if e.dtype == "F32" && littleEndian {
		// The bytes are the floats: read them in place.
		for len(dst) > 0 {
			k := min(len(dst), chunkBytes/4)
			b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(dst))), 4*k)
			if _, err := f.r.ReadAt(b, at); err != nil {
				return f.errorf("tensor %q: %w", e.name, unexpectedEOF(err))
			}
			dst, at = dst[k:], at+int64(len(b))
		}
		return nil
	}
	buf := chunks.Get().(*[chunkBytes]byte)
	defer chunks.Put(buf)
	for len(dst) > 0 {
		k := min(len(dst), chunkBytes/dt.size)
		b := buf[:k*dt.size]
		if _, err := f.r.ReadAt(b, at); err != nil {
			return f.errorf("tensor %q: %w", e.name, unexpectedEOF(err))
		}
		out := dst[:k]
		switch e.dtype {
		case "F32":
			for i := range out {
				out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			}
		case "BF16":
			for i := range out {
				out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
			}
		default:
			for i := range out {
				out[i] = dt.convert(b[i*dt.size:])
			}
		}
		dst, at = dst[k:], at+int64(len(b))
	}
	return nil
}

// errorf returns an error of the package naming the file, if it has a
// name.
func (f *File) errorf(format string, args ...any) error {
	if f.path == "" {
		return fmt.Errorf("safetensors: "+format, args...)
	}
	return fmt.Errorf("safetensors: %s: "+format, append([]any{f.path}, args...)...)
}

// ReadInt64 reads the tensor called name, of an integer dtype (I8 … I64,
// U8 … U32, BOOL; U64 within int64), as int64.
func (f *File) ReadInt64(name string) ([]int64, error) {
	e, err := f.entry(name)
	if err != nil {
		return nil, err
	}
	size := dtypes[e.dtype].size
	b := make([]byte, e.end-e.begin)
	if _, err := f.r.ReadAt(b, f.start+e.begin); err != nil {
		return nil, f.errorf("tensor %q: %w", name, unexpectedEOF(err))
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
				return nil, f.errorf("tensor %q: element %d = %d exceeds int64", name, i, v)
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
			return nil, f.errorf("tensor %q: dtype %s is not an integer", name, e.dtype)
		}
	}
	return out, nil
}

// entry returns the entry of the tensor called name.
func (f *File) entry(name string) (entry, error) {
	i, ok := f.byName[name]
	if !ok {
		return entry{}, f.errorf("no tensor %q", name)
	}
	return f.entries[i], nil
}
