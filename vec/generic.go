package vec

import "math"

// The portable kernels. Lengths are checked by the exported functions;
// these assume them equal. Reductions keep four accumulators, for speed and
// because shorter chains of additions round less.

func dotGeneric(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i <= len(x)-4; i += 4 {
		x, y := x[i:i+4:i+4], y[i:i+4:i+4]
		s0 += x[0] * y[0]
		s1 += x[1] * y[1]
		s2 += x[2] * y[2]
		s3 += x[3] * y[3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func axpyGeneric(alpha float32, x, y []float32) {
	y = y[:len(x)]
	i := 0
	for ; i <= len(x)-4; i += 4 {
		x, y := x[i:i+4:i+4], y[i:i+4:i+4]
		y[0] += alpha * x[0]
		y[1] += alpha * x[1]
		y[2] += alpha * x[2]
		y[3] += alpha * x[3]
	}
	for ; i < len(x); i++ {
		y[i] += alpha * x[i]
	}
}

func scaleGeneric(alpha float32, x []float32) {
	for i := range x {
		x[i] *= alpha
	}
}

func mulGeneric(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] * b[i]
	}
}

func addGeneric(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] + b[i]
	}
}

func sumGeneric(x []float32) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i <= len(x)-4; i += 4 {
		x := x[i : i+4 : i+4]
		s0 += x[0]
		s1 += x[1]
		s2 += x[2]
		s3 += x[3]
	}
	for ; i < len(x); i++ {
		s0 += x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func maxGeneric(x []float32) float32 {
	// !(v <= m) is true for a larger v and for a NaN v; only then is it
	// worth testing for NaN.
	m0 := float32(math.Inf(-1))
	m1, m2, m3 := m0, m0, m0
	i := 0
	for ; i <= len(x)-4; i += 4 {
		x := x[i : i+4 : i+4]
		if v := x[0]; !(v <= m0) {
			if v != v {
				return v
			}
			m0 = v
		}
		if v := x[1]; !(v <= m1) {
			if v != v {
				return v
			}
			m1 = v
		}
		if v := x[2]; !(v <= m2) {
			if v != v {
				return v
			}
			m2 = v
		}
		if v := x[3]; !(v <= m3) {
			if v != v {
				return v
			}
			m3 = v
		}
	}
	for ; i < len(x); i++ {
		if v := x[i]; !(v <= m0) {
			if v != v {
				return v
			}
			m0 = v
		}
	}
	return max(m0, m1, m2, m3)
}

func expGeneric(dst, src []float32) {
	expInto(dst, src)
}

// The kernels built on exp work through their input in chunks: one loop
// prepares the arguments of exp in a buffer on the stack, expInto takes the
// exponentials in place, and a last loop finishes. Keeping exp's loop apart
// lets the compiler keep it in registers, which a call per element would
// not.
const chunk = 256

func tanhGeneric(dst, src []float32) {
	src = src[:len(dst)]
	var buf [chunk]float32
	for len(src) > 0 {
		n := min(len(src), chunk)
		e := buf[:n]
		for i, x := range src[:n] {
			a := abs32(x)
			e[i] = a + a
		}
		expInto(e, e)
		for i, x := range src[:n] {
			a := abs32(x)
			var y float32
			if a < tanhSmall {
				z := a * a
				var q float32 = tanhQ4
				q = q*z + tanhQ3
				q = q*z + tanhQ2
				q = q*z + tanhQ1
				q = q*z + tanhQ0
				y = a + a*z*q
			} else { // also NaN
				y = 1 - 2/(e[i]+1)
			}
			dst[i] = math.Float32frombits(math.Float32bits(y) | math.Float32bits(x)&(1<<31))
		}
		src, dst = src[n:], dst[n:]
	}
}

// GELU(x) = x·σ(2u), u = √(2/π)·(x + 0.044715·x³), and σ(2u) is computed
// from E = e^-|2u| ≤ 1, which neither overflows nor cancels:
// σ(2u) = 1/(1+E) for u ≥ 0 and E/(1+E) for u < 0. In the kernels
// v = -2u = x·(geluA + geluB·x²).

func geluGeneric(dst, src []float32) {
	src = src[:len(dst)]
	var vbuf, ebuf [chunk]float32
	for len(src) > 0 {
		n := min(len(src), chunk)
		v, e := vbuf[:n], ebuf[:n]
		for i, x := range src[:n] {
			// Below -100 the result is -0 anyway; clamping keeps -Inf
			// from making -Inf·0.
			x = max(x, -100)
			v[i] = x * (geluA + geluB*x*x)
			e[i] = -abs32(v[i])
		}
		expInto(e, e)
		for i, x := range src[:n] {
			x = max(x, -100)
			num := x
			if v[i] > 0 {
				num = x * e[i]
			}
			dst[i] = num / (1 + e[i])
		}
		src, dst = src[n:], dst[n:]
	}
}

// GELU'(x) = σ + x·2u'·σ·(1-σ), and σ·(1-σ) = E/(1+E)² for either sign of
// u.
func geluBackwardGeneric(dx, x, dy []float32) {
	x, dy = x[:len(dx)], dy[:len(dx)]
	var wbuf, ebuf [chunk]float32
	for len(x) > 0 {
		n := min(len(x), chunk)
		w, e := wbuf[:n], ebuf[:n]
		for i, v := range x[:n] {
			// Beyond ±100 the derivative is exactly 1 or 0 in float32;
			// clamping keeps Inf out of the products below.
			v = min(max(v, -100), 100)
			w[i] = v * (geluA + geluB*v*v)
			e[i] = -abs32(w[i])
		}
		expInto(e, e)
		for i, v := range x[:n] {
			v = min(max(v, -100), 100)
			d := 1 / (1 + e[i])
			ed := e[i] * d
			s := d
			if w[i] > 0 {
				s = ed
			}
			dx[i] = dy[i] * (s + v*(geluD0+geluD1*v*v)*ed*d)
		}
		x, dy, dx = x[n:], dy[n:], dx[n:]
	}
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// expSubSumGeneric sets dst[i] = e^(src[i]-m) and returns their sum.
func expSubSumGeneric(dst, src []float32, m float32) float32 {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] = v - m
	}
	expInto(dst, dst)
	return sumGeneric(dst)
}

// sumExpSubGeneric returns Σ e^(x[i]-m).
func sumExpSubGeneric(x []float32, m float32) float32 {
	var buf [chunk]float32
	var s float32
	for len(x) > 0 {
		n := min(len(x), chunk)
		e := buf[:n]
		for i, v := range x[:n] {
			e[i] = v - m
		}
		expInto(e, e)
		s += sumGeneric(e)
		x = x[n:]
	}
	return s
}

// sumDevGeneric returns Σ (x[i]-mu) and Σ (x[i]-mu)².
func sumDevGeneric(x []float32, mu float32) (s, q float32) {
	var s0, s1, q0, q1 float32
	i := 0
	for ; i <= len(x)-2; i += 2 {
		d0, d1 := x[i]-mu, x[i+1]-mu
		s0 += d0
		s1 += d1
		q0 += d0 * d0
		q1 += d1 * d1
	}
	if i < len(x) {
		d := x[i] - mu
		s0 += d
		q0 += d * d
	}
	return s0 + s1, q0 + q1
}

// mulSubGeneric sets dst[i] = a[i]·(b[i]-c).
func mulSubGeneric(dst, a, b []float32, c float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] * (b[i] - c)
	}
}

// normAffineGeneric sets dst[i] = (x[i]-mu)·rstd·gain[i] + bias[i].
func normAffineGeneric(dst, x, gain, bias []float32, mu, rstd float32) {
	x, gain, bias = x[:len(dst)], gain[:len(dst)], bias[:len(dst)]
	for i, v := range x {
		dst[i] = (v-mu)*rstd*gain[i] + bias[i]
	}
}

// layerNormReduceGeneric is the first pass of LayerNormBackward: with
// x̂ = (x-mu)·rstd and g = dy·gain, it returns Σ g and Σ g·x̂ and adds dy·x̂
// to dgain and dy to dbias.
func layerNormReduceGeneric(dgain, dbias, x, gain, dy []float32, mu, rstd float32) (sg, sgx float32) {
	n := len(dgain)
	dbias, x, gain, dy = dbias[:n], x[:n], gain[:n], dy[:n]
	var s0, s1, t0, t1 float32
	i := 0
	for ; i <= n-2; i += 2 {
		xh0, xh1 := (x[i]-mu)*rstd, (x[i+1]-mu)*rstd
		d0, d1 := dy[i], dy[i+1]
		dgain[i] += d0 * xh0
		dgain[i+1] += d1 * xh1
		dbias[i] += d0
		dbias[i+1] += d1
		g0, g1 := d0*gain[i], d1*gain[i+1]
		s0 += g0
		s1 += g1
		t0 += g0 * xh0
		t1 += g1 * xh1
	}
	if i < n {
		xh, d := (x[i]-mu)*rstd, dy[i]
		dgain[i] += d * xh
		dbias[i] += d
		g := d * gain[i]
		s0 += g
		t0 += g * xh
	}
	return s0 + s1, t0 + t1
}

// layerNormDxGeneric is the second pass of LayerNormBackward:
// dx += rstd·(g - a - x̂·b).
func layerNormDxGeneric(dx, x, gain, dy []float32, mu, rstd, a, b float32) {
	x, gain, dy = x[:len(dx)], gain[:len(dx)], dy[:len(dx)]
	for i, v := range x {
		xh := (v - mu) * rstd
		dx[i] += rstd * (dy[i]*gain[i] - a - xh*b)
	}
}

// The constants of GELU as the kernels use them: e^(-2u) = e^(x·(geluA +
// geluB·x²)) and d(2u)/dx = geluD0 + geluD1·x².
const (
	geluA  = -2 * geluC0
	geluB  = -2 * geluC0 * geluC1
	geluD0 = 2 * geluC0
	geluD1 = 6 * geluC0 * geluC1
)

// The constants of expInto, shared with the assembly in _asm/asm.go. Keep them
// in sync.
const (
	expHi    = 89   // e^89 overflows: the scaling below makes +Inf
	expLo    = -104 // e^-104 rounds to 0
	log2e    = 1.44269504088896341
	expMagic = 12582912 // 1.5·2²³: adding it rounds to an integer in the low mantissa bits
	// ln 2 = ln2Hi + ln2Lo, ln2Hi with 9 significant bits so that n·ln2Hi
	// is exact for |n| < 2¹⁵.
	ln2Hi = 0.693359375
	ln2Lo = -2.12194440e-4
	// e^r ≈ 1 + r + r²·(p0 + p1·r + p2·r² + p3·r³ + p4·r⁴) on |r| ≤ 0.347,
	// minimax for the relative error (4.4e-9), from go run ./remez in _asm.
	expP0 = 0.49999994
	expP1 = 0.166665196
	expP2 = 0.0416683964
	expP3 = 0.00836879667
	expP4 = 0.00138144335
)

// expInto sets dst[i] = e^src[i] with the algorithm of the assembly:
// x = n·ln2 + r with |r| ≤ ln2/2, e^r by a polynomial, 2^n built in the
// exponent bits. The scaling by 2^n goes in two halves so that n = 128
// (results near the largest float32) and n down to -150 (subnormal
// results) need no special cases: the last multiplication overflows to +Inf
// or rounds to a subnormal or 0 by itself.
func expInto(dst, src []float32) {
	src = src[:len(dst)]
	for i, x := range src {
		// Branches rather than min and max: they are predictable and
		// stay off the chain of dependent operations that bounds the
		// speed of this loop. NaN fails both tests and propagates.
		if x > expHi {
			x = expHi
		}
		if x < expLo {
			x = expLo
		}
		t := x*log2e + expMagic
		n := t - expMagic
		r := x - n*ln2Hi - n*ln2Lo
		// 1 + r + r²·(p0 + p1·r + r²·(p2 + p3·r + p4·r²)) in Estrin's
		// order, which shortens the chain of Horner's.
		r2 := r * r
		p := (expP0 + expP1*r) + r2*((expP2+expP3*r)+r2*expP4)
		p = 1 + (r + r2*p)
		// With kb = n + 254, 2^k1 has exponent field k1+127 = kb>>1 and
		// 2^k2 = 2^(n-k1) has kb - (kb>>1).
		kb := int32(math.Float32bits(t) - (math.Float32bits(expMagic) - 254))
		e1 := kb >> 1
		dst[i] = p * math.Float32frombits(uint32(e1)<<23) * math.Float32frombits(uint32(kb-e1)<<23)
	}
}

// The small-argument branch of tanh: tanh x ≈ x + x³·(q0 + q1·z + … + q4·z⁴),
// z = x², for |x| < tanhSmall, minimax for the relative error (8.6e-9), from
// go run ./remez in _asm. Above it tanh x = 1 - 2/(e^(2x) + 1) loses nothing
// to cancellation.
const (
	tanhSmall = 0.625
	tanhQ0    = -0.333332807
	tanhQ1    = 0.133314416
	tanhQ2    = -0.0537397154
	tanhQ3    = 0.020639088
	tanhQ4    = -0.00570498733
)

// expScaleGeneric sets dst[i] = e^((src[i]-m)·s) and returns their sum.
func expScaleGeneric(dst, src []float32, m, s float32) float32 {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] = (v - m) * s
	}
	expInto(dst, dst)
	return sumGeneric(dst)
}

// bandGeneric is Band. The weights above hi are added as bandAVX2 adds
// them, element i into lane i mod 8, the lanes i and i+4 together, then
// (0+2) + (1+3): the same bits.
func bandGeneric(dst []int32, x, w []float32, lo, hi float32) (n, above int, weight float64) {
	w = w[:len(x)]
	var acc [8]float64
	for i, v := range x {
		switch {
		case v >= hi:
			above++
			acc[i&7] += float64(w[i])
		case v >= lo:
			if n < len(dst) {
				dst[n] = int32(i)
			}
			n++
		}
	}
	s0, s1, s2, s3 := acc[0]+acc[4], acc[1]+acc[5], acc[2]+acc[6], acc[3]+acc[7]
	return n, above, (s0 + s2) + (s1 + s3)
}
