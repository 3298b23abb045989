package safetensors

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestHalfRounding: every half-precision and bfloat16 value comes back
// from F16 and BF16 unchanged, and a float32 between two neighbours
// rounds to the nearer, ties to the even one.
func TestHalfRounding(t *testing.T) {
	for bits := range 1 << 16 {
		var b [2]byte
		binary.LittleEndian.PutUint16(b[:], uint16(bits))
		for _, c := range []struct {
			name  string
			read  func([]byte) float32
			write func([]float32) []byte
		}{{"F16", f16, F16}, {"BF16", bf16, BF16}} {
			v := c.read(b[:])
			if v != v {
				if w := c.read(c.write([]float32{v})); w == w {
					t.Fatalf("%s: NaN %#04x came back as %g", c.name, bits, w)
				}
				continue
			}
			if got := binary.LittleEndian.Uint16(c.write([]float32{v})); got != uint16(bits) {
				t.Fatalf("%s(%g) = %#04x, want %#04x", c.name, v, got, bits)
			}
			// The midpoint to the next value up in magnitude.
			var nb [2]byte
			binary.LittleEndian.PutUint16(nb[:], uint16(bits)+1)
			next := c.read(nb[:])
			if next != next || math.IsInf(float64(v), 0) {
				continue
			}
			mid := float32((float64(v) + float64(next)) / 2)
			if float64(mid) != (float64(v)+float64(next))/2 {
				continue // not representable in float32
			}
			want := uint16(bits)
			if bits&1 == 1 {
				want++
			}
			if got := binary.LittleEndian.Uint16(c.write([]float32{mid})); got != want {
				t.Fatalf("%s(%g), halfway between %#04x and the next: %#04x, want %#04x", c.name, mid, bits, got, want)
			}
		}
	}
	if got := binary.LittleEndian.Uint16(F16([]float32{1e6})); got != 0x7c00 {
		t.Errorf("F16(1e6) = %#04x, want +Inf", got)
	}
}

// TestFile writes tensors of several dtypes with WriteRaw and reads them
// back one at a time.
func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	x := []float32{1, -2.5, 0.1, 3e-5, 65504, -0}
	ids := []int64{0, 7, -3, 1 << 40}
	err := WriteRaw(path, map[string]Raw{
		"f32":  {DType: "F32", Shape: []int{2, 3}, Data: f32Bytes(x)},
		"bf16": {DType: "BF16", Shape: []int{6}, Data: BF16(x)},
		"f16":  {DType: "F16", Shape: []int{3, 2}, Data: F16(x)},
		"ids":  {DType: "I64", Shape: []int{2, 2}, Data: I64(ids)},
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata()["format"] != "pt" || len(f.Tensors()) != 4 {
		t.Errorf("metadata %v, %d tensors", f.Metadata(), len(f.Tensors()))
	}
	for _, c := range []struct {
		name string
		tol  float64
	}{{"f32", 0}, {"bf16", 1.0 / 256}, {"f16", 1.0 / 2048}} {
		got := make([]float32, 6)
		if err := f.ReadFloat32(c.name, got); err != nil {
			t.Fatal(err)
		}
		for i := range x {
			if math.Abs(float64(got[i]-x[i])) > c.tol*math.Abs(float64(x[i]))+1e-7 {
				t.Errorf("%s[%d] = %g, want %g", c.name, i, got[i], x[i])
			}
		}
	}
	got, err := f.ReadInt64("ids")
	if err != nil || !slices.Equal(got, ids) {
		t.Errorf("ids: %v, %v; want %v", got, err, ids)
	}
	if info, ok := f.Lookup("f16"); !ok || info.DType != "F16" || !slices.Equal(info.Shape, []int{3, 2}) || info.Len() != 6 {
		t.Errorf("Lookup(f16) = %+v, %v", info, ok)
	}
	for _, bad := range []struct {
		err  error
		want string
	}{
		{f.ReadFloat32("ids", make([]float32, 4)), `tensor "ids": dtype I64 is not a float`},
		{f.ReadFloat32("f32", make([]float32, 5)), "into a buffer of 5 elements"},
		{f.ReadFloat32("none", nil), `no tensor "none"`},
	} {
		if bad.err == nil || !strings.Contains(bad.err.Error(), bad.want) {
			t.Errorf("error %v, want one containing %q", bad.err, bad.want)
		}
	}
	if _, err := f.ReadInt64("bf16"); err == nil || !strings.Contains(err.Error(), "not an integer") {
		t.Errorf("ReadInt64 of BF16: %v", err)
	}
}

func f32Bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// TestOpenTruncated: Open checks that the tensors tile the file.
func TestOpenTruncated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := WriteRaw(path, map[string]Raw{"a": {DType: "BF16", Shape: []int{4}, Data: BF16([]float32{1, 2, 3, 4})}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 8+8); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Open of a truncated file: %v, want an error naming it", err)
	}
}

// orderedReader is an io.ReaderAt that records the offsets it is read at.
type orderedReader struct {
	b    []byte
	offs []int64
}

func (r *orderedReader) ReadAt(p []byte, off int64) (int, error) {
	r.offs = append(r.offs, off)
	return bytes.NewReader(r.b).ReadAt(p, off)
}

// TestNewFileReadsInOrder: a File over any io.ReaderAt reads the header
// and then each tensor asked for in order, front to back, so that a
// reader hashing what it serves sees the whole file once when the tensors
// are read in the order Tensors lists them; ReadFloat32At reads any part
// of a tensor.
func TestNewFileReadsInOrder(t *testing.T) {
	x := make([]float32, 3*chunkBytes/4/2+5) // one chunk and a half of F32, three of BF16
	for i := range x {
		x[i] = float32(i%256) - 128 // exact in BF16 and F16
	}
	var buf bytes.Buffer
	err := EncodeRaw(&buf, map[string]Raw{
		"a": {DType: "F32", Shape: []int{len(x)}, Data: f32Bytes(x)},
		"b": {DType: "BF16", Shape: []int{len(x)}, Data: BF16(x)},
		"c": {DType: "F16", Shape: []int{5, 1}, Data: F16(x[:5])},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &orderedReader{b: buf.Bytes()}
	f, err := NewFile(r, int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(x))
	for _, info := range f.Tensors() {
		if err := f.ReadFloat32(info.Name, got[:info.Len()]); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got[:info.Len()], x[:info.Len()]) {
			t.Errorf("%s read back differs", info.Name)
		}
	}
	next := int64(0)
	for i, off := range r.offs {
		if off < next {
			t.Fatalf("read %d at offset %d, after reading up to %d", i, off, next)
		}
		next = off
	}
	for _, name := range []string{"a", "b"} {
		part := make([]float32, chunkBytes/4)
		if err := f.ReadFloat32At(name, part, 7); err != nil || !slices.Equal(part, x[7:7+len(part)]) {
			t.Errorf("ReadFloat32At(%s, 7): %v, or values that differ", name, err)
		}
	}
	for _, bad := range []struct {
		err  error
		want string
	}{
		{f.ReadFloat32At("c", make([]float32, 2), 4), "elements 4 to 6 are outside it"},
		{f.ReadFloat32At("c", nil, -1), "elements -1 to -1 are outside it"},
		{f.ReadFloat32At("none", nil, 0), `safetensors: no tensor "none"`},
	} {
		if bad.err == nil || !strings.Contains(bad.err.Error(), bad.want) {
			t.Errorf("error %v, want one containing %q", bad.err, bad.want)
		}
	}
	if _, err := NewFile(r, int64(buf.Len())-1); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("NewFile of a size one short: %v", err)
	}
}
