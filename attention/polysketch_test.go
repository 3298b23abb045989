package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
)

// refSketch evaluates M(x) in float64 literally as Algorithm 1
// (POLYSKETCHWITHNEGATIVITY) does, taking the matrices g1, g2, … of
// SketchMatrices in the order the recursion samples them.
func refSketch(x []float64, d int, mats map[string]*tensor.Tensor, next *int) []float64 {
	if d == 1 {
		return x
	}
	m1 := refSketch(x, d/2, mats, next)
	m2 := refSketch(x, d/2, mats, next)
	g1 := mats[fmt.Sprintf("g%d", *next+1)]
	g2 := mats[fmt.Sprintf("g%d", *next+2)]
	*next += 2
	r := g1.Shape[1]
	out := make([]float64, r)
	for c := 0; c < r; c++ {
		var a, b float64
		for t := range m1 {
			a += m1[t] * float64(g1.Data[t*r+c])
			b += m2[t] * float64(g2.Data[t*r+c])
		}
		out[c] = a * b / math.Sqrt(float64(r))
	}
	return out
}

// refPolysketch evaluates PolySketch attention in float64 from its
// definition (see refSketched) with the random sketch M of Algorithm 1
// rebuilt from the mechanism's own matrices.
func refPolysketch(q, k, v *tensor.Tensor, o kernelOptions, mats map[string]*tensor.Tensor, tn refTune) []float64 {
	return refSketched(q, k, v, o, func(x []float64) []float64 {
		next := 0
		return refSketch(x, o.Degree/2, mats, &next)
	}, tn)
}

// psCase is one configuration of the polysketch tests.
type psCase struct {
	name          string
	causal, local bool
	degree, r, b  int
	sketch        SketchKind
	cumsum, remat bool
}

func (c psCase) options() kernelOptions {
	return kernelOptions{Causal: c.causal, Degree: c.degree, SketchSize: c.r, Block: c.b, Local: c.local,
		Sketch: c.sketch, CumSum: c.cumsum, Remat: c.remat, Seed: 42}
}

// psCases covers every variant: local exact or sketched diagonal blocks,
// Gaussian and SRHT sketches, degrees 2, 4 and 8, causal or not, Remat,
// CumSum.
var psCases = []psCase{
	{name: "local/p4", causal: true, local: true, degree: 4, r: 6, b: 4, sketch: Gaussian},
	{name: "local/p4/remat", causal: true, local: true, degree: 4, r: 6, b: 4, sketch: Gaussian, remat: true},
	{name: "sketched/p4", causal: true, degree: 4, r: 6, b: 4, sketch: Gaussian},
	{name: "sketched/p4/remat", causal: true, degree: 4, r: 6, b: 4, sketch: Gaussian, remat: true},
	{name: "local/p2", causal: true, local: true, degree: 2, r: 6, b: 4, sketch: Gaussian},
	{name: "sketched/p2", causal: true, degree: 2, r: 6, b: 4, sketch: Gaussian},
	{name: "local/p8", causal: true, local: true, degree: 8, r: 5, b: 4, sketch: Gaussian},
	{name: "sketched/p8/remat", causal: true, degree: 8, r: 5, b: 4, sketch: Gaussian, remat: true},
	{name: "sketched/p16", causal: true, degree: 16, r: 4, b: 4, sketch: Gaussian},
	{name: "local/p4/srht", causal: true, local: true, degree: 4, r: 6, b: 4, sketch: SRHT},
	{name: "sketched/p8/srht", causal: true, degree: 8, r: 5, b: 4, sketch: SRHT},
	{name: "noncausal/p4", degree: 4, r: 6, b: 4, sketch: Gaussian},
	{name: "noncausal/p4/remat", degree: 4, r: 6, b: 4, sketch: Gaussian, remat: true},
	{name: "noncausal/p8/srht", degree: 8, r: 5, b: 4, sketch: SRHT},
	{name: "cumsum/p4", causal: true, degree: 4, r: 6, b: 4, sketch: Gaussian, cumsum: true},
	{name: "cumsum/p8/srht", causal: true, degree: 8, r: 5, b: 4, sketch: SRHT, cumsum: true},
}

func TestPolysketchMatchesReference(t *testing.T) {
	for _, c := range psCases {
		for _, n := range []int{3, 4, 11, 16} { // N < b, N = b, N not a multiple of b, many blocks
			t.Run(fmt.Sprintf("%s/N=%d", c.name, n), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(1, uint64(n)))
				h := 6
				q, k, v := randTensor(rng, 0.5, 2, 2, n, h), randTensor(rng, 0.5, 2, 2, n, h), randTensor(rng, 1, 2, 2, n, h)
				m := mustNew(t, Polysketch, c.options())
				o := forward(m, q, k, v)
				want := refPolysketch(q, k, v, c.options(), m.(Sketched).SketchMatrices(), refTune{})
				var worst, scale float64
				for i := range want {
					worst = math.Max(worst, math.Abs(float64(o.Data[i])-want[i]))
					scale = math.Max(scale, math.Abs(want[i]))
				}
				if worst > 2e-5*scale {
					t.Errorf("max |o - reference| = %.3g (max |reference| %.3g)", worst, scale)
				}
			})
		}
	}
}

func TestPolysketchGradients(t *testing.T) {
	for _, c := range psCases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(2, 3))
			n, h := 11, 6
			q, k, v := randTensor(rng, 0.7, 1, 2, n, h), randTensor(rng, 0.7, 1, 2, n, h), randTensor(rng, 1, 1, 2, n, h)
			m := mustNew(t, Polysketch, c.options())
			eps := 1e-2
			if c.degree > 8 {
				eps = 3e-3 // the truncation error of the difference grows with the degree
			}
			checkGradients(t, m, q, k, v, eps, 2e-2, 30)
		})
	}
}

func TestPolysketchCausal(t *testing.T) {
	for _, c := range psCases {
		if !c.causal {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(4, 5))
			q, k, v := randTensor(rng, 0.7, 1, 2, 13, 6), randTensor(rng, 0.7, 1, 2, 13, 6), randTensor(rng, 1, 1, 2, 13, 6)
			checkCausal(t, mustNew(t, Polysketch, c.options()), q, k, v)
		})
	}
}

// gradients runs Forward and Backward with a fixed output gradient.
func gradients(m Mechanism, q, k, v *tensor.Tensor) (o, dq, dk, dv *tensor.Tensor) {
	o = forward(m, q, k, v)
	w := randTensor(rand.New(rand.NewPCG(9, 9)), 1, q.Shape...)
	dq, dk, dv = tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...)
	m.Backward(dq, dk, dv, w)
	return o, dq, dk, dv
}

func requireEqual(t *testing.T, what string, a, b *tensor.Tensor) {
	t.Helper()
	for i := range a.Data {
		if a.Data[i] != b.Data[i] {
			t.Fatalf("%s differs at %d: %v vs %v", what, i, a.Data[i], b.Data[i])
		}
	}
}

func TestPolysketchRematIdentical(t *testing.T) {
	for _, c := range psCases {
		if c.remat || c.cumsum {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(6, 7))
			q, k, v := randTensor(rng, 0.7, 2, 3, 19, 6), randTensor(rng, 0.7, 2, 3, 19, 6), randTensor(rng, 1, 2, 3, 19, 6)
			c2 := c
			c2.remat = true
			o1, dq1, dk1, dv1 := gradients(mustNew(t, Polysketch, c.options()), q, k, v)
			o2, dq2, dk2, dv2 := gradients(mustNew(t, Polysketch, c2.options()), q, k, v)
			requireEqual(t, "o", o1, o2)
			requireEqual(t, "dq", dq1, dq2)
			requireEqual(t, "dk", dk1, dk2)
			requireEqual(t, "dv", dv1, dv2)
		})
	}
}

func TestPolysketchCumSumMatchesBlocks(t *testing.T) {
	for _, deg := range []int{2, 4, 8} {
		rng := rand.New(rand.NewPCG(8, uint64(deg)))
		q, k, v := randTensor(rng, 0.6, 1, 2, 37, 8), randTensor(rng, 0.6, 1, 2, 37, 8), randTensor(rng, 1, 1, 2, 37, 8)
		c := psCase{causal: true, degree: deg, r: 6, b: 8, sketch: Gaussian}
		o1, dq1, dk1, dv1 := gradients(mustNew(t, Polysketch, c.options()), q, k, v)
		c.cumsum = true
		o2, dq2, dk2, dv2 := gradients(mustNew(t, Polysketch, c.options()), q, k, v)
		for _, x := range []struct {
			name string
			a, b *tensor.Tensor
		}{{"o", o1, o2}, {"dq", dq1, dq2}, {"dk", dk1, dk2}, {"dv", dv1, dv2}} {
			if d := maxRelDiff(x.a.Data, x.b.Data); d > 1e-4 {
				t.Errorf("degree %d: %s of blocks and CumSum differ by %.3g (relative)", deg, x.name, d)
			}
		}
	}
}

func TestPolysketchDeterministic(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range psCases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(10, 11))
			q, k, v := randTensor(rng, 0.7, 2, 3, 21, 6), randTensor(rng, 0.7, 2, 3, 21, 6), randTensor(rng, 1, 2, 3, 21, 6)
			runtime.GOMAXPROCS(1)
			o1, dq1, dk1, dv1 := gradients(mustNew(t, Polysketch, c.options()), q, k, v)
			var m Mechanism
			for _, procs := range parallel.TestThreads[1:] {
				runtime.GOMAXPROCS(procs)
				m = mustNew(t, Polysketch, c.options())
				o2, dq2, dk2, dv2 := gradients(m, q, k, v)
				requireEqual(t, fmt.Sprintf("o at GOMAXPROCS=%d", procs), o1, o2)
				requireEqual(t, fmt.Sprintf("dq at GOMAXPROCS=%d", procs), dq1, dq2)
				requireEqual(t, fmt.Sprintf("dk at GOMAXPROCS=%d", procs), dk1, dk2)
				requireEqual(t, fmt.Sprintf("dv at GOMAXPROCS=%d", procs), dv1, dv2)
			}
			// A second Backward after one Forward gives the same again.
			dq3, dk3, dv3 := tensor.New(q.Shape...), tensor.New(q.Shape...), tensor.New(q.Shape...)
			m.Backward(dq3, dk3, dv3, randTensor(rand.New(rand.NewPCG(9, 9)), 1, q.Shape...))
			requireEqual(t, "dq of a second Backward", dq1, dq3)
			requireEqual(t, "dv of a second Backward", dv1, dv3)
		})
	}
}

func TestPolysketchNoAllocs(t *testing.T) {
	if psRace {
		t.Skip("the race detector allocates")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, c := range psCases {
		t.Run(c.name, func(t *testing.T) {
			checkNoAllocs(t, mustNew(t, Polysketch, c.options()), 21, 6)
		})
	}
}

// TestPolysketchWorkspace checks that Workspace reports what Forward
// actually allocates.
func TestPolysketchWorkspace(t *testing.T) {
	for _, c := range psCases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(14, 15))
			q := randTensor(rng, 0.7, 2, 3, 21, 6)
			m := mustNew(t, Polysketch, c.options()).(*engine)
			want := m.Workspace(2, 3, 21, 6)
			forward(m, q, q, q)
			got := int64(cap(m.mem)) * 4
			for _, lv := range m.sk.levels {
				got += int64(len(lv.gT)+len(lv.signs)+2*len(lv.idx)) * 4
			}
			if got != want {
				t.Errorf("Workspace says %d bytes, Forward holds %d", want, got)
			}
		})
	}
}
