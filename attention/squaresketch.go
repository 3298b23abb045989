package attention

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/internal/field"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// SquareSketch is the linear-time form of learnable squared polynomial
// attention (thesis §4.3): the weights f(q,k) = (Σ_{i=0..p} a_i (q·k)^i)²
// with learned coefficients a_i, approximated as (ψ_Q(q)·ψ_K(k))², where
//
//	ψ_Q(x) = [a_0, a_1·M_1(x), …, a_p·M_p(x)],  ψ_K(y) = [1, M_1(y), …, M_p(y)],
//
// and M_i is a random sketch of degree i with r columns, the same for q
// and k: column c is ∏_{t=1..i} (g_{i,t,c}·x) / √r for independent
// Gaussian vectors g, so that E[M_i(x)·M_i(y)] = (x·y)^i. The square is
// a self-tensoring of ψ (featuremap.go), so every weight is ≥ 0 however
// the coefficients are signed, and the engine runs it in O(N) with
// (1+p·r)(2+p·r)/2 features per row; inside the diagonal blocks the
// weights are lt((ψ_Q(Q_l)·ψ_K(K_l)ᵀ)²) without forming features. As the
// thesis and the exact form (sqpoly) have it, o_i = Σ_j w_ij v_j / Σ_j w_ij.
//
// The coefficients are a parameter ("coefficients", [p+1], lowest degree
// first) shared by the heads of a layer, initialized from U(−50, 50) as
// the thesis found best, or all ones (its §5.2), or given explicitly;
// frozen, they are fixed and no parameter, as for sqpoly. The random
// vectors are drawn from the layer's seed ("g<i>.<t>", [h, r]: the
// g_{i,t,c} of degree i as columns); SketchMatrices returns them with the
// coefficients, everything another implementation needs to reproduce the
// output.
const SquareSketch Kind = "sqpolysketch"

// SquareSketchConfig configures sketched squared-polynomial attention.
type SquareSketchConfig struct {
	Degree     int    `json:"degree" help:"degree p of the inner polynomial Σ a_i (q·k)^i, squared: 1 to 8"`
	SketchSize int    `json:"sketch_size" help:"sketch size r: columns per degree"`
	Init       string `json:"init" help:"initial coefficients: uniform (U(−50, 50)) or ones ((1+x+…+x^p)²)"`
	// Coefficients and Frozen mean what they mean for sqpoly.
	Coefficients string `json:"coefficients" help:"explicit a_0,…,a_p, lowest degree first, by commas or spaces (overrides --init; needs --degree p)"`
	Frozen       bool   `json:"frozen" help:"keep the coefficients fixed instead of training them"`
	Block        int    `json:"block" help:"rows per block of the lower-triangular multiply"`
	CumSum       bool   `json:"cumsum" help:"per-token cumulative sums instead of blocks (the slow baseline)"`
	Remat        bool   `json:"remat" help:"keep nothing per block for backward: recompute it"`
}

func (SquareSketchConfig) Mechanism() string { return string(SquareSketch) }

func (c SquareSketchConfig) Validate() error {
	errs := checkSquare(c.Degree, c.Init, c.Coefficients)
	if c.SketchSize <= 0 {
		errs = append(errs, field.Invalid("sketch_size", c.SketchSize, "must be positive (8 or 16 keep the features few)"))
	}
	errs = append(errs, checkMax("sketch_size", c.SketchSize, maxSketchSize/4))
	return errors.Join(append(errs, checkBlock(c.Block))...)
}

func init() {
	Register(Entry{
		Name: string(SquareSketch), Order: 130, Cost: "O(N·(b + p²r²)·h)",
		Summary: "learnable squared polynomial (Σ a_i (q·k)^i)², sketched per degree and self-tensored: linear time",
		Properties: Properties{
			Linear: true, NormalizeQK: true, Trainable: true, Recurrent: true,
		},
		Default: func() Config {
			return SquareSketchConfig{Degree: 2, SketchSize: 8, Init: "uniform", Block: 256}
		},
		New: func(c Config, s Setup) (Mechanism, error) {
			cfg := c.(SquareSketchConfig)
			coef, err := newCoefficients(cfg.Degree, cfg.Init, cfg.Coefficients, s.Seed)
			if err != nil {
				return nil, err
			}
			o := kernelOptions{Causal: s.Causal, Seed: s.Seed, Block: cfg.Block, CumSum: cfg.CumSum, Remat: cfg.Remat}
			var keys *degreeSketch // drawn with the queries', for the same head size
			fm := featureMap{
				project: func(h int, seed uint64) projection {
					q := newDegreeSketch(h, cfg.Degree, cfg.SketchSize, seed, coef)
					keys = &degreeSketch{h: h, p: q.p, r: q.r, w: q.w, gT: q.gT}
					if cfg.Frozen {
						return frozenSketch{q}
					}
					return q
				},
				projectKeys: func(int, uint64) projection { return keys },
				lift:        tensored{},
				one:         0, // the plain ratio of the thesis and of sqpoly
			}
			a := &squareSketchAttn{engine: newEngine(SquareSketch, o, fm)}
			if !cfg.Frozen {
				a.ps = []*nn.Param{coef}
			}
			return a, nil
		},
	})
}

// squareSketchAttn is the engine with the per-degree sketches, and the
// coefficients, which exist before the head size is known.
type squareSketchAttn struct {
	*engine
	ps []*nn.Param // {coefficients}, or none when frozen
}

// Params returns the coefficients, or nothing when they are frozen.
// Backward adds (+=) to their gradient.
func (a *squareSketchAttn) Params() []*nn.Param { return a.ps }

// frozenSketch is the queries' degreeSketch with fixed coefficients: not
// a trainedProjection, so the engine keeps no gradient for them.
type frozenSketch struct{ s *degreeSketch }

func (f frozenSketch) dims() (in, out, preW int)           { return f.s.dims() }
func (f frozenSketch) scratchSize(n int) (ab, buf int)     { return f.s.scratchSize(n) }
func (f frozenSketch) floats() int                         { return f.s.floats() }
func (f frozenSketch) matrices() map[string]*tensor.Tensor { return f.s.matrices() }
func (f frozenSketch) apply(x blas.General, pre, mT []float32, scr *sketchScratch) {
	f.s.apply(x, pre, mT, scr)
}
func (f frozenSketch) output(x blas.General, pre, mT []float32) {
	f.s.output(x, pre, mT)
}
func (f frozenSketch) backward(dx blas.General, accumulate bool, dmT, pre []float32, scr *sketchScratch) {
	f.s.frozenBackward(dx, accumulate, dmT, pre, scr)
}

// degreeSketch is the projection ψ of SquareSketch: row 0 of Mᵀ is the
// constant term, then r rows per degree i = 1…p. pre keeps every
// projection g·x ([w × n]): degree i's i·r of them from row r·i(i−1)/2.
// The queries' carries the coefficients; the keys' has coef nil and
// shares gT.
type degreeSketch struct {
	h, p, r, w int
	gT         []float32 // [w × h]: row r·i(i−1)/2 + (t−1)·r + c is g_{i,t,c}
	coef       *nn.Param
	ps         []*nn.Param // {coef}, made once: Backward allocates nothing
}

func newDegreeSketch(h, p, r int, seed uint64, coef *nn.Param) *degreeSketch {
	s := &degreeSketch{h: h, p: p, r: r, w: r * p * (p + 1) / 2, coef: coef, ps: []*nn.Param{coef}}
	s.gT = make([]float32, s.w*h)
	rng := rand.New(rand.NewPCG(seed, 0x5ca1ab1e))
	for i := range s.gT {
		s.gT[i] = float32(rng.NormFloat64())
	}
	return s
}

func (s *degreeSketch) dims() (in, out, preW int) { return s.h, 1 + s.p*s.r, s.w }
func (s *degreeSketch) scratchSize(n int) (ab, buf int) {
	return s.w * n, n
}

// floats counts the shared random vectors once, with the queries'.
func (s *degreeSketch) floats() int {
	if s.coef == nil {
		return 0
	}
	return len(s.gT)
}

func (s *degreeSketch) params() []*nn.Param { return s.ps }
func (s *degreeSketch) paramSize() int      { return s.p + 1 }

// matrices returns g<i>.<t> as [h, r] matrices (column c is g_{i,t,c})
// and, for the queries', the coefficients ("coefficients", [p+1]), all
// that another implementation needs to reproduce the output.
func (s *degreeSketch) matrices() map[string]*tensor.Tensor {
	m := map[string]*tensor.Tensor{}
	if s.coef != nil {
		m["coefficients"] = s.coef.Value
	}
	for i := 1; i <= s.p; i++ {
		for t := 1; t <= i; t++ {
			g := tensor.New(s.h, s.r)
			at := s.r*i*(i-1)/2 + (t-1)*s.r
			for c := 0; c < s.r; c++ {
				for d := 0; d < s.h; d++ {
					g.Data[d*s.r+c] = s.gT[(at+c)*s.h+d]
				}
			}
			m[fmt.Sprintf("g%d.%d", i, t)] = g
		}
	}
	return m
}

func (s *degreeSketch) apply(x blas.General, pre, mT []float32, _ *sketchScratch) {
	blas.SgemmSerial(blas.NoTrans, blas.Trans, 1, blas.NewGeneral(s.w, s.h, s.gT), x, 0, blas.NewGeneral(s.w, x.Rows, pre))
	s.output(x, pre, mT)
}

// scale returns the factor of degree i's rows: a_i/√r, or 1/√r (keys);
// degree 0: a_0 or 1.
func (s *degreeSketch) scale(i int) float32 {
	f := float32(1)
	if i > 0 {
		f = float32(1 / math.Sqrt(float64(s.r)))
	}
	if s.coef != nil {
		f *= s.coef.Value.Data[i]
	}
	return f
}

func (s *degreeSketch) output(x blas.General, pre, mT []float32) {
	r, n := s.r, x.Rows
	row0 := mT[:n]
	for j := range row0 {
		row0[j] = s.scale(0)
	}
	for i := 1; i <= s.p; i++ {
		at := r * i * (i - 1) / 2
		for c := 0; c < r; c++ {
			m := mT[(1+(i-1)*r+c)*n : (2+(i-1)*r+c)*n]
			copy(m, pre[(at+c)*n:(at+c+1)*n])
			for t := 1; t < i; t++ {
				vec.Mul(m, m, pre[(at+t*r+c)*n:(at+t*r+c+1)*n])
			}
			vec.Scale(s.scale(i), m)
		}
	}
}

// backward: with ψ_ic = s_i·∏_t P_t (P_t = g_{i,t,c}·x), dP_t = dψ_ic·s_i·
// ∏_{t'≠t} P_t', and for the queries da_i = Σ dψ_ic·ψ_ic/a_i, computed as
// Σ dψ_ic·∏_t P_t/√r (no division).
func (s *degreeSketch) backward(dx blas.General, accumulate bool, dmT, pre []float32, scr *sketchScratch) {
	s.backwardOf(dx, accumulate, dmT, pre, scr, s.coef != nil)
}

// frozenBackward is backward without the coefficients' gradient.
func (s *degreeSketch) frozenBackward(dx blas.General, accumulate bool, dmT, pre []float32, scr *sketchScratch) {
	s.backwardOf(dx, accumulate, dmT, pre, scr, false)
}

func (s *degreeSketch) backwardOf(dx blas.General, accumulate bool, dmT, pre []float32, scr *sketchScratch, train bool) {
	r, n := s.r, dx.Rows
	dp, tmp := scr.a[:s.w*n], scr.buf[:n]
	if train {
		scr.dparam[0] += vec.Sum(dmT[:n])
	}
	inv := float32(1 / math.Sqrt(float64(r)))
	for i := 1; i <= s.p; i++ {
		at := r * i * (i - 1) / 2
		si := s.scale(i)
		for c := 0; c < r; c++ {
			d := dmT[(1+(i-1)*r+c)*n : (2+(i-1)*r+c)*n]
			if train {
				copy(tmp, d)
				for t := 0; t < i; t++ {
					vec.Mul(tmp, tmp, pre[(at+t*r+c)*n:(at+t*r+c+1)*n])
				}
				scr.dparam[i] += inv * vec.Sum(tmp)
			}
			for t := 0; t < i; t++ {
				g := dp[(at+t*r+c)*n : (at+t*r+c+1)*n]
				copy(g, d)
				vec.Scale(si, g)
				for u := 0; u < i; u++ {
					if u != t {
						vec.Mul(g, g, pre[(at+u*r+c)*n:(at+u*r+c+1)*n])
					}
				}
			}
		}
	}
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	blas.SgemmSerial(blas.Trans, blas.NoTrans, 1, blas.NewGeneral(s.w, n, dp), blas.NewGeneral(s.w, s.h, s.gT), beta, dx)
}
