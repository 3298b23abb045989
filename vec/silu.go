package vec

// SiLU computes the sigmoid-weighted linear unit (Swish with β = 1) of
// the SiLU-gated feed-forward blocks (SwiGLU) of Llama, Qwen2 and
// Mistral:
//
//	dst[i] = x·σ(x) = x/(1 + e^(-x)),  x = src[i].
//
// dst may alias src. It evaluates σ from E = e^(-|x|) ≤ 1, which neither
// overflows nor cancels: σ(x) = 1/(1+E) for x ≥ 0 and E/(1+E) for x < 0.
// SiLU(+Inf) = +Inf, SiLU(-Inf) = -0.
func SiLU(dst, src []float32) {
	if len(dst) != len(src) {
		panic2("SiLU", "dst", len(dst), "src", len(src))
	}
	var ebuf [chunk]float32
	for len(src) > 0 {
		n := min(len(src), chunk)
		e := ebuf[:n]
		for i, x := range src[:n] {
			e[i] = -abs32(max(x, -200)) // below -200 e underflows: the result is -0, not -Inf·0
		}
		exp(e, e)
		for i, x := range src[:n] {
			x = max(x, -200)
			num := x
			if x < 0 {
				num = x * e[i]
			}
			dst[i] = num / (1 + e[i])
		}
		src, dst = src[n:], dst[n:]
	}
}

// SiLUBackward computes dx[i] = dy[i]·SiLU'(x[i]), the derivative of the
// function SiLU computes: SiLU'(x) = σ(x)·(1 + x·(1 − σ(x))). dx may alias
// dy or x.
func SiLUBackward(dx, x, dy []float32) {
	if len(dx) != len(x) || len(dx) != len(dy) {
		panic3("SiLUBackward", "dx", len(dx), "x", len(x), "dy", len(dy))
	}
	var ebuf [chunk]float32
	for len(x) > 0 {
		n := min(len(x), chunk)
		e := ebuf[:n]
		for i, v := range x[:n] {
			e[i] = -abs32(min(max(v, -200), 200)) // beyond ±200 SiLU' is exactly 0 or 1
		}
		exp(e, e)
		for i, v := range x[:n] {
			v = min(max(v, -200), 200)
			s, c := 1/(1+e[i]), e[i]/(1+e[i]) // σ(v) and 1 − σ(v) for v ≥ 0
			if v < 0 {
				s, c = c, s
			}
			dx[i] = dy[i] * s * (1 + v*c)
		}
		x, dy, dx = x[n:], dy[n:], dx[n:]
	}
}
