package attention

import (
	"errors"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// ELU is ELU+1 linearized attention (Katharopoulos et al. 2020, as the
// thesis defines it in §3.2-3.3): weights w_ij = φ(q_i)·φ(k_j) with
// φ(x) = elu(x)+1 entrywise (x+1 for x > 0, eˣ otherwise, always > 0) and
// the plain ratio o_i = Σ_{j≤i} w_ij v_j / Σ_{j≤i} w_ij, without the 1 that
// polysketch adds to its denominators. It runs on the engine (engine.go)
// with h features per row; the diagonal blocks are lt(φ(Q_l)·φ(K_l)ᵀ).
const ELU Kind = "elu"

// ELUConfig configures ELU+1 attention.
type ELUConfig struct {
	Block  int  `json:"block" help:"rows per block of the lower-triangular multiply"`
	CumSum bool `json:"cumsum" help:"per-token cumulative sums instead of blocks (the slow baseline)"`
	Remat  bool `json:"remat" help:"keep nothing per block for backward: recompute it"`
}

func (ELUConfig) Mechanism() string { return string(ELU) }

func (c ELUConfig) Validate() error { return errors.Join(checkBlock(c.Block)) }

func init() {
	Register(Entry{
		Name: string(ELU), Order: 110, Cost: "O(N·(b + h)·h)",
		Summary:    "linear attention with features elu(x)+1 and the plain ratio (Katharopoulos et al.; thesis §3.2)",
		Properties: Properties{Linear: true, Recurrent: true},
		// Blocks of 64: measured fastest for h = 64 (BenchmarkLinear, 10%
		// faster than 256); the diagonal blocks dominate at larger ones.
		Default: func() Config { return ELUConfig{Block: 64} },
		New: func(c Config, s Setup) (Mechanism, error) {
			cfg := c.(ELUConfig)
			o := kernelOptions{Causal: s.Causal, Seed: s.Seed, Block: cfg.Block, CumSum: cfg.CumSum, Remat: cfg.Remat}
			return newEngine(ELU, o, featureMap{project: func(h int, _ uint64) projection { return eluMap{h} }}), nil
		},
	})
}

// eluMap is the identity projection followed by the lift elu(x)+1,
// applied by the map itself. It keeps the features φ in pre: output is a
// copy, and backward needs nothing else, since dφ/dx = min(φ, 1) (φ = x+1
// > 1 for x > 0, φ = eˣ ≤ 1 otherwise).
type eluMap struct{ h int }

func (m eluMap) dims() (in, out, preW int)         { return m.h, m.h, m.h }
func (m eluMap) scratchSize(n int) (ab, buf int)   { return m.h * n, 0 }
func (eluMap) matrices() map[string]*tensor.Tensor { return nil }
func (eluMap) floats() int                         { return 0 }

// apply sets φ = x+1 for x > 0 and eˣ otherwise.
func (m eluMap) apply(x blas.General, pre, mT []float32, _ *sketchScratch) {
	n := x.Rows
	pre = pre[:m.h*n]
	blas.Copy(blas.Trans, x, blas.NewGeneral(m.h, n, mT))
	vec.Exp(pre, mT[:m.h*n]) // +Inf where x is large, replaced below
	for i, x := range mT[:m.h*n] {
		if x > 0 {
			pre[i] = x + 1
		}
	}
	copy(mT, pre)
}

func (m eluMap) output(x blas.General, pre, mT []float32) {
	copy(mT[:m.h*x.Rows], pre[:m.h*x.Rows])
}

func (m eluMap) backward(dx blas.General, accumulate bool, dmT, pre []float32, scr *sketchScratch) {
	n := dx.Rows
	d := scr.a[:m.h*n]
	for i, f := range pre[:m.h*n] {
		d[i] = dmT[i] * min(f, 1)
	}
	transposeAdd(dx, blas.NewGeneral(m.h, n, d), accumulate)
}
