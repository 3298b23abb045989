package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
)

// exactAttention computes attention in float64 straight from the definitions:
// softmax(QKᵀ/√h)·V, or for polynomial attention of degree p,
// o_i = Σ_j s_ij^p·v_j / (1 + Σ_j s_ij^p) with s = q·k.
func exactAttention(kind Kind, causal bool, p int, q, k, v *tensor.Tensor) *tensor.Tensor {
	B, H, N, h := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	out := tensor.New(q.Shape...)
	w := make([]float64, N)
	for bh := 0; bh < B*H; bh++ {
		at := func(x *tensor.Tensor, i, d int) float64 { return float64(x.Data[(bh*N+i)*h+d]) }
		for i := 0; i < N; i++ {
			n := N
			if causal {
				n = i + 1
			}
			for j := 0; j < n; j++ {
				var s float64
				for d := 0; d < h; d++ {
					s += at(q, i, d) * at(k, j, d)
				}
				w[j] = s
			}
			var norm float64
			switch kind {
			case Softmax, Flash:
				mx := math.Inf(-1)
				for j := 0; j < n; j++ {
					w[j] /= math.Sqrt(float64(h))
					mx = math.Max(mx, w[j])
				}
				for j := 0; j < n; j++ {
					w[j] = math.Exp(w[j] - mx)
					norm += w[j]
				}
			case Polynomial:
				norm = 1
				for j := 0; j < n; j++ {
					w[j] = math.Pow(w[j], float64(p))
					norm += w[j]
				}
			default:
				panic("reference: unknown kind " + string(kind))
			}
			for d := 0; d < h; d++ {
				var o float64
				for j := 0; j < n; j++ {
					o += w[j] * at(v, j, d)
				}
				out.Data[(bh*N+i)*h+d] = float32(o / norm)
			}
		}
	}
	return out
}

// randQKV returns random q, k, v of shape [B,H,N,h] with N(0, scale²) entries.
func randQKV(seed uint64, scale float64, B, H, N, h int) (q, k, v *tensor.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 1))
	return randTensor(rng, scale, B, H, N, h), randTensor(rng, scale, B, H, N, h), randTensor(rng, 1, B, H, N, h)
}

// forwardBackward returns the output and the gradients for the output gradient do.
func forwardBackward(m Mechanism, q, k, v, do *tensor.Tensor) (o, dq, dk, dv *tensor.Tensor) {
	o = forward(m, q, k, v)
	dq, dk, dv = tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...)
	m.Backward(dq, dk, dv, do)
	return o, dq, dk, dv
}

// raceEnabled is set by tile_race_test.go in builds with the race detector.
var raceEnabled bool

// withProcs runs f with GOMAXPROCS set to n.
func withProcs(n int, f func()) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	f()
}

// The tiled driver must give the same answer for any tile shape, in
// particular tiles that are not square, so that causal masking crosses
// several tiles per row and some tile rows see no key at all.
func TestTiledTileShapes(t *testing.T) {
	for _, tc := range []struct{ br, bc int }{{64, 64}, {16, 24}, {24, 16}, {7, 5}, {1, 3}} {
		for _, causal := range []bool{false, true} {
			for _, w := range []weighting{softmaxWeighting{}, polyWeighting{p: 4}} {
				kind, scale := Flash, 1.0
				if _, ok := w.(polyWeighting); ok {
					kind, scale = Polynomial, 0.5
				}
				name := fmt.Sprintf("%s/%dx%d/causal=%v", kind, tc.br, tc.bc, causal)
				q, k, v := randQKV(1, scale, 1, 2, 53, 8)
				d := newTiled(string(kind), causal, 0, w)
				d.br, d.bc = tc.br, tc.bc
				o := tensor.New(q.Shape...)
				d.forward(o, q, k, v)
				want := exactAttention(kind, causal, 4, q, k, v)
				if diff := maxRelDiff(o.Data, want.Data); diff > 1e-5 {
					t.Errorf("%s: output differs from the float64 reference by %.3g (relative)", name, diff)
				}
			}
		}
	}
}

// Gradients must not depend on the number of threads, bit for bit; both
// shapes that split heads into key-tile groups (B·H < backwardItems) and
// shapes that do not.
func TestDeterministicAcrossThreads(t *testing.T) {
	shapes := [][4]int{{1, 1, 300, 16}, {2, 5, 130, 8}}
	for _, kind := range []Kind{Softmax, Flash, Polynomial} {
		for _, causal := range []bool{false, true} {
			for _, s := range shapes {
				opts := defaultKernelOptions()
				opts.Causal, opts.Block = causal, 32
				q, k, v := randQKV(2, 0.5, s[0], s[1], s[2], s[3])
				do := randTensor(rand.New(rand.NewPCG(9, 9)), 1, q.Shape...)
				var want [4]*tensor.Tensor
				for _, procs := range parallel.TestThreads {
					var got [4]*tensor.Tensor
					withProcs(procs, func() {
						o, dq, dk, dv := forwardBackward(mustNew(t, kind, opts), q, k, v, do)
						got = [4]*tensor.Tensor{o, dq, dk, dv}
					})
					if procs == 1 {
						want = got
						continue
					}
					for j, name := range []string{"o", "dq", "dk", "dv"} {
						for i := range want[j].Data {
							if math.Float32bits(want[j].Data[i]) != math.Float32bits(got[j].Data[i]) {
								t.Errorf("%s causal=%v shape %v: %s[%d] = %v with 1 thread, %v with %d",
									kind, causal, s, name, i, want[j].Data[i], got[j].Data[i], procs)
								break
							}
						}
					}
				}
			}
		}
	}
}

// After the first call for a shape, Forward and Backward allocate nothing,
// with one thread or two.
func TestNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, kind := range []Kind{Softmax, Flash, Polynomial} {
		for _, procs := range []int{1, 2} {
			withProcs(procs, func() {
				opts := defaultKernelOptions()
				opts.Block = 64 // several tiles, and the dQ reduction
				m := mustNew(t, kind, opts)
				q, k, v := randQKV(3, 0.5, 1, 2, 150, 8)
				o, dq, dk, dv := forwardBackward(m, q, k, v, q)
				fwd := testing.AllocsPerRun(5, func() { m.Forward(o, q, k, v) })
				bwd := testing.AllocsPerRun(5, func() { m.Backward(dq, dk, dv, q) })
				if fwd != 0 || bwd != 0 {
					t.Errorf("%s with %d threads: %v allocations per Forward, %v per Backward; want 0", kind, procs, fwd, bwd)
				}
			})
		}
	}
}

// Workspace must count what the mechanism really holds after a forward and
// a backward pass.
func TestWorkspaceHonest(t *testing.T) {
	for _, s := range [][5]int{{1, 1, 300, 16, 256}, {1, 1, 300, 16, 32}, {2, 5, 37, 8, 16}, {1, 2, 64, 4, 256}} {
		for _, kind := range []Kind{Softmax, Flash, Polynomial} {
			opts := defaultKernelOptions()
			opts.Block = s[4]
			m := mustNew(t, kind, opts)
			q, k, v := randQKV(4, 0.5, s[0], s[1], s[2], s[3])
			forwardBackward(m, q, k, v, q)
			var held int64
			switch a := m.(type) {
			case *softmaxAttn:
				held = 4 * int64(len(a.p))
				for _, d := range a.dp {
					held += 4 * int64(len(d))
				}
			case flashAttn:
				held = a.held()
			case polynomialAttn:
				held = a.held()
			}
			if ws := m.Workspace(s[0], s[1], s[2], s[3]); ws != held {
				t.Errorf("%s shape %v: Workspace says %d bytes, the mechanism holds %d", kind, s, ws, held)
			}
		}
	}
}

// Mismatched shapes are programming errors: they panic with a message
// naming the mechanism and the shapes.
func TestShapeMismatchPanics(t *testing.T) {
	good := tensor.New(1, 2, 5, 4)
	for _, kind := range []Kind{Softmax, Flash, Polynomial} {
		for _, tc := range []struct {
			name string
			call func(m Mechanism)
			want string
		}{
			{"backward before forward", func(m Mechanism) { m.Backward(good, good, good, good) }, "before Forward"},
			{"forward k", func(m Mechanism) { m.Forward(good, good, tensor.New(1, 2, 6, 4), good) }, "[1 2 5 4] and [1 2 6 4]"},
			{"forward 3-d", func(m Mechanism) { m.Forward(good, tensor.New(2, 5, 4), good, good) }, "[2 5 4]"},
			{"backward do", func(m Mechanism) {
				m.Forward(tensor.New(1, 2, 5, 4), good, good, good)
				m.Backward(good, good, good, tensor.New(1, 2, 5, 3))
			}, "[1 2 5 3]"},
		} {
			msg := func() (msg string) {
				defer func() { msg = fmt.Sprint(recover()) }()
				tc.call(mustNew(t, kind, defaultKernelOptions()))
				return "no panic"
			}()
			if !strings.Contains(msg, string(kind)) || !strings.Contains(msg, tc.want) {
				t.Errorf("%s, %s: panic %q, want one naming %q and %q", kind, tc.name, msg, kind, tc.want)
			}
		}
	}
}

func TestPower(t *testing.T) {
	x := []float32{-1.5, -1, -0.3, 0, 0.7, 1, 1.2, 2}
	dst := make([]float32, len(x))
	for e := 1; e <= 11; e++ {
		power(dst, x, e)
		for i := range x {
			want := math.Pow(float64(x[i]), float64(e))
			if math.Abs(float64(dst[i])-want) > 1e-6*math.Max(1, math.Abs(want)) {
				t.Errorf("power(%v, %d) = %v, want %v", x[i], e, dst[i], want)
			}
		}
	}
}

func slices4(a, b, c, d *tensor.Tensor) [4]*tensor.Tensor { return [4]*tensor.Tensor{a, b, c, d} }
