package optim_test

import (
	"fmt"
	"log"

	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/optim"
)

// One AdamW step. At step 1 the bias-corrected moments are g and g², so
// each weight moves by about lr against the sign of its gradient; weights
// with Decay also shrink by lr·λ·w.
func ExampleAdamW() {
	w := nn.NewParam("w", true, 2)  // a weight: decayed
	b := nn.NewParam("b", false, 1) // a bias: not decayed
	copy(w.Value.Data, []float32{1, -1})
	copy(w.Grad.Data, []float32{0.3, 0.3})
	b.Grad.Data[0] = -2

	params := []*nn.Param{w, b}
	opt, err := optim.NewAdamW(params, optim.Config{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1})
	if err != nil {
		log.Fatal(err)
	}
	sched := optim.Schedule{Peak: 0.01, Min: 0, Warmup: 1, Total: 100}

	norm := optim.ClipGradNorm(params, 1)
	opt.Update(sched.LR(opt.Step))
	optim.ZeroGrad(params)

	fmt.Printf("norm before clipping %.4f\n", norm)
	fmt.Printf("w = %.4f, b = %.4f, step %d\n", w.Value.Data, b.Value.Data, opt.Step)
	// Output:
	// norm before clipping 2.0445
	// w = [0.9890 -1.0090], b = [0.0100], step 1
}
