package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/tensor"
)

// unit is bfloat16's unit roundoff, 2⁻⁸: rounding to nearest moves a
// value by at most unit times its magnitude (8 significant bits).
const unit = 1.0 / 256

// bf16Eps and bf16Tol are the step and tolerance of the finite-difference
// check of the bf16 layers (TestGradients). Their forward passes are
// linear in every input and parameter, so a large step loses nothing to
// curvature, and it must be large: the forward pass rounds x±eps to bf16,
// which moves each by up to unit·(|x|+eps), a relative error of up to
// unit·(|x|+eps)/eps in the difference quotient: 1.75·unit for |x| ≤ 3
// at eps = 4. The analytic gradient also rounds the other factor, dy,
// which the numeric one takes exact: an error of up to unit·Σ|dy·w|,
// about 2·unit of the gradient's RMS at these sizes. 4·unit = 2⁻⁶ bounds
// the two, and stays well below the 5% error that
// TestGradientCheckCatchesErrors plants.
const bf16Eps, bf16Tol = 4, 4 * unit

// round returns x rounded to bf16 and back.
func round(x float32) float64 {
	var b [1]blas.BF16
	blas.ToBF16(b[:], []float32{x})
	return float64(math.Float32frombits(uint32(b[0]) << 16))
}

// TestLinearBF16 checks the three products of a bf16 Linear against
// float64 products of the bf16-rounded factors. Each fp32 sum of k
// products of such factors is within k·2⁻²⁴·Σ|terms| of the exact sum;
// 2⁻²⁰·Σ|terms| (k ≤ 16 here) bounds it.
func TestLinearBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 9))
	const rows, in, out = 7, 13, 11
	l := NewLinear("lin", in, out, true, rng)
	randomize(rng, l.Params())
	l.BF16 = NewRounded(l.Weight, true, true)
	x := randTensor(rng, 1, rows, in)
	dy := randTensor(rng, 1, rows, out)
	y, dx := tensor.New(rows, out), tensor.New(rows, in)
	y.Fill(float32(math.NaN()))
	l.Forward(y, x)
	l.Backward(dx, dy)
	W, b := l.Weight.Value.Data, l.Bias.Value.Data
	check := func(what string, got float32, terms []float64, start float64) {
		t.Helper()
		sum, abs := start, math.Abs(start)
		for _, v := range terms {
			sum += v
			abs += math.Abs(v)
		}
		if math.Abs(float64(got)-sum) > abs/(1<<20) {
			t.Errorf("%s = %g, want %g (bf16 factors, float64 sum)", what, got, sum)
		}
	}
	var terms []float64
	for r := range rows {
		for j := range out {
			terms = terms[:0]
			for k := range in {
				terms = append(terms, round(x.Data[r*in+k])*round(W[k*out+j]))
			}
			check("y", y.Data[r*out+j], terms, float64(b[j]))
		}
		for i := range in {
			terms = terms[:0]
			for j := range out {
				terms = append(terms, round(dy.Data[r*out+j])*round(W[i*out+j]))
			}
			check("dx", dx.Data[r*in+i], terms, 0)
		}
	}
	for i := range in {
		for j := range out {
			terms = terms[:0]
			for r := range rows {
				terms = append(terms, round(x.Data[r*in+i])*round(dy.Data[r*out+j]))
			}
			check("dW", l.Weight.Grad.Data[i*out+j], terms, 0)
		}
	}
}

// TestRoundedFollowsWeights checks that the bf16 copies are those of the
// weight when they were last made: a changed weight leaves the products
// alone until Round.
func TestRoundedFollowsWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 9))
	l := NewLinear("lin", 8, 5, false, rng)
	l.BF16 = NewRounded(l.Weight, true, false)
	x := randTensor(rng, 1, 3, 8)
	before, after := tensor.New(3, 5), tensor.New(3, 5)
	l.Forward(before, x)
	l.Weight.Value.Data[0] += 1
	l.Forward(after, x)
	if !bitwiseEqual(before.Data, after.Data) {
		t.Error("the products changed with the float32 weight before Round")
	}
	l.BF16.Round(l.Weight)
	l.Forward(after, x)
	if bitwiseEqual(before.Data, after.Data) {
		t.Error("the products did not change after Round")
	}
	defer func() {
		if recover() == nil {
			t.Error("Backward with copies for inference only (no transposed copy) did not panic")
		}
	}()
	l.Backward(tensor.New(3, 8), randTensor(rng, 1, 3, 5))
}

func TestParsePrecision(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Precision
		ok   bool
	}{
		{"fp32", FP32, true}, {"bf16", BF16, true}, {"", FP32, true},
		{"fp16", FP32, false}, {"BF16", FP32, false}, {"bfloat16", FP32, false},
	} {
		p, err := ParsePrecision(tc.in)
		if (err == nil) != tc.ok || p != tc.want {
			t.Errorf("ParsePrecision(%q) = %v, %v; want %v, ok %v", tc.in, p, err, tc.want, tc.ok)
		}
		if err == nil {
			continue
		}
		var q Precision
		if q.UnmarshalText([]byte(tc.in)) == nil {
			t.Errorf("UnmarshalText(%q) accepted it", tc.in)
		}
	}
	for _, p := range []Precision{FP32, BF16} {
		b, err := p.MarshalText()
		var q Precision
		if err != nil || q.UnmarshalText(b) != nil || q != p {
			t.Errorf("%v: MarshalText %q, %v; back: %v", p, b, err, q)
		}
	}
	if _, err := Precision(7).MarshalText(); err == nil {
		t.Error("MarshalText of Precision(7) succeeded")
	}
}
