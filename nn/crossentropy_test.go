package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// crossEntropyCase treats the mean loss as a one-element output; backward
// scales dlogits by dy. One row is padding (target −1).
func crossEntropyCase(rng *rand.Rand, s size) *gradCase {
	vocab := s.dim + 5
	logits := randTensor(rng, 2, 2, s.rows/2, vocab)
	targets := ids(rng, s.rows, vocab)
	targets[1] = -1
	var ce CrossEntropy
	dl := tensor.New(logits.Shape...)
	c := &gradCase{
		inputs: []*tensor.Tensor{logits}, dinputs: []*tensor.Tensor{tensor.New(logits.Shape...)},
		out: tensor.New(1),
	}
	c.forward = func() {
		loss, _ := ce.Loss(dl, logits, targets)
		c.out.Data[0] = float32(loss)
	}
	c.backward = func(dy *tensor.Tensor) {
		for i, v := range dl.Data {
			c.dinputs[0].Data[i] = v * dy.Data[0]
		}
	}
	return c
}

// refCrossEntropy is the loss written directly from its definition in
// float64: mean over counted rows of log Σ exp(l) − l_t.
func refCrossEntropy(logits []float32, V int, targets []int32) float64 {
	var sum float64
	n := 0
	for r, t := range targets {
		if t < 0 {
			continue
		}
		row := logits[r*V : (r+1)*V]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, float64(v))
		}
		var s float64
		for _, v := range row {
			s += math.Exp(float64(v) - m)
		}
		sum += m + math.Log(s) - float64(row[t])
		n++
	}
	return sum / float64(n)
}

func TestCrossEntropyValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 1))
	const rows, V = 7, 9
	logits := randTensor(rng, 3, rows, V)
	targets := ids(rng, rows, V)
	targets[2], targets[5] = -1, -1
	var ce CrossEntropy
	dl := tensor.New(rows, V)
	loss, n := ce.Loss(dl, logits, targets)
	if n != rows-2 {
		t.Errorf("n = %d, want %d", n, rows-2)
	}
	if want := refCrossEntropy(logits.Data, V, targets); math.Abs(loss-want) > 1e-5*want {
		t.Errorf("loss = %.8g, want %.8g", loss, want)
	}
	for r, tg := range targets {
		var sum float64
		for v := range V {
			g := float64(dl.Data[r*V+v])
			if tg < 0 && g != 0 {
				t.Errorf("ignored row %d has gradient %g", r, g)
			}
			sum += g
		}
		// Softmax minus one-hot sums to zero on every row.
		if math.Abs(sum) > 1e-6 {
			t.Errorf("row %d gradient sums to %g, want 0", r, sum)
		}
	}

	// Loss without gradient, and with the gradient written over the logits,
	// give the same numbers.
	lossOnly, _ := ce.Loss(nil, logits, targets)
	if lossOnly != loss {
		t.Errorf("loss without gradient %.10g, with gradient %.10g", lossOnly, loss)
	}
	inPlace := logits.Clone()
	lossInPlace, _ := ce.Loss(inPlace, inPlace, targets)
	if lossInPlace != loss || !bitwiseEqual(inPlace.Data, dl.Data) {
		t.Error("dlogits = logits gives a different loss or gradient")
	}
}

func TestCrossEntropyStable(t *testing.T) {
	var ce CrossEntropy
	for _, tc := range []struct {
		name    string
		logits  []float32
		target  int32
		wantRaw float64 // from the definition in float64
	}{
		{"huge logits", []float32{1e4, 1e4 + 1, 1e4 - 3}, 0, 0},
		{"tiny probability", []float32{0, 200, -50}, 0, 0},
		{"certain", []float32{-300, 300, 0}, 1, 0},
	} {
		tc.wantRaw = refCrossEntropy(tc.logits, len(tc.logits), []int32{tc.target})
		dl := tensor.New(1, len(tc.logits))
		loss, _ := ce.Loss(dl, tensor.From(tc.logits, 1, len(tc.logits)), []int32{tc.target})
		if math.IsNaN(loss) || math.IsInf(loss, 0) || math.Abs(loss-tc.wantRaw) > 1e-5*(1+tc.wantRaw) {
			t.Errorf("%s: loss %g, want %g", tc.name, loss, tc.wantRaw)
		}
		if err := dl.CheckFinite(tc.name); err != nil {
			t.Error(err)
		}
	}
}

func TestCrossEntropyAllIgnored(t *testing.T) {
	var ce CrossEntropy
	dl := tensor.New(2, 3)
	dl.Fill(5)
	loss, n := ce.Loss(dl, tensor.New(2, 3), []int32{-1, -1})
	if loss != 0 || n != 0 {
		t.Errorf("loss, n = %g, %d; want 0, 0", loss, n)
	}
	for _, v := range dl.Data {
		if v != 0 {
			t.Fatal("gradient not zeroed")
		}
	}
}

// distillCase treats ce + 0.7·kl of Distill as a one-element output, the
// teacher's logits a constant; one row is padding.
func distillCase(rng *rand.Rand, s size) *gradCase {
	const weight = 0.7
	vocab := s.dim + 5
	logits := randTensor(rng, 2, 2, s.rows/2, vocab)
	teacher := randTensor(rng, 2, 2, s.rows/2, vocab)
	targets := ids(rng, s.rows, vocab)
	targets[1] = -1
	var ce CrossEntropy
	dl := tensor.New(logits.Shape...)
	c := &gradCase{
		inputs: []*tensor.Tensor{logits}, dinputs: []*tensor.Tensor{tensor.New(logits.Shape...)},
		out: tensor.New(1),
	}
	c.forward = func() {
		l, kl, _ := ce.Distill(dl, logits, teacher, targets, weight)
		c.out.Data[0] = float32(l + weight*kl)
	}
	c.backward = func(dy *tensor.Tensor) {
		for i, v := range dl.Data {
			c.dinputs[0].Data[i] = v * dy.Data[0]
		}
	}
	return c
}

// TestDistillValues compares Distill with the definitions in float64, and
// its cross-entropy and gradient at weight 0 with Loss's.
func TestDistillValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, s := range []size{small, large} {
		V := s.dim + 5
		logits, teacher := randTensor(rng, 3, s.rows, V), randTensor(rng, 3, s.rows, V)
		targets := ids(rng, s.rows, V)
		targets[0] = -1
		var c CrossEntropy
		ce, kl, n := c.Distill(nil, logits, teacher, targets, 0.5)
		if n != s.rows-1 {
			t.Errorf("n = %d, want %d", n, s.rows-1)
		}
		if want := refCrossEntropy(logits.Data, V, targets); math.Abs(ce-want) > 1e-5*want {
			t.Errorf("rows %d: cross-entropy %v, want %v", s.rows, ce, want)
		}
		var want float64
		for r, tg := range targets {
			if tg < 0 {
				continue
			}
			p, q := refSoftmax(logits.Data[r*V:(r+1)*V]), refSoftmax(teacher.Data[r*V:(r+1)*V])
			for j := range p {
				want += q[j] * math.Log(q[j]/p[j])
			}
		}
		want /= float64(n)
		if math.Abs(kl-want) > 1e-5*want {
			t.Errorf("rows %d: KL %v, want %v", s.rows, kl, want)
		}
		// Weight 0 is Loss, to float32 rounding.
		d0, d1 := tensor.New(logits.Shape...), tensor.New(logits.Shape...)
		l0, _ := c.Loss(d0, logits, targets)
		l1, _, _ := c.Distill(d1, logits, teacher, targets, 0)
		if math.Abs(l0-l1) > 1e-7*l0 || maxDiff(d0.Data, d1.Data) > 1e-6 {
			t.Errorf("rows %d: weight 0 gives loss %v and a gradient %.3g off, Loss %v", s.rows, l1, maxDiff(d0.Data, d1.Data), l0)
		}
	}
}

func refSoftmax(x []float32) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, float64(v))
	}
	p := make([]float64, len(x))
	var s float64
	for i, v := range x {
		p[i] = math.Exp(float64(v) - m)
		s += p[i]
	}
	for i := range p {
		p[i] /= s
	}
	return p
}

func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}
