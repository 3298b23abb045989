package attention

import (
	"errors"

	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// polynomialAttn is exact degree-p polynomial attention (PolySketchFormer,
// Sec. 2.1): o_i = Σ_j w_ij·v_j with
//
//	w_ij = (q_i·k_j)^p / (1 + Σ_j' (q_i·k_j')^p)
//
// for even p, without the 1/√h scale of softmax: the model normalizes q
// and k (LayerNorm) before attention. It runs on the tiled driver of
// flash, with the same O(N·h) memory per head (the output and one
// denominator per row) and the same parallel structure; no running
// maximum is needed because the weights are not exponentials.
//
// It is quadratic in N: the exact attention that polysketch approximates,
// for models and tests at moderate lengths; use polysketch for long ones.
type polynomialAttn struct {
	*tiled
}

func newPolynomial(o kernelOptions) Mechanism {
	return polynomialAttn{newTiled("polynomial", o.Causal, o.Block, polyWeighting{p: o.Degree})}
}

func (a polynomialAttn) Kind() Kind                             { return Polynomial }
func (a polynomialAttn) Forward(o, q, k, v *tensor.Tensor)      { a.forward(o, q, k, v) }
func (a polynomialAttn) Backward(dq, dk, dv, do *tensor.Tensor) { a.backward(dq, dk, dv, do) }

// Workspace counts the saved output, two floats per row (denominator and
// the scaled dO·O), the rescaled dO of the backward pass, the partial dQ
// when B·H is small, and the tile buffers of each thread.
func (a polynomialAttn) Workspace(B, H, N, h int) int64 { return a.workspace(B, H, N, h) }

// polyWeighting is the weight function (q·k)^p, normalized by
// D_i = 1 + Σ_j (q_i·k_j)^p, the per-row statistic kept for backward.
//
// Backward, with A = W·V and O = A/D: dW_ij = (dO_i·v_j − dO_i·O_i)/D_i
// and dS_ij = dW_ij·p·S_ij^(p−1). Working with G = dO/D (the rescaled
// upstream gradient) makes that dW = G·Vᵀ − (G_i·O_i) and dV = Wᵀ·G, with
// no per-tile row scaling.
type polyWeighting struct{ p int }

func (polyWeighting) scoreScale(int) float32  { return 1 }
func (w polyWeighting) gradScale(int) float32 { return float32(w.p) }
func (polyWeighting) scaledUpstream() bool    { return true }
func (polyWeighting) spare() bool             { return true }

func (polyWeighting) forwardStart(sc *scratch, rows int) { clear(sc.l[:rows]) }

// forwardTile raises the scores to the p-th power and adds them to the
// running row sums.
func (w polyWeighting) forwardTile(sc *scratch, t tile, _ []float32, _ int) {
	s := sc.s[:t.rows*t.cols]
	if w.p&(w.p-1) == 0 {
		for e := w.p; e > 1; e >>= 1 {
			vec.Mul(s, s, s)
		}
	} else {
		pow := sc.t[:len(s)]
		power(pow, s, w.p-1)
		vec.Mul(s, s, pow)
	}
	t.clearMasked(s)
	for r := 0; r < t.rows; r++ {
		sc.l[r] += vec.Sum(s[r*t.cols : r*t.cols+t.span(r)])
	}
}

func (polyWeighting) forwardEnd(sc *scratch, rows int, o, stat []float32, h int) {
	for r := 0; r < rows; r++ {
		d := 1 + sc.l[r]
		vec.Scale(1/d, o[r*h:(r+1)*h])
		stat[r] = d
	}
}

// backwardRows computes G_i = dO_i/D_i and delta_i = G_i·O_i.
func (polyWeighting) backwardRows(do, o, stat, delta, up []float32, h int) {
	for i := range delta {
		g := up[i*h : (i+1)*h]
		copy(g, do[i*h:(i+1)*h])
		vec.Scale(1/stat[i], g)
		delta[i] = vec.Dot(g, o[i*h:(i+1)*h])
	}
}

// backwardWeights recomputes W = S^p in sc.s and keeps S^(p−1) in sc.t.
func (w polyWeighting) backwardWeights(sc *scratch, t tile, _ []float32) {
	s, pow := sc.s[:t.rows*t.cols], sc.t[:t.rows*t.cols]
	power(pow, s, w.p-1)
	vec.Mul(s, s, pow)
	t.clearMasked(s)
	t.clearMasked(pow)
}

// backwardScores computes dS = (dP − delta)∘S^(p−1); the factor p is the
// gradient scale of the products that follow.
func (polyWeighting) backwardScores(sc *scratch, t tile, delta []float32) {
	dp := sc.dp[:t.rows*t.cols]
	for r := 0; r < t.rows; r++ {
		vec.Axpy(-delta[r], sc.ones[:t.cols], dp[r*t.cols:(r+1)*t.cols])
	}
	vec.Mul(dp, dp, sc.t[:t.rows*t.cols])
}

// power sets dst = x^e elementwise (e ≥ 1), by left-to-right binary
// exponentiation: a squaring per bit of e and a multiplication by x per
// set bit below the top one.
func power(dst, x []float32, e int) {
	if e == 1 {
		copy(dst, x)
		return
	}
	top := 1
	for top*2 <= e {
		top *= 2
	}
	// The top bit contributes x; the first squaring reads x directly.
	vec.Mul(dst, x, x)
	if e&(top>>1) != 0 {
		vec.Mul(dst, dst, x)
	}
	for bit := top >> 2; bit > 0; bit >>= 1 {
		vec.Mul(dst, dst, dst)
		if e&bit != 0 {
			vec.Mul(dst, dst, x)
		}
	}
}

// PolynomialConfig configures exact polynomial attention.
type PolynomialConfig struct {
	Degree int `json:"degree" help:"degree p of the weights (q·k)^p: even, ≥ 2"`
	Block  int `json:"block" help:"tile size: queries × keys per tile"`
}

func (PolynomialConfig) Mechanism() string { return string(Polynomial) }
func (c PolynomialConfig) Validate() error {
	return errors.Join(checkEvenDegree(c.Degree), checkBlock(c.Block))
}

func init() {
	Register(Entry{
		Name: string(Polynomial), Order: 30, Cost: "O(N²·h) time, O(N·h) memory",
		Summary:    "exact (q·k)^p / (1 + Σ (q·k')^p), tiled like flash",
		Properties: Properties{NormalizeQK: true, ContextLimit: true},
		Default:    func() Config { return PolynomialConfig{Degree: 4, Block: 256} },
		New: func(c Config, s Setup) (Mechanism, error) {
			pc := c.(PolynomialConfig)
			return newPolynomial(kernelOptions{Causal: s.Causal, Degree: pc.Degree, Block: pc.Block}), nil
		},
	})
}
