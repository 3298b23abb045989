package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/safetensors"
	"github.com/polysketch/polysketch/tensor"
)

// testRandn returns a tensor of N(0, scale²) entries.
func testRandn(rng *rand.Rand, scale float64, shape ...int) *tensor.Tensor {
	t := tensor.New(shape...)
	for i := range t.Data {
		t.Data[i] = float32(rng.NormFloat64() * scale)
	}
	return t
}

// writeQKV writes an input file for attend.
func writeQKV(t *testing.T, path string, tensors map[string]*tensor.Tensor) {
	t.Helper()
	if err := safetensors.Write(path, tensors, nil); err != nil {
		t.Fatal(err)
	}
}

func TestAttendErrors(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	good := filepath.Join(dir, "good.safetensors")
	writeQKV(t, good, map[string]*tensor.Tensor{
		"q": testRandn(rng, 0.5, 8, 4), "k": testRandn(rng, 0.5, 8, 4), "v": testRandn(rng, 1, 8, 4),
	})
	file := func(name string, tensors map[string]*tensor.Tensor) string {
		p := filepath.Join(dir, name+".safetensors")
		writeQKV(t, p, tensors)
		return p
	}
	withNaN, withInf := testRandn(rng, 1, 8, 4), testRandn(rng, 1, 8, 4)
	withNaN.Data[5] = float32(math.NaN())
	withInf.Data[31] = float32(math.Inf(-1))
	notST := filepath.Join(dir, "text.safetensors")
	os.WriteFile(notST, []byte("hello, world: not a safetensors file"), 0o644)
	f16 := filepath.Join(dir, "f16.safetensors")
	{
		header := `{"k":{"dtype":"F32","shape":[1,1],"data_offsets":[0,4]},"q":{"dtype":"F16","shape":[1,1],"data_offsets":[4,6]},"v":{"dtype":"F32","shape":[1,1],"data_offsets":[6,10]}}`
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
		b = append(append(b, header...), make([]byte, 10)...)
		os.WriteFile(f16, b, 0o644)
	}

	tests := []struct {
		name string
		in   string
		args []string
		want string
	}{
		{"missing file", filepath.Join(dir, "nope.safetensors"), nil, "no such file"},
		{"not safetensors", notST, nil, "header length"},
		{"missing v", file("nov", map[string]*tensor.Tensor{"q": tensor.New(2, 2), "k": tensor.New(2, 2)}), nil, `no tensor "v"`},
		{"wrong dtype", f16, nil, `"q": dtype F16, want F32`},
		{"mismatched shapes", file("mismatch", map[string]*tensor.Tensor{"q": tensor.New(8, 4), "k": tensor.New(8, 4), "v": tensor.New(7, 4)}), nil, "shapes must be equal"},
		{"rank 3", file("rank3", map[string]*tensor.Tensor{"q": tensor.New(2, 8, 4), "k": tensor.New(2, 8, 4), "v": tensor.New(2, 8, 4)}), nil, "want [N,h] or [B,H,N,h]"},
		{"empty dim", file("empty", map[string]*tensor.Tensor{"q": tensor.New(0, 4), "k": tensor.New(0, 4), "v": tensor.New(0, 4)}), nil, "must be positive"},
		{"nan", file("nan", map[string]*tensor.Tensor{"q": tensor.New(8, 4), "k": withNaN, "v": tensor.New(8, 4)}), nil, "k: element 5"},
		{"inf", file("inf", map[string]*tensor.Tensor{"q": tensor.New(8, 4), "k": tensor.New(8, 4), "v": withInf}), nil, "v: element 31"},
		{"odd degree", good, []string{"--degree", "3"}, "--degree 3"},
		{"zero degree", good, []string{"--degree", "0"}, "--degree 0"},
		{"negative degree", good, []string{"--attention", "polynomial", "--degree", "-2"}, "--degree -2"},
		{"degree not power of two", good, []string{"--degree", "6"}, "power of two"},
		{"zero sketch size", good, []string{"--sketch-size", "0"}, "--sketch-size 0"},
		{"zero block", good, []string{"--block", "0"}, "--block 0"},
		{"negative block", good, []string{"--attention", "flash", "--block", "-1"}, "--block -1"},
		{"option of another mechanism", good, []string{"--attention", "softmax", "--block", "4"}, "--block is no option of softmax attention: it has no options"},
		{"unknown mechanism", good, []string{"--attention", "linear"}, `unknown attention mechanism "linear"`},
		{"unknown sketch", good, []string{"--sketch", "cosine"}, `--sketch "cosine"`},
		{"stray argument", good, []string{"extra"}, "unexpected argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(dir, "out.safetensors")
			args := append([]string{"attend", "--in", tt.in, "--out", out}, tt.args...)
			var buf bytes.Buffer
			err := run(args, &buf)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
			if _, statErr := os.Stat(out); statErr == nil {
				t.Errorf("a failed run wrote %s", out)
			}
		})
	}

	// Flags that are missing or point at the input.
	for _, args := range [][]string{
		{"attend", "--in", good},
		{"attend", "--out", filepath.Join(dir, "o.safetensors")},
	} {
		if err := run(args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "required") {
			t.Errorf("%v: error %v, want one saying --in and --out are required", args, err)
		}
	}
	before, _ := os.ReadFile(good)
	for _, out := range []string{good, filepath.Join(dir, ".", "good.safetensors")} {
		err := run([]string{"attend", "--in", good, "--out", out}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "input file") {
			t.Errorf("--out %s: error %v, want a refusal to overwrite the input", out, err)
		}
	}
	link := filepath.Join(dir, "link.safetensors")
	if err := os.Symlink(good, link); err == nil {
		if err := run([]string{"attend", "--in", good, "--out", link}, &bytes.Buffer{}); err == nil {
			t.Error("--out a symlink to --in was accepted")
		}
	}
	if after, _ := os.ReadFile(good); !bytes.Equal(before, after) {
		t.Error("the input file changed")
	}
}

// attend runs the command and returns the tensors and metadata it wrote.
func attend(t *testing.T, in map[string]*tensor.Tensor, args ...string) (map[string]*tensor.Tensor, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	inPath, outPath := filepath.Join(dir, "in.safetensors"), filepath.Join(dir, "out.safetensors")
	writeQKV(t, inPath, in)
	var buf bytes.Buffer
	if err := run(append([]string{"attend", "--in", inPath, "--out", outPath}, args...), &buf); err != nil {
		t.Fatalf("attend %v: %v", args, err)
	}
	out, md, err := safetensors.Read(outPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.SameShape(out["out"], in["q"]) {
		t.Fatalf("out has shape %v, want the shape of q %v", out["out"].Shape, in["q"].Shape)
	}
	return out, md
}

// heads splits a [N,h] or [B,H,N,h] tensor into [N][h] float64 matrices,
// one per head.
func heads(t *tensor.Tensor) [][][]float64 {
	N, h := t.Dim(-2), t.Dim(-1)
	var out [][][]float64
	for off := 0; off < t.Len(); off += N * h {
		m := make([][]float64, N)
		for i := range m {
			m[i] = make([]float64, h)
			for j := range m[i] {
				m[i][j] = float64(t.Data[off+i*h+j])
			}
		}
		out = append(out, m)
	}
	return out
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// reference computes attention of one head directly in float64: softmax
// weights exp(s_ij − max) for softmax, else o_i = Σ w_ij v_j / (1 + Σ w_ij).
func reference(q, k, v [][]float64, causal, softmax bool, weight func(i, j int) float64) [][]float64 {
	N, h := len(q), len(q[0])
	o := make([][]float64, N)
	for i := range o {
		o[i] = make([]float64, h)
		last := N - 1
		if causal {
			last = i
		}
		w := make([]float64, last+1)
		denom := 1.0
		if softmax {
			mx := math.Inf(-1)
			for j := range w {
				w[j] = weight(i, j)
				mx = math.Max(mx, w[j])
			}
			denom = 0
			for j := range w {
				w[j] = math.Exp(w[j] - mx)
			}
		} else {
			for j := range w {
				w[j] = weight(i, j)
			}
		}
		for j := range w {
			denom += w[j]
			for c := 0; c < h; c++ {
				o[i][c] += w[j] * v[j][c]
			}
		}
		for c := range o[i] {
			o[i][c] /= denom
		}
	}
	return o
}

// closeTo checks got against want within tol relative to the largest |want|.
func closeTo(t *testing.T, what string, got *tensor.Tensor, want [][][]float64, tol float64) {
	t.Helper()
	var scale, worst float64
	idx := 0
	for _, head := range want {
		for _, row := range head {
			for _, w := range row {
				scale = math.Max(scale, math.Abs(w))
				worst = math.Max(worst, math.Abs(float64(got.Data[idx])-w))
				idx++
			}
		}
	}
	if idx != got.Len() {
		t.Fatalf("%s: %d outputs, reference has %d", what, got.Len(), idx)
	}
	if !(worst <= tol*scale) {
		t.Errorf("%s: max |out − reference| = %.3g, want ≤ %.3g (tolerance %g of the largest |reference| %.3g)", what, worst, tol*scale, tol, scale)
	}
}

func TestAttendSoftmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, shape := range [][]int{{13, 8}, {2, 3, 10, 4}} {
		in := map[string]*tensor.Tensor{"q": testRandn(rng, 1, shape...), "k": testRandn(rng, 1, shape...), "v": testRandn(rng, 1, shape...)}
		Q, K, V := heads(in["q"]), heads(in["k"]), heads(in["v"])
		h := float64(shape[len(shape)-1])
		for _, mech := range []string{"softmax", "flash"} {
			for _, causal := range []bool{true, false} {
				var want [][][]float64
				for x := range Q {
					want = append(want, reference(Q[x], K[x], V[x], causal, true, func(i, j int) float64 { return dot(Q[x][i], K[x][j]) / math.Sqrt(h) }))
				}
				args := []string{"--attention", mech, "--causal=" + strconv.FormatBool(causal)}
				if mech == "flash" {
					args = append(args, "--block", "4") // tiles smaller than N
				}
				out, md := attend(t, in, args...)
				closeTo(t, mech, out["out"], want, 1e-5)
				if len(out) != 1 || md["mechanism"] != mech {
					t.Errorf("%s: wrote %d tensors and metadata %v, want only out", mech, len(out), md)
				}
			}
		}
	}
}

func TestAttendPolynomial(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	shape := []int{2, 1, 11, 4}
	in := map[string]*tensor.Tensor{"q": testRandn(rng, 0.7, shape...), "k": testRandn(rng, 0.7, shape...), "v": testRandn(rng, 1, shape...)}
	Q, K, V := heads(in["q"]), heads(in["k"]), heads(in["v"])
	for _, p := range []int{2, 4} {
		for _, causal := range []bool{true, false} {
			var want [][][]float64
			for x := range Q {
				want = append(want, reference(Q[x], K[x], V[x], causal, false, func(i, j int) float64 { return math.Pow(dot(Q[x][i], K[x][j]), float64(p)) }))
			}
			out, _ := attend(t, in, "--attention", "polynomial", "--degree", strconv.Itoa(p), "--causal="+strconv.FormatBool(causal), "--block", "4")
			closeTo(t, "polynomial", out["out"], want, 1e-5)
		}
	}
}

// TestAttendPolysketch reproduces polysketch's output from the sketch
// matrices it wrote, with the formula of attend -h: for degree 4,
// φ(x) = (((x·g1) ∗ (x·g2))/√r)^⊗2, so φ(q)·φ(k) = (s(q)·s(k))² with
// s(x) = ((x·g1) ∗ (x·g2))/√r; with --local, (q·k)^4 inside diagonal blocks.
func TestAttendPolysketch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const r, b = 6, 8
	for _, tc := range []struct {
		shape  []int
		local  bool
		causal bool
	}{
		{[]int{20, 4}, false, true},
		{[]int{20, 4}, true, true},
		{[]int{2, 2, 19, 4}, true, true},
		{[]int{16, 4}, false, false},
	} {
		in := map[string]*tensor.Tensor{"q": testRandn(rng, 0.7, tc.shape...), "k": testRandn(rng, 0.7, tc.shape...), "v": testRandn(rng, 1, tc.shape...)}
		out, md := attend(t, in, "--attention", "polysketch", "--degree", "4", "--sketch-size", "6", "--block", "8",
			"--local="+strconv.FormatBool(tc.local), "--causal="+strconv.FormatBool(tc.causal), "--seed", "42")
		g1, g2 := out["sketch.g1"], out["sketch.g2"]
		h := tc.shape[len(tc.shape)-1]
		if g1 == nil || g2 == nil || len(out) != 3 {
			t.Fatalf("wrote %d tensors (%v), want out, sketch.g1, sketch.g2", len(out), names(out))
		}
		if g1.Dims() != 2 || g1.Shape[0] != h || g1.Shape[1] != r || !tensor.SameShape(g1, g2) {
			t.Fatalf("sketch shapes %v, %v, want [%d %d]", g1.Shape, g2.Shape, h, r)
		}
		if md["seed"] != "42" || md["sketch_size"] != "6" {
			t.Errorf("metadata %v does not record the options", md)
		}
		G1, G2 := heads(g1)[0], heads(g2)[0]
		sketch := func(x []float64) []float64 {
			s := make([]float64, r)
			for c := 0; c < r; c++ {
				var a, bb float64
				for d := range x {
					a += x[d] * G1[d][c]
					bb += x[d] * G2[d][c]
				}
				s[c] = a * bb / math.Sqrt(r)
			}
			return s
		}
		Q, K, V := heads(in["q"]), heads(in["k"]), heads(in["v"])
		var want [][][]float64
		for x := range Q {
			sq, sk := make([][]float64, len(Q[x])), make([][]float64, len(K[x]))
			for i := range sq {
				sq[i], sk[i] = sketch(Q[x][i]), sketch(K[x][i])
			}
			want = append(want, reference(Q[x], K[x], V[x], tc.causal, false, func(i, j int) float64 {
				if tc.local && i/b == j/b {
					return math.Pow(dot(Q[x][i], K[x][j]), 4)
				}
				return math.Pow(dot(sq[i], sk[j]), 2)
			}))
		}
		closeTo(t, "polysketch", out["out"], want, 1e-4)
	}
}

func TestAttendSRHT(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	in := map[string]*tensor.Tensor{"q": testRandn(rng, 0.7, 12, 8), "k": testRandn(rng, 0.7, 12, 8), "v": testRandn(rng, 1, 12, 8)}
	out, md := attend(t, in, "--sketch", "srht", "--sketch-size", "8", "--block", "4")
	if md["sketch"] != "srht" || out["sketch.g1"] == nil {
		t.Errorf("srht run wrote %v with metadata %v, want sketch matrices", names(out), md)
	}
	if err := out["out"].CheckFinite("out"); err != nil {
		t.Error(err)
	}
}

func TestAttendTooLarge(t *testing.T) {
	if physicalMemory() == 0 {
		t.Skip("physical memory unknown on this system")
	}
	// Softmax keeps N² weights: 4·N² bytes is 160 GB at N = 200000.
	const N = 200000
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.safetensors"), filepath.Join(dir, "out.safetensors")
	writeQKV(t, in, map[string]*tensor.Tensor{"q": tensor.New(N, 1), "k": tensor.New(N, 1), "v": tensor.New(N, 1)})
	err := run([]string{"attend", "--in", in, "--out", out, "--attention", "softmax"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "of memory") {
		t.Errorf("error %v, want one about memory", err)
	}
}
