package attention

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/vec"
)

// Learned sketches (PolySketchFormer Sec. 2.3 and Appendix D, Algorithm 2,
// LEARNABLEPOLYSKETCHWITHNEGATIVITY). Every random projection M·G of
// Algorithm 1 becomes a small dense network f, and each level combines
// its two networks' outputs as
//
//	M = √r·tanh(√(1/r)·[f1(M1) ∗ f2(M2)]),
//
// the tanh keeping every entry of M inside (−√r, √r). The recursion over
// d = p/2 is that of Algorithm 1, with p−2 networks in all: for p = 4,
// M(x) = √r·tanh(f1(x)∗f2(x)/√r); for p = 8 two such sketches, networks
// f1, f2 and f3, f4 on x, are combined by f5, f6 on their r-dimensional
// outputs. Self-tensoring is unchanged, φ(x) = M(x)^⊗2, so attention
// weights stay non-negative. At p = 2, M(x) = x and there is nothing to
// learn: a learned polysketch of degree 2 is the plain one, with no
// parameters.
//
// The network f: R^in → R^r. Appendix D gives it "3 hidden layers with
// size [8r, r, 8r]", "gelu after the first and the third hidden layer" and
// "layer normalization before the input and the second hidden layer", for
// about 8hr + 24r² parameters. We read that as
//
//	f(x) = W4·GELU(W3·(W2·LN2(GELU(W1·LN1(x) + b1)) + b2) + b3) + b4
//
// (hidden layers W1: in→8r, W2: 8r→r, W3: r→8r, output W4: 8r→r; LN2
// normalizes the input of the second hidden layer; no activation after
// the r-wide bottleneck). Linear layers have biases and LayerNorms gains
// and biases, the usual defaults, which add 2·in + 34r parameters to the
// paper's count. GELU is the tanh approximation (vec.GELU); LayerNorm is
// nn's (ε = 1e-5).
//
// Parameters, shared by all heads of the layer, are named in the order the
// recursion of Algorithm 2 creates the networks, "sketch.f1", "sketch.f2",
// … (as the random sketch names its matrices g1, g2, …), each with
// ".ln1.gain", ".ln1.bias", ".l1.weight", ".l1.bias", ".ln2.gain",
// ".ln2.bias", ".l2.weight", ".l2.bias", ".l3…", ".l4…"; weights are [in,
// out] (y = x·W). Initialization is nn's: weights N(0, 1/in) drawn from a
// PCG seeded with the layer seed (Setup.Seed) (stream "learned"), network by network in
// that order and l1…l4 within each; biases 0 and LayerNorm gains 1.
// The sketch option does not enter: the learned sketch starts the same
// whichever random sketch is named.
//
// How polysketch runs it. A network is far more work per row than a
// random projection (2·(8·in·r + 24r²) FLOPs against 2·in·r), so the
// networks run once per Forward on all rows of all heads, q and k alike,
// in chunks of netChunk rows (GEMMs on row-major [rows × width]
// activations, chunks in parallel), and the mechanism keeps M(Q), M(K) of
// every row (r floats each, also with Remat). The block phases read their
// M from there and leave the gradient dM of every row in a buffer. After
// them, Backward recomputes each chunk's activations and runs the
// networks backward into dq and dk. Keeping every activation would cost
// about 1400 floats per row and network at h = 64, r = 32 (gigabytes per
// layer at long contexts); but without Remat Forward keeps each network's
// bottleneck a2 and output y (2r floats per row and network, 128 for
// p = 4 and r = 32), so the recomputation skips l2 and l4, two of the
// four GEMMs. Backward sums the parameter gradients of its chunks into
// one of netGroups partial sums: group g takes chunks g, g+netGroups, …
// in order, and the partial sums are added to the gradients in group
// order, so that no sum depends on GOMAXPROCS. The groups are the items
// of the backward pass, a third of a training step's time: 32 keep 16
// threads busy, at a partial sum of the parameters' size each (about
// 0.9 MB for degree 4, r = 32, h = 64), which each item clears and the
// reduction reads. 128 groups measured the same on 16 cores and 1–3%
// slower on one thread (docs/benchmarks.md); past 32 threads the pass
// leaves threads idle.

const (
	learnedSketch SketchKind = "learned" // internal: newSketch builds the networks of Algorithm 2
	netWiden                 = 8         // the hidden layers are 8r, r, 8r wide
	netChunk                 = 64        // rows per chunk of the network passes: their activations (12 KB a row at h = 64, r = 32) stay in L2, and the products keep more than RowBlockBF16 rows (AMX tiles)
	netGroups                = 32        // partial sums of the parameter gradients: items of the backward pass
	netSegment               = 4096      // floats per item of the gradient reduction
)

// learned is the learned part of a sketch: the networks of Algorithm 2 level
// by level, laid out as the projections of sketchLevel (level 0 holds d
// networks on x, level j > 0 holds d/2^j networks on the outputs of level
// j−1, network e on output e).
type learned struct {
	in, r, hid int
	levels     [][]*sketchNet
	params     []*nn.Param
	size       int // floats in all parameters: the flat gradient layout
	segs       []paramSegment

	// The scratch of a chunk of c rows is a sequence of [c × width] row-major
	// arrays; these are their offsets in floats per row.
	perRow int
	keepW  int     // floats per row that Forward keeps for Backward: a2 and y of every network
	act    [][]int // first array of network e of level j (see netActs)
	mt     []int   // level j: the outputs m of its pairs, then their tanh t
	dy     []int   // level j: the gradients of its networks' outputs
	dm     []int   // level j: the gradients of its pairs' outputs
	tmp    int     // two of width hid, one of r, one of max(in, r)
}

// sketchNet is one network f of Algorithm 2.
type sketchNet struct {
	in       int
	ln1, ln2 *nn.LayerNorm
	l1, l2   *nn.Linear
	l3, l4   *nn.Linear
	off      int // first float of its parameters in the flat gradient layout
	kept     int // where its a2 and y are kept: floats per row before them (see kept)

	// wT holds the transposes of l1…l4's weights ([out, in]), taken at
	// each Backward, so that the input gradients dy·Wᵀ are NN products,
	// which blas streams for these narrow shapes (about 1.2× the NT ones).
	wT [4][]float32
}

// paramSegment is a range of one parameter's elements, a unit of the
// parallel gradient reduction.
type paramSegment struct{ p, lo, hi, off int }

// newLearned builds the networks of a degree-d learned sketch (d ≥ 2 a power
// of two) for inputs of dimension in and sketch size r, initialized from
// seed.
func newLearned(d, in, r int, seed uint64) *learned {
	s := &learned{in: in, r: r, hid: netWiden * r}
	depth := bits.TrailingZeros(uint(d))
	s.levels = make([][]*sketchNet, depth)
	for j := range s.levels {
		s.levels[j] = make([]*sketchNet, d>>j)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6c6561726e6564)) // "learned"
	// Networks placed so far, per level and in all.
	next, named := make([]int, depth), 0
	var build func(d int)
	build = func(d int) { // the recursion of Algorithm 2
		if d == 1 {
			return
		}
		build(d / 2)
		build(d / 2)
		j := bits.TrailingZeros(uint(d)) - 1
		for range 2 {
			named++
			s.levels[j][next[j]] = s.newNet(fmt.Sprintf("sketch.f%d", named), j, rng)
			next[j]++
		}
	}
	build(d)

	for i, p := range s.params {
		for lo := 0; lo < p.Value.Len(); lo += netSegment {
			s.segs = append(s.segs, paramSegment{i, lo, min(lo+netSegment, p.Value.Len()), s.offset(i)})
		}
	}
	// Scratch layout, in floats per row.
	s.act = make([][]int, depth)
	s.mt, s.dy, s.dm = make([]int, depth), make([]int, depth), make([]int, depth)
	off := 0
	for j, nets := range s.levels {
		s.act[j] = make([]int, len(nets))
		for e, f := range nets {
			s.act[j][e] = off
			off += f.in + 5*s.hid + 2*r + 4
		}
		s.mt[j] = off
		off += len(nets) * r // m and t of len(nets)/2 pairs
		s.dy[j] = off
		off += len(nets) * r
		s.dm[j] = off
		off += len(nets) / 2 * r
	}
	s.tmp = off
	s.perRow = off + 2*s.hid + r + max(in, r)
	return s
}

// newNet creates network name of level j, drawing its weights from rng.
func (s *learned) newNet(name string, j int, rng *rand.Rand) *sketchNet {
	in, r, hid := s.r, s.r, s.hid
	if j == 0 {
		in = s.in
	}
	f := &sketchNet{in: in, off: s.size, kept: s.keepW}
	s.keepW += 2 * r
	f.ln1 = nn.NewLayerNorm(name+".ln1", in, nn.GainBias)
	f.l1 = nn.NewLinear(name+".l1", in, hid, true, rng)
	f.ln2 = nn.NewLayerNorm(name+".ln2", hid, nn.GainBias)
	f.l2 = nn.NewLinear(name+".l2", hid, r, true, rng)
	f.l3 = nn.NewLinear(name+".l3", r, hid, true, rng)
	f.l4 = nn.NewLinear(name+".l4", hid, r, true, rng)
	for i, l := range f.linears() {
		f.wT[i] = make([]float32, l.In*l.Out)
	}
	for _, p := range f.params() {
		s.params = append(s.params, p)
		s.size += p.Value.Len()
	}
	return f
}

// params lists the twelve parameters of f in the flat gradient layout's
// order.
func (f *sketchNet) params() []*nn.Param {
	return []*nn.Param{f.ln1.Gain, f.ln1.Bias, f.l1.Weight, f.l1.Bias, f.ln2.Gain, f.ln2.Bias,
		f.l2.Weight, f.l2.Bias, f.l3.Weight, f.l3.Bias, f.l4.Weight, f.l4.Bias}
}

// linears lists l1…l4.
func (f *sketchNet) linears() [4]*nn.Linear { return [4]*nn.Linear{f.l1, f.l2, f.l3, f.l4} }

// transposeWeights refreshes every network's wT from its weights (in
// bf16 the backward pass reads the bf16 copies of Wᵀ instead).
func (s *learned) transposeWeights() {
	for _, nets := range s.levels {
		for _, f := range nets {
			for i, l := range f.linears() {
				if l.BF16 == nil {
					blas.Copy(blas.Trans, blas.NewGeneral(l.In, l.Out, l.Weight.Value.Data), blas.NewGeneral(l.Out, l.In, f.wT[i]))
				}
			}
		}
	}
}

// setPrecision makes the networks' products bf16 (with copies of the
// weights for x·W and dy·Wᵀ) or fp32.
func (s *learned) setPrecision(p nn.Precision) {
	for _, nets := range s.levels {
		for _, f := range nets {
			for _, l := range f.linears() {
				l.BF16 = nil
				if p == nn.BF16 {
					l.BF16 = nn.NewRounded(l.Weight, true, true)
				}
			}
		}
	}
}

// roundWeights makes the bf16 copies of the weights again.
func (s *learned) roundWeights() {
	for _, nets := range s.levels {
		for _, f := range nets {
			for _, l := range f.linears() {
				if l.BF16 != nil {
					l.BF16.Round(l.Weight)
				}
			}
		}
	}
}

// transposedSize returns the floats of all wT.
func (s *learned) transposedSize() int {
	n := 0
	for _, nets := range s.levels {
		for _, f := range nets {
			for _, t := range f.wT {
				n += len(t)
			}
		}
	}
	return n
}

// offset returns the first float of parameter i in the flat layout.
func (s *learned) offset(i int) int {
	off := 0
	for _, p := range s.params[:i] {
		off += p.Value.Len()
	}
	return off
}

// netGrads are the gradients of one network's parameters, as views of a
// flat gradient buffer.
type netGrads struct {
	g1, b1, w1, c1, g2, b2, w2, c2, w3, c3, w4, c4 []float32
}

// grads returns f's gradients in the flat buffer flat.
func (f *sketchNet) grads(flat []float32) netGrads {
	flat = flat[f.off:]
	take := func(n int) []float32 {
		x := flat[:n:n]
		flat = flat[n:]
		return x
	}
	in, hid, r := f.in, f.l1.Out, f.l2.Out
	var g netGrads
	g.g1, g.b1, g.w1, g.c1 = take(in), take(in), take(in*hid), take(hid)
	g.g2, g.b2, g.w2, g.c2 = take(hid), take(hid), take(hid*r), take(r)
	g.w3, g.c3, g.w4, g.c4 = take(r*hid), take(hid), take(hid*r), take(r)
	return g
}

// netActs are the activations of one network for a chunk of rows, each
// row-major [rows × width].
type netActs struct {
	u0             []float32 // LN1(x): in
	a1, h1, u1     []float32 // W1·u0 + b1, GELU(a1), LN2(h1): hid
	a2             []float32 // W2·u1 + b2: r
	a3, h3         []float32 // W3·a2 + b3, GELU(a3): hid
	y              []float32 // W4·h3 + b4: r
	m0, s0, m1, s1 []float32 // mean and 1/σ of LN1 and LN2: 1
}

// region returns the array of width w at offset off (floats per row) of a
// scratch buf of capacity c rows, cut to rows rows.
func region(buf []float32, c, off, w, rows int) []float32 {
	return buf[c*off : c*off+rows*w]
}

// acts returns the activations of network e of level j in buf, a2 and y
// in k's arrays where k keeps them.
func (s *learned) acts(buf []float32, c, rows, j, e int, k kept) netActs {
	f := s.levels[j][e]
	in, hid, r := f.in, s.hid, s.r
	off := s.act[j][e]
	take := func(w int) []float32 {
		x := region(buf, c, off, w, rows)
		off += w
		return x
	}
	var a netActs
	a.u0, a.a1, a.h1, a.u1 = take(in), take(hid), take(hid), take(hid)
	a.a2, a.a3, a.h3, a.y = take(r), take(hid), take(hid), take(r)
	a.m0, a.s0, a.m1, a.s1 = take(1), take(1), take(1), take(1)
	if k.buf != nil {
		a.a2, a.y = k.rows(f.kept, rows), k.rows(f.kept+r, rows)
	}
	return a
}

// pair returns the output m, and its tanh t, of pair i of level j, and the
// gradient dm of m.
func (s *learned) pair(buf []float32, c, rows, j, i int) (m, t, dm []float32) {
	r, np := s.r, len(s.levels[j])/2
	m = region(buf, c, s.mt[j]+i*r, r, rows)
	t = region(buf, c, s.mt[j]+(np+i)*r, r, rows)
	dm = region(buf, c, s.dm[j]+i*r, r, rows)
	return m, t, dm
}

// scratchRows is the capacity in rows of a scratch of n floats.
func (s *learned) scratchRows(n int) int { return n / s.perRow }

// kept is where a chunk's networks save their a2 and y for backward (see
// the top of this file), or load them from when recomputing: the kept
// values of all n rows of a side, keepW floats a row, stored as one
// [n × r] array after another (network by network, a2 then y), so that
// a chunk's a2 or y is one contiguous [rows × r] array that l2 and l4
// write and l3 and the pairs read where it lies. A nil buf keeps nothing.
type kept struct {
	buf   []float32
	n, lo int  // rows of the side; the chunk's first
	r     int  // floats per row of an array
	load  bool // recompute: take a2 and y from buf instead of l2 and l4
}

// rows returns the chunk's rows rows of the array at off floats per row.
func (k kept) rows(off, rows int) []float32 {
	at := off*k.n + k.lo*k.r
	return k.buf[at : at+rows*k.r]
}

// forward computes M for the rows ≤ c rows of x in buf, a scratch of
// capacity c rows, keeping every activation for backward, and returns M:
// a view of buf, row-major [rows × r], or out if not nil. With grad (to
// run backward next) the networks leave GELU's derivatives for backward
// in place of the activations' inputs.
func (s *learned) forward(x blas.General, c int, buf []float32, k kept, grad bool, out []float32) []float32 {
	r, rows := s.r, x.Rows
	var m []float32
	for j, nets := range s.levels {
		for e, f := range nets {
			in := x
			if j > 0 {
				p, _, _ := s.pair(buf, c, rows, j-1, e)
				in = blas.NewGeneral(rows, r, p)
			}
			f.forward(in, s.acts(buf, c, rows, j, e, k), k, grad)
		}
		// M = √r·tanh(√(1/r)·y1∗y2), pair by pair.
		for i := 0; i < len(nets)/2; i++ {
			y1, y2 := s.acts(buf, c, rows, j, 2*i, k).y, s.acts(buf, c, rows, j, 2*i+1, k).y
			var t []float32
			m, t, _ = s.pair(buf, c, rows, j, i)
			if j == len(s.levels)-1 && out != nil {
				m = out[:rows*r]
			}
			vec.Mul(t, y1, y2)
			vec.Scale(float32(1/math.Sqrt(float64(r))), t)
			vec.Tanh(t, t)
			copy(m, t)
			vec.Scale(float32(math.Sqrt(float64(r))), m)
		}
	}
	return m
}

// backward takes the gradient dM ([rows × r]) of the M that forward just
// computed with grad in buf (and k) for the rows of x, writes (or with
// accumulate adds) the gradient of x into dx and adds the parameter
// gradients to the flat buffer grads.
func (s *learned) backward(dx blas.General, accumulate bool, x blas.General, c int, buf []float32, k kept, dM, grads []float32) {
	r, hid, rows := s.r, s.hid, x.Rows
	tA, tB := region(buf, c, s.tmp, hid, rows), region(buf, c, s.tmp+hid, hid, rows)
	tR, tX := region(buf, c, s.tmp+2*hid, r, rows), buf[c*(s.tmp+2*hid+r):]
	for j := len(s.levels) - 1; j >= 0; j-- {
		nets := s.levels[j]
		// Through the pairs: dM/dy1 = (1 − t²)·y2, dM/dy2 = (1 − t²)·y1.
		for i := 0; i < len(nets)/2; i++ {
			_, t, dm := s.pair(buf, c, rows, j, i)
			if j == len(s.levels)-1 {
				dm = dM[:rows*r]
			}
			g := tR
			vec.Mul(g, t, t)
			vec.Mul(g, g, dm)
			vec.Scale(-1, g)
			vec.Add(g, g, dm)
			a1, a2 := s.acts(buf, c, rows, j, 2*i, k), s.acts(buf, c, rows, j, 2*i+1, k)
			vec.Mul(region(buf, c, s.dy[j]+2*i*r, r, rows), g, a2.y)
			vec.Mul(region(buf, c, s.dy[j]+(2*i+1)*r, r, rows), g, a1.y)
		}
		for e, f := range nets {
			in, din, acc := x, dx, accumulate || e > 0
			if j > 0 {
				m, _, dm := s.pair(buf, c, rows, j-1, e)
				in, din, acc = blas.NewGeneral(rows, r, m), blas.NewGeneral(rows, r, dm), false
			}
			dy := region(buf, c, s.dy[j]+e*r, r, rows)
			f.backward(din, acc, in, dy, s.acts(buf, c, rows, j, e, k), f.grads(grads), tA, tB, tX[:rows*f.in])
		}
	}
}

// forward runs f on the rows of x into a, with a2 and y in k's arrays
// where k keeps them: computed there or, with k.load, taken from there.
// With grad, a1 and a3 are left holding GELU' of themselves (see
// nn.Linear.ApplyGELU), which is all backward needs of them.
func (f *sketchNet) forward(x blas.General, a netActs, k kept, grad bool) {
	in, hid, rows := f.in, f.l1.Out, x.Rows
	vec.LayerNormRows(a.u0, x.Data, x.Stride, f.ln1.Gain.Value.Data, f.ln1.Bias.Value.Data, a.m0[:rows], a.s0[:rows], f.ln1.Eps)
	f.l1.ApplyGELU(blas.NewGeneral(rows, hid, a.a1), blas.NewGeneral(rows, hid, a.h1), blas.NewGeneral(rows, in, a.u0), grad)
	vec.LayerNormRows(a.u1, a.h1, hid, f.ln2.Gain.Value.Data, f.ln2.Bias.Value.Data, a.m1[:rows], a.s1[:rows], f.ln2.Eps)
	r := f.l2.Out
	if !k.load {
		f.l2.Apply(blas.NewGeneral(rows, r, a.a2), blas.NewGeneral(rows, hid, a.u1))
	}
	f.l3.ApplyGELU(blas.NewGeneral(rows, hid, a.a3), blas.NewGeneral(rows, hid, a.h3), blas.NewGeneral(rows, r, a.a2), grad)
	if !k.load {
		f.l4.Apply(blas.NewGeneral(rows, r, a.y), blas.NewGeneral(rows, hid, a.h3))
	}
}

// backward takes dy, the gradient of f's output for the activations a of
// input x (from forward with grad), writes (or with accumulate adds) the gradient of x into dx and
// adds the parameter gradients to g. tA, tB ([rows × hid]) and tX
// ([rows × in]) are scratch.
func (f *sketchNet) backward(dx blas.General, accumulate bool, x blas.General, dy []float32, a netActs, g netGrads, tA, tB, tX []float32) {
	in, hid, r, rows := f.in, f.l1.Out, f.l2.Out, x.Rows
	// y = h3·W4 + b4
	dh3 := tA
	f.l4.ApplyBackward(blas.NewGeneral(rows, hid, dh3), blas.NewGeneral(rows, r, dy), blas.NewGeneral(rows, hid, a.h3), blas.NewGeneral(r, hid, f.wT[3]), blas.NewGeneral(hid, r, g.w4), g.c4)
	vec.Mul(dh3, dh3, a.a3) // a3 holds GELU'(a3)
	// a3 = a2·W3 + b3, a2 = u1·W2 + b2
	da2 := tB[:rows*r]
	f.l3.ApplyBackward(blas.NewGeneral(rows, r, da2), blas.NewGeneral(rows, hid, dh3), blas.NewGeneral(rows, r, a.a2), blas.NewGeneral(hid, r, f.wT[2]), blas.NewGeneral(r, hid, g.w3), g.c3)
	du1 := tA
	f.l2.ApplyBackward(blas.NewGeneral(rows, hid, du1), blas.NewGeneral(rows, r, da2), blas.NewGeneral(rows, hid, a.u1), blas.NewGeneral(r, hid, f.wT[1]), blas.NewGeneral(hid, r, g.w2), g.c2)
	// u1 = LN2(h1), h1 = GELU(a1)
	dh1 := tB
	clear(dh1)
	vec.LayerNormBackwardRows(dh1, hid, g.g2, g.b2, a.h1, hid, f.ln2.Gain.Value.Data, du1, a.m1[:rows], a.s1[:rows])
	vec.Mul(dh1, dh1, a.a1) // a1 holds GELU'(a1)
	// a1 = u0·W1 + b1, u0 = LN1(x)
	du0 := tX
	f.l1.ApplyBackward(blas.NewGeneral(rows, in, du0), blas.NewGeneral(rows, hid, dh1), blas.NewGeneral(rows, in, a.u0), blas.NewGeneral(hid, in, f.wT[0]), blas.NewGeneral(in, hid, g.w1), g.c1)
	if !accumulate {
		for i := 0; i < rows; i++ {
			clear(dx.Data[i*dx.Stride : i*dx.Stride+in])
		}
	}
	vec.LayerNormBackwardRows(dx.Data, dx.Stride, g.g1, g.b1, x.Data, x.Stride, f.ln1.Gain.Value.Data, du0, a.m0[:rows], a.s0[:rows])
}

// apply computes Mᵀ ([r × n]) for the n rows of x chunk by chunk, for
// sketch.apply; scr.buf holds at least one row.
func (s *learned) apply(x blas.General, mT []float32, scr *sketchScratch) {
	c, n := s.scratchRows(len(scr.buf)), x.Rows
	for lo := 0; lo < n; lo += c {
		rows := min(c, n-lo)
		m := s.forward(x.Slice(lo, lo+rows, 0, x.Cols), c, scr.buf, kept{}, false, nil)
		for i := 0; i < rows; i++ {
			for t, v := range m[i*s.r : (i+1)*s.r] {
				mT[t*n+lo+i] = v
			}
		}
	}
}

// The mechanism's side: polysketch with a learned sketch (see the top of
// this file).

// Params lists the parameters of a learned sketch (see sketch_learned.go
// for their names and shapes), shared by all heads, then the per-head
// "scale" and "mix" of Scale and Mix (engine_mixed.go): none for random
// sketches without those, for degree 2 (nothing to learn), and before the
// head size is known (Setup.HeadSize or the first Forward; a later Forward
// with another head size panics), and no per-head ones before the number
// of heads is known (Setup.Heads or the first Forward). Backward adds
// (+=) to their gradients.
func (a *engine) Params() []*nn.Param {
	if a.src == nil {
		return nil
	}
	return append(a.src.params(), a.tune.params()...)
}

// SetPrecision makes the products of a learned sketch's networks, and
// the state products of its engine's backward pass (blockStateGrads),
// bf16 or fp32 (see Rounder); the other feature maps have no dense
// layers, and their products stay float32. These products are small, and
// take bf16 for speed alone (docs/bf16.md): so only where bf16 multiplies
// faster than float32 (blas.FasterBF16). Elsewhere rounding their
// operands would cost time for nothing, and they stay float32.
func (a *engine) SetPrecision(p nn.Precision) {
	if a.sk != nil && a.sk.net != nil {
		if p == nn.BF16 && !blas.FasterBF16() {
			p = nn.FP32
		}
		a.sk.net.setPrecision(p)
		a.bf16 = 0
		if p == nn.BF16 {
			a.bf16 = blockStateGrads
		}
	}
}

// RoundWeights makes the bf16 copies of a learned sketch's weights again.
func (a *engine) RoundWeights() {
	if a.sk != nil && a.sk.net != nil {
		a.sk.net.roundWeights()
	}
}

// netPass is the projector of a learned sketch: its networks run on all
// rows of q and k before the phases, which read M from there and leave
// dM, and backward on them after.
type netPass struct {
	e   *engine
	net *learned

	ms, dms [2][]float32 // M(Q), M(K) and their gradients: [bh·n × ro] each
	keep    [2][]float32 // without Remat, the networks' a2 and y for Q and K: [bh·n × keepW] each
	pgrad   []float32    // [groups × parameter floats]: partial parameter gradients

	// The items of its passes, bound once so that running them allocates
	// nothing.
	stepFwd, stepBwd, stepReduce func(w *engineWorker, i int)
}

func newNetPass(a *engine, net *learned) *netPass {
	s := &netPass{e: a, net: net}
	s.stepFwd, s.stepBwd, s.stepReduce = s.forwardItem, s.backwardItem, s.reduceItem
	return s
}

// layout cuts the rows of q, then of k, into chunks, and the chunks into
// groups of partial parameter gradients.
func (s *netPass) layout(L *engineLayout, items int) int {
	L.chunk = min(netChunk, L.bh*L.n)
	L.chunks = (L.bh*L.n + L.chunk - 1) / L.chunk
	L.groups = min(netGroups, L.chunks) // of 2·chunks: two chunks a group where there are few
	return max(items, 2*L.chunks)
}

func (s *netPass) carve(L *engineLayout, c *carver) {
	n := L.bh * L.n
	var ms, dms, keep [2][]float32
	for i := range ms {
		ms[i], dms[i] = c.take(n*L.ro), c.take(n*L.ro)
		if !s.e.opts.Remat {
			keep[i] = c.take(n * s.net.keepW)
		}
	}
	pgrad := c.take(L.groups * s.net.size)
	if c.keep() {
		s.ms, s.dms, s.keep, s.pgrad = ms, dms, keep, pgrad
	}
}

func (s *netPass) scratchRows(L *engineLayout) int { return L.chunk }

func (s *netPass) params() []*nn.Param { return append([]*nn.Param(nil), s.net.params...) }

func (s *netPass) forward() { s.e.pool.run(2*s.e.L.chunks, s.stepFwd) }

func (s *netPass) backwardEnd() {
	s.net.transposeWeights()
	s.e.pool.run(s.e.L.groups, s.stepBwd)
	s.e.pool.run(len(s.net.segs), s.stepReduce)
}

// apply and output read Mᵀ of block l of head hd ([r × rows]) from the
// sketches of all rows that forward computed: queries (key false) or keys.
func (s *netPass) apply(_ *engineWorker, key bool, hd, l int, _, mT []float32) {
	L := &s.e.L
	lo, rows := L.plan.span(l)
	m := s.ms[0]
	if key {
		m = s.ms[1]
	}
	at := (hd*L.n + lo) * L.ro
	blas.Copy(blas.Trans, blas.NewGeneral(rows, L.ro, m[at:at+rows*L.ro]), blas.NewGeneral(L.ro, rows, mT))
}

func (s *netPass) output(w *engineWorker, key bool, hd, l int, pre, mT []float32) {
	s.apply(w, key, hd, l, pre, mT)
}

// backward keeps dM of the block's rows for backwardEnd.
func (s *netPass) backward(_ *engineWorker, key bool, hd, l int, _ bool, dmT, _ []float32) {
	L := &s.e.L
	lo, rows := L.plan.span(l)
	side := 0
	if key {
		side = 1
	}
	dm := s.dms[side][(hd*L.n+lo)*L.ro : (hd*L.n+lo+rows)*L.ro]
	if dmT == nil {
		clear(dm)
	} else {
		blas.Copy(blas.Trans, blas.NewGeneral(L.ro, rows, dmT), blas.NewGeneral(rows, L.ro, dm))
	}
}

// rows returns side's input (q for 0, k for 1) and its gradient, and the
// first row and count of chunk c.
func (s *netPass) rows(side, c int) (x, dx []float32, lo, rows int) {
	L := &s.e.L
	x, dx = s.e.q, s.e.dq
	if side == 1 {
		x, dx = s.e.k, s.e.dk
	}
	lo = c * L.chunk
	return x, dx, lo, min(L.chunk, L.bh*L.n-lo)
}

// forwardItem computes M of chunk i (q chunks, then k chunks) into s.ms.
func (s *netPass) forwardItem(w *engineWorker, i int) {
	L := &s.e.L
	side := i / L.chunks
	x, _, lo, rows := s.rows(side, i%L.chunks)
	s.net.forward(blas.NewGeneral(rows, L.h, x[lo*L.h:]), L.chunk, w.sks.buf, s.kept(side, lo, false), false, s.ms[side][lo*L.ro:(lo+rows)*L.ro])
}

// kept returns where the networks keep a2 and y for rows from lo of side
// (q for 0, k for 1): nothing with Remat.
func (s *netPass) kept(side, lo int, load bool) kept {
	if s.keep[side] == nil {
		return kept{}
	}
	return kept{buf: s.keep[side], n: s.e.L.bh * s.e.L.n, lo: lo, r: s.net.r, load: load}
}

// backwardItem runs the networks backward over the chunks of group g,
// from the gradients in s.dms, into dq, dk and the group's partial
// parameter gradients.
func (s *netPass) backwardItem(w *engineWorker, g int) {
	L := &s.e.L
	net := s.net
	grads := s.pgrad[g*net.size : (g+1)*net.size]
	clear(grads)
	// dq, dk hold the diagonal blocks' exact terms unless those are sketched.
	acc := L.causal && !L.sketched && L.mode != modeCumSum
	for i := g; i < 2*L.chunks; i += L.groups {
		side := i / L.chunks
		x, dx, lo, rows := s.rows(side, i%L.chunks)
		xv, dxv := blas.NewGeneral(rows, L.h, x[lo*L.h:]), blas.NewGeneral(rows, L.h, dx[lo*L.h:])
		k := s.kept(side, lo, true)
		net.forward(xv, L.chunk, w.sks.buf, k, true, nil)
		net.backward(dxv, acc, xv, L.chunk, w.sks.buf, k, s.dms[side][lo*L.ro:], grads)
	}
}

// reduceItem adds the partial sums of segment i to the parameter
// gradients, in group order.
func (s *netPass) reduceItem(_ *engineWorker, i int) {
	net := s.net
	sg := net.segs[i]
	dst := net.params[sg.p].Grad.Data[sg.lo:sg.hi]
	vec.AddRows(dst, s.pgrad[sg.off+sg.lo:], net.size, s.e.L.groups)
}
