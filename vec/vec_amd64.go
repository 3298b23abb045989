//go:build !purego

package vec

import "golang.org/x/sys/cpu"

//go:generate go run -C _asm . -out ../vec_amd64.s -stubs ../stubs_amd64.go -pkg vec

// hasAsm reports whether the CPU runs the assembly kernels.
var hasAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// useAsm selects the assembly kernels; the tests flip it to cover both
// paths.
var useAsm = hasAsm && !noAsmEnv()

func dot(x, y []float32) float32 {
	if useAsm {
		return dotAVX2(x, y)
	}
	return dotGeneric(x, y)
}

func axpy(alpha float32, x, y []float32) {
	if useAsm {
		axpyAVX2(alpha, x, y)
		return
	}
	axpyGeneric(alpha, x, y)
}

func scale(alpha float32, x []float32) {
	if useAsm {
		scaleAVX2(alpha, x)
		return
	}
	scaleGeneric(alpha, x)
}

func mul(dst, a, b []float32) {
	if useAsm {
		mulAVX2(dst, a, b)
		return
	}
	mulGeneric(dst, a, b)
}

func add(dst, a, b []float32) {
	if useAsm {
		addAVX2(dst, a, b)
		return
	}
	addGeneric(dst, a, b)
}

func sum(x []float32) float32 {
	if useAsm {
		return sumAVX2(x)
	}
	return sumGeneric(x)
}

func max32(x []float32) float32 {
	if useAsm {
		return maxAVX2(x)
	}
	return maxGeneric(x)
}

func exp(dst, src []float32) {
	if useAsm {
		expAVX2(dst, src)
		return
	}
	expGeneric(dst, src)
}

func tanh(dst, src []float32) {
	if useAsm {
		tanhAVX2(dst, src)
		return
	}
	tanhGeneric(dst, src)
}

func gelu(dst, src []float32) {
	if useAsm {
		geluAVX2(dst, src)
		return
	}
	geluGeneric(dst, src)
}

func geluBackward(dx, x, dy []float32) {
	if useAsm {
		geluBackwardAVX2(dx, x, dy)
		return
	}
	geluBackwardGeneric(dx, x, dy)
}

func expSubSum(dst, src []float32, m float32) float32 {
	if useAsm {
		return expSubSumAVX2(dst, src, m)
	}
	return expSubSumGeneric(dst, src, m)
}

func sumExpSub(x []float32, m float32) float32 {
	if useAsm {
		return sumExpSubAVX2(x, m)
	}
	return sumExpSubGeneric(x, m)
}

func sumDev(x []float32, mu float32) (s, q float32) {
	if useAsm {
		return sumDevAVX2(x, mu)
	}
	return sumDevGeneric(x, mu)
}

func normAffine(dst, x, gain, bias []float32, mu, rstd float32) {
	if useAsm {
		normAffineAVX2(dst, x, gain, bias, mu, rstd)
		return
	}
	normAffineGeneric(dst, x, gain, bias, mu, rstd)
}

func layerNormReduce(dgain, dbias, x, gain, dy []float32, mu, rstd float32) (sg, sgx float32) {
	if useAsm {
		return layerNormReduceAVX2(dgain, dbias, x, gain, dy, mu, rstd)
	}
	return layerNormReduceGeneric(dgain, dbias, x, gain, dy, mu, rstd)
}

func layerNormDx(dx, x, gain, dy []float32, mu, rstd, a, b float32) {
	if useAsm {
		layerNormDxAVX2(dx, x, gain, dy, mu, rstd, a, b)
		return
	}
	layerNormDxGeneric(dx, x, gain, dy, mu, rstd, a, b)
}

func mulSub(dst, a, b []float32, c float32) {
	if useAsm {
		mulSubAVX2(dst, a, b, c)
		return
	}
	mulSubGeneric(dst, a, b, c)
}
