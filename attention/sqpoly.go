package attention

import (
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode"

	"github.com/polysketch/polysketch/internal/field"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// SquarePolynomial is exact learnable squared polynomial attention (the
// thesis, 001 §4.3): the weights are
//
//	f(q, k) = (Σ_{i=0..p} a_i (q·k)^i)²,
//
// non-negative for any real coefficients a_0…a_p because they are a
// square, and the output is their plain ratio, as the thesis defines it:
//
//	o_i = Σ_j f(q_i, k_j)·v_j / Σ_j f(q_i, k_j).
//
// Unlike polynomial attention there is no 1 added to the denominator
// (the thesis adds one for single-term kernels only), so the weights of a
// row sum to 1; a row whose weights all vanish outputs 0. q·k is not
// scaled: the model puts a LayerNorm without a scale of its own on q and k
// (NormalizeQK), as the thesis does for its polynomial kernels (§4.1), so
// that |q·k| ≤ h.
//
// The coefficients are a parameter ("coefficients", [p+1], lowest degree
// first) shared by the heads of a layer and trained with the model,
// initialized from U(−50, 50), the thesis's best (§5.3), with the random
// stream sqpolysketch uses, so both start from the same polynomial for a
// seed; or all ones, the hand-set (1 + x + … + x^p)² of §5.2; or given
// explicitly. Frozen coefficients are fixed (the "fixed learned
// polynomial" of §5.4): the mechanism then has no parameters.
//
// With U(−50, 50) coefficients f reaches 50²·h^(2p), past float32 for
// large p, so the kernel never forms f: like online softmax it keeps, per
// query row, the running maximum M of |Σ a_i (q·k)^i| and weighs by
// (Σ a_i (q·k)^i / M)² ≤ 1, rescaling the partial sums when M grows; the
// ratio does not change. It runs on the tiled driver of flash and
// polynomial attention: quadratic time, O(N·h) memory. sqpolysketch is
// its linear-time approximation.
const SquarePolynomial Kind = "sqpoly"

// maxSquareDegree bounds p: (q·k)^p with |q·k| ≤ h = 64 stays finite in
// float32 up to p = 20; beyond 8 the thesis found nothing, and the
// coefficients' gradients span too many orders of magnitude to train.
const maxSquareDegree = 8

// SquarePolynomialConfig configures exact squared polynomial attention.
type SquarePolynomialConfig struct {
	Degree       int    `json:"degree" help:"degree p of the inner polynomial Σ a_i (q·k)^i, squared: 1 to 8"`
	Init         string `json:"init" help:"initial coefficients: uniform (U(−50, 50)) or ones ((1+x+…+x^p)²)"`
	Coefficients string `json:"coefficients" help:"explicit a_0,…,a_p, lowest degree first, by commas or spaces (overrides --init; needs --degree p)"`
	Frozen       bool   `json:"frozen" help:"keep the coefficients fixed instead of training them"`
	Block        int    `json:"block" help:"tile size: queries × keys per tile"`
}

func (SquarePolynomialConfig) Mechanism() string { return string(SquarePolynomial) }

func (c SquarePolynomialConfig) Validate() error {
	return errors.Join(append(checkSquare(c.Degree, c.Init, c.Coefficients), checkBlock(c.Block))...)
}

// checkSquare validates the options of the inner polynomial that sqpoly
// and sqpolysketch share: its degree, its initialization and its
// explicit coefficients ("" for none).
func checkSquare(degree int, init, explicit string) []error {
	var errs []error
	if degree < 1 || degree > maxSquareDegree {
		errs = append(errs, field.Invalid("degree", degree, "the inner polynomial's degree must be 1 to %d", maxSquareDegree))
	}
	if init != "uniform" && init != "ones" {
		errs = append(errs, field.Invalid("init", init, "use uniform or ones"))
	}
	if explicit != "" {
		if _, err := coefficients(explicit, max(degree, 0)); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// coefficients parses explicit coefficients and checks that there are
// degree+1 of them; a degree below 1 takes any number (its own error is
// the degree's).
func coefficients(explicit string, degree int) ([]float32, error) {
	a, err := parseCoefficients(explicit)
	if err != nil {
		return nil, err
	}
	if degree >= 1 && len(a) != degree+1 {
		return nil, field.Errorf("%s %q: %d values for %s %d; give %d values or %s %d",
			field.Name("coefficients"), explicit, len(a), field.Name("degree"), degree, degree+1, field.Name("degree"), len(a)-1)
	}
	return a, nil
}

// parseCoefficients reads "a0,a1,…": finite numbers separated by commas
// or spaces (spaces in a spec, "sqpoly:coefficients=1 1 1", whose lists
// of mechanisms commas separate).
func parseCoefficients(s string) ([]float32, error) {
	parts := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	if len(parts) == 0 {
		return nil, field.Invalid("coefficients", s, "no values; write them like 1,-0.5,2")
	}
	a := make([]float32, len(parts))
	for i, p := range parts {
		x, err := strconv.ParseFloat(strings.TrimSpace(p), 32)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, field.Invalid("coefficients", s, "value %d (%q) is not a finite number; write them like 1,-0.5,2", i+1, p)
		}
		a[i] = float32(x)
	}
	return a, nil
}

func init() {
	Register(Entry{
		Name: string(SquarePolynomial), Order: 125, Cost: "O(N²·(h+p)) time, O(N·h) memory",
		Summary: "exact learnable squared polynomial (Σ a_i (q·k)^i)², normalized by its row sum, tiled like flash",
		Properties: Properties{
			NormalizeQK: true, Trainable: true, ContextLimit: true,
		},
		Default: func() Config {
			return SquarePolynomialConfig{Degree: 3, Init: "uniform", Block: 256}
		},
		New: func(c Config, s Setup) (Mechanism, error) {
			cfg := c.(SquarePolynomialConfig)
			coef, err := newCoefficients(cfg.Degree, cfg.Init, cfg.Coefficients, s.Seed)
			if err != nil {
				return nil, err
			}
			return newSquarePolynomial(s.Causal, cfg.Block, coef, cfg.Frozen), nil
		},
	})
}

// newCoefficients makes the coefficient parameter of sqpoly and
// sqpolysketch ("coefficients", [degree+1], lowest degree first): the
// explicit values if given, else all ones, else U(−50, 50) drawn from the
// layer's seed with one stream for both, so that the exact and the
// sketched form start from the same polynomial.
func newCoefficients(degree int, init, explicit string, seed uint64) (*nn.Param, error) {
	coef := nn.NewParam("coefficients", false, degree+1)
	switch {
	case explicit != "":
		a, err := coefficients(explicit, degree)
		if err != nil {
			return nil, err
		}
		copy(coef.Value.Data, a)
	case init == "ones":
		coef.Value.Fill(1)
	default:
		rng := rand.New(rand.NewPCG(seed, 0x5eed0c0ef))
		for i := range coef.Value.Data {
			coef.Value.Data[i] = float32(100*rng.Float64() - 50)
		}
	}
	return coef, nil
}

// squarePolyAttn is the tiled driver with the squared-polynomial
// weighting and the coefficients.
type squarePolyAttn struct {
	*tiled
	coef   *nn.Param
	frozen bool
	ps     []*nn.Param // {coef}, or none when frozen; made once
	grad   []float64   // the coefficients' gradient, summed over the items
}

func newSquarePolynomial(causal bool, block int, coef *nn.Param, frozen bool) *squarePolyAttn {
	w := &squareWeighting{coef: coef}
	if !frozen {
		w.n = coef.Value.Len()
	}
	a := &squarePolyAttn{tiled: newTiled(string(SquarePolynomial), causal, block, w), coef: coef, frozen: frozen,
		grad: make([]float64, coef.Value.Len())}
	if !frozen {
		a.ps = []*nn.Param{coef}
	}
	return a
}

func (a *squarePolyAttn) Kind() Kind                        { return SquarePolynomial }
func (a *squarePolyAttn) Forward(o, q, k, v *tensor.Tensor) { a.forward(o, q, k, v) }

// Backward computes dq, dk, dv and adds (+=) the coefficients' gradient,
// unless they are frozen.
func (a *squarePolyAttn) Backward(dq, dk, dv, do *tensor.Tensor) {
	a.backward(dq, dk, dv, do)
	if a.frozen {
		return
	}
	n := len(a.grad)
	clear(a.grad)
	accs := a.accumulated()
	for i := 0; i+n <= len(accs); i += n {
		for c := range n {
			a.grad[c] += accs[i+c]
		}
	}
	for c, g := range a.grad {
		a.coef.Grad.Data[c] += float32(g)
	}
}

// Workspace counts what the tiled driver keeps (the saved output, one
// statistic and dO·O per row, the partial dQ when B·H is small, the tile
// buffers of each thread) and the per-item coefficient gradients.
func (a *squarePolyAttn) Workspace(B, H, N, h int) int64 { return a.workspace(B, H, N, h) }

// Params returns the coefficients, or nothing when they are frozen.
func (a *squarePolyAttn) Params() []*nn.Param { return a.ps }

// SketchMatrices returns the coefficients ("coefficients", [p+1], lowest
// degree first), so that other implementations can reproduce the output.
func (a *squarePolyAttn) SketchMatrices() map[string]*tensor.Tensor {
	return map[string]*tensor.Tensor{"coefficients": a.coef.Value}
}

// squareWeighting turns scores x = q·k into the weights (g(x)/M)² with
// g(x) = Σ a_i x^i and M the running maximum of |g| over the row's keys.
// The per-row statistic kept for backward is r = 1/√D, with
// D = Σ_j g(x_j)² the row's true denominator, so that the normalized
// weights are w = (g·r)², each ≤ 1, however large D is.
//
// Backward, with u = g·r and δ_i = dO_i·O_i: ∂L/∂g_ij = 2·u_ij·(dP_ij − δ_i)·r_i,
// hence dS_ij = 2·u_ij·(dP_ij − δ_i)·r_i·g'(x_ij) (the 2 is the gradient
// scale) and ∂L/∂a_c = Σ_ij 2·u_ij·(dP_ij − δ_i)·r_i·x_ij^c. The spare tile
// keeps the scores between backwardWeights and backwardScores.
type squareWeighting struct {
	coef *nn.Param // the coefficients a_0…a_p, read at every call
	n    int       // gradients accumulated per backward item: p+1, or 0 when frozen
}

// a returns the coefficients' current values.
func (w *squareWeighting) a() []float32 { return w.coef.Value.Data }

func (*squareWeighting) scoreScale(int) float32   { return 1 }
func (*squareWeighting) gradScale(int) float32    { return 2 }
func (*squareWeighting) scaledUpstream() bool     { return false }
func (*squareWeighting) spare() bool              { return true }
func (w *squareWeighting) accumulates() int       { return w.n }
func (w *squareWeighting) poly(x float32) float32 { return horner(w.a(), x) }

// horner returns Σ a_i x^i.
func horner(a []float32, x float32) float32 {
	g := a[len(a)-1]
	for i := len(a) - 2; i >= 0; i-- {
		g = g*x + a[i]
	}
	return g
}

// weighRow turns one row of scores into its normalized weights, in
// place, for the KV-cache decoder.
func (w *squareWeighting) weighRow(s []float32) {
	var mx float32
	for j, x := range s {
		s[j] = w.poly(x)
		mx = max(mx, abs32(s[j]))
	}
	if mx == 0 {
		return // every g is 0: so are the weights
	}
	inv := 1 / mx
	var sum float32
	for j, g := range s {
		u := g * inv
		s[j] = u * u
		sum += s[j]
	}
	inv = 1 / sum
	for j := range s {
		s[j] *= inv
	}
}

func (*squareWeighting) forwardStart(sc *scratch, rows int) {
	clear(sc.m[:rows])
	clear(sc.l[:rows])
}

// forwardTile evaluates g on the visible scores (into the spare tile),
// raises the rows' maxima of |g|, rescaling their partial outputs and
// sums by (M_old/M_new)², and leaves the weights (g/M)² in sc.s.
func (w *squareWeighting) forwardTile(sc *scratch, t tile, o []float32, h int) {
	for r := 0; r < t.rows; r++ {
		n := t.span(r)
		s := sc.s[r*t.cols : (r+1)*t.cols]
		if n == 0 {
			clear(s)
			continue
		}
		g := sc.t[r*t.cols : r*t.cols+n]
		hornerInto(g, s[:n], sc.ones, w.a())
		// The maximum of g² is that of |g|, in one vector pass, while g²
		// stays finite (|g| < 1.8·10^19); beyond, |g| is scanned.
		vec.Mul(s[:n], g, g)
		mx := float32(math.Sqrt(float64(vec.Max(s[:n]))))
		if math.IsInf(float64(mx), 0) {
			mx = 0
			for _, x := range g {
				mx = max(mx, abs32(x))
			}
		}
		if m := sc.m[r]; mx > m {
			if m > 0 {
				c := m / mx
				c *= c
				sc.l[r] *= c
				vec.Scale(c, o[r*h:(r+1)*h])
			}
			sc.m[r] = mx
		}
		switch m := sc.m[r]; {
		case m == 0:
			clear(s) // every weight so far is 0
			continue
		case m < 1e18:
			vec.Scale(1/(m*m), s[:n])
		default: // M² would overflow: scale g first
			vec.Scale(1/m, g)
			vec.Mul(s[:n], g, g)
		}
		clear(s[n:])
		sc.l[r] += vec.Sum(s[:n])
	}
}

// hornerInto sets dst = Σ_i a_i x^i elementwise, by Horner's rule in
// vector operations; ones holds at least len(x) ones.
func hornerInto(dst, x, ones, a []float32) {
	p := len(a) - 1
	if p == 0 {
		for i := range dst {
			dst[i] = a[0]
		}
		return
	}
	ones = ones[:len(x)]
	copy(dst, x)
	vec.Scale(a[p], dst)
	vec.Axpy(a[p-1], ones, dst)
	for i := p - 2; i >= 0; i-- {
		vec.Mul(dst, dst, x)
		vec.Axpy(a[i], ones, dst)
	}
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// forwardEnd divides the rows by their sums and keeps r = 1/(M·√l), the
// reciprocal square root of the true denominator M²·l (0 for a row
// without weight, whose output is 0).
func (*squareWeighting) forwardEnd(sc *scratch, rows int, o, stat []float32, h int) {
	for r := 0; r < rows; r++ {
		l := sc.l[r]
		if l == 0 {
			stat[r] = 0
			continue
		}
		inv := 1 / l
		row := o[r*h : (r+1)*h]
		for e := range row {
			row[e] *= inv
		}
		stat[r] = float32(1 / (float64(sc.m[r]) * math.Sqrt(float64(l))))
	}
}

// backwardRows computes δ_i = dO_i·O_i.
func (*squareWeighting) backwardRows(do, o, stat, delta, _ []float32, h int) {
	for i := range delta {
		var d float32
		for e, x := range do[i*h : (i+1)*h] {
			d += x * o[i*h+e]
		}
		delta[i] = d
	}
}

// backwardWeights keeps the scores in the spare tile and the rows' r in
// sc.m, for backwardScores, and recomputes the normalized weights (g·r)²
// in sc.s.
func (w *squareWeighting) backwardWeights(sc *scratch, t tile, stat []float32) {
	copy(sc.t[:t.rows*t.cols], sc.s[:t.rows*t.cols])
	copy(sc.m[:t.rows], stat[:t.rows])
	for r := 0; r < t.rows; r++ {
		n := t.span(r)
		s := sc.s[r*t.cols : (r+1)*t.cols]
		hornerInto(s[:n], sc.t[r*t.cols:r*t.cols+n], sc.ones, w.a())
		vec.Scale(stat[r], s[:n])
		vec.Mul(s[:n], s[:n], s[:n])
		clear(s[n:])
	}
}

// backwardScores turns dP into dS/2 = e·g'(x) with e = (g·r)·(dP − δ)·r,
// and adds the coefficients' gradient Σ 2·e·x^c to sc.acc. The weights in
// sc.s have been used: it serves as scratch for g, the powers of x and g'.
func (w *squareWeighting) backwardScores(sc *scratch, t tile, delta []float32) {
	a := w.a()
	p := len(a) - 1
	var da [maxSquareDegree]float32 // g' = Σ_i da[i] x^i
	for i := 1; i <= p; i++ {
		da[i-1] = float32(i) * a[i]
	}
	for r := 0; r < t.rows; r++ {
		n := t.span(r)
		dp := sc.dp[r*t.cols : (r+1)*t.cols]
		e, x, g := dp[:n], sc.t[r*t.cols:r*t.cols+n], sc.s[r*t.cols:r*t.cols+n]
		ri := sc.m[r]
		vec.Axpy(-delta[r], sc.ones[:n], e)
		hornerInto(g, x, sc.ones, a)
		vec.Scale(ri, g) // g·r ≤ 1 first: r² may underflow
		vec.Mul(e, e, g)
		vec.Scale(ri, e)
		clear(dp[n:])
		if len(sc.acc) > 0 {
			sc.acc[0] += 2 * float64(vec.Sum(e))
			pw := g
			copy(pw, x)
			for c := 1; c <= p; c++ {
				if c > 1 {
					vec.Mul(pw, pw, x)
				}
				sc.acc[c] += 2 * float64(vec.Dot(e, pw))
			}
		}
		hornerInto(g, x, sc.ones, da[:p])
		vec.Mul(e, e, g)
	}
}
