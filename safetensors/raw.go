package safetensors

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/polysketch/polysketch/internal/atomicfile"
)

// Raw is a tensor of any dtype as its little-endian bytes: how files of
// other dtypes than F32 are written (EncodeRaw), such as the bf16 shards
// of a Hugging Face checkpoint or int64 token ids.
type Raw struct {
	DType string // "BF16", "F16", "I64", …
	Shape []int
	Data  []byte
}

// WriteRaw writes tensors of any dtype, with metadata (may be nil), to
// the file at path, atomically, as Write does.
func WriteRaw(path string, tensors map[string]Raw, metadata map[string]string) error {
	if err := atomicfile.Write(path, func(w io.Writer) error { return encodeRaw(w, tensors, metadata) }); err != nil {
		return fmt.Errorf("safetensors: %s: %w", path, err)
	}
	return nil
}

// EncodeRaw writes tensors of any dtype, laid out as Encode lays out F32
// tensors.
func EncodeRaw(w io.Writer, tensors map[string]Raw, metadata map[string]string) error {
	if err := encodeRaw(w, tensors, metadata); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

func encodeRaw(w io.Writer, tensors map[string]Raw, metadata map[string]string) error {
	items := make(map[string]item, len(tensors))
	for name, t := range tensors {
		dt, ok := dtypes[t.DType]
		if !ok || dt.size == 0 {
			return fmt.Errorf("tensor %q: dtype %q cannot be written", name, t.DType)
		}
		n, ok := volume(t.Shape)
		if !ok || n*int64(dt.size) != int64(len(t.Data)) || slices.ContainsFunc(t.Shape, func(d int) bool { return d < 0 }) {
			return fmt.Errorf("tensor %q: shape %v of %s does not match its %d bytes", name, t.Shape, t.DType, len(t.Data))
		}
		items[name] = item{t.DType, t.Shape, int64(len(t.Data))}
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
	for _, name := range names {
		if _, err := bw.Write(tensors[name].Data); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// BF16 returns x rounded to bfloat16 (to nearest, ties to even; NaN stays
// NaN) as little-endian bytes.
func BF16(x []float32) []byte {
	b := make([]byte, 2*len(x))
	for i, v := range x {
		u := math.Float32bits(v)
		if v != v {
			u |= 1 << 22 // quiet, so that the truncated payload stays a NaN
		} else {
			u += 0x7fff + (u>>16)&1
		}
		binary.LittleEndian.PutUint16(b[2*i:], uint16(u>>16))
	}
	return b
}

// F16 returns x rounded to IEEE 754 half precision (to nearest, ties to
// even; beyond the range ±Inf; NaN stays NaN) as little-endian bytes.
func F16(x []float32) []byte {
	b := make([]byte, 2*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint16(b[2*i:], toF16(v))
	}
	return b
}

// toF16 rounds v to half precision.
func toF16(v float32) uint16 {
	u := math.Float32bits(v)
	sign := uint16(u>>16) & 0x8000
	exp := int(u>>23&0xff) - 127
	frac := u & 0x7fffff
	switch {
	case exp == 128: // Inf or NaN
		if frac != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp > 15:
		return sign | 0x7c00
	case exp >= -14: // normal: 10 of the 23 fraction bits, rounded
		h := uint32(exp+15)<<10 | frac>>13
		rest := frac & 0x1fff
		if rest > 0x1000 || rest == 0x1000 && h&1 == 1 {
			h++ // may carry into the exponent, up to Inf: correct
		}
		return sign | uint16(h)
	case exp >= -25: // subnormal: the value in units of 2⁻²⁴, rounded
		m := frac | 0x800000    // 24 significant bits, value m·2^(exp−23)
		shift := uint(-exp - 1) // to units of 2⁻²⁴: m >> (−14−exp+13)
		h := m >> shift
		rest := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || rest == half && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	}
	return sign
}

// I64 returns x as little-endian bytes.
func I64(x []int64) []byte {
	b := make([]byte, 8*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
	return b
}
