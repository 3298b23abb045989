package attention

import (
	"errors"
	"math"
	"math/rand/v2"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/internal/field"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// Performer is Performer's FAVOR+ attention (Choromanski et al. 2021):
// softmax attention exp(q·k/√h) approximated by positive orthogonal random
// features, on the engine (engine.go). With x' = h^(-1/4)·x and W the
// [m × h] matrix of random features (rows w_f),
//
//	φ(x) = exp(W·x' − ‖x'‖²/2),  E[φ(q)·φ(k)] = m·exp(q·k/√h),
//
// and o_i = Σ_{j≤i} w_ij v_j / Σ_{j≤i} w_ij with w_ij = φ(q_i)·φ(k_j).
// (The usual 1/√m of φ cancels in the ratio and is left out.)
//
// W stacks blocks of h orthonormal rows (Gram–Schmidt on the rows of a
// Gaussian h×h matrix, the last block cut to m rows), each row then
// rescaled by the norm of h fresh Gaussians, so that its length has the
// distribution of a Gaussian row's. The features are shared by the heads
// of a layer and drawn from the layer's seed; with Redraw = K they are
// drawn again every K optimizer steps from the seed and the step only
// (SetStep), never from the data.
//
// Stabilizing, causally. exp(W·x') overflows float32 unless shifted, and
// the public implementations shift keys by a maximum over the whole
// sequence, which lets later keys change earlier outputs. Here every
// shift uses positions ≤ i only: with b_j = W·k'_j − ‖k'_j‖²/2 and its
// maximum s_j = max_f b_jf, keys carry φ̃(k_j) = exp(b_j − s_j) ∈ (0,1]
// and the log-scale s_j, queries φ̃(q_i) = exp(a_i − max_f a_if), whose
// shift cancels in the ratio; the engine weights w_ij = φ̃(q_i)·φ̃(k_j)
// by exp(s_j − R_i), R_i = max_{j≤i} s_j the running maximum, which also
// cancels in the ratio. Block states are kept relative to their own
// maximum and rescaled when a larger one arrives, as online softmax
// does (engine_scaled.go).
//
// No eps is added: public implementations add it after stabilizing,
// which makes the kernel depend on the stabilizer (and so, with their
// whole-sequence maximum, on the future). Here the ratio is exactly that
// of the features φ. Denominators are sums of positive terms, the key
// attaining R_i weighted by exp(0) = 1; they underflow only if every
// product φ̃_f(q_i)·φ̃_f(k_j) does (exponent differences beyond about 87,
// far outside what moderate ‖q'‖, ‖k'‖ give), and are then floored at
// 1e-30, making o_i = 0 rather than NaN (see denFloor).
const Performer Kind = "performer"

// PerformerConfig configures Performer attention.
type PerformerConfig struct {
	Features int  `json:"features" help:"m, random features per row (the paper's default 256; it trained with 2048)"`
	Redraw   int  `json:"redraw" help:"draw new random features every this many training steps (0: never)"`
	Block    int  `json:"block" help:"rows per block of the lower-triangular multiply"`
	CumSum   bool `json:"cumsum" help:"per-token cumulative sums instead of blocks (the slow baseline, Performer without fast LT)"`
	Remat    bool `json:"remat" help:"keep nothing per block for backward: recompute it"`
}

func (PerformerConfig) Mechanism() string { return string(Performer) }

func (c PerformerConfig) Validate() error {
	var errs []error
	if c.Features <= 0 {
		errs = append(errs, field.Invalid("features", c.Features, "must be positive (256 is the default)"))
	}
	errs = append(errs, checkMax("features", c.Features, maxFeatures))
	if c.Redraw < 0 {
		errs = append(errs, field.Invalid("redraw", c.Redraw, "must be 0 (never) or a positive number of steps"))
	}
	return errors.Join(append(errs, checkBlock(c.Block))...)
}

func init() {
	Register(Entry{
		Name: string(Performer), Order: 120, Cost: "O(N·(b + h)·m)",
		Summary:    "FAVOR+: positive orthogonal random features approximating softmax, causally stabilized by a running maximum",
		Properties: Properties{Linear: true, Recurrent: true},
		// Blocks of 128: measured 13% faster than 256 for m = 256, h = 64
		// (BenchmarkLinear); the diagonal blocks cost b·m per token.
		Default: func() Config { return PerformerConfig{Features: 256, Block: 128} },
		New: func(c Config, s Setup) (Mechanism, error) {
			cfg := c.(PerformerConfig)
			o := kernelOptions{Causal: s.Causal, Seed: s.Seed, Block: cfg.Block, CumSum: cfg.CumSum, Remat: cfg.Remat}
			p := &performerAttn{redraw: cfg.Redraw}
			p.engine = newEngine(Performer, o, featureMap{
				project: func(h int, seed uint64) projection { return newFavor(h, cfg.Features, seed, p.epoch) },
				scaled:  true,
			})
			return p, nil
		},
	})
}

// performerAttn is the engine with FAVOR+ features, and the redraw
// schedule.
type performerAttn struct {
	*engine
	redraw int // steps per draw; 0: never
	epoch  int // step / redraw: which draw is in use
}

// SetStep sets the optimizer step, drawing the features of its epoch
// (step / Redraw) if they are not those in use.
func (p *performerAttn) SetStep(step int) {
	if p.redraw <= 0 {
		return
	}
	e := max(step, 0) / p.redraw
	if e == p.epoch {
		return
	}
	p.epoch = e
	if f, ok := p.proj.(*favor); ok {
		f.draw(p.opts.Seed, e)
	}
}

// favor is the projection of Performer's features, with the positive
// exponential applied by the map itself. Per block of n rows it keeps in
// pre ([(m+h+1) × n]) the features φ̃ = exp(b − s), then x'ᵀ, then the
// log-scales s = max_f b_f of b_f = w_f·x' − ‖x'‖²/2, so that output is
// a copy and backward needs no exponential.
type favor struct {
	h, m int
	w    []float32 // [m × h], row f is w_f
}

func newFavor(h, m int, seed uint64, epoch int) *favor {
	f := &favor{h: h, m: m, w: make([]float32, m*h)}
	f.draw(seed, epoch)
	return f
}

// draw fills w from the seed and the epoch: for each block of h rows an
// h×h Gaussian matrix (row-major) whose rows Gram–Schmidt makes
// orthonormal in order, the last block's first rows only; then for each
// of the m rows in order, the norm of h fresh Gaussians, by which it is
// scaled.
func (f *favor) draw(seed uint64, epoch int) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15^uint64(epoch)))
	h := f.h
	g := make([]float64, h*h)
	for b := 0; b*h < f.m; b++ {
		for i := range g {
			g[i] = rng.NormFloat64()
		}
		for i := 0; i < h; i++ {
			row := g[i*h : (i+1)*h]
			for j := 0; j < i; j++ {
				prev := g[j*h : (j+1)*h]
				var d float64
				for c := range row {
					d += row[c] * prev[c]
				}
				for c := range row {
					row[c] -= d * prev[c]
				}
			}
			var n float64
			for _, x := range row {
				n += x * x
			}
			n = math.Sqrt(n)
			for c := range row {
				row[c] /= n
			}
		}
		for i := 0; i < h && b*h+i < f.m; i++ {
			for c := 0; c < h; c++ {
				f.w[(b*h+i)*h+c] = float32(g[i*h+c])
			}
		}
	}
	for r := 0; r < f.m; r++ {
		var n float64
		for range h {
			x := rng.NormFloat64()
			n += x * x
		}
		vec.Scale(float32(math.Sqrt(n)), f.w[r*h:(r+1)*h])
	}
}

func (f *favor) dims() (in, out, preW int)       { return f.h, f.m, f.m + f.h + 1 }
func (f *favor) scratchSize(n int) (ab, buf int) { return f.m * n, n }
func (f *favor) floats() int                     { return len(f.w) }

// matrices returns "w", the [m, h] random features: φ(x) = exp(w·x' − ‖x'‖²/2)
// with x' = h^(-1/4)·x.
func (f *favor) matrices() map[string]*tensor.Tensor {
	t := tensor.New(f.m, f.h)
	copy(t.Data, f.w)
	return map[string]*tensor.Tensor{"w": t}
}

// logScale returns the log-scales s of the rows whose pre is given.
func (f *favor) logScale(pre []float32, n int) []float32 {
	at := (f.m + f.h) * n
	return pre[at : at+n]
}

func (f *favor) apply(x blas.General, pre, mT []float32, scr *sketchScratch) {
	m, h, n := f.m, f.h, x.Rows
	scale := float32(math.Pow(float64(h), -0.25))
	b, xt, s := pre[:m*n], pre[m*n:(m+h)*n], pre[(m+h)*n:(m+h+1)*n]
	blas.SgemmSerial(blas.NoTrans, blas.Trans, scale, blas.NewGeneral(m, h, f.w), x, 0, blas.NewGeneral(m, n, b))
	blas.Copy(blas.Trans, x, blas.NewGeneral(h, n, xt))
	vec.Scale(scale, xt)
	half, tmp := scr.buf[:n], scr.a[:n]
	clear(half)
	for c := 0; c < h; c++ {
		r := xt[c*n : (c+1)*n]
		vec.Mul(tmp, r, r)
		vec.Add(half, half, tmp)
	}
	vec.Scale(0.5, half)
	for k := 0; k < m; k++ {
		vec.Axpy(-1, half, b[k*n:(k+1)*n])
	}
	copy(s, b[:n])
	for k := 1; k < m; k++ {
		for i, x := range b[k*n : (k+1)*n] {
			s[i] = max(s[i], x)
		}
	}
	for k := 0; k < m; k++ {
		row := b[k*n : (k+1)*n]
		vec.Axpy(-1, s, row)
		vec.Exp(row, row)
	}
	copy(mT[:m*n], b)
}

func (f *favor) output(x blas.General, pre, mT []float32) {
	copy(mT[:f.m*x.Rows], pre[:f.m*x.Rows])
}

// backward: with the shift s held fixed (it cancels in the ratio),
// db = φ̃ ∗ dφ̃, and dx = h^(-1/4)·(dbᵀ·W − x'·Σ_f db_f).
func (f *favor) backward(dx blas.General, accumulate bool, dmT, pre []float32, scr *sketchScratch) {
	m, h, n := f.m, f.h, dx.Rows
	scale := float32(math.Pow(float64(h), -0.25))
	db := scr.a[:m*n]
	vec.Mul(db, pre[:m*n], dmT[:m*n])
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	blas.SgemmSerial(blas.Trans, blas.NoTrans, scale, blas.NewGeneral(m, n, db), blas.NewGeneral(m, h, f.w), beta, dx)
	sum := scr.buf[:n]
	clear(sum)
	vec.AddRows(sum, db, n, m)
	xt := pre[m*n : (m+h)*n]
	for i, si := range sum {
		row := dx.Data[i*dx.Stride : i*dx.Stride+h]
		for c := range row {
			row[c] -= scale * si * xt[c*n+i]
		}
	}
}
