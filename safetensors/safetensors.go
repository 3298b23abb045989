// Package safetensors reads and writes tensors in the Hugging Face
// safetensors format, so that weights and test data move between polysketch
// and Python (safetensors.numpy, safetensors.torch) without conversion.
//
// A file is an 8-byte little-endian header length n, n bytes of JSON
//
//	{"__metadata__":{"key":"value"},"name":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}
//
// padded with spaces, and then the byte buffer the offsets point into. The
// offsets are relative to the start of the buffer, and the tensors must
// tile it exactly: no gaps, no overlaps, nothing after the last tensor.
//
// Everything is float32 here. Writing stores F32 (little-endian). Reading
// accepts F32; with Options.Convert it also accepts F16, BF16 and F64 and
// converts them to float32. Any other dtype (integers, booleans, 8-bit
// floats) is an error naming the tensor. Every field of a file is checked
// before it is used, so a corrupt or hostile file gives an error, never a
// panic or a huge allocation.
package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"unicode/utf8"
	"unsafe"

	"github.com/polysketch/polysketch/internal/atomicfile"
	"github.com/polysketch/polysketch/internal/regular"

	"github.com/polysketch/polysketch/tensor"
)

// MaxHeaderSize is the largest JSON header accepted, as in the reference
// implementation: a larger header is taken as a corrupt file.
const MaxHeaderSize = 100_000_000

// metadataKey is the reserved header key holding the free-form string map.
const metadataKey = "__metadata__"

// Options configures reading. A nil *Options is the zero value.
type Options struct {
	// Convert accepts F16, BF16 and F64 tensors and converts them to
	// float32 (F64 rounds to nearest; magnitudes beyond float32 become
	// ±Inf). Without it only F32 tensors are accepted.
	Convert bool
}

// dtype describes one element type of the format.
type dtype struct {
	size    int                    // bytes per element; 0 for the packed sub-byte floats
	convert func(b []byte) float32 // nil: not readable as float32
}

// dtypes lists every dtype of the format (so that a file with, say, I64
// tensors is reported as unsupported, not as corrupt).
var dtypes = map[string]dtype{
	"F32":     {size: 4, convert: f32},
	"F16":     {size: 2, convert: f16},
	"BF16":    {size: 2, convert: bf16},
	"F64":     {size: 8, convert: f64},
	"BOOL":    {size: 1},
	"U8":      {size: 1},
	"I8":      {size: 1},
	"F8_E5M2": {size: 1},
	"F8_E4M3": {size: 1},
	"F8_E8M0": {size: 1},
	"I16":     {size: 2},
	"U16":     {size: 2},
	"I32":     {size: 4},
	"U32":     {size: 4},
	"I64":     {size: 8},
	"U64":     {size: 8},
	"C64":     {size: 8},
	"F4":      {},
	"F6_E2M3": {},
	"F6_E3M2": {},
}

func f32(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }
func f64(b []byte) float32 { return float32(math.Float64frombits(binary.LittleEndian.Uint64(b))) }

// bf16 is the top half of a float32.
func bf16(b []byte) float32 { return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16) }

// f16 converts an IEEE 754 half-precision number, exactly: every half is
// representable as a float32.
func f16(b []byte) float32 {
	h := binary.LittleEndian.Uint16(b)
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN, keeping the NaN payload
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp != 0: // normal: rebias the exponent from 15 to 127
		return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
	default: // zero or subnormal: frac · 2⁻²⁴
		v := float32(frac) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(v))
	}
}

// Read reads every tensor of the safetensors file at path, with its
// metadata (nil if the file has none). Errors name the file, and the
// tensor where there is one.
func Read(path string, opts *Options) (map[string]*tensor.Tensor, map[string]string, error) {
	f, err := regular.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("safetensors: %w", err)
	}
	ts, md, err := decode(bufio.NewReaderSize(f, 1<<20), st.Size(), opts)
	if err != nil {
		return nil, nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	return ts, md, nil
}

// Decode reads a safetensors file from r, which must end where the file
// ends. It checks the same things as Read; since the size of r is not known
// up front, memory grows with the data actually read, never with the sizes
// a header claims.
func Decode(r io.Reader, opts *Options) (map[string]*tensor.Tensor, map[string]string, error) {
	ts, md, err := decode(r, -1, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("safetensors: %w", err)
	}
	return ts, md, nil
}

// entry is one tensor as the header describes it.
type entry struct {
	name       string
	dtype      string
	shape      []int
	begin, end int64
}

// decode reads a file of size bytes (-1 if unknown) from r.
func decode(r io.Reader, size int64, opts *Options) (map[string]*tensor.Tensor, map[string]string, error) {
	if opts == nil {
		opts = &Options{}
	}
	var lenBuf [8]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, nil, fmt.Errorf("file too short for the 8-byte header length: %w", unexpectedEOF(err))
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	switch {
	case n > MaxHeaderSize:
		return nil, nil, fmt.Errorf("header length %d exceeds the %d-byte limit (not a safetensors file?)", n, MaxHeaderSize)
	case size >= 0 && int64(n) > size-8:
		return nil, nil, fmt.Errorf("header length %d exceeds the %d bytes after the length field (truncated, or not a safetensors file?)", n, size-8)
	}
	header, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the %d-byte header: %w", n, err)
	}
	if uint64(len(header)) != n {
		return nil, nil, fmt.Errorf("header truncated: %d of %d bytes", len(header), n)
	}
	entries, metadata, err := parseHeader(header)
	if err != nil {
		return nil, nil, err
	}
	bufLen, err := validate(entries, opts)
	if err != nil {
		return nil, nil, err
	}
	if size >= 0 && bufLen != size-8-int64(n) {
		return nil, nil, fmt.Errorf("tensors cover %d bytes of data, the file has %d after the header (truncated or trailing bytes)", bufLen, size-8-int64(n))
	}

	// The entries are sorted by offset and tile the buffer, so one pass in
	// that order reads every byte once.
	tensors := make(map[string]*tensor.Tensor, len(entries))
	scratch := make([]byte, 64<<10)
	for _, e := range entries {
		dt := dtypes[e.dtype]
		count := int((e.end - e.begin) / int64(dt.size))
		prealloc := count
		if size < 0 {
			prealloc = min(count, 1<<16) // grow with the data actually present
		}
		data := make([]float32, 0, prealloc)
		chunk := len(scratch) / dt.size * dt.size
		for remaining := e.end - e.begin; remaining > 0; {
			b := scratch[:min(int64(chunk), remaining)]
			if _, err := io.ReadFull(r, b); err != nil {
				return nil, nil, fmt.Errorf("tensor %q: data truncated: %w", e.name, unexpectedEOF(err))
			}
			for i := 0; i < len(b); i += dt.size {
				data = append(data, dt.convert(b[i:i+dt.size]))
			}
			remaining -= int64(len(b))
		}
		tensors[e.name] = tensor.From(data, e.shape...)
	}
	if size < 0 {
		var one [1]byte
		if k, _ := io.ReadFull(r, one[:]); k > 0 {
			return nil, nil, fmt.Errorf("trailing bytes after the last tensor (data ends at offset %d)", bufLen)
		}
	}
	return tensors, metadata, nil
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseHeader decodes the JSON header. It rejects what encoding/json would
// silently accept: invalid UTF-8, duplicate keys, keys that differ only in
// case, unknown fields, and anything after the object but spaces.
func parseHeader(header []byte) ([]entry, map[string]string, error) {
	if !utf8.Valid(header) {
		return nil, nil, errors.New("header is not valid UTF-8")
	}
	if len(header) == 0 || header[0] != '{' {
		return nil, nil, errors.New("header does not start with '{' (not a safetensors file?)")
	}
	dec := json.NewDecoder(bytes.NewReader(header))
	dec.UseNumber()
	fields, err := readObject(dec)
	if err != nil {
		return nil, nil, fmt.Errorf("header is not valid JSON: %w", err)
	}
	if rest := header[dec.InputOffset():]; len(bytes.Trim(rest, " \t\r\n")) > 0 {
		return nil, nil, fmt.Errorf("header has %d bytes after the JSON object that are not padding", len(rest))
	}
	var (
		entries  []entry
		metadata map[string]string
	)
	for _, f := range fields {
		if f.key == metadataKey {
			if metadata, err = parseMetadata(f.value); err != nil {
				return nil, nil, err
			}
			continue
		}
		e, err := parseEntry(f.key, f.value)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", f.key, err)
		}
		entries = append(entries, e)
	}
	return entries, metadata, nil
}

type field struct {
	key   string
	value json.RawMessage
}

// readObject reads one JSON object as its fields in order, rejecting
// duplicate keys.
func readObject(dec *json.Decoder) ([]field, error) {
	if tok, err := dec.Token(); err != nil {
		return nil, err
	} else if tok != json.Delim('{') {
		return nil, fmt.Errorf("got %v, want an object", tok)
	}
	var fields []field
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string) // inside an object the decoder only yields string keys
		if seen[key] {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("key %q: %w", key, err)
		}
		fields = append(fields, field{key, v})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, err
	}
	return fields, nil
}

func parseMetadata(raw json.RawMessage) (map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	fields, err := readObject(dec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", metadataKey, err)
	}
	md := make(map[string]string, len(fields))
	for _, f := range fields {
		var s string
		if err := json.Unmarshal(f.value, &s); err != nil {
			return nil, fmt.Errorf("%s: key %q: value %s is not a string", metadataKey, f.key, clip(f.value))
		}
		md[f.key] = s
	}
	return md, nil
}

func parseEntry(name string, raw json.RawMessage) (entry, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	fields, err := readObject(dec)
	if err != nil {
		return entry{}, err
	}
	e := entry{name: name}
	var have struct{ dtype, shape, offsets bool }
	for _, f := range fields {
		switch f.key {
		case "dtype":
			if err := json.Unmarshal(f.value, &e.dtype); err != nil {
				return entry{}, fmt.Errorf("dtype %s is not a string", clip(f.value))
			}
			have.dtype = true
		case "shape":
			dims, err := ints(f.value)
			if err != nil {
				return entry{}, fmt.Errorf("shape %s: %w", clip(f.value), err)
			}
			e.shape = make([]int, len(dims))
			for i, d := range dims {
				e.shape[i] = int(d)
			}
			have.shape = true
		case "data_offsets":
			offs, err := ints(f.value)
			if err != nil || len(offs) != 2 {
				return entry{}, fmt.Errorf("data_offsets %s: want [begin, end] with non-negative integers", clip(f.value))
			}
			e.begin, e.end = offs[0], offs[1]
			have.offsets = true
		default:
			return entry{}, fmt.Errorf("unknown field %q", f.key)
		}
	}
	switch {
	case !have.dtype:
		return entry{}, errors.New("missing dtype")
	case !have.shape:
		return entry{}, errors.New("missing shape")
	case !have.offsets:
		return entry{}, errors.New("missing data_offsets")
	}
	return e, nil
}

// ints decodes a JSON array of non-negative integers that fit in an int64.
func ints(raw json.RawMessage) ([]int64, error) {
	var nums []json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&nums); err != nil {
		return nil, errors.New("not an array of integers")
	}
	out := make([]int64, len(nums))
	for i, s := range nums {
		v, err := s.Int64()
		if err != nil || v < 0 {
			return nil, fmt.Errorf("element %s is not a non-negative integer", s)
		}
		out[i] = v
	}
	return out, nil
}

// validate checks dtypes, shapes and offsets, sorts entries by offset, and
// returns the length of the data buffer they tile.
func validate(entries []entry, opts *Options) (int64, error) {
	for _, e := range entries {
		dt, ok := dtypes[e.dtype]
		switch {
		case !ok:
			return 0, fmt.Errorf("tensor %q: unknown dtype %q", e.name, e.dtype)
		case e.dtype != "F32" && (!opts.Convert || dt.convert == nil):
			if dt.convert != nil {
				return 0, fmt.Errorf("tensor %q: dtype %s, want F32 (conversion from F16, BF16 and F64 is off)", e.name, e.dtype)
			}
			return 0, fmt.Errorf("tensor %q: dtype %s is not supported: polysketch reads F32 (and F16, BF16, F64 when converting)", e.name, e.dtype)
		}
	}
	return layout(entries)
}

// layout checks the shapes and offsets of entries of known dtypes, sorts
// them by offset, and returns the length of the data buffer they tile.
func layout(entries []entry) (int64, error) {
	for _, e := range entries {
		dt, ok := dtypes[e.dtype]
		switch {
		case !ok:
			return 0, fmt.Errorf("tensor %q: unknown dtype %q", e.name, e.dtype)
		case dt.size == 0:
			return 0, fmt.Errorf("tensor %q: dtype %s is not supported: polysketch reads F32, F16, BF16, F64 and the integers", e.name, e.dtype)
		case e.begin > e.end:
			return 0, fmt.Errorf("tensor %q: data_offsets [%d, %d] end before they begin", e.name, e.begin, e.end)
		}
		count, ok := volume(e.shape)
		if !ok || count > math.MaxInt64/int64(dt.size) {
			return 0, fmt.Errorf("tensor %q: shape %v is too large", e.name, e.shape)
		}
		if want := count * int64(dt.size); e.end-e.begin != want {
			return 0, fmt.Errorf("tensor %q: data_offsets [%d, %d] hold %d bytes, shape %v of %s needs %d", e.name, e.begin, e.end, e.end-e.begin, e.shape, e.dtype, want)
		}
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if a.begin != b.begin {
			return int(sign(a.begin - b.begin))
		}
		return int(sign(a.end - b.end))
	})
	var pos int64
	for i, e := range entries {
		switch {
		case e.begin < pos:
			return 0, fmt.Errorf("tensor %q: data_offsets [%d, %d] overlap tensor %q at [%d, %d]", e.name, e.begin, e.end, entries[i-1].name, entries[i-1].begin, entries[i-1].end)
		case e.begin > pos:
			return 0, fmt.Errorf("tensor %q: data_offsets [%d, %d] leave a gap: the previous tensor ends at %d", e.name, e.begin, e.end, pos)
		}
		pos = e.end
	}
	return pos, nil
}

func sign(x int64) int64 {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

// volume returns the number of elements of shape, and false on overflow.
// A zero dimension makes the volume zero whatever the others are.
func volume(shape []int) (int64, bool) {
	if slices.Contains(shape, 0) {
		return 0, true
	}
	n := int64(1)
	for _, d := range shape {
		if int64(d) > math.MaxInt64/n {
			return 0, false
		}
		n *= int64(d)
	}
	return n, true
}

// clip shortens a JSON value for an error message.
func clip(raw []byte) string {
	const max = 40
	if len(raw) > max {
		return string(raw[:max]) + "…"
	}
	return string(raw)
}

// Write writes tensors as F32, with metadata (may be nil), to the file at
// path. It writes a temporary file in the same directory, syncs it and
// renames it over path, so a failure never leaves a partial file nor
// clobbers an existing one.
func Write(path string, tensors map[string]*tensor.Tensor, metadata map[string]string) error {
	if err := atomicfile.Write(path, func(w io.Writer) error { return encode(w, tensors, metadata) }); err != nil {
		return fmt.Errorf("safetensors: %s: %w", path, err)
	}
	return nil
}

// Encode writes tensors as F32, with metadata (may be nil), to w. The
// output is deterministic and laid out as the reference writer lays out
// F32 tensors: compact JSON with the metadata first (keys sorted here,
// where the reference's order is arbitrary), then the tensors sorted by
// name, their data in that order, the header padded with spaces to a
// multiple of 8 bytes. (Names with U+2028 or U+2029 are escaped, which
// serde does not do; readers see the same strings.)
func Encode(w io.Writer, tensors map[string]*tensor.Tensor, metadata map[string]string) error {
	if err := encode(w, tensors, metadata); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

func encode(w io.Writer, tensors map[string]*tensor.Tensor, metadata map[string]string) error {
	items := make(map[string]item, len(tensors))
	for name, t := range tensors {
		if t == nil {
			return fmt.Errorf("tensor %q is nil", name)
		}
		n, ok := volume(t.Shape)
		if !ok || n != int64(len(t.Data)) || slices.ContainsFunc(t.Shape, func(d int) bool { return d < 0 }) {
			return fmt.Errorf("tensor %q: shape %v does not match its %d elements", name, t.Shape, len(t.Data))
		}
		items[name] = item{"F32", t.Shape, 4 * int64(len(t.Data))}
	}
	header, names, err := makeHeader(items, metadata)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(header)))
	bw.Write(lenBuf[:])
	bw.Write(header)
	if littleEndian {
		// The data's chunks then go through the buffer without a copy.
		if err := bw.Flush(); err != nil {
			return err
		}
	}
	var scratch [4096]byte
	for _, name := range names {
		data := tensors[name].Data
		for littleEndian && len(data) > 0 {
			// The floats are their bytes: write them as they are, a
			// chunk at a time, which a hashing writer below hashes
			// while it is in cache.
			k := min(len(data), chunkBytes/4)
			if _, err := bw.Write(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(data))), 4*k)); err != nil {
				return err
			}
			data = data[k:]
		}
		for len(data) > 0 {
			k := min(len(data), len(scratch)/4)
			for i, v := range data[:k] {
				binary.LittleEndian.PutUint32(scratch[4*i:], math.Float32bits(v))
			}
			if _, err := bw.Write(scratch[:4*k]); err != nil {
				return err
			}
			data = data[k:]
		}
	}
	return bw.Flush()
}

// item is a tensor as the header describes it: dtype, shape and bytes.
type item struct {
	dtype string
	shape []int
	bytes int64
}

// makeHeader returns the padded JSON header and the tensor names in buffer
// order.
func makeHeader(tensors map[string]item, metadata map[string]string) ([]byte, []string, error) {
	names := make([]string, 0, len(tensors))
	for name := range tensors {
		switch {
		case name == metadataKey:
			return nil, nil, fmt.Errorf("tensor name %q is reserved for metadata", name)
		case !utf8.ValidString(name):
			return nil, nil, fmt.Errorf("tensor name %q is not valid UTF-8", name)
		}
		names = append(names, name)
	}
	sort.Strings(names)

	var b bytes.Buffer
	b.WriteByte('{')
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k, v := range metadata {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, nil, fmt.Errorf("metadata %q: not valid UTF-8", k)
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		writeString(&b, metadataKey)
		b.WriteString(":{")
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(&b, k)
			b.WriteByte(':')
			writeString(&b, metadata[k])
		}
		b.WriteByte('}')
	}
	var offset int64
	for i, name := range names {
		if i > 0 || len(metadata) > 0 {
			b.WriteByte(',')
		}
		t := tensors[name]
		writeString(&b, name)
		fmt.Fprintf(&b, `:{"dtype":%q,"shape":[`, t.dtype)
		for j, d := range t.shape {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprint(&b, d)
		}
		end := offset + t.bytes
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, offset, end)
		offset = end
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	return b.Bytes(), names, nil
}

// writeString writes s as a JSON string without HTML escaping, as serde
// does, so that names like "a<b" come out the same.
func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)           // cannot fail for a string
	b.Truncate(b.Len() - 1) // Encode appends a newline
}
