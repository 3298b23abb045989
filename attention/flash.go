package attention

import (
	"math"

	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// flashAttn is FlashAttention-2 on the CPU: softmax(QKᵀ/√h)·V computed
// tile by tile (--block queries × --block keys; the default
// 256 measured fastest) with an online softmax, a running maximum and sum
// per query row, so that the N×N score matrix never exists. It keeps a
// copy of the output and one logsumexp per row for the backward pass,
// which recomputes each score tile: memory is O(N·h) per head plus a few
// tiles per thread. Causal attention skips the tiles above the diagonal
// and masks inside the diagonal ones.
//
// It computes what softmaxAttn computes, to float32 rounding, and is the
// quadratic baseline to use at every length: the speed claims of the
// project are made against it.
type flashAttn struct {
	*tiled
}

func newFlash(o kernelOptions) Mechanism {
	return flashAttn{newTiled("flash", o.Causal, o.Block, softmaxWeighting{})}
}

func (a flashAttn) Kind() Kind                             { return Flash }
func (a flashAttn) Forward(o, q, k, v *tensor.Tensor)      { a.forward(o, q, k, v) }
func (a flashAttn) Backward(dq, dk, dv, do *tensor.Tensor) { a.backward(dq, dk, dv, do) }

// Workspace counts the saved output, two floats per row (logsumexp and
// dO·O), the partial dQ of the backward pass when B·H is small, and the
// tile buffers of each thread.
func (a flashAttn) Workspace(B, H, N, h int) int64 { return a.workspace(B, H, N, h) }

// softmaxWeighting is the online softmax of FlashAttention-2. In the
// forward pass sc.m and sc.l are the running maximum and sum of each row;
// the per-row statistic kept for backward is L = m + log l, so that the
// weights are P = exp(S − L).
type softmaxWeighting struct{}

var negInf = float32(math.Inf(-1))

func (softmaxWeighting) scoreScale(h int) float32 { return float32(1 / math.Sqrt(float64(h))) }
func (softmaxWeighting) gradScale(h int) float32  { return float32(1 / math.Sqrt(float64(h))) }
func (softmaxWeighting) scaledUpstream() bool     { return false }
func (softmaxWeighting) spare() bool              { return false }

func (softmaxWeighting) forwardStart(sc *scratch, rows int) {
	for r := 0; r < rows; r++ {
		sc.m[r], sc.l[r] = negInf, 0
	}
}

// forwardTile replaces the scores by exp(S − m) with m the new running
// maximum of each row, rescaling the row's sum and partial output by
// exp(m_old − m) when the maximum grows.
func (softmaxWeighting) forwardTile(sc *scratch, t tile, o []float32, h int) {
	s := sc.s[:t.rows*t.cols]
	for r := 0; r < t.rows; r++ {
		row := s[r*t.cols : (r+1)*t.cols]
		n := t.span(r)
		if n == 0 {
			continue // cleared by t.exp
		}
		onlineShift(row[:n], sc.ones, vec.Max(row[:n]), &sc.m[r], &sc.l[r], o[r*h:(r+1)*h])
	}
	t.exp(s)
	for r := 0; r < t.rows; r++ {
		sc.l[r] += vec.Sum(s[r*t.cols : r*t.cols+t.span(r)])
	}
}

// onlineShift is the step of an online softmax for a row of scores whose
// maximum is mx: when mx exceeds the row's running maximum *m, its running
// sum *l and partial output o are rescaled by exp(m − mx) and *m becomes
// mx; then the row is shifted by −*m, so that its exponentials are its
// weights relative to *m. HyperAttention's merge takes the same step.
func onlineShift(row, ones []float32, mx float32, m, l *float32, o []float32) {
	if mx > *m {
		if old := *m; old != negInf {
			c := float32(math.Exp(float64(old - mx)))
			*l *= c
			vec.Scale(c, o)
		}
		*m = mx
	}
	vec.Axpy(-*m, ones[:len(row)], row)
}

func (softmaxWeighting) forwardEnd(sc *scratch, rows int, o, stat []float32, h int) {
	for r := 0; r < rows; r++ {
		vec.Scale(1/sc.l[r], o[r*h:(r+1)*h])
		stat[r] = sc.m[r] + float32(math.Log(float64(sc.l[r])))
	}
}

// backwardRows computes D_i = dO_i·O_i.
func (softmaxWeighting) backwardRows(do, o, _, delta, _ []float32, h int) {
	for i := range delta {
		delta[i] = vec.Dot(do[i*h:(i+1)*h], o[i*h:(i+1)*h])
	}
}

// backwardWeights recomputes P = exp(S − L).
func (softmaxWeighting) backwardWeights(sc *scratch, t tile, stat []float32) {
	s := sc.s[:t.rows*t.cols]
	for r := 0; r < t.rows; r++ {
		n := t.span(r)
		vec.Axpy(-stat[r], sc.ones[:n], s[r*t.cols:r*t.cols+n])
	}
	t.exp(s)
}

// backwardScores computes dS = P∘(dP − D).
func (softmaxWeighting) backwardScores(sc *scratch, t tile, delta []float32) {
	dp := sc.dp[:t.rows*t.cols]
	for r := 0; r < t.rows; r++ {
		vec.Axpy(-delta[r], sc.ones[:t.cols], dp[r*t.cols:(r+1)*t.cols])
	}
	vec.Mul(dp, dp, sc.s[:t.rows*t.cols])
}

// FlashConfig configures FlashAttention.
type FlashConfig struct {
	Block int `json:"block" help:"tile size: queries × keys per tile"`
}

func (FlashConfig) Mechanism() string { return string(Flash) }
func (c FlashConfig) Validate() error { return checkBlock(c.Block) }

func init() {
	Register(Entry{
		Name: string(Flash), Order: 20, Cost: "O(N²·h) time, O(N·h) memory",
		Summary:    "softmax attention tile by tile with an online softmax (FlashAttention-2)",
		Properties: Properties{ContextLimit: true},
		Default:    func() Config { return FlashConfig{Block: 256} },
		New: func(c Config, s Setup) (Mechanism, error) {
			return newFlash(kernelOptions{Causal: s.Causal, Block: c.(FlashConfig).Block}), nil
		},
	})
}
