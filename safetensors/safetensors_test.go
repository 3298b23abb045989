package safetensors

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// file assembles a safetensors file from a header and a data buffer,
// without padding, as a hand-written or foreign file might be.
func file(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// le32 returns the little-endian bytes of float32 values.
func le32(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func le16(vs ...uint16) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	return b
}

// sameBits reports whether two tensors have equal shapes and bitwise equal
// data (so NaN payloads and signed zeros count).
func sameBits(a, b *tensor.Tensor) bool {
	if !tensor.SameShape(a, b) || len(a.Data) != len(b.Data) {
		return false
	}
	for i := range a.Data {
		if math.Float32bits(a.Data[i]) != math.Float32bits(b.Data[i]) {
			return false
		}
	}
	return true
}

// TestGolden checks the writer against bytes worked out by hand from the
// format: metadata first, tensors sorted by name and laid out in that
// order, compact JSON, the header padded with spaces to a multiple of 8.
func TestGolden(t *testing.T) {
	tensors := map[string]*tensor.Tensor{
		"b": tensor.From([]float32{0.5}, 1, 1),
		"a": tensor.From([]float32{1, -2}, 2),
	}
	metadata := map[string]string{"format": "pt"}

	// 141 bytes of JSON, padded with 3 spaces to 144 = 0x90.
	const header = `{"__metadata__":{"format":"pt"},` +
		`"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},` +
		`"b":{"dtype":"F32","shape":[1,1],"data_offsets":[8,12]}}   `
	want := []byte{0x90, 0, 0, 0, 0, 0, 0, 0}
	want = append(want, header...)
	want = append(want,
		0x00, 0x00, 0x80, 0x3f, // 1.0
		0x00, 0x00, 0x00, 0xc0, // -2.0
		0x00, 0x00, 0x00, 0x3f, // 0.5
	)
	if len(want) != 8+144+12 {
		t.Fatalf("test is wrong: golden file has %d bytes, want 164", len(want))
	}

	var buf bytes.Buffer
	if err := Encode(&buf, tensors, metadata); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("Encode:\n got %q\nwant %q", buf.Bytes(), want)
	}

	got, md, err := Decode(bytes.NewReader(want), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !sameBits(got["a"], tensors["a"]) || !sameBits(got["b"], tensors["b"]) {
		t.Errorf("Decode tensors = %v, want %v", got, tensors)
	}
	if len(md) != 1 || md["format"] != "pt" {
		t.Errorf("Decode metadata = %v, want %v", md, metadata)
	}
}

// TestReferenceExample reads the example file of the reference
// implementation's documentation: a 60-byte header without padding.
func TestReferenceExample(t *testing.T) {
	const header = `{"test":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`
	data := file(header, le32(1, 2, 3, 4))
	if data[0] != '<' {
		t.Fatalf("test is wrong: header length byte %q, want '<' (60)", data[0])
	}
	got, md, err := Decode(bytes.NewReader(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := tensor.From([]float32{1, 2, 3, 4}, 2, 2)
	if md != nil || !sameBits(got["test"], want) {
		t.Errorf("got %v %v, want %v and no metadata", got["test"], md, want)
	}
}

func TestRoundTrip(t *testing.T) {
	nan := math.Float32frombits(0x7fc00123) // a NaN with a payload
	tensors := map[string]*tensor.Tensor{
		"scalar":        tensor.From([]float32{3.25}),
		"empty":         tensor.New(0, 5),
		"special":       tensor.From([]float32{float32(math.Inf(1)), float32(math.Inf(-1)), nan, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, math.MaxFloat32}, 2, 3),
		"layers.0.w<&>": tensor.New(3, 4, 5),
		"ünïcode":       tensor.New(1),
	}
	for i := range tensors["layers.0.w<&>"].Data {
		tensors["layers.0.w<&>"].Data[i] = float32(i)*0.37 - 5
	}
	metadata := map[string]string{"step": "1200", "note": "quote \" and <html> and \n newline", "ключ": "значение"}

	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := Write(path, tensors, metadata); err != nil {
		t.Fatal(err)
	}
	got, md, err := Read(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(tensors) {
		t.Errorf("read %d tensors, want %d", len(got), len(tensors))
	}
	for name, want := range tensors {
		if !sameBits(got[name], want) {
			t.Errorf("tensor %q: got %v, want %v", name, got[name], want)
		}
	}
	if len(md) != len(metadata) {
		t.Errorf("metadata %v, want %v", md, metadata)
	}
	for k, v := range metadata {
		if md[k] != v {
			t.Errorf("metadata[%q] = %q, want %q", k, md[k], v)
		}
	}

	// Deterministic: the same input gives the same bytes, whatever the
	// order of map iteration.
	onDisk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		var buf bytes.Buffer
		if err := Encode(&buf, tensors, metadata); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), onDisk) {
			t.Fatal("Encode output differs between calls or from Write")
		}
	}
	if n := binary.LittleEndian.Uint64(onDisk); n%8 != 0 || onDisk[8+n-1] != '}' && onDisk[8+n-1] != ' ' {
		t.Errorf("header length %d is not padded to 8 bytes", n)
	}
}

func TestConvert(t *testing.T) {
	tests := []struct {
		dtype string
		data  []byte
		want  []float32
	}{
		{"F16", le16(0x3c00, 0xc000, 0x7bff, 0x0400, 0x03ff, 0x0001, 0x8000, 0x7c00, 0xfc00, 0x3555),
			[]float32{1, -2, 65504, 0x1p-14, 1023 * 0x1p-24, 0x1p-24, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), 0x1.554p-2}},
		{"BF16", le16(0x3f80, 0xc040, 0x4049, 0x0001),
			[]float32{1, -3, 3.140625, math.Float32frombits(0x00010000)}},
		{"F64", binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil,
			math.Float64bits(0.1)), math.Float64bits(-1e300)), math.Float64bits(2.5)),
			[]float32{float32(0.1), float32(math.Inf(-1)), 2.5}},
	}
	for _, tt := range tests {
		header := `{"x":{"dtype":"` + tt.dtype + `","shape":[` + strconv.Itoa(len(tt.want)) + `],"data_offsets":[0,` + strconv.Itoa(len(tt.data)) + `]}}`
		data := file(header, tt.data)
		if _, _, err := Decode(bytes.NewReader(data), nil); err == nil || !strings.Contains(err.Error(), "want F32") {
			t.Errorf("%s without Convert: error %v, want one saying F32 is wanted", tt.dtype, err)
		}
		got, _, err := Decode(bytes.NewReader(data), &Options{Convert: true})
		if err != nil {
			t.Errorf("%s: %v", tt.dtype, err)
			continue
		}
		if !sameBits(got["x"], tensor.From(tt.want, len(tt.want))) {
			t.Errorf("%s: got %v, want %v", tt.dtype, got["x"].Data, tt.want)
		}
	}
	// NaN stays NaN.
	got, _, err := Decode(bytes.NewReader(file(`{"x":{"dtype":"F16","shape":[],"data_offsets":[0,2]}}`, le16(0x7e00))), &Options{Convert: true})
	if err != nil || !math.IsNaN(float64(got["x"].Data[0])) {
		t.Errorf("F16 NaN: got %v, %v", got, err)
	}
}

// TestBadFiles checks that every kind of damage is reported, by Read (size
// known) and by Decode (size unknown), with a message naming the problem.
func TestBadFiles(t *testing.T) {
	ok := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	tests := []struct {
		name string
		file []byte
		want string // substring of the error
	}{
		{"empty", nil, "too short"},
		{"short length", []byte{1, 0, 0}, "too short"},
		{"huge header length", binary.LittleEndian.AppendUint64(nil, 1<<40), "exceeds"},
		{"header past end", append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...), "header"},
		{"not utf-8", file("{\"\xff\":1}", nil), "UTF-8"},
		{"not an object", file(`[1,2]`, nil), "start with '{'"},
		{"not json", file(`{"a":`, nil), "not valid JSON"},
		{"trailing junk", file(`{} x`, nil), "after the JSON object"},
		{"duplicate tensor", file(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[],"data_offsets":[4,8]}}`, le32(1, 2)), `duplicate key "a"`},
		{"entry not object", file(`{"a":3}`, nil), `tensor "a"`},
		{"unknown field", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}`, le32(1, 2)), `unknown field "x"`},
		{"case-folded field", file(`{"a":{"DTYPE":"F32","shape":[2],"data_offsets":[0,8]}}`, le32(1, 2)), `unknown field "DTYPE"`},
		{"missing dtype", file(`{"a":{"shape":[2],"data_offsets":[0,8]}}`, le32(1, 2)), "missing dtype"},
		{"missing shape", file(`{"a":{"dtype":"F32","data_offsets":[0,8]}}`, le32(1, 2)), "missing shape"},
		{"missing offsets", file(`{"a":{"dtype":"F32","shape":[2]}}`, le32(1, 2)), "missing data_offsets"},
		{"negative dim", file(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, le32(1, 2)), "non-negative"},
		{"fractional dim", file(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}}`, le32(1, 2)), "non-negative integer"},
		{"shape not array", file(`{"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}}`, le32(1, 2)), "shape"},
		{"overflowing shape", file(`{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}}`, le32(1, 2)), "too large"},
		{"three offsets", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}}`, le32(1, 2)), "data_offsets"},
		{"negative offset", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}}`, le32(1, 2)), "data_offsets"},
		{"reversed offsets", file(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}`, le32(1, 2)), "end before they begin"},
		{"size mismatch", file(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, le32(1, 2)), "needs 12"},
		{"unknown dtype", file(`{"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}}`, le32(1, 2)), `unknown dtype "F33"`},
		{"unsupported dtype", file(`{"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}`, make([]byte, 16)), `tensor "test": dtype I32 is not supported`},
		{"overlap", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, le32(1, 2, 3)), "overlap"},
		{"gap", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, le32(1, 2, 3)), "gap"},
		{"not from zero", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, le32(1, 2)), "gap"},
		{"past end", file(ok, le32(1)), `truncated`},
		{"trailing bytes", file(ok, le32(1, 2, 3)), "trailing"},
		{"metadata not strings", file(`{"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, le32(1, 2)), `key "k"`},
		{"metadata not object", file(`{"__metadata__":"x"}`, nil), "__metadata__"},
		{"duplicate metadata key", file(`{"__metadata__":{"k":"1","k":"2"}}`, nil), `duplicate key "k"`},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Decode(bytes.NewReader(tt.file), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "safetensors: ") {
				t.Errorf("Decode: error %v, want one containing %q", err, tt.want)
			}
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".safetensors")
			if err := os.WriteFile(path, tt.file, 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, err = Read(path, nil)
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("Read: error %v, want one naming %s", err, path)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("Read: error spans lines: %q", err)
			}
		})
	}
}

// TestTruncated cuts a valid file at every length: each prefix is an error.
func TestTruncated(t *testing.T) {
	var buf bytes.Buffer
	tensors := map[string]*tensor.Tensor{"a": tensor.New(3, 2), "b": tensor.New(4)}
	if err := Encode(&buf, tensors, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	full := buf.Bytes()
	dir := t.TempDir()
	for n := range len(full) {
		if _, _, err := Decode(bytes.NewReader(full[:n]), nil); err == nil {
			t.Errorf("Decode of the first %d of %d bytes succeeded", n, len(full))
		}
		path := filepath.Join(dir, "cut.safetensors")
		if err := os.WriteFile(path, full[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Read(path, nil); err == nil {
			t.Errorf("Read of the first %d of %d bytes succeeded", n, len(full))
		}
	}
	if _, _, err := Decode(bytes.NewReader(full), nil); err != nil {
		t.Errorf("the whole file: %v", err)
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.safetensors")
	if _, _, err := Read(missing, nil); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: error %v, want one naming the file", err)
	}
	if _, _, err := Read(dir, nil); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: error %v, want 'not a regular file'", err)
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "good.safetensors")
	good := map[string]*tensor.Tensor{"w": tensor.From([]float32{1, 2}, 2)}
	if err := Write(path, good, nil); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)

	bad := []struct {
		name     string
		tensors  map[string]*tensor.Tensor
		metadata map[string]string
		want     string
	}{
		{"reserved name", map[string]*tensor.Tensor{"__metadata__": tensor.New(1)}, nil, "reserved"},
		{"nil tensor", map[string]*tensor.Tensor{"w": nil}, nil, "nil"},
		{"shape mismatch", map[string]*tensor.Tensor{"w": {Shape: []int{3}, Data: make([]float32, 2)}}, nil, "does not match"},
		{"bad utf-8 name", map[string]*tensor.Tensor{"\xff": tensor.New(1)}, nil, "UTF-8"},
		{"bad utf-8 metadata", good, map[string]string{"k": "\xff"}, "UTF-8"},
	}
	for _, tt := range bad {
		err := Write(path, tt.tensors, tt.metadata)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %v, want one containing %q and the path", tt.name, err, tt.want)
		}
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Error("a failed Write changed the existing file")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("failed writes left files behind: %v", entries)
	}
	if err := Write(filepath.Join(dir, "no", "such", "dir", "x.safetensors"), good, nil); err == nil {
		t.Error("Write into a missing directory succeeded")
	}
}

// FuzzRead checks that no input makes the reader panic, that the streaming
// reader and the sized reader agree, and that whatever reads back also
// writes and reads back unchanged.
func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	Encode(&buf, map[string]*tensor.Tensor{"a": tensor.From([]float32{1, 2, 3, 4}, 2, 2), "b": tensor.New(0)}, map[string]string{"k": "v"})
	f.Add(buf.Bytes())
	f.Add(file(`{"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}`, le16(0x3c00, 0x7e00)))
	f.Add(file(`{"x":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},"y":{"dtype":"F64","shape":[1],"data_offsets":[2,10]}}`, make([]byte, 10)))
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, le32(1, 2, 3)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		opts := &Options{Convert: true}
		ts, md, err := Decode(bytes.NewReader(data), opts)
		_, _, sizedErr := decode(bytes.NewReader(data), int64(len(data)), opts)
		if (err == nil) != (sizedErr == nil) {
			t.Fatalf("streaming error %v, sized error %v", err, sizedErr)
		}
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := Encode(&out, ts, md); err != nil {
			t.Fatalf("re-encoding what was read: %v", err)
		}
		ts2, md2, err := Decode(&out, nil)
		if err != nil {
			t.Fatalf("reading back: %v", err)
		}
		for name, a := range ts {
			if !sameBits(a, ts2[name]) {
				t.Fatalf("tensor %q changed in a round trip", name)
			}
		}
		if len(ts) != len(ts2) || len(md) != len(md2) {
			t.Fatalf("round trip changed the number of tensors or metadata keys")
		}
	})
}
