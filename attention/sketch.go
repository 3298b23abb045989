package attention

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// A sketch is the degree-d polynomial sketch M of Algorithm 1 of
// PolySketchFormer (POLYSKETCHWITHNEGATIVITY), for d = p/2 a power of two:
// M(x) ∈ R^r with E[M(x)·M(y)] = (x·y)^d. Degree 1 is the identity,
// M(x) = x, with r = h columns.
//
// The recursion of Algorithm 1 is stored level by level. Level 1 holds the
// d projections [h,r] of the input (all of x, so one GEMM applies them);
// level j > 1 holds d/2^(j-1) projections [r,r], projection e applied to
// the e-th output of level j-1. The outputs P of a level combine in pairs:
// M_i = (P_2i ∗ P_2i+1)/√r, and the single M of the top level is the
// sketch. Every projection is a Gaussian matrix, or with SRHT the matrix
// D·H·P of a TensorSRHT: random signs D, the Walsh–Hadamard matrix H
// (entries ±1, on the input padded to a power of two) and r sampled
// coordinates P. Either way E[(x·g)(y·g)] = x·y for each column g, so one
// scaling by √(1/r) per level keeps the sketch unbiased.
//
// The sketch works on blocks of rows in transposed layout: the outputs of
// every projection of a block of n rows (kept for the backward pass, "pre")
// form a [preW × n] matrix, and M a [out × n] matrix, so that the
// elementwise work runs along rows of length n.
//
// A learned sketch (kind learnedSketch, Algorithm 2; see sketch_learned.go)
// has networks net instead of levels and keeps nothing in pre (preW = 0):
// apply runs the networks on its rows, for the decoder; polysketch runs
// them on all rows at once and never calls output or backward.
type sketch struct {
	kind   SketchKind
	degree int // d = p/2
	in, r  int // input dimension h and sketch size r
	out    int // columns of M: r, or h when d = 1
	preW   int // rows of pre: Σ over levels of projections·r
	scale  float32
	levels []sketchLevel
	names  []string // every projection's name in the order Algorithm 1 samples it
	net    *learned // the networks of a learned sketch; nil for random ones
}

// A sketchLevel is one depth of the recursion of Algorithm 1.
type sketchLevel struct {
	in  int       // input dimension of each projection: h at level 1, r above
	n   int       // number of projections
	off int       // first row of this level's outputs in pre
	gT  []float32 // [n·r × in]: row e·r+c is column c of projection e
	// SRHT only: the TensorSRHT factors of each projection.
	pad   int       // in rounded up to a power of two
	signs []float32 // [n × pad], ±1
	idx   []int     // [n × r], sampled coordinates in [0, pad)
	names []string
}

// newSketch draws the sketch of degree d (a power of two) for inputs of
// dimension in and sketch size r from seed. The matrices are drawn in the
// order Algorithm 1 samples them, so the same seed always gives the same
// sketch for the same shape.
func newSketch(kind SketchKind, d, in, r int, seed uint64) *sketch {
	if d < 1 || d&(d-1) != 0 {
		panic(fmt.Sprintf("attention: sketch degree %d is not a power of two", d))
	}
	s := &sketch{kind: kind, degree: d, in: in, r: r, out: r, scale: float32(1 / math.Sqrt(float64(r)))}
	if d == 1 {
		s.out, s.r = in, in
		return s
	}
	if kind == learnedSketch {
		s.net = newLearned(d, in, r, seed)
		return s
	}
	depth := bits.TrailingZeros(uint(d))
	s.levels = make([]sketchLevel, depth)
	for j := range s.levels {
		lv := &s.levels[j]
		lv.in = r
		if j == 0 {
			lv.in = in
		}
		lv.n = d >> j
		lv.off = s.preW
		s.preW += lv.n * r
		lv.gT = make([]float32, lv.n*r*lv.in)
		lv.names = make([]string, lv.n)
		if kind == SRHT {
			lv.pad = 1 << bits.Len(uint(lv.in-1))
			lv.signs = make([]float32, lv.n*lv.pad)
			lv.idx = make([]int, lv.n*r)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	next := make([]int, depth) // projections placed so far, per level
	var build func(d int)
	build = func(d int) {
		if d == 1 {
			return
		}
		build(d / 2)
		build(d / 2)
		j := bits.TrailingZeros(uint(d)) - 1
		for range 2 {
			s.draw(rng, j, next[j])
			next[j]++
		}
	}
	build(d)
	return s
}

// draw samples projection e of level j and names it g1, g2, … in sampling
// order.
func (s *sketch) draw(rng *rand.Rand, j, e int) {
	lv := &s.levels[j]
	name := fmt.Sprintf("g%d", len(s.names)+1)
	s.names = append(s.names, name)
	lv.names[e] = name
	r, in := s.r, lv.in
	g := lv.gT[e*r*in : (e+1)*r*in]
	if s.kind == Gaussian {
		// Drawn as the [in, r] matrix in row-major order, stored transposed.
		for t := 0; t < in; t++ {
			for c := 0; c < r; c++ {
				g[c*in+t] = float32(rng.NormFloat64())
			}
		}
		return
	}
	signs := lv.signs[e*lv.pad : (e+1)*lv.pad]
	for t := range signs {
		signs[t] = float32(1 - 2*int(rng.Uint64()&1))
	}
	idx := lv.idx[e*r : (e+1)*r]
	for c := range idx {
		idx[c] = rng.IntN(lv.pad)
	}
	// The dense equivalent: g[t,c] = sign_t · H[t, idx_c].
	for c := 0; c < r; c++ {
		for t := 0; t < in; t++ {
			h := float32(1 - 2*(bits.OnesCount(uint(t&idx[c]))&1))
			g[c*in+t] = signs[t] * h
		}
	}
}

// matrices returns every projection as a dense [in, r] matrix by name; the
// SRHT ones materialized, so that M(x) can be reproduced by plain products.
// A learned sketch has none: nil.
func (s *sketch) matrices() map[string]*tensor.Tensor {
	if s.net != nil {
		return nil
	}
	m := make(map[string]*tensor.Tensor, len(s.names))
	for j := range s.levels {
		lv := &s.levels[j]
		for e, name := range lv.names {
			t := tensor.New(lv.in, s.r)
			g := lv.gT[e*s.r*lv.in:]
			for i := 0; i < lv.in; i++ {
				for c := 0; c < s.r; c++ {
					t.Data[i*s.r+c] = g[c*lv.in+i]
				}
			}
			m[name] = t
		}
	}
	return m
}

// sketchScratch is the working memory of apply and backward for blocks of
// up to n rows.
type sketchScratch struct {
	dparam []float32 // a trainedProjection's parameter gradient of the rows (see featuremap.go)
	a, b   []float32 // ping-pong buffers for intermediate levels
	buf    []float32 // SRHT: [pad × n]
}

// scratchSize returns the sizes of the buffers of a sketchScratch for
// blocks of n rows. A learned sketch needs only buf, the activations of
// chunks of up to netChunk rows.
func (s *sketch) scratchSize(n int) (ab, buf int) {
	if s.net != nil {
		return 0, s.net.perRow * max(1, min(n, netChunk))
	}
	ab = s.degree * s.r * n
	for j := range s.levels {
		buf = max(buf, s.levels[j].pad*n)
	}
	return ab, buf
}

func (s *sketch) newScratch(n int) sketchScratch {
	ab, buf := s.scratchSize(n)
	return sketchScratch{a: make([]float32, ab), b: make([]float32, ab), buf: make([]float32, buf)}
}

// apply computes M for the n rows of x ([n × in]): the output of every
// projection into pre ([preW × n]) and Mᵀ into mT ([out × n]).
func (s *sketch) apply(x blas.General, pre, mT []float32, scr *sketchScratch) {
	if s.net != nil {
		s.net.apply(x, mT, scr)
		return
	}
	n := x.Rows
	if s.degree == 1 {
		blas.Copy(blas.Trans, x, blas.NewGeneral(s.in, n, mT))
		return
	}
	r := s.r
	in := scr.a
	for j := range s.levels {
		lv := &s.levels[j]
		p := pre[lv.off*n : (lv.off+lv.n*r)*n]
		switch {
		case s.kind == SRHT:
			for e := 0; e < lv.n; e++ {
				// buf = (D_e·input)ᵀ, zero-padded to a power of two.
				buf, signs := scr.buf[:lv.pad*n], lv.signs[e*lv.pad:(e+1)*lv.pad]
				for t := 0; t < lv.in; t++ {
					row, sg := buf[t*n:(t+1)*n], signs[t]
					if j == 0 {
						for i := range row {
							row[i] = sg * x.Data[i*x.Stride+t]
						}
					} else {
						copy(row, in[(e*r+t)*n:(e*r+t+1)*n])
						vec.Scale(sg, row)
					}
				}
				clear(buf[lv.in*n:])
				fwht(buf, lv.pad, n)
				for c, t := range lv.idx[e*r : (e+1)*r] {
					copy(p[(e*r+c)*n:(e*r+c+1)*n], buf[t*n:(t+1)*n])
				}
			}
		case j == 0:
			// Pᵀ = Gᵀ·xᵀ for all level-1 projections at once.
			blockGemm(blockSketch, blas.NoTrans, blas.Trans, 1, blas.NewGeneral(lv.n*r, lv.in, lv.gT), x, 0, blas.NewGeneral(lv.n*r, n, p))
		default:
			for e := 0; e < lv.n; e++ {
				blockGemm(blockSketch, blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(r, r, lv.gT[e*r*r:]), blas.NewGeneral(r, n, in[e*r*n:]), 0, blas.NewGeneral(r, n, p[e*r*n:]))
			}
		}
		dst := mT
		if j < len(s.levels)-1 {
			dst = scr.b
		}
		s.combine(dst, p, lv.n, n)
		scr.a, scr.b = scr.b, scr.a
		in = scr.a
	}
}

// output recomputes Mᵀ from the kept pre of apply (or from x at degree 1),
// bitwise equal to what apply produced.
func (s *sketch) output(x blas.General, pre, mT []float32) {
	if s.net != nil {
		panic("attention: sketch.output of a learned sketch (the engine reads M from netPass)")
	}
	n := x.Rows
	if s.degree == 1 {
		blas.Copy(blas.Trans, x, blas.NewGeneral(s.in, n, mT))
		return
	}
	top := &s.levels[len(s.levels)-1]
	s.combine(mT, pre[top.off*n:(top.off+2*s.r)*n], 2, n)
}

// combine computes M_i = (P_2i ∗ P_2i+1)·scale for the np outputs in p.
func (s *sketch) combine(dst, p []float32, np, n int) {
	w := s.r * n
	for i := 0; i < np/2; i++ {
		d := dst[i*w : (i+1)*w]
		vec.Mul(d, p[2*i*w:(2*i+1)*w], p[(2*i+1)*w:(2*i+2)*w])
		vec.Scale(s.scale, d)
	}
}

// backward computes dx ([n × in]) from dmT = dMᵀ and the pre of apply;
// with accumulate it adds to dx instead of overwriting.
func (s *sketch) backward(dx blas.General, accumulate bool, dmT, pre []float32, scr *sketchScratch) {
	if s.net != nil {
		panic("attention: sketch.backward of a learned sketch (the engine runs netPass.backwardEnd)")
	}
	n := dx.Rows
	if s.degree == 1 {
		transposeAdd(dx, blas.NewGeneral(s.in, n, dmT), accumulate)
		return
	}
	r, w := s.r, s.r*n
	// d holds the gradient of the current level's outputs; dm that of its inputs.
	top := len(s.levels) - 1
	d := scr.a[:2*w]
	s.uncombine(d, dmT, pre[s.levels[top].off*n:], 2, n)
	for j := top; j >= 0; j-- {
		lv := &s.levels[j]
		if j == 0 {
			if s.kind == Gaussian {
				beta := float32(0)
				if accumulate {
					beta = 1
				}
				// dx = dP·G, with dPᵀ stored: dx = (dPᵀ)ᵀ·(Gᵀ).
				blockGemm(blockSketch, blas.Trans, blas.NoTrans, 1, blas.NewGeneral(lv.n*r, n, d), blas.NewGeneral(lv.n*r, lv.in, lv.gT), beta, dx)
				return
			}
			for e := 0; e < lv.n; e++ {
				g, signs := s.srhtInputGrad(lv, e, d, n, scr.buf), lv.signs[e*lv.pad:]
				for t := 0; t < lv.in; t++ {
					row, sg := g[t*n:(t+1)*n], signs[t]
					if e == 0 && !accumulate {
						for i, v := range row {
							dx.Data[i*dx.Stride+t] = sg * v
						}
					} else {
						for i, v := range row {
							dx.Data[i*dx.Stride+t] += sg * v
						}
					}
				}
			}
			return
		}
		// Gradient of level j's inputs, the outputs of level j-1.
		dm := scr.b[:lv.n*w]
		if s.kind == Gaussian {
			for e := 0; e < lv.n; e++ {
				blockGemm(blockSketch, blas.Trans, blas.NoTrans, 1, blas.NewGeneral(r, r, lv.gT[e*r*r:]), blas.NewGeneral(r, n, d[e*w:]), 0, blas.NewGeneral(r, n, dm[e*w:]))
			}
		} else {
			for e := 0; e < lv.n; e++ {
				g, signs := s.srhtInputGrad(lv, e, d, n, scr.buf), lv.signs[e*lv.pad:]
				for t := 0; t < lv.in; t++ {
					row := dm[(e*r+t)*n : (e*r+t+1)*n]
					copy(row, g[t*n:(t+1)*n])
					vec.Scale(signs[t], row)
				}
			}
		}
		below := &s.levels[j-1]
		nd := scr.a[:below.n*w]
		s.uncombine(nd, dm, pre[below.off*n:], below.n, n)
		d = nd
	}
}

// srhtInputGrad returns, in buf ([pad × n]), the gradient of the signed,
// padded input of SRHT projection e of lv (H·P transposed applied to the
// gradient d of the level's outputs); the caller multiplies by the signs.
func (s *sketch) srhtInputGrad(lv *sketchLevel, e int, d []float32, n int, buf []float32) []float32 {
	r := s.r
	buf = buf[:lv.pad*n]
	clear(buf)
	for c, t := range lv.idx[e*r : (e+1)*r] {
		vec.Add(buf[t*n:(t+1)*n], buf[t*n:(t+1)*n], d[(e*r+c)*n:(e*r+c+1)*n])
	}
	fwht(buf, lv.pad, n) // H is symmetric
	return buf
}

// uncombine computes the gradients of the np outputs p of a level from the
// gradient dm of their pairwise products M_i = (P_2i ∗ P_2i+1)·scale.
func (s *sketch) uncombine(dp, dm, p []float32, np, n int) {
	w := s.r * n
	for i := 0; i < np/2; i++ {
		g := dm[i*w : (i+1)*w]
		a, b := p[2*i*w:(2*i+1)*w], p[(2*i+1)*w:(2*i+2)*w]
		da, db := dp[2*i*w:(2*i+1)*w], dp[(2*i+1)*w:(2*i+2)*w]
		vec.Mul(da, g, b)
		vec.Scale(s.scale, da)
		vec.Mul(db, g, a)
		vec.Scale(s.scale, db)
	}
}

// fwht applies the (unnormalized) Walsh–Hadamard transform of order pad to
// the columns of buf, a [pad × n] matrix: row operations of length n.
func fwht(buf []float32, pad, n int) {
	for h := 1; h < pad; h *= 2 {
		for i := 0; i < pad; i += 2 * h {
			for j := i; j < i+h; j++ {
				x, y := buf[j*n:(j+1)*n], buf[(j+h)*n:(j+h+1)*n]
				y = y[:len(x)]
				for t, a := range x {
					b := y[t]
					x[t], y[t] = a+b, a-b
				}
			}
		}
	}
}

// transposeAdd writes (or with accumulate adds) srcᵀ into dst: src is
// c×n, dst n×c.
func transposeAdd(dst, src blas.General, accumulate bool) {
	n, c := dst.Rows, dst.Cols
	if src.Rows != c || src.Cols != n {
		panic(fmt.Sprintf("attention: transposeAdd into a %d×%d matrix from a %d×%d one", n, c, src.Rows, src.Cols))
	}
	if !accumulate {
		blas.Copy(blas.Trans, src, dst)
		return
	}
	sd, ss := src.Data, src.Stride
	for i := 0; i < n; i++ {
		row := dst.Data[i*dst.Stride : i*dst.Stride+c]
		for t := range row {
			row[t] += sd[t*ss+i]
		}
	}
}

// Self-tensoring. φ(x) = M(x)^⊗2 has only r(r+1)/2 distinct entries; the
// symmetric features [M_c² ; √2·M_c·M_d for c < d] have the same dot
// products, φ(x)·φ(y) = (M(x)·M(y))², with half the dimension. Row f of
// the [F × n] feature matrix Φᵀ is M_c∗M_d (times √2 off the diagonal),
// (c,d) running over c ≤ d in row-major order of the upper triangle.

// featureDim is the number of symmetric features of an r-dimensional sketch.
func featureDim(r int) int { return r * (r + 1) / 2 }

// selfTensor computes Φᵀ ([F × n]) from Mᵀ ([r × n]); tilde ([r × n]) is
// scratch and receives √2·Mᵀ.
func selfTensor(phiT, mT, tilde []float32, r, n int) {
	copy(tilde[:r*n], mT[:r*n])
	vec.Scale(math.Sqrt2, tilde[:r*n])
	vec.SymOuter(phiT, mT, tilde, r, n)
}

// selfTensorBackward computes dMᵀ ([r × n]) from dΦᵀ, given Mᵀ and
// tilde = √2·Mᵀ as selfTensor left it. With accumulate it adds to dmT.
// For c < d, φ_cd = M_c·√2M_d gives dM_c += √2M_d ∗ dφ_cd and dM_d +=
// √2M_c ∗ dφ_cd; φ_cc = M_c² gives dM_c += 2M_c ∗ dφ_cc.
func selfTensorBackward(dmT, dphiT, mT, tilde []float32, r, n int, accumulate bool) {
	if !accumulate {
		clear(dmT[:r*n])
	}
	vec.SymOuterBackward(dmT, dphiT, mT, tilde, r, n)
}

// dims returns the input size, the output size and the rows of pre: a
// sketch is the projection of polysketch's feature map.
func (s *sketch) dims() (in, out, preW int) { return s.in, s.out, s.preW }

// floats is the memory of the sketch's matrices, or of a learned sketch's
// parameters, their gradients and the transposed weights of its networks.
func (s *sketch) floats() int {
	n := 0
	for _, lv := range s.levels {
		n += len(lv.gT) + len(lv.signs) + 2*len(lv.idx) // int is two floats
	}
	if s.net != nil {
		n += 2*s.net.size + s.net.transposedSize()
	}
	return n
}
