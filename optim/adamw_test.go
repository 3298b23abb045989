package optim

import (
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
)

func param(name string, decay bool, values ...float32) *nn.Param {
	p := nn.NewParam(name, decay, len(values))
	copy(p.Value.Data, values)
	return p
}

func mustAdamW(t *testing.T, params []*nn.Param, c Config) *AdamW {
	t.Helper()
	o, err := NewAdamW(params, c)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestAdamWFirstStepByHand: at step 1 the bias-corrected moments are g and
// g², so the update is lr·g/(|g|+ε) ≈ lr·sign(g), plus lr·λ·w with decay.
// With lr = 0.1, λ = 0.01:
//
//	w =  1,   g =  0.5, decay:    1 − 0.1 − 0.001·1    = 0.899
//	w = −2,   g = −3,   decay:   −2 + 0.1 + 0.001·2    = −1.898
//	w =  0.5, g =  0,   decay:    0.5 − 0.001·0.5      = 0.4995
//	w =  1,   g = −1,   no decay: 1 + 0.1              = 1.1
func TestAdamWFirstStepByHand(t *testing.T) {
	w := param("w", true, 1, -2, 0.5)
	copy(w.Grad.Data, []float32{0.5, -3, 0})
	b := param("b", false, 1)
	b.Grad.Data[0] = -1
	o := mustAdamW(t, []*nn.Param{w, b}, Config{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
	o.Update(0.1)
	for _, tc := range []struct {
		got, want float32
	}{{w.Value.Data[0], 0.899}, {w.Value.Data[1], -1.898}, {w.Value.Data[2], 0.4995}, {b.Value.Data[0], 1.1}} {
		if math.Abs(float64(tc.got-tc.want)) > 1e-6 {
			t.Errorf("got %.7g, want %.7g", tc.got, tc.want)
		}
	}
	if o.Step != 1 {
		t.Errorf("Step = %d, want 1", o.Step)
	}
}

// TestAdamWSeveralSteps follows the update formulas in float64 for three
// steps with changing gradients and learning rates.
func TestAdamWSeveralSteps(t *testing.T) {
	c := Config{Beta1: 0.8, Beta2: 0.9, Eps: 1e-3, WeightDecay: 0.5}
	w0 := []float64{0.3, -1.2}
	grads := [][]float64{{1, -0.5}, {-2, 0.25}, {0.5, 4}}
	lrs := []float64{0.05, 0.1, 0.02}
	for _, decay := range []bool{true, false} {
		p := param("p", decay, float32(w0[0]), float32(w0[1]))
		o := mustAdamW(t, []*nn.Param{p}, c)
		want := append([]float64(nil), w0...)
		m, v := make([]float64, 2), make([]float64, 2)
		for s := range grads {
			for i, g := range grads[s] {
				p.Grad.Data[i] = float32(g)
				m[i] = c.Beta1*m[i] + (1-c.Beta1)*g
				v[i] = c.Beta2*v[i] + (1-c.Beta2)*g*g
				mhat := m[i] / (1 - math.Pow(c.Beta1, float64(s+1)))
				vhat := v[i] / (1 - math.Pow(c.Beta2, float64(s+1)))
				upd := mhat / (math.Sqrt(vhat) + c.Eps)
				if decay {
					upd += c.WeightDecay * want[i]
				}
				want[i] -= lrs[s] * upd
			}
			o.Update(lrs[s])
		}
		for i := range want {
			if got := float64(p.Value.Data[i]); math.Abs(got-want[i]) > 1e-6 {
				t.Errorf("decay %v: w[%d] = %.8g, want %.8g", decay, i, got, want[i])
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"beta1", func(c *Config) { c.Beta1 = 1 }},
		{"beta2", func(c *Config) { c.Beta2 = -0.1 }},
		{"eps", func(c *Config) { c.Eps = 0 }},
		{"weight decay", func(c *Config) { c.WeightDecay = math.NaN() }},
	} {
		c := DefaultConfig()
		tc.edit(&c)
		if _, err := NewAdamW(nil, c); err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s: error %v, want one naming %q", tc.name, err, tc.name)
		}
	}
	p := param("same", true, 1)
	if _, err := NewAdamW([]*nn.Param{p, param("same", false, 2)}, DefaultConfig()); err == nil {
		t.Error("repeated parameter name accepted")
	}
}

func TestStateRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	mk := func() []*nn.Param {
		a, b := nn.NewParam("a", true, 3, 4), nn.NewParam("b", false, 5)
		a.InitNormal(rand.New(rand.NewPCG(9, 9)), 1)
		return []*nn.Param{a, b}
	}
	src := mk()
	o1 := mustAdamW(t, src, DefaultConfig())
	for range 3 {
		for _, p := range src {
			for i := range p.Grad.Data {
				p.Grad.Data[i] = float32(rng.NormFloat64())
			}
		}
		o1.Update(1e-2)
	}
	// A second optimizer on copies of the parameters, restored from o1.
	dst := mk()
	for i := range dst {
		dst[i].Value.CopyFrom(src[i].Value)
	}
	o2 := mustAdamW(t, dst, DefaultConfig())
	saved := map[string]*tensor.Tensor{}
	for k, v := range o1.State() {
		saved[k] = v.Clone()
	}
	if len(saved) != 4 || saved["a.m"] == nil || saved["b.v"] == nil {
		t.Fatalf("state keys: %v", keys(saved))
	}
	if err := o2.LoadState(saved); err != nil {
		t.Fatal(err)
	}
	o2.Step = o1.Step
	for i := range src {
		for j := range src[i].Grad.Data {
			g := float32(rng.NormFloat64())
			src[i].Grad.Data[j], dst[i].Grad.Data[j] = g, g
		}
	}
	o1.Update(1e-2)
	o2.Update(1e-2)
	for i := range src {
		for j, v := range src[i].Value.Data {
			if dst[i].Value.Data[j] != v {
				t.Fatalf("%s[%d]: restored optimizer gives %g, original %g", src[i].Name, j, dst[i].Value.Data[j], v)
			}
		}
	}
}

func keys(m map[string]*tensor.Tensor) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func TestLoadStateErrors(t *testing.T) {
	p := nn.NewParam("layer.weight", true, 2, 3)
	o := mustAdamW(t, []*nn.Param{p}, DefaultConfig())
	good := func() map[string]*tensor.Tensor {
		return map[string]*tensor.Tensor{"layer.weight.m": tensor.New(2, 3), "layer.weight.v": tensor.New(2, 3)}
	}
	for _, tc := range []struct {
		name, want string
		edit       func(map[string]*tensor.Tensor)
	}{
		{"missing", `no entry "layer.weight.v"`, func(s map[string]*tensor.Tensor) { delete(s, "layer.weight.v") }},
		{"shape", `"layer.weight.m" has shape [3 2]`, func(s map[string]*tensor.Tensor) { s["layer.weight.m"] = tensor.New(3, 2) }},
		{"extra", `unknown parameters: ["other.m"]`, func(s map[string]*tensor.Tensor) { s["other.m"] = tensor.New(1) }},
		{"nan", "layer.weight.v", func(s map[string]*tensor.Tensor) { s["layer.weight.v"].Data[4] = float32(math.NaN()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			s["layer.weight.m"].Fill(3) // must not reach the optimizer on failure
			tc.edit(s)
			err := o.LoadState(s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %s", err, tc.want)
			}
			if o.State()["layer.weight.m"].Data[0] != 0 {
				t.Error("failed LoadState changed the state")
			}
		})
	}
}

// TestLeastSquaresConverges fits y = x·W* + b* with an nn.Linear layer and
// AdamW under the schedule; the mean squared error must fall a hundredfold.
func TestLeastSquaresConverges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const rows, in, out = 64, 8, 3
	truth := nn.NewLinear("truth", in, out, true, rng)
	truth.Bias.InitNormal(rng, 1)
	x := tensor.New(rows, in)
	for i := range x.Data {
		x.Data[i] = float32(rng.NormFloat64())
	}
	target := tensor.New(rows, out)
	truth.Forward(target, x)

	model := nn.NewLinear("model", in, out, true, rng)
	o := mustAdamW(t, model.Params(), Config{Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, WeightDecay: 0})
	sched := Schedule{Peak: 0.05, Min: 0.005, Warmup: 20, Total: 400}
	y, dy := tensor.New(rows, out), tensor.New(rows, out)
	mse := func() float64 {
		model.Forward(y, x)
		var s float64
		for i := range y.Data {
			d := float64(y.Data[i] - target.Data[i])
			s += d * d
			dy.Data[i] = float32(2 * d / (rows * out))
		}
		return s / (rows * out)
	}
	first := mse()
	for o.Step < sched.Total {
		ZeroGrad(model.Params())
		mse()
		model.Backward(nil, dy)
		ClipGradNorm(model.Params(), 10)
		o.Update(sched.LR(o.Step))
	}
	if last := mse(); !(last < first/100) {
		t.Errorf("mean squared error went from %.4g to %.4g, want a hundredfold drop", first, last)
	}
}

// TestUpdateDeterministic runs an update over a parameter spanning several
// chunks for every GOMAXPROCS of parallel.TestThreads.
func TestUpdateDeterministic(t *testing.T) {
	run := func(procs int) ([]float32, float64) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		rng := rand.New(rand.NewPCG(5, 6))
		p := nn.NewParam("big", true, 3*chunkLen+17)
		p.InitNormal(rng, 1)
		for i := range p.Grad.Data {
			p.Grad.Data[i] = float32(rng.NormFloat64())
		}
		o := mustAdamW(t, []*nn.Param{p}, DefaultConfig())
		norm := ClipGradNorm([]*nn.Param{p}, 1)
		o.Update(1e-3)
		return p.Value.Data, norm
	}
	v1, n1 := run(1)
	for _, procs := range parallel.TestThreads[1:] {
		v2, n2 := run(procs)
		if n1 != n2 {
			t.Errorf("gradient norm %v with one thread, %v with %d", n1, n2, procs)
		}
		for i := range v1 {
			if v1[i] != v2[i] {
				t.Fatalf("element %d: %g with one thread, %g with %d", i, v1[i], v2[i], procs)
			}
		}
	}
}
