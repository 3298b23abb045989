package sample

import (
	"math"
	"slices"

	"github.com/polysketch/polysketch/vec"
)

// buckets is the number of equal ranges of (l-top)/T by which nucleus
// groups the candidates, few enough to stay in the first-level cache.
const buckets = 1024

// zSpan is the widest range of (l-top)/T that nucleus's buckets cover:
// tokens below it weigh less than e^-32 of the most likely each, and are
// walked only if the nucleus reaches them (by nucleusBySelection).
const zSpan = 32

// fewCandidates is the most candidates (tokens that may be in the
// nucleus) that nucleus groups in buckets; more, as a flat distribution
// has, are left to wide.
const fewCandidates = 4096

// nucleus draws from the smallest set of most likely tokens of
// probability TopP, as draw does after a sort of the whole vocabulary,
// without that sort. Tokens of weight below a threshold cannot be in the
// nucleus; the others, the candidates, are found by one vectorized pass
// (vec.Band). When they are few, equal ranges of (l-top)/T, which follow
// the tokens' rank, are the buckets of one pass over the candidates that
// adds their weights (float32, summed in float64); walking them finds the
// bucket of the nucleus's edge (with a margin, for the rounding), and the
// candidates up to it are sorted and weighed exactly (exact). More
// candidates are left to wide. Non-finite logits take nucleusBySelection.
func (s *Sampler) nucleus(logits []float32) int32 {
	n := len(logits)
	total, top := s.weights(logits)
	frac := min(s.TopP*(1+nucleusMargin), 1)
	// Tokens of weight below t weigh at most n·t together, within the
	// (1-frac)·total outside the nucleus: they all rank after it, and
	// only the others are candidates, which the buckets cover:
	// -span ≤ (l-top)/T, give or take the exponentials' rounding.
	t := (1 - frac) * total / float64(n) * 0.99
	span := float32(min(-math.Log(t), zSpan))
	if math.IsInf(float64(top), 0) || top != top || !(span > 0) {
		return s.nucleusBySelection(logits)
	}
	inv := float32(min(1/s.Temperature, math.MaxFloat32))
	// A few tokens tell when there are far too many candidates to
	// collect (a flat distribution's).
	heavy := 0
	for i := 0; i < n; i += 128 {
		if s.w[i] >= float32(t) {
			heavy++
		}
	}
	if heavy*128 > 4*fewCandidates {
		return s.wide(logits, total, top, inv, span)
	}
	s.cand = slices.Grow(s.cand[:0], fewCandidates)[:fewCandidates]
	k, _, _ := vec.Band(s.cand, s.w[:n], s.w[:n], float32(t), float32(math.Inf(1)))
	if k > fewCandidates {
		return s.wide(logits, total, top, inv, span)
	}
	cand := s.cand[:k]
	c := buckets / span
	mass := slices.Grow(s.mass[:0], buckets)[:buckets]
	clear(mass)
	s.bk = slices.Grow(s.bk[:0], k)[:k]
	w, bk := s.w[:n], s.bk[:k]
	for j, id := range cand {
		z := (logits[id] - top) * inv // as weights computes it: monotone in l
		b := min(int(-z*c), buckets-1)
		bk[j] = uint16(b)
		mass[b] += float64(w[id])
	}
	s.mass = mass
	// The candidates: the buckets up to where frac of the total is
	// reached, the margin covering the rounding.
	edge, acc := buckets-1, 0.0
	for b, m := range mass {
		acc += m
		if acc >= frac*total {
			edge = b
			break
		}
	}
	ids := slices.Grow(s.ids[:0], n)[:n]
	m := 0
	for j, b := range bk {
		ids[m] = cand[j]
		if int(b) <= edge {
			m++
		}
	}
	s.ids = ids
	return s.exact(logits, ids[:m], total, top)
}

// wide draws from a nucleus among many candidates (a flat distribution,
// as an untrained model's). What the draw needs is two tokens: the edge,
// where the weights in rank order reach TopP of the total, and the token
// where the drawn point falls; cross finds each without ordering the
// others. A nucleus of at most exactNucleus tokens is then sorted and
// weighed exactly (exact); a wider one is drawn from the float32
// weights: the token is the one draw would give but where the draw falls
// within the weights' rounding (about 1e-6) of the edge of a token or of
// the nucleus.
func (s *Sampler) wide(logits []float32, total float64, top, inv, span float32) int32 {
	s.est.sample(logits, s.w, top, inv, span, total)
	s.last.valid = false
	e, sum, m := s.cross(logits, s.TopP*total, false)
	if m <= exactNucleus {
		// The candidates up to where frac of the total is reached, the
		// margin covering the rounding (most often from cross's range
		// again).
		e1, _, _ := s.cross(logits, min(s.TopP*(1+nucleusMargin), 1)*total, false)
		n, inf := len(logits), float32(math.Inf(1))
		ids := slices.Grow(s.ids[:0], n)[:n]
		s.ids = ids
		var k int
		if b := &s.last; b.valid && b.hi == inf && logits[e1] >= b.lo {
			// cross's range held every token from its bottom up: they
			// are among its tokens.
			k, _, _ = vec.Band(ids, s.bx[:b.m], s.bw[:b.m], logits[e1], inf)
			for j, i := range ids[:k] {
				ids[j] = s.band[i]
			}
		} else {
			k, _, _ = vec.Band(ids, logits, s.w[:n], logits[e1], inf)
		}
		return s.exact(logits, ids[:k], total, top)
	}
	u := s.Rand.Float64() * sum
	d, _, _ := s.cross(logits, u, true)
	if better(logits, e, d) { // rounding between the sums: the edge
		return e
	}
	return d
}

// cross returns the token at which the weights, added in rank order,
// reach need (pass it, if strict), with the sum of the weights through it
// and the number of tokens through it. The estimate of the weights'
// distribution gives a range of logits that should hold that token; one
// vectorized pass (vec.Band) checks it, with the exact weight of the
// tokens above it, and collects the tokens in it (a wider range follows
// if the estimate missed). Their logits and weights, copied side by side,
// are halved by value with more such passes, each over them alone, until
// at most crossFew are left; a selection (rankCut) finds the token among
// those.
func (s *Sampler) cross(logits []float32, need float64, strict bool) (int32, float64, int) {
	reached := func(acc float64) bool { return acc > need || !strict && acc == need }
	inf := float32(math.Inf(1))
	n := len(logits)
	w := s.w[:n]
	last := &s.last
	if !last.valid || reached(last.weight) || !reached(last.weight+last.bandWeight) {
		// The last call's range (if any) does not hold this token.
		lo, hi, few := s.est.bounds(need)
		if few { // few tokens rank above the range: take them in too
			hi = inf
		}
		if missBounds != nil {
			lo, hi = missBounds(lo, hi)
		}
		s.collect(logits, reached, lo, hi)
	}
	lo, hi, m, above, weight := last.lo, last.hi, last.m, last.above, last.weight
	xs, ws := s.bx[:m], s.bw[:m]
	if m == 0 {
		panic("sample: no token has a logit that is not NaN") // nucleus excludes NaN before
	}
	// Halve [a, b) while it holds more than crossFew: the tokens at or
	// above b weigh fb (those above the range included), count cb of the
	// range's.
	a, b := lo, hi
	if a == -inf {
		a = xs[0]
		for _, x := range xs {
			a = min(a, x)
		}
	}
	if b == inf {
		b = math.Nextafter32(vec.Max(xs), inf)
	}
	fb, cb, count := weight, 0, m
	for count > crossFew {
		mid := float32(float64(a)/2 + float64(b)/2)
		if !(a < mid && mid < b) {
			break // ties: no value between a and b
		}
		_, c, wm := vec.Band(nil, xs, ws, mid, mid)
		if reached(weight + wm) {
			count, a = c-cb, mid
		} else {
			count, b, fb, cb = count-(c-cb), mid, weight+wm, c
		}
	}
	s.small = slices.Grow(s.small[:0], count)[:count]
	k, _, _ := vec.Band(s.small, xs, ws, a, b)
	ids := s.small[:k]
	for j, i := range ids {
		ids[j] = s.band[i]
	}
	if k == 0 { // rounding between the sums left the range empty: the band's tokens
		ids, fb, cb = s.band[:m], weight, 0
		s.last.valid = false // their order is rankCut's now
	}
	r := rankCut(s, logits, w, ids, need-fb, strict)
	sum := fb
	for _, id := range ids[:r] {
		sum += float64(w[id])
	}
	return ids[r-1], sum, above + cb + r
}

// lastRange is what cross's last pass over the vocabulary found: the
// tokens of [lo, hi) are s.band[:m], with their logits and weights in
// s.bx and s.bw; above of them are at or above hi and weigh weight, the
// range's weigh bandWeight.
type lastRange struct {
	valid              bool
	lo, hi             float32
	m, above           int
	weight, bandWeight float64
}

// collect passes over the vocabulary with vec.Band for the tokens of
// [lo, hi), copies their logits and weights side by side, and widens the
// range when the token where reached turns true is not in it: above it
// when reached already is at hi, below when not even at lo. It records
// the range in s.last.
func (s *Sampler) collect(logits []float32, reached func(float64) bool, lo, hi float32) {
	inf := float32(math.Inf(1))
	n := len(logits)
	w := s.w[:n]
	s.band = slices.Grow(s.band[:0], n)[:n]
	for pass := 0; ; pass++ {
		if pass == 3 { // the estimate and its two widenings missed (rounding): every token
			lo, hi = -inf, inf
		}
		m, above, weight := vec.Band(s.band, logits, w, lo, hi)
		xs := slices.Grow(s.bx[:0], m)[:m]
		ws := slices.Grow(s.bw[:0], m)[:m]
		for j, id := range s.band[:m] {
			xs[j], ws[j] = logits[id], w[id]
		}
		s.bx, s.bw = xs, ws
		_, _, bandWeight := vec.Band(nil, xs, ws, -inf, -inf) // all of them
		s.last = lastRange{true, lo, hi, m, above, weight, bandWeight}
		switch {
		case pass >= 3:
		case hi < inf && reached(weight): // above the range
			lo, hi = hi, inf
			continue
		case lo > -inf && !reached(weight+bandWeight): // below it
			lo, hi = -inf, lo
			continue
		}
		return
	}
}

// missBounds, when set (by a test), replaces the range of logits that
// cross checks first, so that the widenings that follow a missed estimate
// are tried.
var missBounds func(lo, hi float32) (float32, float32)

// crossFew is how many tokens cross leaves to rankCut.
const crossFew = 64
