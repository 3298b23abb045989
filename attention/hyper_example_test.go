package attention_test

import (
	"fmt"
	"math"
	"sort"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/tensor"
)

// HyperAttention approximates softmax attention past min-length; its
// decoder reproduces Forward, and SketchMatrices returns every random draw
// (the LSH hyperplanes, the sampled key positions and their log-weights).
func ExampleNew_hyper() {
	cfg, err := attention.ParseSpec("hyper:block=16:samples=8:min-length=32")
	if err != nil {
		panic(err)
	}
	m, err := attention.New(cfg, attention.Setup{Causal: true, Seed: 1})
	if err != nil {
		panic(err)
	}
	const N, h = 64, 8
	q, k, v := tensor.New(1, 1, N, h), tensor.New(1, 1, N, h), tensor.New(1, 1, N, h)
	for i := range q.Data {
		q.Data[i] = float32(math.Sin(float64(i)))
		k.Data[i] = float32(math.Cos(float64(3 * i)))
		v.Data[i] = float32(i % 5)
	}
	o := tensor.New(1, 1, N, h)
	m.Forward(o, q, k, v)

	// Decode one position at a time.
	d, err := attention.NewDecoder(m, 1, 1, h)
	if err != nil {
		panic(err)
	}
	var diff float64
	step := tensor.New(1, 1, h)
	for i := range N {
		row := func(x *tensor.Tensor) *tensor.Tensor { return tensor.From(x.Data[i*h:(i+1)*h], 1, 1, h) }
		d.Step(step, row(q), row(k), row(v))
		for c := range h {
			diff = math.Max(diff, math.Abs(float64(step.Data[c]-o.Data[i*h+c])))
		}
	}
	fmt.Println("decoder reproduces Forward:", diff < 1e-5)

	draws := m.(attention.Sketched).SketchMatrices()
	names := make([]string, 0, len(draws))
	for name := range draws {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Println(name, draws[name].Shape)
	}
	// Output:
	// decoder reproduces Forward: true
	// lsh [8 7]
	// sample_logweights [1 1 4 8]
	// samples [1 1 4 8]
}
