package attention

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// randTensor returns a tensor of the given shape with N(0, scale²) entries.
func randTensor(rng *rand.Rand, scale float64, shape ...int) *tensor.Tensor {
	t := tensor.New(shape...)
	for i := range t.Data {
		t.Data[i] = float32(rng.NormFloat64() * scale)
	}
	return t
}

// normalizeRows scales every row of x (of its last dimension) to mean 0
// and standard deviation scale, as the model's q/k LayerNorm leaves them
// (times scale).
func normalizeRows(x *tensor.Tensor, scale float64) {
	h := x.Shape[x.Dims()-1]
	for r := 0; r < len(x.Data); r += h {
		row := x.Data[r : r+h]
		var mean, sq float64
		for _, e := range row {
			mean += float64(e)
		}
		mean /= float64(h)
		for _, e := range row {
			sq += (float64(e) - mean) * (float64(e) - mean)
		}
		sd := math.Sqrt(sq / float64(h))
		for i, e := range row {
			row[i] = float32((float64(e) - mean) / sd * scale)
		}
	}
}

// mustNew builds a mechanism or fails the test.
func mustNew(t testing.TB, kind Kind, o kernelOptions) Mechanism {
	t.Helper()
	m, err := newMechanism(kind, o)
	if err != nil {
		t.Fatalf("New(%s, %+v): %v", kind, o, err)
	}
	return m
}

// forward runs m and returns a fresh output tensor.
func forward(m Mechanism, q, k, v *tensor.Tensor) *tensor.Tensor {
	o := tensor.New(q.Shape...)
	m.Forward(o, q, k, v)
	return o
}

// checkGradients compares Backward against central finite differences of
// the scalar loss L = Σ o ⊙ w for a random w. It probes `probes` random
// coordinates of each of q, k, v and requires
// |analytic − numeric| ≤ tol·(|numeric| + scale), where scale is the RMS of
// the analytic gradient, so that tiny gradients are judged by absolute error.
// Each loss is accumulated in float64; eps should be large enough that
// float32 rounding of the forward does not dominate (1e-2 for unit inputs).
func checkGradients(t *testing.T, m Mechanism, q, k, v *tensor.Tensor, eps, tol float64, probes int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	w := randTensor(rng, 1, q.Shape...)
	loss := func() float64 {
		o := forward(m, q, k, v)
		var s float64
		for i := range o.Data {
			s += float64(o.Data[i]) * float64(w.Data[i])
		}
		return s
	}
	forward(m, q, k, v)
	dq, dk, dv := tensor.New(q.Shape...), tensor.New(k.Shape...), tensor.New(v.Shape...)
	m.Backward(dq, dk, dv, w)
	for _, in := range []struct {
		name string
		x, g *tensor.Tensor
	}{{"q", q, dq}, {"k", k, dk}, {"v", v, dv}} {
		scale := rms(in.g.Data)
		for p := 0; p < probes; p++ {
			i := rng.IntN(len(in.x.Data))
			orig := in.x.Data[i]
			in.x.Data[i] = orig + float32(eps)
			up := loss()
			in.x.Data[i] = orig - float32(eps)
			down := loss()
			in.x.Data[i] = orig
			numeric := (up - down) / (2 * eps)
			analytic := float64(in.g.Data[i])
			if math.Abs(analytic-numeric) > tol*(math.Abs(numeric)+scale) {
				t.Errorf("%s: d%s[%d] = %.6g, finite difference %.6g (gradient RMS %.3g)", m.Kind(), in.name, i, analytic, numeric, scale)
			}
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

// checkCausal changes q, k and v at every position after i and requires the
// outputs at positions ≤ i to stay bit-identical, for several cut points i.
func checkCausal(t *testing.T, m Mechanism, q, k, v *tensor.Tensor) {
	t.Helper()
	B, H, N, h := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	base := forward(m, q, k, v)
	rng := rand.New(rand.NewPCG(3, 5))
	for _, cut := range []int{0, N / 3, N/2 + 1, N - 2} {
		if cut < 0 || cut >= N-1 {
			continue
		}
		q2, k2, v2 := q.Clone(), k.Clone(), v.Clone()
		for _, x := range []*tensor.Tensor{q2, k2, v2} {
			for b := 0; b < B*H; b++ {
				for i := cut + 1; i < N; i++ {
					for d := 0; d < h; d++ {
						x.Data[(b*N+i)*h+d] += float32(rng.NormFloat64())
					}
				}
			}
		}
		o := forward(m, q2, k2, v2)
		for b := 0; b < B*H; b++ {
			for i := 0; i <= cut; i++ {
				for d := 0; d < h; d++ {
					at := (b*N+i)*h + d
					if o.Data[at] != base.Data[at] {
						t.Fatalf("%s: output at position %d (batch·head %d) changed when positions > %d changed: %v → %v",
							m.Kind(), i, b, cut, base.Data[at], o.Data[at])
					}
				}
			}
		}
		// The change must be visible after the cut, or the test proves nothing.
		changed := false
		for b := 0; b < B*H && !changed; b++ {
			for d := 0; d < h; d++ {
				at := (b*N+N-1)*h + d
				if o.Data[at] != base.Data[at] {
					changed = true
					break
				}
			}
		}
		if !changed {
			t.Fatalf("%s: changing positions > %d changed nothing after them either", m.Kind(), cut)
		}
	}
}

// maxRelDiff returns max |a−b| / (max|b| + tiny).
func maxRelDiff(a, b []float32) float64 {
	var d, s float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
		s = math.Max(s, math.Abs(float64(b[i])))
	}
	return d / (s + 1e-30)
}

// checkNoAllocs requires a Forward+Backward of m on [1,2,N,h] inputs to
// allocate nothing once warmed up. Callers run it with GOMAXPROCS=1:
// starting goroutines allocates.
func checkNoAllocs(t *testing.T, m Mechanism, N, h int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(12, 13))
	q, k, v := randTensor(rng, 0.7, 1, 2, N, h), randTensor(rng, 0.7, 1, 2, N, h), randTensor(rng, 1, 1, 2, N, h)
	o, dq, dk, dv := tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...)
	step := func() {
		m.Forward(o, q, k, v)
		m.Backward(dq, dk, dv, v)
	}
	step()
	// A garbage collection empties the sync.Pools the mechanisms keep
	// buffers in, and the next step refills them: under a loaded test run
	// (packages tested in parallel) one such step was seen to count. A
	// step that allocates fails every try.
	var n float64
	for try := 0; try < 3; try++ {
		if n = testing.AllocsPerRun(3, step); n == 0 {
			return
		}
	}
	t.Errorf("%s: %v allocations per Forward+Backward after warm-up", m.Kind(), n)
}

// mustRegistered returns the named registered mechanism with its default
// configuration.
func mustRegistered(t testing.TB, name string, causal bool) Mechanism {
	t.Helper()
	cfg, err := DefaultConfig(name)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, Setup{Causal: causal, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
