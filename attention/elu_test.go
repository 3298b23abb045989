package attention

import (
	"math"
	"testing"

	"github.com/polysketch/polysketch/tensor"
)

// refELU is ELU+1 attention of one head in float64, from its definition
// (thesis eqs. 3.5 and 3.8): φ(x) = elu(x)+1 entrywise and the plain ratio.
func refELU(q, k, v [][]float64, causal bool) [][]float64 {
	phi := func(x []float64) []float64 {
		f := make([]float64, len(x))
		for i, e := range x {
			if e > 0 {
				f[i] = e + 1
			} else {
				f[i] = math.Exp(e)
			}
		}
		return f
	}
	return refKernel(q, k, v, causal, func(qi, kj []float64) float64 { return dotF64(phi(qi), phi(kj)) })
}

// refKernel is Σ_j w(q_i, k_j) v_j / Σ_j w(q_i, k_j) over j ≤ i (causal)
// or all j, in float64.
func refKernel(q, k, v [][]float64, causal bool, w func(qi, kj []float64) float64) [][]float64 {
	o := make([][]float64, len(q))
	for i := range q {
		o[i] = make([]float64, len(v[0]))
		var den float64
		for j := range k {
			if causal && j > i {
				break
			}
			x := w(q[i], k[j])
			den += x
			for c, e := range v[j] {
				o[i][c] += x * e
			}
		}
		for c := range o[i] {
			o[i][c] /= den
		}
	}
	return o
}

func dotF64(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// perHead applies a one-head float64 reference to every head of q, k, v
// ([B,H,N,h]) and returns the outputs, flattened as the tensors are.
func perHead(ref func(q, k, v [][]float64, causal bool) [][]float64) func(m Mechanism, causal bool, q, k, v *tensor.Tensor) []float64 {
	return func(_ Mechanism, causal bool, q, k, v *tensor.Tensor) []float64 {
		N, h := q.Shape[2], q.Shape[3]
		rows := func(x *tensor.Tensor, hd int) [][]float64 {
			r := make([][]float64, N)
			for i := range r {
				r[i] = make([]float64, h)
				for c := range r[i] {
					r[i][c] = float64(x.Data[(hd*N+i)*h+c])
				}
			}
			return r
		}
		var out []float64
		for hd := 0; hd < q.Shape[0]*q.Shape[1]; hd++ {
			for _, row := range ref(rows(q, hd), rows(k, hd), rows(v, hd), causal) {
				out = append(out, row...)
			}
		}
		return out
	}
}

// TestELUOptions checks that ELU's engine options agree with each other:
// blocks, Remat and CumSum compute the same attention.
func TestELUOptions(t *testing.T) {
	q, k, v := conformanceInputs(8, 45)
	for _, causal := range []bool{true, false} {
		want := perHead(refELU)(nil, causal, q, k, v)
		for _, spec := range []string{"elu:block=8", "elu:block=8:remat", "elu:block=16:cumsum", "elu:block=64"} {
			cfg, err := ParseSpec(spec)
			if err != nil {
				t.Fatal(err)
			}
			m, err := New(cfg, Setup{Causal: causal, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			o := forward(m, q, k, v)
			var d, s float64
			for i := range want {
				d = math.Max(d, math.Abs(float64(o.Data[i])-want[i]))
				s = math.Max(s, math.Abs(want[i]))
			}
			if d/s > 1e-5 {
				t.Errorf("%s causal=%v: max |o − reference| / max |reference| = %.3g", spec, causal, d/s)
			}
			if causal || !cfg.(ELUConfig).CumSum {
				checkGradients(t, m, q, k, v, 1e-2, 2e-2, 4)
			}
		}
	}
}
