package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
)

// The conformance table: every registered mechanism, in a small
// configuration whose blocks or tiles the sequence crosses (N = 37, not a
// multiple of the block of 8), goes through the same checks. Adding a
// mechanism is adding a row; TestConformanceCoversRegistry fails for a
// registered mechanism without one.

// conformanceCase is one row of the table.
type conformanceCase struct {
	spec string // the mechanism, small (see ParseSpec)
	// ref evaluates the mechanism in float64 from its definition, for
	// m's random draws or parameters; tol bounds max|o − ref| / max|ref|.
	ref func(m Mechanism, causal bool, q, k, v *tensor.Tensor) []float64
	tol float64
	// eps and gradTol are the finite-difference step and tolerance (see
	// checkGradients, checkParamGradients).
	eps, gradTol float64
	// decodeTol bounds the decoder's relative difference from Forward.
	decodeTol float64
}

// conformanceCases is the table.
var conformanceCases = []conformanceCase{
	{spec: "softmax", ref: refExact(Softmax, 0), tol: 1e-5, eps: 1e-2, gradTol: 2e-2, decodeTol: 1e-5},
	{spec: "flash:block=8", ref: refExact(Flash, 0), tol: 1e-5, eps: 1e-2, gradTol: 2e-2, decodeTol: 1e-5},
	{spec: "polynomial:block=8", ref: refExact(Polynomial, 4), tol: 1e-5, eps: 1e-2, gradTol: 2e-2, decodeTol: 1e-5},
	{spec: "polysketch:block=8:sketch-size=8", ref: refPolysketchOf, tol: 1e-4, eps: 1e-2, gradTol: 3e-2, decodeTol: 1e-4},
	{spec: "polysketch:block=8:sketch-size=8:learned", ref: refPolysketchOf, tol: 1e-4, eps: 1e-2, gradTol: 3e-2, decodeTol: 1e-4},
	// The student of a softmax teacher (engine_mixed.go): softmax local
	// blocks under one normalizer with the sketch, a learned mix and
	// temperature; and polynomial local blocks with a mix. (A learned
	// sketch normalizes its input, so that non-causal attention, which
	// has no local blocks, does not depend on the temperature: the causal
	// learned student with a temperature is TestStudentLearnedScale's.)
	{spec: "polysketch:block=8:sketch-size=8:local-softmax:mix:scale", ref: refPolysketchOf, tol: 1e-4, eps: 1e-2, gradTol: 3e-2, decodeTol: 1e-4},
	{spec: "polysketch:block=8:sketch-size=8:learned:local-softmax:mix", ref: refPolysketchOf, tol: 1e-4, eps: 1e-2, gradTol: 3e-2, decodeTol: 1e-4},
	{spec: "polysketch:block=8:sketch-size=8:mix:scale", ref: refPolysketchOf, tol: 1e-4, eps: 1e-2, gradTol: 3e-2, decodeTol: 1e-4},
	{spec: "elu:block=8", ref: perHead(refELU), tol: 1e-5, eps: 1e-2, gradTol: 2e-2, decodeTol: 1e-5},
	{spec: "elu:block=8:cumsum", ref: perHead(refELU), tol: 1e-5, eps: 1e-2, gradTol: 2e-2, decodeTol: 1e-5},
	{spec: "performer:block=8:features=16", ref: refPerformerOf, tol: 1e-5, eps: 1e-2, gradTol: 2e-2, decodeTol: 1e-5},
	{spec: "performer:block=8:features=16:cumsum", ref: refPerformerOf, tol: 1e-5, eps: 1e-2, gradTol: 2e-2, decodeTol: 1e-5},
	// HyperAttention's reference is the approximation as computed, for its
	// draws (with min-length=4 it approximates at these sizes).
	{spec: "hyper:block=8", ref: refHyperOf, tol: 1e-5, eps: 1e-2, gradTol: 2e-2, decodeTol: 1e-5},
	{spec: "hyper:block=8:samples=6:min-length=4:hashes=3", ref: refHyperOf, tol: 1e-5, eps: 1e-2, gradTol: 2e-2, decodeTol: 1e-5},
	{spec: "hyper:block=8:samples=6:min-length=4:hashes=3:sampling=vnorm", ref: refHyperOf, tol: 1e-5, eps: 1e-2, gradTol: 2e-2, decodeTol: 1e-5},
	{spec: "sqpolysketch:block=8:degree=2:sketch-size=4", ref: refSquareSketchOf, tol: 1e-4, eps: 1e-2, gradTol: 3e-2, decodeTol: 1e-4},
	{spec: "sqpolysketch:block=8:degree=2:sketch-size=4:frozen:coefficients=1,-0.5,2", ref: refSquareSketchOf, tol: 1e-4, eps: 1e-2, gradTol: 3e-2, decodeTol: 1e-4},
	{spec: "sqpoly:block=8:degree=3", ref: refSquarePolyOf, tol: 1e-5, eps: 1e-2, gradTol: 2e-2, decodeTol: 1e-5},
}

// Shapes of the conformance inputs: B·H = 4 heads of h = 8, N = 37.
const confB, confH, confN, confh = 2, 2, 37, 8

// refExact is the float64 reference of the exact mechanisms.
func refExact(kind Kind, p int) func(m Mechanism, causal bool, q, k, v *tensor.Tensor) []float64 {
	return func(_ Mechanism, causal bool, q, k, v *tensor.Tensor) []float64 {
		o := exactAttention(kind, causal, p, q, k, v)
		out := make([]float64, len(o.Data))
		for i, x := range o.Data {
			out[i] = float64(x)
		}
		return out
	}
}

// refPolysketchOf is the float64 reference of polysketch, random or
// learned, for m's own sketch.
func refPolysketchOf(m Mechanism, causal bool, q, k, v *tensor.Tensor) []float64 {
	a := m.(*engine)
	o := a.opts
	o.Causal = causal
	if o.Learned {
		ps := paramMap(a.Params())
		return refSketched(q, k, v, o, func(x []float64) []float64 {
			next := 0
			return refLearned(x, o.Degree/2, ps, &next)
		}, tuneOf(a))
	}
	return refPolysketch(q, k, v, o, a.SketchMatrices(), tuneOf(a))
}

// build returns the row's mechanism, sized for head size h.
func (c conformanceCase) build(t testing.TB, causal bool) Mechanism {
	t.Helper()
	cfg, err := ParseSpec(c.spec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, Setup{Causal: causal, Seed: 7, HeadSize: confh})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// conformanceInputs returns q and k whose rows are normalized to mean 0
// and unit variance (as the model's q/k LayerNorm leaves them, which keeps
// polynomial weights in range) and scaled by h^-1/4, and v ~ N(0, 1).
func conformanceInputs(seed uint64, N int) (q, k, v *tensor.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 99))
	q, k, v = randTensor(rng, 1, confB, confH, N, confh), randTensor(rng, 1, confB, confH, N, confh), randTensor(rng, 1, confB, confH, N, confh)
	normalizeRows(q, math.Pow(confh, -0.25))
	normalizeRows(k, math.Pow(confh, -0.25))
	return q, k, v
}

func TestConformanceCoversRegistry(t *testing.T) {
	covered := map[string]bool{}
	for _, c := range conformanceCases {
		cfg, err := ParseSpec(c.spec)
		if err != nil {
			t.Fatalf("row %q: %v", c.spec, err)
		}
		covered[cfg.Mechanism()] = true
	}
	for _, name := range Names() {
		if !covered[name] {
			t.Errorf("mechanism %s is registered but has no row in the conformance table", name)
		}
	}
}

// TestConformanceReference compares Forward, causal and not, with the
// row's float64 reference.
func TestConformanceReference(t *testing.T) {
	for _, c := range conformanceCases {
		for _, causal := range []bool{true, false} {
			t.Run(name(c.spec, causal), func(t *testing.T) {
				m := c.build(t, causal)
				q, k, v := conformanceInputs(1, confN)
				o := forward(m, q, k, v)
				want := c.ref(m, causal, q, k, v)
				var d, s float64
				for i := range want {
					d = math.Max(d, math.Abs(float64(o.Data[i])-want[i]))
					s = math.Max(s, math.Abs(want[i]))
				}
				if d/s > c.tol || math.IsNaN(d) {
					t.Errorf("max |o − reference| / max |reference| = %.3g > %.3g", d/s, c.tol)
				}
			})
		}
	}
}

func name(spec string, causal bool) string {
	if causal {
		return spec + "/causal"
	}
	return spec + "/bidirectional"
}

// TestConformanceGradients checks Backward against finite differences,
// for the inputs and every parameter.
func TestConformanceGradients(t *testing.T) {
	for _, c := range conformanceCases {
		for _, causal := range []bool{true, false} {
			t.Run(name(c.spec, causal), func(t *testing.T) {
				m := c.build(t, causal)
				q, k, v := conformanceInputs(2, 13)
				checkGradients(t, m, q, k, v, c.eps, c.gradTol, 6)
				if tr, ok := m.(Trainable); ok && len(tr.Params()) > 0 {
					checkParamGradients(t, m, q, k, v, c.eps, c.gradTol, 2)
				}
			})
		}
	}
}

// TestConformanceCausal changes everything after a cut and requires the
// outputs before it to stay bit-identical.
func TestConformanceCausal(t *testing.T) {
	for _, c := range conformanceCases {
		t.Run(c.spec, func(t *testing.T) {
			q, k, v := conformanceInputs(3, confN)
			checkCausal(t, c.build(t, true), q, k, v)
		})
	}
}

// TestConformanceThreads requires bitwise identical outputs and gradients
// for GOMAXPROCS 1, 2 and 3, on inputs large enough for the parallel
// paths (several heads, blocks and tiles).
func TestConformanceThreads(t *testing.T) {
	for _, c := range conformanceCases {
		for _, causal := range []bool{true, false} {
			t.Run(name(c.spec, causal), func(t *testing.T) {
				q, k, v := conformanceInputs(4, 301)
				checkThreads(t, func() Mechanism { return c.build(t, causal) }, q, k, v)
			})
		}
	}
}

// checkThreads requires the output and gradients of a mechanism that
// build makes to be bitwise the same for every GOMAXPROCS of
// parallel.TestThreads.
func checkThreads(t *testing.T, build func() Mechanism, q, k, v *tensor.Tensor) {
	t.Helper()
	run := func(procs int) (r [4]*tensor.Tensor) {
		withProcs(procs, func() {
			o, dq, dk, dv := forwardBackward(build(), q, k, v, v)
			r = [4]*tensor.Tensor{o, dq, dk, dv}
		})
		return r
	}
	want := run(1)
	for _, procs := range parallel.TestThreads[1:] {
		got := run(procs)
		for i, what := range []string{"o", "dq", "dk", "dv"} {
			if !slices.Equal(got[i].Data, want[i].Data) {
				t.Fatalf("GOMAXPROCS=%d: %s differs from one thread's", procs, what)
			}
		}
	}
}

// TestConformanceAllocs requires Forward+Backward to allocate nothing once
// warmed up (one thread: starting goroutines allocates).
func TestConformanceAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	for _, c := range conformanceCases {
		for _, causal := range []bool{true, false} {
			t.Run(name(c.spec, causal), func(t *testing.T) {
				withProcs(1, func() { checkNoAllocs(t, c.build(t, causal), confN, confh) })
			})
		}
	}
}

// TestConformanceWorkspace requires Workspace to account for what the
// mechanism allocates: building it and a first Forward+Backward (one
// thread) allocate at least Workspace bytes and at most a little more
// (the mechanism's own small structures). A first instance runs before,
// so that the matrix products' packing buffers, shared by every caller,
// exist already.
func TestConformanceWorkspace(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	const N, h = 500, 16 // [1, 2, N, h] inputs (resizeHead)
	for _, c := range conformanceCases {
		for _, causal := range []bool{true, false} {
			t.Run(name(c.spec, causal), func(t *testing.T) {
				q, k, v := conformanceInputs(5, N)
				q, k, v = resizeHead(q, h), resizeHead(k, h), resizeHead(v, h)
				cfg, err := ParseSpec(c.spec)
				if err != nil {
					t.Fatal(err)
				}
				checkWorkspace(t, func() Mechanism {
					m, err := New(cfg, Setup{Causal: causal, Seed: 7, HeadSize: h})
					if err != nil {
						t.Fatal(err)
					}
					return m
				}, q, k, v)
			})
		}
	}
}

// checkWorkspace requires Workspace to account for what a mechanism
// allocates: building it with build and a first Forward+Backward on one
// thread allocate at least Workspace bytes and at most 2% + 16 KiB more
// (its own small structures). A first instance runs before, so that the
// matrix products' packing buffers, shared by every caller, exist already.
func checkWorkspace(t *testing.T, build func() Mechanism, q, k, v *tensor.Tensor) {
	t.Helper()
	B, H, N, h := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	o, dq, dk, dv := tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...)
	withProcs(1, func() {
		forwardBackward(build(), q, k, v, v)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		m := build()
		m.Forward(o, q, k, v)
		m.Backward(dq, dk, dv, v)
		runtime.ReadMemStats(&after)
		got := int64(after.TotalAlloc - before.TotalAlloc)
		want := m.Workspace(B, H, N, h)
		if got < want || got > want+want/50+16<<10 {
			t.Errorf("Workspace says %d bytes; building it and a Forward+Backward allocated %d", want, got)
		}
	})
}

// resizeHead returns x, [B,H,N,h'], as [1,2,N,h] (h ≤ h' keeps the first
// h features of the first two heads; h > h' repeats them).
func resizeHead(x *tensor.Tensor, h int) *tensor.Tensor {
	N, h0 := x.Shape[2], x.Shape[3]
	y := tensor.New(1, 2, N, h)
	for hd := range 2 {
		for n := range N {
			for d := range h {
				y.Data[(hd*N+n)*h+d] = x.Data[(hd*N+n)*h0+d%h0]
			}
		}
	}
	return y
}

// conformanceSchedules cut the decoded sequence: one position per Step,
// chunks shorter than, equal to and longer than the blocks of 8, the
// whole sequence at once, and chunks of changing sizes.
var conformanceSchedules = [][]int{{1}, {3}, {8}, {9}, {confN}, {3, 1, 6, 2, 11}}

// TestConformanceDecoder requires the decoder to reproduce Forward for
// every chunk schedule, a sequence split and resumed at any point, and a
// Reset decoder to start afresh.
func TestConformanceDecoder(t *testing.T) {
	for _, c := range conformanceCases {
		t.Run(c.spec, func(t *testing.T) {
			m := c.build(t, true)
			q, k, v := conformanceInputs(6, confN)
			want := forward(m, q, k, v)
			d, err := NewDecoder(m, confB, confH, confh)
			if err != nil {
				t.Fatal(err)
			}
			check := func(what string, got *tensor.Tensor) {
				t.Helper()
				if diff := maxRelDiff(got.Data, want.Data); !(diff <= c.decodeTol) {
					t.Errorf("%s: decoded outputs differ from Forward by %.3g (relative) > %.3g", what, diff, c.decodeTol)
				}
			}
			var first *tensor.Tensor
			for i, s := range conformanceSchedules {
				d.Reset()
				got := decodeChunks(t, d, q, k, v, s)
				check(fmt.Sprint("schedule ", s), got)
				if i == 0 {
					first = got
				}
			}
			// Split at every point, resumed with the rest in one Step.
			for cut := 1; cut < confN; cut += 5 {
				d.Reset()
				check(fmt.Sprint("split at ", cut), decodeChunks(t, d, q, k, v, []int{cut, confN}))
			}
			// A Reset decoder reproduces its first run bit for bit.
			d.Reset()
			if again := decodeChunks(t, d, q, k, v, conformanceSchedules[0]); !slices.Equal(again.Data, first.Data) {
				t.Error("after Reset the decoder does not reproduce its first run")
			}
		})
	}
}

// repeatHeads returns x ([B,G,N,h]) with each head repeated group times in
// order: [B,G·group,N,h].
func repeatHeads(x *tensor.Tensor, group int) *tensor.Tensor {
	B, G, N, h := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	r := tensor.New(B, G*group, N, h)
	for i := range B * G * group {
		j := i / group
		copy(r.Data[i*N*h:(i+1)*N*h], x.Data[j*N*h:(j+1)*N*h])
	}
	return r
}

// TestConformanceGroupedDecoder requires a decoder of grouped-query
// attention (4 query heads, 2 key/value heads) to give, bit for bit, what
// a decoder of 4 heads gives for the key/value heads repeated, for every
// mechanism and chunk schedule, and its state saved mid-sequence to
// resume exactly.
func TestConformanceGroupedDecoder(t *testing.T) {
	const H, kvHeads = 4, 2
	for _, c := range conformanceCases {
		t.Run(c.spec, func(t *testing.T) {
			m := c.build(t, true)
			rng := rand.New(rand.NewPCG(7, 7))
			q := randTensor(rng, 1, confB, H, confN, confh)
			k, v := randTensor(rng, 1, confB, kvHeads, confN, confh), randTensor(rng, 1, confB, kvHeads, confN, confh)
			forward(m, q, repeatHeads(k, H/kvHeads), repeatHeads(v, H/kvHeads)) // draws sketches at these sizes
			for _, s := range conformanceSchedules {
				plain, err := NewDecoder(m, confB, H, confh)
				if err != nil {
					t.Fatal(err)
				}
				grouped, err := NewGroupedDecoder(m, confB, H, kvHeads, confh)
				if err != nil {
					t.Fatal(err)
				}
				want := decodeChunks(t, plain, q, repeatHeads(k, H/kvHeads), repeatHeads(v, H/kvHeads), s)
				if got := decodeChunks(t, grouped, q, k, v, s); !slices.Equal(got.Data, want.Data) {
					t.Errorf("schedule %v: grouped decoder differs from the decoder of repeated heads by %.3g", s, maxRelDiff(got.Data, want.Data))
				}
			}
			if c.spec[:5] == "hyper" {
				return // no state to save
			}
			d, _ := NewGroupedDecoder(m, confB, H, kvHeads, confh)
			full := decodeChunks(t, d, q, k, v, []int{1})
			cut := 17
			d.Reset()
			decodeChunks(t, d, prefix(q, cut), prefix(k, cut), prefix(v, cut), []int{1})
			st, err := SaveState(d)
			if err != nil {
				t.Fatal(err)
			}
			e, _ := NewGroupedDecoder(m, confB, H, kvHeads, confh)
			if err := RestoreState(e, st); err != nil {
				t.Fatal(err)
			}
			rest := decodeChunks(t, e, suffix(q, cut), suffix(k, cut), suffix(v, cut), []int{1})
			if want := suffix(full, cut); !slices.Equal(rest.Data, want.Data) {
				t.Error("a grouped decoder restored mid-sequence does not continue as the one saved")
			}
		})
	}
}

// prefix and suffix return positions [0, n) and [n, N) of x ([B,H,N,h]).
func prefix(x *tensor.Tensor, n int) *tensor.Tensor { return positions(x, 0, n) }
func suffix(x *tensor.Tensor, n int) *tensor.Tensor { return positions(x, n, x.Shape[2]) }

func positions(x *tensor.Tensor, lo, hi int) *tensor.Tensor {
	B, H, N, h := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	p := tensor.New(B, H, hi-lo, h)
	for bh := range B * H {
		copy(p.Data[bh*(hi-lo)*h:(bh+1)*(hi-lo)*h], x.Data[(bh*N+lo)*h:(bh*N+hi)*h])
	}
	return p
}
