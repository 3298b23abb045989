package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// decodeAll runs a fresh Decoder of m over the N positions of q, k, v
// ([B,H,N,h]) and returns the outputs in the same layout.
func decodeAll(t *testing.T, m Mechanism, q, k, v *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	B, H, h := q.Shape[0], q.Shape[1], q.Shape[3]
	d, err := NewDecoder(m, B, H, h)
	if err != nil {
		t.Fatalf("NewDecoder(%s): %v", m.Kind(), err)
	}
	return decodeWith(t, d, q, k, v)
}

// decodeWith feeds q, k, v position by position to d.
func decodeWith(t *testing.T, d Decoder, q, k, v *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	B, H, N, h := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	out := tensor.New(q.Shape...)
	qs, ks, vs, os := tensor.New(B, H, h), tensor.New(B, H, h), tensor.New(B, H, h), tensor.New(B, H, h)
	for n := 0; n < N; n++ {
		for bh := 0; bh < B*H; bh++ {
			at := (bh*N + n) * h
			copy(qs.Data[bh*h:(bh+1)*h], q.Data[at:at+h])
			copy(ks.Data[bh*h:(bh+1)*h], k.Data[at:at+h])
			copy(vs.Data[bh*h:(bh+1)*h], v.Data[at:at+h])
		}
		if d.Len() != n {
			t.Fatalf("Len() = %d before position %d", d.Len(), n)
		}
		d.Step(os, qs, ks, vs)
		for bh := 0; bh < B*H; bh++ {
			at := (bh*N + n) * h
			copy(out.Data[at:at+h], os.Data[bh*h:(bh+1)*h])
		}
	}
	return out
}

// worstPosition returns the largest |a−b| over the outputs of each
// position, relative to the largest |b| of the whole sequence, and the
// position where it occurs.
func worstPosition(a, b *tensor.Tensor) (float64, int) {
	B, H, N, h := b.Shape[0], b.Shape[1], b.Shape[2], b.Shape[3]
	var scale float64
	for _, x := range b.Data {
		scale = math.Max(scale, math.Abs(float64(x)))
	}
	worst, at := 0.0, -1
	for bh := 0; bh < B*H; bh++ {
		for n := 0; n < N; n++ {
			for j := 0; j < h; j++ {
				i := (bh*N+n)*h + j
				if d := math.Abs(float64(a.Data[i])-float64(b.Data[i])) / scale; d > worst || at < 0 {
					worst, at = d, n
				}
			}
		}
	}
	return worst, at
}

type decodeCase struct {
	name string
	kind Kind
	opts kernelOptions
	N    int
}

func decodeCases() []decodeCase {
	base := kernelOptions{Causal: true, Degree: 4, SketchSize: 4, Block: 4, Local: true, Sketch: Gaussian, Seed: 3}
	with := func(f func(o *kernelOptions)) kernelOptions { o := base; f(&o); return o }
	return []decodeCase{
		{"softmax", Softmax, base, 13},
		{"softmax/N37", Softmax, base, 37}, // the cache grows during chunks
		{"flash/b4", Flash, base, 13},
		{"flash/b64", Flash, with(func(o *kernelOptions) { o.Block = 64 }), 13},
		{"polynomial/p2", Polynomial, with(func(o *kernelOptions) { o.Degree = 2 }), 13},
		{"polynomial/p4", Polynomial, base, 13},
		{"polynomial/p4/N37", Polynomial, base, 37},
		{"polynomial/p6", Polynomial, with(func(o *kernelOptions) { o.Degree = 6 }), 13},
		// Polysketch: N = 13 spans blocks [0,4) [4,8) [8,12) [12,13).
		{"polysketch/local/b4", Polysketch, base, 13},
		{"polysketch/local/b4/N12", Polysketch, base, 12},
		{"polysketch/local/b4/N37", Polysketch, base, 37},
		{"polysketch/local/b5", Polysketch, with(func(o *kernelOptions) { o.Block = 5 }), 13},
		{"polysketch/local/b3/r16", Polysketch, with(func(o *kernelOptions) { o.Block = 3; o.SketchSize = 16 }), 13},
		{"polysketch/local/b1", Polysketch, with(func(o *kernelOptions) { o.Block = 1 }), 13},
		{"polysketch/local/b16", Polysketch, with(func(o *kernelOptions) { o.Block = 16 }), 13},
		{"polysketch/sketched/b4", Polysketch, with(func(o *kernelOptions) { o.Local = false }), 13},
		{"polysketch/cumsum", Polysketch, with(func(o *kernelOptions) { o.CumSum = true }), 13},
		{"polysketch/remat", Polysketch, with(func(o *kernelOptions) { o.Remat = true }), 13},
		{"polysketch/srht", Polysketch, with(func(o *kernelOptions) { o.Sketch = SRHT }), 13},
		{"polysketch/p2", Polysketch, with(func(o *kernelOptions) { o.Degree = 2 }), 13},
		{"polysketch/p8", Polysketch, with(func(o *kernelOptions) { o.Degree = 8 }), 13},
		{"polysketch/learned", Polysketch, with(func(o *kernelOptions) { o.Learned = true }), 13},
		{"polysketch/learned/sketched", Polysketch, with(func(o *kernelOptions) { o.Learned = true; o.Local = false }), 13},
		{"polysketch/learned/p8/b5", Polysketch, with(func(o *kernelOptions) { o.Learned = true; o.Degree = 8; o.Block = 5 }), 13},
	}
}

// decodeInputs returns q, k, v of shape [2,3,N,8] whose q and k rows are
// normalized to mean 0 and unit variance, as the model's LayerNorm leaves
// them for polynomial attention.
func decodeInputs(N int, seed uint64) (q, k, v *tensor.Tensor) {
	const B, H, h = 2, 3, 8
	rng := rand.New(rand.NewPCG(seed, 17))
	q, k, v = randTensor(rng, 1, B, H, N, h), randTensor(rng, 1, B, H, N, h), randTensor(rng, 1, B, H, N, h)
	normalizeRows(q, 1)
	normalizeRows(k, 1)
	return q, k, v
}

// decodeTol bounds the decoding error relative to the largest output;
// measured errors are below 2.1e-6 (degree 8 one position at a time; in
// chunks below 1e-6), against Forward and between the two.
const decodeTol = 1e-5

// TestDecoderMatchesForward decodes every position of a sequence one at a
// time and compares each output with the full causal Forward.
func TestDecoderMatchesForward(t *testing.T) {
	for _, c := range decodeCases() {
		t.Run(c.name, func(t *testing.T) {
			q, k, v := decodeInputs(c.N, 1)
			m := mustNew(t, c.kind, c.opts)
			want := forward(m, q, k, v)
			got := decodeAll(t, m, q, k, v)
			if d, n := worstPosition(got, want); d > decodeTol {
				t.Errorf("decoded output at position %d differs from Forward by %.3g (relative to max |o|), want ≤ %g", n, d, decodeTol)
			}
		})
	}
}

// decodeChunks feeds q, k, v ([B,H,N,h]; k and v may have fewer heads,
// for a grouped decoder) to d in chunks of the sizes of schedule, repeated
// until N positions are consumed (the last chunk cut short), and returns
// the outputs in the layout of q.
func decodeChunks(t *testing.T, d Decoder, q, k, v *tensor.Tensor, schedule []int) *tensor.Tensor {
	t.Helper()
	B, H, N, h := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	out := tensor.New(q.Shape...)
	// chunk copies positions [at, at+n) of x ([B,heads,N,h]).
	chunk := func(x *tensor.Tensor, at, n int) *tensor.Tensor {
		c := tensor.New(B, x.Shape[1], n, h)
		for bh := 0; bh < B*x.Shape[1]; bh++ {
			copy(c.Data[bh*n*h:(bh+1)*n*h], x.Data[(bh*N+at)*h:(bh*N+at+n)*h])
		}
		return c
	}
	start := d.Len() // a restored decoder goes on from there
	for at, i := 0, 0; at < N; i++ {
		n := min(schedule[i%len(schedule)], N-at)
		qs, ks, vs, os := chunk(q, at, n), chunk(k, at, n), chunk(v, at, n), tensor.New(B, H, n, h)
		os.Fill(float32(math.NaN())) // every output must be written
		if d.Len() != start+at {
			t.Fatalf("Len() = %d before position %d", d.Len(), start+at)
		}
		d.Step(os, qs, ks, vs)
		for bh := 0; bh < B*H; bh++ {
			copy(out.Data[(bh*N+at)*h:(bh*N+at+n)*h], os.Data[bh*n*h:(bh+1)*n*h])
		}
		at += n
	}
	if d.Len() != start+N {
		t.Fatalf("Len() = %d after %d positions", d.Len(), N)
	}
	return out
}

// chunkSchedules are the ways TestDecoderChunks cuts sequences: one
// position per Step (as [B,H,1,h]), chunks shorter than, equal to and
// longer than the blocks of decodeCases, the whole sequence at once, and
// chunks of changing sizes; {4, 1, 3} and {1, 1, 1, 1, 2} start blocks
// with one position, so that chunks follow while heads have not folded
// the previous block yet (polysketch folds at a position of the next block
// that depends on the head).
var chunkSchedules = [][]int{{1}, {2}, {3}, {4}, {5}, {9}, {64}, {3, 1, 6, 2}, {4, 1, 3}, {1, 1, 1, 1, 2}}

// TestDecoderChunks decodes every case in chunks of several positions and
// compares the outputs with the full causal Forward and with decoding one
// position at a time; polysketch's chunks cross block boundaries, end
// mid-block and start mid-block.
func TestDecoderChunks(t *testing.T) {
	for _, c := range decodeCases() {
		t.Run(c.name, func(t *testing.T) {
			q, k, v := decodeInputs(c.N, 1)
			m := mustNew(t, c.kind, c.opts)
			want := forward(m, q, k, v)
			single := decodeAll(t, m, q, k, v)
			for _, sched := range chunkSchedules {
				d, err := NewDecoder(m, 2, 3, 8)
				if err != nil {
					t.Fatal(err)
				}
				got := decodeChunks(t, d, q, k, v, sched)
				if diff, n := worstPosition(got, want); diff > decodeTol {
					t.Errorf("chunks %v: output at position %d differs from Forward by %.3g (relative to max |o|), want ≤ %g", sched, n, diff, decodeTol)
				}
				if diff, n := worstPosition(got, single); diff > decodeTol {
					t.Errorf("chunks %v: output at position %d differs from single steps by %.3g, want ≤ %g", sched, n, diff, decodeTol)
				}
				// Reset, then the same chunks again: bit for bit.
				d.Reset()
				again := decodeChunks(t, d, q, k, v, sched)
				for i := range got.Data {
					if again.Data[i] != got.Data[i] {
						t.Fatalf("chunks %v: element %d after Reset: %v, first time %v", sched, i, again.Data[i], got.Data[i])
					}
				}
			}
		})
	}
}

// TestDecoderStepShapes: Step panics on inconsistent shapes, with the
// shapes in the message.
func TestDecoderStepShapes(t *testing.T) {
	for _, kind := range Names() {
		d, err := NewDecoder(mustRegistered(t, kind, true), 2, 3, 8)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name   string
			o, qkv []int
		}{
			{"o shorter", []int{2, 3, 2, 8}, []int{2, 3, 3, 8}},
			{"o 3-D", []int{2, 3, 8}, []int{2, 3, 1, 8}},
			{"no positions", []int{2, 3, 0, 8}, []int{2, 3, 0, 8}},
			{"wrong heads", []int{2, 2, 1, 8}, []int{2, 2, 1, 8}},
			{"wrong head size", []int{2, 3, 1, 4}, []int{2, 3, 1, 4}},
			{"2-D", []int{6, 8}, []int{6, 8}},
		} {
			func() {
				defer func() {
					if r := recover(); r == nil {
						t.Errorf("%s: %s: no panic", kind, c.name)
					} else if !strings.Contains(fmt.Sprint(r), "Decoder.Step") {
						t.Errorf("%s: %s: panic %q does not name Decoder.Step", kind, c.name, r)
					}
				}()
				d.Step(tensor.New(c.o...), tensor.New(c.qkv...), tensor.New(c.qkv...), tensor.New(c.qkv...))
			}()
			if d.Len() != 0 {
				t.Fatalf("%s: %s: a rejected Step moved Len to %d", kind, c.name, d.Len())
			}
		}
	}
}

// TestDecoderSeesBlockBoundaries makes sure the comparison above is sharp
// for polysketch: outputs computed with blocks one row shorter or longer,
// or without the exact local blocks, or fully exact, differ from the true
// ones by far more than the tolerance, so a decoder that misplaced a block
// boundary, or folded a block into the prefix state too early or too late,
// would fail TestDecoderMatchesForward.
func TestDecoderSeesBlockBoundaries(t *testing.T) {
	const N = 13
	q, k, v := decodeInputs(N, 1)
	o := kernelOptions{Causal: true, Degree: 4, SketchSize: 4, Block: 4, Local: true, Sketch: Gaussian, Seed: 3}
	want := forward(mustNew(t, Polysketch, o), q, k, v)
	for _, c := range []struct {
		name string
		kind Kind
		f    func(o *kernelOptions)
	}{
		{"block 3", Polysketch, func(o *kernelOptions) { o.Block = 3 }},
		{"block 5", Polysketch, func(o *kernelOptions) { o.Block = 5 }},
		{"not local", Polysketch, func(o *kernelOptions) { o.Local = false }},
		{"exact", Polynomial, func(*kernelOptions) {}},
	} {
		wrong := o
		c.f(&wrong)
		got := forward(mustNew(t, c.kind, wrong), q, k, v)
		if d, _ := worstPosition(got, want); d < 100*decodeTol {
			t.Errorf("%s: outputs differ by only %.3g from blocks of 4; the decoding test could not tell them apart", c.name, d)
		}
	}
}

// TestDecoderReset decodes, resets and decodes another sequence, which
// must match a fresh decoder bit for bit.
func TestDecoderReset(t *testing.T) {
	for _, c := range decodeCases() {
		t.Run(c.name, func(t *testing.T) {
			q1, k1, v1 := decodeInputs(c.N, 1)
			q2, k2, v2 := decodeInputs(c.N, 2)
			m := mustNew(t, c.kind, c.opts)
			d, err := NewDecoder(m, 2, 3, 8)
			if err != nil {
				t.Fatal(err)
			}
			decodeWith(t, d, q1, k1, v1)
			d.Reset()
			if d.Len() != 0 {
				t.Fatalf("Len() = %d after Reset", d.Len())
			}
			got := decodeWith(t, d, q2, k2, v2)
			want := decodeAll(t, mustNew(t, c.kind, c.opts), q2, k2, v2)
			for i := range want.Data {
				if got.Data[i] != want.Data[i] {
					t.Fatalf("element %d after Reset: %v, fresh decoder %v", i, got.Data[i], want.Data[i])
				}
			}
		})
	}
}

// TestDecoderBeforeForward builds a polysketch decoder on a mechanism that
// has not run yet: it must draw the same sketch Forward will.
func TestDecoderBeforeForward(t *testing.T) {
	q, k, v := decodeInputs(13, 1)
	o := kernelOptions{Causal: true, Degree: 4, SketchSize: 8, Block: 4, Local: true, Sketch: SRHT, Seed: 9}
	m := mustNew(t, Polysketch, o)
	got := decodeAll(t, m, q, k, v)
	want := forward(m, q, k, v)
	if d, n := worstPosition(got, want); d > decodeTol {
		t.Errorf("position %d differs by %.3g", n, d)
	}
}

func TestDecoderErrors(t *testing.T) {
	for _, kind := range Names() {
		if _, err := NewDecoder(mustRegistered(t, kind, false), 1, 2, 8); err == nil {
			t.Errorf("%s: non-causal decoder: no error", kind)
		}
	}
	m := mustNew(t, Softmax, defaultKernelOptions())
	for _, s := range [][3]int{{0, 1, 8}, {1, 0, 8}, {1, 1, 0}} {
		if _, err := NewDecoder(m, s[0], s[1], s[2]); err == nil {
			t.Errorf("shape %v: no error", s)
		}
	}
	if _, err := NewDecoder(nil, 1, 1, 8); err == nil {
		t.Error("nil mechanism: no error")
	}
}

// TestDecoderStepAllocs checks that steps allocate nothing: polysketch at
// any position (its state has a fixed size), the caches once grown.
func TestDecoderStepAllocs(t *testing.T) {
	if decodeRace {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	for _, c := range []struct {
		name    string
		kind    Kind
		learned bool
	}{{"softmax", Softmax, false}, {"flash", Flash, false}, {"polynomial", Polynomial, false},
		{"polysketch", Polysketch, false}, {"polysketch/learned", Polysketch, true}} {
		t.Run(c.name, func(t *testing.T) {
			o := kernelOptions{Causal: true, Degree: 4, SketchSize: 8, Block: 4, Local: true, Sketch: Gaussian, Learned: c.learned, Seed: 3}
			d, err := NewDecoder(mustNew(t, c.kind, o), 2, 3, 8)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			q, k, v, out := randTensor(rng, 1, 2, 3, 8), randTensor(rng, 1, 2, 3, 8), randTensor(rng, 1, 2, 3, 8), tensor.New(2, 3, 8)
			const runs = 50
			if c.kind != Polysketch {
				for range runs + 2 { // AllocsPerRun warms up with one extra run
					d.Step(out, q, k, v)
				}
				d.Reset() // keeps the grown cache
			}
			if a := testing.AllocsPerRun(runs, func() { d.Step(out, q, k, v) }); a != 0 {
				t.Errorf("%v allocations per step", a)
			}

			// Chunks of 7 positions: once the cache and the chunk scratch
			// have grown (the first chunk), nothing more.
			const chunk, chunkRuns = 7, 10
			q, k, v, out = randTensor(rng, 1, 2, 3, chunk, 8), randTensor(rng, 1, 2, 3, chunk, 8), randTensor(rng, 1, 2, 3, chunk, 8), tensor.New(2, 3, chunk, 8)
			d.Reset()
			if c.kind != Polysketch {
				for range chunkRuns + 1 {
					d.Step(out, q, k, v)
				}
			}
			d.Reset()
			d.Step(out, q, k, v)
			if a := testing.AllocsPerRun(chunkRuns, func() { d.Step(out, q, k, v) }); a != 0 {
				t.Errorf("%v allocations per chunk of %d positions", a, chunk)
			}
		})
	}
}

func ExampleNewDecoder() {
	m, _ := newMechanism(Polysketch, defaultKernelOptions())
	const B, H, h = 1, 2, 8
	d, _ := NewDecoder(m, B, H, h)
	q, k, v, o := tensor.New(B, H, h), tensor.New(B, H, h), tensor.New(B, H, h), tensor.New(B, H, h)
	for pos := 0; pos < 3; pos++ {
		// Fill q, k, v with the projections of the token at pos, then:
		v.Fill(float32(pos + 1))
		d.Step(o, q, k, v)
	}
	fmt.Println(d.Len(), "positions decoded")
	// Output: 3 positions decoded
}
