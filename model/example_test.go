package model_test

import (
	"fmt"
	"log"

	"github.com/polysketch/polysketch/attention"

	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/optim"
)

// Train a small byte-level polysketch model on a repeated phrase, then
// generate from it token by token.
func Example() {
	cfg := model.DefaultConfig() // polysketch attention, bytes
	cfg.Dim, cfg.Layers, cfg.Heads, cfg.Context = 32, 2, 2, 32
	cfg.Attention = attention.PolysketchConfig{
		Degree: 4, SketchSize: 8, Block: 8, Local: true, Learned: true, Sketch: attention.Gaussian,
	}
	m, err := model.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	opt, err := optim.NewAdamW(m.Params(), optim.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}

	// One batch of B = 2 windows of N = 32 bytes; each target is the
	// byte after its input.
	const B, N = 2, 32
	text := []byte("the cat sat on the mat. the cat sat on the mat. the cat sat on the mat.")
	inputs, targets := make([]int32, B*N), make([]int32, B*N)
	for b := range B {
		for n := range N {
			inputs[b*N+n] = int32(text[b*5+n])
			targets[b*N+n] = int32(text[b*5+n+1])
		}
	}
	var first, loss float64
	for step := range 150 {
		loss = m.Loss(inputs, targets, B, N) // forward + mean cross-entropy
		m.Backward()                         // accumulate gradients
		opt.Update(3e-3)
		optim.ZeroGrad(m.Params())
		if step == 0 {
			first = loss
		}
	}
	fmt.Printf("loss fell below a tenth: %v\n", loss < first/10)

	// Generate greedily: run the prompt through in one Prefill, then feed
	// back the most likely next byte, one Step each.
	dec, err := m.NewDecoder(1)
	if err != nil {
		log.Fatal(err)
	}
	prompt := []byte("the cat")
	ids := make([]int32, len(prompt))
	for i, c := range prompt {
		ids[i] = int32(c)
	}
	logits, err := dec.Prefill(ids) // [1, Vocab]: the next byte's logits
	if err != nil {
		log.Fatal(err)
	}
	out := append([]byte(nil), prompt...)
	for len(out) < 20 {
		next := argmax(logits.Data)
		out = append(out, byte(next))
		if logits, err = dec.Step([]int32{next}); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("%q\n", out)
	// Output:
	// loss fell below a tenth: true
	// "the cat sat on the m"
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}
