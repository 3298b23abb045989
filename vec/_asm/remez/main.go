// Command remez derives the polynomial coefficients of the vec kernels: a
// Remez exchange in float64 for the minimax relative error of
//
//	e^r  ≈ 1 + r + r²·P(r)      on |r| ≤ R (after range reduction by ln 2)
//	tanh ≈ x + x³·Q(x²)         on |x| ≤ T (the small-argument branch)
//
// It prints the coefficients rounded to float32, which ../../generic.go and
// ../asm.go hold as constants, and the relative error of the rounded
// polynomials evaluated in float64, so that the evaluation error of the
// float32 kernels can be told apart from the approximation error.
//
// Usage:
//
//	go run ./remez
package main

import (
	"fmt"
	"math"
)

// problem is a weighted minimax problem: find P of degree deg minimizing
// max |w(t)·(g(t) − P(t))| over [a, b].
type problem struct {
	name string
	a, b float64
	deg  int
	g, w func(float64) float64
}

func main() {
	// Range reduction leaves |r| ≤ ln2/2 ≈ 0.3466; round-to-nearest of
	// x·log2e in float32 can push r a little past it, hence the margin.
	const r = 0.3470
	expG := func(t float64) float64 { // (e^t − 1 − t)/t², no cancellation near 0
		if math.Abs(t) < 0.05 {
			s, term := 0.0, 0.5
			for k := 3; k < 20; k++ {
				s += term
				term *= t / float64(k)
			}
			return s
		}
		return (math.Expm1(t) - t) / (t * t)
	}
	expW := func(t float64) float64 { return t * t / math.Exp(t) }

	// tanh on |x| ≤ T in z = x²; (tanh x − x)/x³ by its series for small x.
	const tmax = 0.625
	tanhG := func(z float64) float64 {
		x := math.Sqrt(z)
		if x < 0.05 {
			// tanh x = x − x³/3 + 2x⁵/15 − 17x⁷/315 + 62x⁹/2835 − …
			return -1.0/3 + z*(2.0/15+z*(-17.0/315+z*(62.0/2835)))
		}
		return (math.Tanh(x) - x) / (x * z)
	}
	tanhW := func(z float64) float64 {
		x := math.Sqrt(z)
		if x == 0 {
			return 0
		}
		return x * z / math.Tanh(x)
	}

	for _, p := range []problem{
		// Degree 4 is the least that keeps the approximation error well
		// below the float32 roundoff, 6e-8.
		{"exp P", -r, r, 4, expG, expW},
		{"tanh Q", 0, tmax * tmax, 4, tanhG, tanhW},
	} {
		c, e := remez(p)
		fmt.Printf("%s degree %d on [%g, %g]: minimax relative error %.3g\n", p.name, p.deg, p.a, p.b, e)
		c32 := make([]float64, len(c))
		for i, v := range c {
			c32[i] = float64(float32(v))
			fmt.Printf("\tc%d = %.9g\n", i, float32(v))
		}
		fmt.Printf("\twith float32 coefficients: %.3g\n", maxErr(p, c32))
	}
}

// remez returns the minimax coefficients (lowest degree first) and the
// levelled error.
func remez(p problem) ([]float64, float64) {
	n := p.deg + 2
	// Start from the Chebyshev extrema.
	pts := make([]float64, n)
	for i := range pts {
		pts[i] = (p.a+p.b)/2 - (p.b-p.a)/2*math.Cos(math.Pi*float64(i)/float64(n-1))
		if p.w(pts[i]) == 0 {
			// The relative error vanishes where the weight does (t = 0):
			// it cannot be an extremum, so start next to it.
			pts[i] += (p.b - p.a) / float64(4*n)
		}
	}
	var c []float64
	var e float64
	for iter := 0; iter < 50; iter++ {
		c, e = solve(p, pts)
		next := extrema(p, c)
		if len(next) != n {
			break // the error curve no longer alternates n times; keep the last solution
		}
		moved := 0.0
		for i := range pts {
			moved = math.Max(moved, math.Abs(next[i]-pts[i]))
		}
		pts = next
		if moved < 1e-12*(p.b-p.a) {
			break
		}
	}
	return c, math.Abs(e)
}

// solve finds P and E with w(t_i)·(g(t_i) − P(t_i)) = (−1)^i·E.
func solve(p problem, pts []float64) ([]float64, float64) {
	n := len(pts)
	m := make([][]float64, n)
	for i, t := range pts {
		row := make([]float64, n+1)
		tj := 1.0
		for j := 0; j <= p.deg; j++ {
			row[j] = tj
			tj *= t
		}
		sign := 1.0
		if i%2 == 1 {
			sign = -1
		}
		row[n-1] = sign / p.w(t)
		row[n] = p.g(t)
		m[i] = row
	}
	// Gaussian elimination with partial pivoting.
	for col := 0; col < n; col++ {
		piv := col
		for r := col + 1; r < n; r++ {
			if math.Abs(m[r][col]) > math.Abs(m[piv][col]) {
				piv = r
			}
		}
		m[col], m[piv] = m[piv], m[col]
		for r := col + 1; r < n; r++ {
			f := m[r][col] / m[col][col]
			for k := col; k <= n; k++ {
				m[r][k] -= f * m[col][k]
			}
		}
	}
	x := make([]float64, n)
	for r := n - 1; r >= 0; r-- {
		s := m[r][n]
		for k := r + 1; k < n; k++ {
			s -= m[r][k] * x[k]
		}
		x[r] = s / m[r][r]
	}
	return x[:n-1], x[n-1]
}

func errAt(p problem, c []float64, t float64) float64 {
	s := 0.0
	for j := len(c) - 1; j >= 0; j-- {
		s = s*t + c[j]
	}
	return p.w(t) * (p.g(t) - s)
}

// extrema returns, for each run of equal sign of the error on a fine grid, the
// point of largest magnitude, keeping the deg+2 largest adjacent ones.
func extrema(p problem, c []float64) []float64 {
	const grid = 200000
	var pts, vals []float64
	best, bestT := 0.0, 0.0
	for i := 0; i <= grid; i++ {
		t := p.a + (p.b-p.a)*float64(i)/grid
		e := errAt(p, c, t)
		if i > 0 && math.Signbit(e) != math.Signbit(best) && e != 0 {
			pts, vals = append(pts, bestT), append(vals, best)
			best, bestT = e, t
			continue
		}
		if math.Abs(e) >= math.Abs(best) {
			best, bestT = e, t
		}
	}
	pts, vals = append(pts, bestT), append(vals, best)
	// Drop the smaller end point until deg+2 remain.
	for len(pts) > p.deg+2 {
		if math.Abs(vals[0]) < math.Abs(vals[len(vals)-1]) {
			pts, vals = pts[1:], vals[1:]
		} else {
			pts, vals = pts[:len(pts)-1], vals[:len(vals)-1]
		}
	}
	return pts
}

func maxErr(p problem, c []float64) float64 {
	m := 0.0
	for i := 0; i <= 200000; i++ {
		t := p.a + (p.b-p.a)*float64(i)/200000
		m = math.Max(m, math.Abs(errAt(p, c, t)))
	}
	return m
}
