package model

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
)

// tiny returns a small model configuration with the attention of spec
// (see attention.ParseSpec): d = 16, 2 heads of 8, 2 layers, and, unless
// spec says otherwise, blocks of 4 and a sketch of only 8 columns, so
// that sketched and exact weights differ visibly.
func tiny(spec string) Config {
	return Config{
		Vocab: 11, Dim: 16, Layers: 2, Heads: 2, Context: 40, Hidden: 24,
		Attention: small(spec, 4), Tied: true, Seed: 5,
	}
}

// small returns the attention config of spec with blocks (or tiles) of
// block rows and sketches of 8 columns, unless spec sets them.
func small(spec string, block int) attention.Config {
	name, opts, _ := strings.Cut(spec, ":")
	cfg, err := attention.DefaultConfig(name)
	if err != nil {
		panic(err)
	}
	for _, o := range []string{"block=" + strconv.Itoa(block), "sketch-size=8"} {
		k, v, _ := strings.Cut(o, "=")
		if c, err := attention.Set(cfg, k, v); err == nil {
			cfg = c
		}
	}
	if cfg, err = attention.SetSpec(cfg, opts); err != nil {
		panic(err)
	}
	return cfg
}

// with returns cfg with f applied to its attention config, which must be
// of type T.
func with[T attention.Config](cfg Config, f func(*T)) Config {
	a := cfg.Attention.(T)
	f(&a)
	cfg.Attention = a
	return cfg
}

// testCases are the model variants the tests run: every mechanism, and
// the polysketch options that change the computation.
func testCases() []struct {
	name string
	cfg  Config
} {
	untied := func(c Config) Config { c.Tied = false; return c }
	cases := []struct {
		name string
		cfg  Config
	}{
		{"softmax/untied", untied(tiny("softmax"))},
		{"polynomial/p2/untied", untied(tiny("polynomial:degree=2"))},
		{"polysketch/sketched", tiny("polysketch:local=false")},
		{"polysketch/srht/remat", tiny("polysketch:sketch=srht:remat")},
		{"polysketch/b5/untied", untied(tiny("polysketch:block=5"))},
		{"polysketch/learned", tiny("polysketch:learned")},
		{"polysketch/student", tiny("polysketch:learned:raw-qk:scale:local-softmax:mix")},
	}
	for _, name := range attention.Names() { // every mechanism with its defaults
		cases = append(cases, struct {
			name string
			cfg  Config
		}{name, tiny(name)})
	}
	for _, a := range architectures() {
		cases = append(cases, a)
	}
	return cases
}

// architectures are the model families that imported checkpoints have,
// small: Llama (RMSNorm, SwiGLU, grouped-query attention, rotary
// embeddings alone at another base, with Llama 3's scaling, untied),
// Qwen2 (q, k, v biases, a head size other than dim/heads, tied), GPT-2
// (LayerNorm, GELU MLP, biases everywhere, learned positions, tied), and
// grouped-query attention with linear mechanisms.
func architectures() []struct {
	name string
	cfg  Config
} {
	llama := func(spec string) Config {
		c := tiny(spec)
		c.Heads, c.KVHeads, c.Tied = 4, 2, false
		c.Positions, c.Norm, c.NormEps, c.FFN = PositionsRoPEOnly, NormRMS, 1e-6, FFNSwiGLU
		c.NoHeadBias, c.EmbedScale = true, 1
		c.RoPETheta = 500000
		c.RoPEScaling = RoPEScaling{Type: ScalingLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 16}
		return c
	}
	qwen := llama("softmax")
	qwen.HeadDim, qwen.QKVBias, qwen.Tied, qwen.RoPEScaling = 6, true, true, RoPEScaling{}
	gpt := tiny("softmax")
	gpt.Positions, gpt.FFN, gpt.QKVBias, gpt.OutBias, gpt.FFNBias = PositionsLearned, FFNGELU, true, true, true
	gpt.NoHeadBias, gpt.EmbedScale = true, 1
	linear := llama("flash")
	linear.RoPEScaling = RoPEScaling{Type: ScalingLinear, Factor: 4}
	return []struct {
		name string
		cfg  Config
	}{
		{"llama", llama("softmax")},
		{"qwen2", qwen},
		{"gpt2", gpt},
		{"llama/linear-scaling/flash", linear},
		{"llama/polysketch", llama("polysketch:learned")},
		{"llama/elu", llama("elu")},
	}
}

func mustNew(t testing.TB, c Config) *Model {
	t.Helper()
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// randomTokens returns n ids in [0, vocab).
func randomTokens(rng *rand.Rand, n, vocab int) []int32 {
	ts := make([]int32, n)
	for i := range ts {
		ts[i] = int32(rng.IntN(vocab))
	}
	return ts
}

// perturb moves every parameter off its initial value, so that LayerNorm
// gains of exactly 1 and zero biases cannot hide a wrong gradient.
func perturb(m *Model, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, p := range m.Params() {
		s := 0.2
		if p.Decay { // weight matrices: relative to their scale
			s = 0.2 * rms(p.Value.Data)
		}
		for i := range p.Value.Data {
			p.Value.Data[i] += float32(rng.NormFloat64() * s)
		}
	}
}

func rms(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s / float64(max(len(x), 1)))
}

// probe is a set of coordinates of one parameter to check, with a label.
type probe struct {
	label string
	p     *nn.Param
	n     int // elements
	lo    int // if cols > 0: only columns [lo, lo+cols) of each row of row elements
	cols  int
	row   int
}

// TestGradients compares Backward with central finite differences of Loss
// for coordinates of every parameter: embedding (and output projection),
// each LayerNorm, the q, k and v columns of the projection separately, the
// output projection, the GLU, and the q/k LayerNorm of polynomial models.
func TestGradients(t *testing.T) {
	for _, c := range testCases() {
		t.Run(c.name, func(t *testing.T) { checkModelGradients(t, c.cfg) })
	}
}

// checkModelGradients compares Backward with central finite differences
// of Loss for a sample of every parameter of a model of configuration cfg.
func checkModelGradients(t *testing.T, cfg Config) {
	const B, N = 2, 13
	m := mustNew(t, cfg)
	perturb(m, 3)
	rng := rand.New(rand.NewPCG(9, 9))
	tokens := randomTokens(rng, B*N, cfg.Vocab)
	targets := randomTokens(rng, B*N, cfg.Vocab)
	targets[3] = -1 // padding is ignored
	m.Loss(tokens, targets, B, N)
	m.Backward()

	var probes []probe
	d := cfg.Dim
	for _, p := range m.Params() {
		if strings.HasSuffix(p.Name, "attn.qkv.weight") {
			for j, part := range []string{"q", "k", "v"} {
				probes = append(probes, probe{label: p.Name + "[" + part + "]", p: p, lo: j * d, cols: d, row: 3 * d, n: len(p.Value.Data)})
			}
			continue
		}
		probes = append(probes, probe{label: p.Name, p: p, n: len(p.Value.Data)})
	}
	classes := map[string]bool{}
	for _, pr := range probes {
		classes[paramClass(pr.p.Name)] = true
		checkProbe(t, m, pr, tokens, targets, B, N, rng)
	}
	want := []string{"embed", "ln1", "qkv", "out", "ln2", "ffn.in", "ffn.out", "norm"}
	if !cfg.NoHeadBias {
		want = append(want, "head.bias")
	}
	if cfg.Properties().NormalizeQK {
		want = append(want, "qknorm")
	}
	if !cfg.Tied {
		want = append(want, "head.weight")
	}
	if cfg.Positions == PositionsLearned {
		want = append(want, "pos")
	}
	for _, w := range want {
		if !classes[w] {
			t.Errorf("no parameter of class %q was checked", w)
		}
	}
}

// paramClass names the kind of a parameter: "qkv" for
// "layers.1.attn.qkv.weight".
func paramClass(name string) string {
	for _, c := range []string{"ffn.in", "ffn.out", "ln1", "qkv", "qknorm", "out", "ln2", "head.bias", "head.weight", "embed", "pos"} {
		if strings.Contains(name, "."+c+".") || strings.HasPrefix(name, c+".") || strings.HasPrefix(name, c) {
			return c
		}
	}
	if strings.HasPrefix(name, "norm.") {
		return "norm"
	}
	return name
}

// checkProbe compares the gradient of 4 random coordinates of pr with the
// derivative of the loss by Ridders' method, requiring
// |analytic − numeric| ≤ 0.02·(|numeric| + RMS of the parameter's
// gradient) + the method's own error estimate.
//
// The loss is float32 arithmetic, rough at the scale of its rounding, and
// along some coordinates strongly curved (degree-4 attention weights), so
// no single step suits every coordinate: small gradients drown in rounding
// at small steps, curved coordinates need them. Ridders' method
// extrapolates central differences at shrinking steps (Richardson) and
// stops where rounding starts to dominate.
func checkProbe(t *testing.T, m *Model, pr probe, tokens, targets []int32, B, N int, rng *rand.Rand) {
	t.Helper()
	const tol, probes = 2e-2, 4
	g := pr.p.Grad.Data
	scale := rms(g)
	if scale == 0 {
		t.Errorf("%s: gradient is all zero", pr.label)
		return
	}
	for range probes {
		i := rng.IntN(pr.n)
		if pr.cols > 0 {
			row := rng.IntN(pr.n / pr.row)
			i = row*pr.row + pr.lo + rng.IntN(pr.cols)
		}
		x := pr.p.Value.Data
		orig := x[i]
		numeric, errEst := ridders(func(d float64) float64 {
			x[i] = orig + float32(d)
			return m.Loss(tokens, targets, B, N)
		}, 1.6e-2)
		x[i] = orig
		analytic := float64(g[i])
		if math.Abs(analytic-numeric) > tol*(math.Abs(numeric)+scale)+errEst {
			t.Errorf("%s[%d]: gradient %.6g, finite difference %.6g ± %.2g (gradient RMS %.3g)", pr.label, i, analytic, numeric, errEst, scale)
		}
	}
}

// ridders returns the derivative of f at 0 and an estimate of its error by
// Ridders' method (Numerical Recipes, dfridr): central differences at steps
// h, h/1.4, h/1.4², …, extrapolated to step 0 in a Neville tableau, keeping
// the extrapolation with the smallest error estimate and stopping once the
// tableau's diagonal grows worse.
func ridders(f func(float64) float64, h float64) (deriv, errEst float64) {
	const con, n = 1.4, 16
	var a [n][n]float64
	a[0][0] = (f(h) - f(-h)) / (2 * h)
	errEst = math.Inf(1)
	for i := 1; i < n; i++ {
		h /= con
		a[0][i] = (f(h) - f(-h)) / (2 * h)
		fac := con * con
		for j := 1; j <= i; j++ {
			a[j][i] = (a[j-1][i]*fac - a[j-1][i-1]) / (fac - 1)
			fac *= con * con
			e := math.Max(math.Abs(a[j][i]-a[j-1][i]), math.Abs(a[j][i]-a[j-1][i-1]))
			if e <= errEst {
				errEst, deriv = e, a[j][i]
			}
		}
		if math.Abs(a[i][i]-a[i-1][i-1]) >= 2*errEst {
			break
		}
	}
	return deriv, errEst
}

// TestBackwardAccumulates checks that gradients of two Loss/Backward pairs
// add up, and that Backward without Loss panics.
func TestBackwardAccumulates(t *testing.T) {
	const B, N = 2, 7
	m := mustNew(t, tiny("polysketch"))
	rng := rand.New(rand.NewPCG(1, 1))
	tokens, targets := randomTokens(rng, B*N, 11), randomTokens(rng, B*N, 11)
	m.Loss(tokens, targets, B, N)
	m.Backward()
	once := make([][]float32, len(m.Params()))
	for i, p := range m.Params() {
		once[i] = append([]float32(nil), p.Grad.Data...)
	}
	m.Loss(tokens, targets, B, N)
	m.Backward()
	for i, p := range m.Params() {
		for j, g := range p.Grad.Data {
			if w := 2 * once[i][j]; math.Abs(float64(g-w)) > 1e-5*(math.Abs(float64(w))+rms(once[i])) {
				t.Fatalf("%s[%d]: after two backward passes %v, want twice %v", p.Name, j, g, once[i][j])
			}
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("second Backward after one Loss did not panic")
		}
	}()
	m.Backward()
}

// TestCausal changes the tokens after position cut and requires the
// logits at positions ≤ cut to stay bit-identical (and some after it to
// change).
func TestCausal(t *testing.T) {
	const B, N = 2, 13
	for _, c := range testCases() {
		t.Run(c.name, func(t *testing.T) {
			m := mustNew(t, c.cfg)
			rng := rand.New(rand.NewPCG(2, 2))
			tokens := randomTokens(rng, B*N, c.cfg.Vocab)
			base := m.Forward(tokens, B, N).Clone()
			V := c.cfg.Vocab
			for _, cut := range []int{0, 3, 4, 7, 11} {
				changed := append([]int32(nil), tokens...)
				for b := range B {
					for n := cut + 1; n < N; n++ {
						changed[b*N+n] = int32((int(changed[b*N+n]) + 1 + rng.IntN(V-1)) % V)
					}
				}
				got := m.Forward(changed, B, N)
				after := false
				for b := range B {
					for n := range N {
						for v := range V {
							i := (b*N+n)*V + v
							if n <= cut && got.Data[i] != base.Data[i] {
								t.Fatalf("cut %d: logit %d at position %d of sequence %d changed: %v → %v", cut, v, n, b, base.Data[i], got.Data[i])
							}
							after = after || (n > cut && got.Data[i] != base.Data[i])
						}
					}
				}
				if !after {
					t.Fatalf("cut %d: changing later tokens changed nothing", cut)
				}
			}
		})
	}
}

// TestDeterminism requires Loss and every gradient to be bitwise identical
// for every GOMAXPROCS of parallel.TestThreads, on a model large enough for the parallel
// paths (row splits, head splits, GEMM tiles) to engage.
func TestDeterminism(t *testing.T) {
	const B, N = 4, 64
	for _, spec := range append([]string{"polysketch:learned"}, attention.Names()...) {
		t.Run(spec, func(t *testing.T) {
			c := Config{Vocab: 256, Dim: 64, Layers: 2, Heads: 4, Context: N, Attention: small(spec, 16), Seed: 3}
			rng := rand.New(rand.NewPCG(4, 4))
			tokens, targets := randomTokens(rng, B*N, c.Vocab), randomTokens(rng, B*N, c.Vocab)
			run := func(procs int) (float64, [][]float32) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				m := mustNew(t, c)
				loss := m.Loss(tokens, targets, B, N)
				m.Backward()
				var grads [][]float32
				for _, p := range m.Params() {
					grads = append(grads, p.Grad.Data)
				}
				return loss, grads
			}
			loss1, grads1 := run(1)
			for _, procs := range parallel.TestThreads[1:] {
				loss, grads := run(procs)
				if loss != loss1 {
					t.Fatalf("GOMAXPROCS=%d: loss %v, with 1 thread %v", procs, loss, loss1)
				}
				for i := range grads {
					for j := range grads[i] {
						if grads[i][j] != grads1[i][j] {
							t.Fatalf("GOMAXPROCS=%d: gradient %d element %d is %v, with 1 thread %v", procs, i, j, grads[i][j], grads1[i][j])
						}
					}
				}
			}
		})
	}
}

func TestParams(t *testing.T) {
	for _, c := range testCases() {
		m := mustNew(t, c.cfg)
		seen := map[string]bool{}
		seenPtr := map[*nn.Param]bool{}
		total := 0
		for _, p := range m.Params() {
			if p.Name == "" || seen[p.Name] {
				t.Errorf("%s: parameter name %q empty or repeated", c.name, p.Name)
			}
			if seenPtr[p] {
				t.Errorf("%s: parameter %q listed twice", c.name, p.Name)
			}
			seen[p.Name], seenPtr[p] = true, true
			if !tensor.SameShape(p.Value, p.Grad) {
				t.Errorf("%s: %s value %v, gradient %v", c.name, p.Name, p.Value.Shape, p.Grad.Shape)
			}
			total += p.Value.Len()
		}
		cfg := c.cfg
		d, V, hid, h := cfg.Dim, cfg.Vocab, cfg.HiddenSize(), cfg.HeadSize()
		H, G := cfg.Heads, cfg.KVHeadCount()
		norm := 2 * d // gain and bias
		if cfg.Norm == NormRMS {
			norm = d
		}
		ffn := 2*d*hid + hid*d // GLU: gate and value, then out
		if cfg.FFN == FFNGELU {
			ffn = d*hid + hid*d
		}
		perLayer := 2*norm + d*(H+2*G)*h + H*h*d + ffn
		if cfg.QKVBias {
			perLayer += (H + 2*G) * h
		}
		if cfg.OutBias {
			perLayer += d
		}
		if cfg.FFNBias {
			perLayer += ffn/d - hid + d // the in layer's outputs, then d
		}
		if cfg.Properties().NormalizeQK {
			perLayer += 2 * h
		}
		if ps, ok := cfg.Attention.(attention.PolysketchConfig); ok && ps.Learned {
			// degree 4: two networks h → 8r → r → 8r → r, with biases and two LayerNorms
			r := ps.SketchSize
			perLayer += 2 * (2*h + (h*8*r + 8*r) + 2*8*r + (8*r*r + r) + (r*8*r + 8*r) + (8*r*r + r))
		}
		if ps, ok := cfg.Attention.(attention.PolysketchConfig); ok {
			for _, on := range []bool{ps.Scale, ps.Mix} {
				if on {
					perLayer += cfg.Heads // one per head
				}
			}
		}
		if sq, ok := cfg.Attention.(attention.SquareSketchConfig); ok && !sq.Frozen {
			perLayer += sq.Degree + 1 // the coefficients
		}
		if sq, ok := cfg.Attention.(attention.SquarePolynomialConfig); ok && !sq.Frozen {
			perLayer += sq.Degree + 1 // the coefficients
		}
		want := V*d + cfg.Layers*perLayer + norm
		if !cfg.NoHeadBias {
			want += V
		}
		if !cfg.Tied {
			want += d * V
		}
		if cfg.Positions == PositionsLearned {
			want += cfg.Context * d
		}
		if total != want {
			t.Errorf("%s: %d parameters, want %d", c.name, total, want)
		}
		names := []string{"embed.weight", "layers.0.attn.qkv.weight", "layers.1.ffn.out.weight", "norm.gain"}
		if !cfg.NoHeadBias {
			names = append(names, "head.bias")
		}
		for _, name := range names {
			if !seen[name] {
				t.Errorf("%s: no parameter %q", c.name, name)
			}
		}
	}
}

func TestSeed(t *testing.T) {
	c := tiny("polysketch")
	a, b := mustNew(t, c), mustNew(t, c)
	c.Seed++
	other := mustNew(t, c)
	differs := false
	for i, p := range a.Params() {
		for j, v := range p.Value.Data {
			if b.Params()[i].Value.Data[j] != v {
				t.Fatalf("same seed: %s[%d] differs", p.Name, j)
			}
			differs = differs || other.Params()[i].Value.Data[j] != v
		}
	}
	if !differs {
		t.Error("another seed gives the same weights")
	}
	// The sketches follow the seed too: same weights, other sketch seeds.
	const B, N = 1, 9
	tokens := randomTokens(rand.New(rand.NewPCG(1, 1)), B*N, c.Vocab)
	c.Seed--
	m1 := mustNew(t, c)
	la := m1.Forward(tokens, B, N).Clone()
	lb := b.Forward(tokens, B, N)
	for i := range la.Data {
		if la.Data[i] != lb.Data[i] {
			t.Fatal("same config: different logits")
		}
	}
	if layerSeed(c.Seed, 0) == layerSeed(c.Seed, 1) || layerSeed(c.Seed, 0) == layerSeed(c.Seed+1, 0) {
		t.Error("layer seeds repeat")
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, c := range []struct {
		name, want string
		f          func(c *Config)
	}{
		{"vocab", "vocab 0", func(c *Config) { c.Vocab = 0 }},
		{"dim", "dim -1", func(c *Config) { c.Dim = -1 }},
		{"layers", "layers 0", func(c *Config) { c.Layers = 0 }},
		{"context", "context 0", func(c *Config) { c.Context = 0 }},
		{"hidden", "hidden -4", func(c *Config) { c.Hidden = -4 }},
		{"heads", "heads 0", func(c *Config) { c.Heads = 0 }},
		{"divisible", "not divisible by heads 3", func(c *Config) { c.Heads = 3 }},
		{"odd head", "head size 1", func(c *Config) { c.Heads = 256 }},
		{"none", "no attention mechanism", func(c *Config) { c.Attention = nil }},
		{"degree", "degree 3", func(c *Config) { *c = with(*c, func(a *attention.PolysketchConfig) { a.Degree = 3 }) }},
		{"degree pow2", "degree 6", func(c *Config) { *c = with(*c, func(a *attention.PolysketchConfig) { a.Degree = 6 }) }},
		{"sketch size", "sketch_size 0", func(c *Config) { *c = with(*c, func(a *attention.PolysketchConfig) { a.SketchSize = 0 }) }},
		{"sketch", "sketch \"x\"", func(c *Config) { *c = with(*c, func(a *attention.PolysketchConfig) { a.Sketch = "x" }) }},
		{"block", "block 0", func(c *Config) { *c = with(*c, func(a *attention.PolysketchConfig) { a.Block = 0 }) }},
		{"flash block", "block -1", func(c *Config) { c.Attention = attention.FlashConfig{Block: -1} }},
		{"kv heads", "heads 4 is not a multiple of kv_heads 3", func(c *Config) { c.KVHeads = 3 }},
		{"head dim", "head_dim 7: odd", func(c *Config) { c.HeadDim = 7 }},
		{"norm", `norm "batch"`, func(c *Config) { c.Norm = "batch" }},
		{"norm eps", "norm_eps -1", func(c *Config) { c.NormEps = -1 }},
		{"ffn", `ffn "relu"`, func(c *Config) { c.FFN = "relu" }},
		{"embed scale", "embed_scale -1", func(c *Config) { c.EmbedScale = -1 }},
		{"rope theta", "rope_theta 1:", func(c *Config) { c.RoPETheta = 1 }},
		{"rope scaling", `rope_scaling: type "yarn"`, func(c *Config) { c.RoPEScaling = RoPEScaling{Type: "yarn", Factor: 2} }},
		{"rope scaling factor", "rope_scaling: factor 0", func(c *Config) { c.RoPEScaling = RoPEScaling{Type: ScalingLinear} }},
		{"llama3 factors", "low_freq_factor 4 and high_freq_factor 1", func(c *Config) {
			c.RoPEScaling = RoPEScaling{Type: ScalingLlama3, Factor: 8, LowFreqFactor: 4, HighFreqFactor: 1, OriginalContext: 8192}
		}},
		{"rope without rotary", "rope_theta and rope_scaling: options of rotary positions", func(c *Config) { c.Positions, c.RoPETheta = PositionsLearned, 1e4 }},
	} {
		cfg := DefaultConfig()
		c.f(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
			continue
		}
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted the config", c.name)
		}
	}
	// Several problems are all reported, one per line.
	cfg := DefaultConfig()
	cfg.Vocab, cfg.Layers = 0, 0
	if err := cfg.Validate(); err == nil || strings.Count(err.Error(), "\n") != 1 {
		t.Errorf("two problems: %q", err)
	}
}

// jsonRoundTrip requires c to come back from its JSON unchanged, and
// returns the JSON.
func jsonRoundTrip(t *testing.T, c Config) []byte {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back Config
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != c {
		t.Errorf("JSON round trip: %+v, want %+v", back, c)
	}
	return b
}

func TestConfigJSON(t *testing.T) {
	c := with(DefaultConfig(), func(a *attention.PolysketchConfig) { a.Remat = true })
	c.Tied = false
	b := jsonRoundTrip(t, c)
	for _, key := range []string{`"vocab":256`, `"sketch_size":32`, `"attention":"polysketch"`, `"sketch":"gaussian"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON %s lacks %s", b, key)
		}
	}
	// The fields of other architectures are left out where they are
	// zero, so that the configurations written before them read the same.
	for _, key := range []string{"kv_heads", "head_dim", "rope", "norm", "ffn", "bias", "embed_scale"} {
		if strings.Contains(string(b), key) {
			t.Errorf("JSON %s of the default architecture has %s", b, key)
		}
	}
	for _, a := range architectures() {
		b := jsonRoundTrip(t, a.cfg)
		if a.name == "llama" {
			for _, key := range []string{`"kv_heads":2`, `"rope_theta":500000`, `"rope_scaling":{"type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_context":16}`, `"norm":"rmsnorm"`, `"ffn":"swiglu"`, `"no_head_bias":true`, `"embed_scale":1`} {
				if !strings.Contains(string(b), key) {
					t.Errorf("JSON %s lacks %s", b, key)
				}
			}
		}
	}
	var back Config
	if err := json.Unmarshal([]byte(`{"vocab":8,"dim":8,"layers":1,"heads":2,"context":8,"hidden":0,"attention":"softmax","tied":true,"seed":1,"rope_scaling":{"type":"linear","factor":2,"beta":3}}`), &back); err == nil {
		t.Error("an unknown field of rope_scaling was accepted")
	}
}

// TestHeads checks that toHeads and fromHeads are inverse permutations,
// hence each other's adjoint (the backward passes of one another).
func TestHeads(t *testing.T) {
	const B, H, N, h = 2, 3, 5, 4
	const ld, col = 3 * H * h, H * h
	rng := rand.New(rand.NewPCG(1, 1))
	rows := make([]float32, B*N*ld)
	for i := range rows {
		rows[i] = float32(rng.NormFloat64())
	}
	heads := make([]float32, B*H*N*h)
	view := blas.General{Rows: B * N, Cols: H * h, Stride: ld, Data: rows[col:]}
	toHeads(tensor.From(heads, B, H, N, h), view)
	// Element (b, i, n, j) comes from row b·N+n, column col + i·h + j.
	for _, e := range [][4]int{{0, 0, 0, 0}, {1, 2, 4, 3}, {1, 0, 3, 1}} {
		b, i, n, j := e[0], e[1], e[2], e[3]
		if got, want := heads[((b*H+i)*N+n)*h+j], rows[(b*N+n)*ld+col+i*h+j]; got != want {
			t.Errorf("heads%v = %v, want %v", e, got, want)
		}
	}
	back := make([]float32, len(rows))
	fromHeads(blas.General{Rows: B * N, Cols: H * h, Stride: ld, Data: back[col:]}, tensor.From(heads, B, H, N, h))
	for r := 0; r < B*N; r++ {
		for c := 0; c < ld; c++ {
			want := float32(0)
			if c >= col && c < col+H*h {
				want = rows[r*ld+c]
			}
			if back[r*ld+c] != want {
				t.Fatalf("fromHeads(toHeads) at row %d column %d: %v, want %v", r, c, back[r*ld+c], want)
			}
		}
	}
}

// TestForwardStepAllocs checks that a training step of a repeated shape
// allocates only goroutine bookkeeping: a few small objects per layer, no
// buffers.
func TestForwardStepAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	const B, N = 2, 13
	m := mustNew(t, tiny("polysketch"))
	rng := rand.New(rand.NewPCG(1, 1))
	tokens, targets := randomTokens(rng, B*N, 11), randomTokens(rng, B*N, 11)
	step := func() { m.Loss(tokens, targets, B, N); m.Backward() }
	step()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 5
	for range runs {
		step()
	}
	runtime.ReadMemStats(&after)
	if bytes := (after.TotalAlloc - before.TotalAlloc) / runs; bytes > 16<<10 {
		t.Errorf("a training step allocates %d bytes", bytes)
	}
}

// An untrained model must predict close to the uniform distribution: its
// loss starts near ln(Vocab), not far above it (as it did when the tied
// output projection rewarded repeating the current token with a logit of
// about √d).
func TestInitialLossNearUniform(t *testing.T) {
	for _, tied := range []bool{true, false} {
		cfg := DefaultConfig()
		cfg.Tied = tied
		cfg.Layers = 2
		cfg.Context = 64
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		const B, N = 2, 64
		tokens := make([]int32, B*N)
		targets := make([]int32, B*N)
		for i := range tokens {
			tokens[i] = int32(rng.IntN(cfg.Vocab))
			targets[i] = int32(rng.IntN(cfg.Vocab))
		}
		uniform := math.Log(float64(cfg.Vocab))
		// Logits of variance σ² cost about σ²/2 above uniform; unit
		// variance (the untied head's N(0, 1/d) init) is expected.
		if loss := m.Loss(tokens, targets, B, N); math.Abs(loss-uniform) > 1 {
			t.Errorf("tied=%v: initial loss %.3f, want within 1 of ln(%d) = %.3f", tied, loss, cfg.Vocab, uniform)
		}
	}
}

// TestGroupedHeads checks toHeads and fromHeads of grouped-query
// attention: each key/value head repeated for its group of query heads,
// and fromHeads its adjoint, ⟨toHeads(r), x⟩ = ⟨r, fromHeads(x)⟩, which
// makes it toHeads' backward pass.
func TestGroupedHeads(t *testing.T) {
	const B, H, G, N, h = 2, 6, 2, 3, 4
	const ld, col = 5 * G * h, 3 * h // a view inside wider rows
	rng := rand.New(rand.NewPCG(2, 2))
	r := make([]float32, B*N*ld)
	x := make([]float32, B*H*N*h)
	for i := range r {
		r[i] = float32(rng.IntN(9) - 4)
	}
	for i := range x {
		x[i] = float32(rng.IntN(9) - 4)
	}
	view := func(data []float32) blas.General {
		return blas.General{Rows: B * N, Cols: G * h, Stride: ld, Data: data[col:]}
	}
	heads := tensor.New(B, H, N, h)
	toHeads(heads, view(r))
	for _, e := range [][4]int{{0, 0, 0, 0}, {0, 2, 1, 3}, {1, 3, 2, 1}, {1, 5, 0, 2}} {
		b, i, n, j := e[0], e[1], e[2], e[3]
		if got, want := heads.Data[((b*H+i)*N+n)*h+j], r[(b*N+n)*ld+col+i/(H/G)*h+j]; got != want {
			t.Errorf("heads%v = %v, want key/value head %d's %v", e, got, i/(H/G), want)
		}
	}
	back := make([]float32, len(r))
	fromHeads(view(back), tensor.From(x, B, H, N, h))
	var lhs, rhs float64 // small integers: both sums are exact
	for i := range x {
		lhs += float64(heads.Data[i]) * float64(x[i])
	}
	for i := range r {
		rhs += float64(r[i]) * float64(back[i])
	}
	if lhs != rhs {
		t.Errorf("⟨toHeads(r), x⟩ = %v, ⟨r, fromHeads(x)⟩ = %v", lhs, rhs)
	}
}

// TestNewEmpty: NewEmpty builds the parameters of New, without drawing
// them: weights zero, gains one.
func TestNewEmpty(t *testing.T) {
	for _, a := range architectures() {
		m, e := mustNew(t, a.cfg), func() *Model {
			e, err := NewEmpty(a.cfg)
			if err != nil {
				t.Fatal(err)
			}
			return e
		}()
		if len(m.Params()) != len(e.Params()) {
			t.Fatalf("%s: %d parameters, New has %d", a.name, len(e.Params()), len(m.Params()))
		}
		for i, p := range e.Params() {
			q := m.Params()[i]
			if p.Name != q.Name || !tensor.SameShape(p.Value, q.Value) {
				t.Errorf("%s: parameter %s %v, New's %s %v", a.name, p.Name, p.Value.Shape, q.Name, q.Value.Shape)
			}
			if strings.Contains(p.Name, ".attn.sketch.") {
				continue // attention's own draws
			}
			want := float32(0)
			if strings.HasSuffix(p.Name, ".gain") {
				want = 1
			}
			for _, v := range p.Value.Data {
				if v != want {
					t.Errorf("%s: %s holds %g, want %g", a.name, p.Name, v, want)
					break
				}
			}
		}
	}
}
