package attention

import (
	"fmt"
	"testing"
)

func TestSoftmaxAgainstFloat64(t *testing.T) {
	for _, N := range []int{1, 7, 64, 100} {
		for _, causal := range []bool{false, true} {
			opts := defaultKernelOptions()
			opts.Causal = causal
			q, k, v := randQKV(5, 1, 2, 2, N, 8)
			o := forward(mustNew(t, Softmax, opts), q, k, v)
			if diff := maxRelDiff(o.Data, exactAttention(Softmax, causal, 0, q, k, v).Data); diff > 1e-5 {
				t.Errorf("N=%d causal=%v: output differs from the float64 reference by %.3g (relative)", N, causal, diff)
			}
		}
	}
}

func TestSoftmaxGradients(t *testing.T) {
	for _, causal := range []bool{false, true} {
		t.Run(fmt.Sprintf("causal=%v", causal), func(t *testing.T) {
			opts := defaultKernelOptions()
			opts.Causal = causal
			q, k, v := randQKV(6, 1, 2, 2, 37, 8)
			checkGradients(t, mustNew(t, Softmax, opts), q, k, v, 1e-2, 1e-2, 20)
		})
	}
}

func TestSoftmaxCausal(t *testing.T) {
	q, k, v := randQKV(7, 1, 2, 2, 37, 8)
	checkCausal(t, mustNew(t, Softmax, defaultKernelOptions()), q, k, v)
}

func BenchmarkSoftmax(b *testing.B) {
	benchMechanism(b, Softmax, defaultKernelOptions(), benchShapes(4096), nil)
}
