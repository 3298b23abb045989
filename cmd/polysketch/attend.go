package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/safetensors"
	"github.com/polysketch/polysketch/tensor"
)

const attendHelp = `usage: polysketch attend --in FILE --out FILE [flags]

Runs one attention mechanism forward on tensors q, k, v from a safetensors
file and writes its output, for checking against other implementations.

Input: F32 tensors q, k, v, all of shape [N,h] or [B,H,N,h].
Output: "out", the shape of q; every random matrix the mechanism used,
"sketch.NAME" (for polysketch "sketch.g1", "sketch.g2", …: [h,r] at the
first level, [r,r] above); the initial parameters of a trainable
mechanism, "param.NAME"; and the mechanism, --causal, --seed and every
option in the metadata.

What the mechanisms compute, without layer norm or any scaling of q and k
besides their own (softmax's 1/√h, Performer's h^-1/4): see "polysketch
mechanisms"; for example
  softmax, flash  o_i = Σ_j softmax_j(q_i·k_j/√h) v_j
  polynomial      o_i = Σ_j w_ij v_j / (1 + Σ_j w_ij),  w_ij = (q_i·k_j)^p
  polysketch      the same with w_ij = φ(q_i)·φ(k_j), where for p = 4
                  φ(x) = (((x·g1) ∗ (x·g2))/√r)^⊗2; with --local, blocks of
                  b rows on the diagonal use the exact w_ij = (q_i·k_j)^p
  sqpoly          o_i = Σ_j w_ij v_j / Σ_j w_ij,  w_ij = (Σ_t a_t (q_i·k_j)^t)²
                  with the coefficients written as "sketch.coefficients"
Sums run over j ≤ i with --causal.

flags:
`

// runAttend implements "polysketch attend".
func runAttend(args []string, stdout io.Writer) (err error) {
	fs := newFlags("attend", attendHelp, stdout, mechanismList(nil))
	defer asCLI(fs, &err)
	var af attentionFlags
	af.register(fs, "polysketch", false)
	var (
		causal = fs.Bool("causal", true, "mask future positions")
		seed   = fs.Uint64("seed", 1, "seed of the mechanism's random draws (sketches, features, hashes, initial parameters)")
		in     = fs.String("in", "", "input safetensors file with q, k, v (required)")
		out    = fs.String("out", "", "output safetensors file (required; written atomically)")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	def, _ := attention.DefaultConfig("polysketch")
	cfg, err := af.apply(def)
	if err != nil {
		return fmt.Errorf("attend: %w", err)
	}
	if *in == "" || *out == "" {
		return errors.New("attend: --in and --out are both required (see -h)")
	}
	if same, err := samePath(*in, *out); err != nil {
		return fmt.Errorf("attend: %w", err)
	} else if same {
		return fmt.Errorf("attend: --out %s is the input file; refusing to overwrite it", *out)
	}

	q, k, v, err := readQKV(*in)
	if err != nil {
		return fmt.Errorf("attend: %w", err)
	}
	m, err := attention.New(cfg, attention.Setup{Causal: *causal, Seed: *seed, HeadSize: q.Shape[q.Dims()-1]})
	if err != nil {
		return fmt.Errorf("attend: %w", err)
	}
	if err := checkMemory(m, as4D(q)); err != nil {
		return fmt.Errorf("attend: %w", err)
	}
	o := tensor.New(q.Shape...)
	m.Forward(as4D(o), as4D(q), as4D(k), as4D(v))

	result := map[string]*tensor.Tensor{"out": o}
	if s, ok := m.(attention.Sketched); ok {
		for name, g := range s.SketchMatrices() {
			result["sketch."+name] = g
		}
	}
	if tr, ok := m.(attention.Trainable); ok {
		for _, p := range tr.Params() {
			result["param."+p.Name] = p.Value
		}
	}
	metadata := map[string]string{
		"mechanism": cfg.Mechanism(), "causal": strconv.FormatBool(*causal), "seed": strconv.FormatUint(*seed, 10),
	}
	for _, o := range attention.OptionsOf(cfg) {
		metadata[o.Name] = o.Default
	}
	if err := safetensors.Write(*out, result, metadata); err != nil {
		return fmt.Errorf("attend: %w", err)
	}
	return nil
}

// samePath reports whether a and b name the same file, by path or, when
// both exist, by identity (links).
func samePath(a, b string) (bool, error) {
	absA, err := filepath.Abs(a)
	if err != nil {
		return false, err
	}
	absB, err := filepath.Abs(b)
	if err != nil {
		return false, err
	}
	if absA == absB {
		return true, nil
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb), nil
}

// readQKV reads q, k, v from path and checks them: F32, equal shapes of
// rank 2 or 4 with positive dimensions, finite values.
func readQKV(path string) (q, k, v *tensor.Tensor, err error) {
	tensors, _, err := safetensors.Read(path, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	var qkv [3]*tensor.Tensor
	for i, name := range []string{"q", "k", "v"} {
		t, ok := tensors[name]
		if !ok {
			return nil, nil, nil, fmt.Errorf("%s: no tensor %q; want q, k, v of shape [N,h] or [B,H,N,h], file has %s", path, name, names(tensors))
		}
		if t.Dims() != 2 && t.Dims() != 4 {
			return nil, nil, nil, fmt.Errorf("%s: %s has shape %v: want [N,h] or [B,H,N,h]", path, name, t.Shape)
		}
		for _, d := range t.Shape {
			if d <= 0 {
				return nil, nil, nil, fmt.Errorf("%s: %s has shape %v: every dimension must be positive", path, name, t.Shape)
			}
		}
		qkv[i] = t
	}
	q, k, v = qkv[0], qkv[1], qkv[2]
	if !tensor.SameShape(q, k) || !tensor.SameShape(q, v) {
		return nil, nil, nil, fmt.Errorf("%s: q %v, k %v, v %v: shapes must be equal", path, q.Shape, k.Shape, v.Shape)
	}
	for i, name := range []string{"q", "k", "v"} {
		if err := qkv[i].CheckFinite(name); err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := attention.Check(as4D(q), as4D(k), as4D(v)); err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return q, k, v, nil
}

// as4D views an [N,h] tensor as [1,1,N,h]; a 4-D tensor is returned as is.
func as4D(t *tensor.Tensor) *tensor.Tensor {
	if t.Dims() == 2 {
		return t.Reshape(1, 1, t.Shape[0], t.Shape[1])
	}
	return t
}

// names lists the tensor names of a file for an error message.
func names(tensors map[string]*tensor.Tensor) string {
	if len(tensors) == 0 {
		return "none"
	}
	ns := make([]string, 0, len(tensors))
	for n := range tensors {
		ns = append(ns, strconv.Quote(n))
	}
	sort.Strings(ns)
	if len(ns) > 10 {
		ns = append(ns[:10], "…")
	}
	return strings.Join(ns, ", ")
}

// checkMemory refuses inputs whose forward pass would need more than the
// physical memory, rather than let the system kill the process.
func checkMemory(m attention.Mechanism, q *tensor.Tensor) error {
	total := physicalMemory()
	if total <= 0 {
		return nil
	}
	B, H, N, h := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	need := 4*4*int64(q.Len()) + m.Workspace(B, H, N, h)
	if need > total {
		return fmt.Errorf("%s attention on q %v needs about %v, more than the %v of memory (flash and polysketch need far less)", m.Kind(), q.Shape, byteSize(need), byteSize(total))
	}
	return nil
}
