// Package sample draws tokens from a language model's logits: the most
// likely one at temperature 0, else one drawn from softmax(logits/T) cut
// to the top k and then to the smallest set of probability top p
// (nucleus), with the caller's generator, so that the tokens depend on the
// logits and the seed alone. generate and serve share it.
//
// The cost follows what is asked, never a sort of the whole vocabulary:
// greedy is an argmax; plain temperature sampling vectorized passes
// (maximum, exponentials, sums of blocks) and a scan of one block; top-k
// a partial selection of k tokens (a heap); the nucleus a vectorized
// pass that collects the tokens that can be in it and, when they are few,
// a pass over them adding the weights of equal ranges of (l-max)/T, a
// walk to where probability top p is reached, and a sort of the nucleus
// alone; when they are many (a flat distribution), a sample of the tokens
// that guesses the logits of the nucleus's edge and of the drawn point,
// and for each a vectorized pass that collects the tokens near it, whose
// range is halved until few are left to order. Top selects the n most
// likely tokens with the heap, for logprobs.
package sample

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/polysketch/polysketch/vec"
)

// Sampler draws tokens; its fields are its settings.
type Sampler struct {
	Temperature float64    // 0 takes the most likely token
	TopK        int        // the k most likely only; 0 for all
	TopP        float64    // the most likely of total probability TopP only; 1 for all
	Rand        *rand.Rand // the source of the draws

	order []int32   // token ids, most likely first
	probs []float64 // their weights
	w     []float32 // every token's weight, for plain sampling and the nucleus's total
	sums  []float64 // the sums of w's blocks
	ids   []int32
	keys  []uint64
	heap  []int32
	cand  []int32   // the nucleus's candidates
	bk    []uint16  // their buckets
	mass  []float64 // the buckets' weights
	band  []int32   // the tokens of a range of logits, for cross
	bx    []float32 // their logits
	bw    []float32 // and weights
	small []int32   // the few of them left by cross's halvings
	last  lastRange // the range band holds
	p64   []float64 // exact's weights, by token
	est   estimate  // the sample that guesses cross's ranges
}

// New returns a Sampler drawing with rng.
func New(temperature, topP float64, topK int, rng *rand.Rand) *Sampler {
	return &Sampler{Temperature: temperature, TopK: topK, TopP: topP, Rand: rng}
}

// Next returns a token id drawn from logits.
//
// With top k or top p the token is drawn by walking the candidates most
// likely first (ties by id), as a sort of the whole vocabulary would
// order them. Plain temperature sampling walks the tokens in id order
// instead, which draws from the same distribution without ordering it.
func (s *Sampler) Next(logits []float32) int32 {
	switch {
	case s.Temperature == 0:
		return Argmax(logits)
	case s.TopK > 0 && s.TopK < len(logits):
		s.order = s.top(s.order[:0], logits, s.TopK, -1)
		return s.draw(logits)
	case s.TopP < 1:
		return s.nucleus(logits)
	}
	return s.plain(logits)
}

// Argmax returns the first index of the largest of logits: the
// vectorized maximum, then the first element equal to it.
func Argmax(logits []float32) int32 {
	if len(logits) == 0 {
		return 0
	}
	m := vec.Max(logits)
	for i, l := range logits {
		if l == m {
			return int32(i)
		}
	}
	// A NaN: the first largest of the others, as comparisons see them.
	best := 0
	for i, l := range logits {
		if l > logits[best] {
			best = i
		}
	}
	return int32(best)
}

// draw takes the candidates s.order (most likely first), computes their
// weights, keeps the nucleus, and draws one.
func (s *Sampler) draw(logits []float32) int32 {
	top := float64(logits[s.order[0]])
	s.probs = s.probs[:0]
	var sum float64
	for _, id := range s.order {
		p := math.Exp((float64(logits[id]) - top) / s.Temperature)
		s.probs = append(s.probs, p)
		sum += p
	}
	keep, acc := len(s.probs), 0.0
	for i, p := range s.probs {
		acc += p / sum
		if acc >= s.TopP {
			keep = i + 1
			break
		}
	}
	return s.walk(keep)
}

// walk draws one of the first keep candidates in proportion to their
// weights.
func (s *Sampler) walk(keep int) int32 {
	s.order, s.probs = s.order[:keep], s.probs[:keep]
	var sum float64
	for _, p := range s.probs {
		sum += p
	}
	u := s.Rand.Float64() * sum
	for i, p := range s.probs {
		if u < p {
			return s.order[i]
		}
		u -= p
	}
	return s.order[len(s.order)-1]
}

// block is the number of weights summed together by weights: plain
// sampling finds the block of the drawn point, then the token in it.
const block = 256

// weights fills s.w with e^((l-top)/T) for every logit l, in float32
// with vectorized exponentials, and s.sums with the sums of its blocks
// (both in one pass);
// it returns their total and top, the largest logit.
func (s *Sampler) weights(logits []float32) (total float64, top float32) {
	top = vec.Max(logits)
	n := len(logits)
	s.w = slices.Grow(s.w[:0], n)[:n]
	// (l - top)/T ≤ 0 overflows only to -Inf, whose weight is 0; 1/T is
	// kept finite, or 0·(1/T) would be NaN for the largest logit.
	inv := float32(min(1/s.Temperature, math.MaxFloat32))
	s.sums = s.sums[:0]
	for lo := 0; lo < n; lo += block {
		hi := min(lo+block, n)
		b := float64(vec.ExpScale(s.w[lo:hi], logits[lo:hi], top, inv))
		s.sums = append(s.sums, b)
		total += b
	}
	return total, top
}

// plain draws from softmax(logits/T) over the whole vocabulary, in id
// order: the weights, the block where the drawn point falls, and the
// token in that block.
func (s *Sampler) plain(logits []float32) int32 {
	total, _ := s.weights(logits)
	u := s.Rand.Float64() * total
	b := 0
	for b < len(s.sums)-1 && u >= s.sums[b] {
		u -= s.sums[b]
		b++
	}
	lo := b * block
	w := s.w[lo:min(lo+block, len(s.w))]
	var acc float64
	last := -1
	for i, x := range w {
		if x == 0 {
			continue
		}
		acc += float64(x)
		if u < acc {
			return int32(lo + i)
		}
		last = i
	}
	if last < 0 { // no weight in the block: a NaN, or rounding at its end
		return Argmax(logits)
	}
	return int32(lo + last) // the block's sum, added in another order, reached past its last weight
}

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

// nucleusBySelection draws from the smallest set of most likely tokens of
// probability TopP, as draw does after a sort of the whole vocabulary,
// without that sort. A selection partitions the tokens around pivots by
// rank, keeping the side where the approximate weights (float32) reach
// TopP of the total, with a margin, until few candidates are left
// undecided; only the candidates are sorted and weighed exactly. Should
// the margin not have covered the rounding, the rest follow.
func (s *Sampler) nucleusBySelection(logits []float32) int32 {
	total, hi := s.weights(logits)
	frac := min(s.TopP*(1+nucleusMargin), 1)
	need := frac * total
	// Tokens of weight below t weigh at most len·t together: when that
	// is within the (1-frac)·total outside the nucleus, they all rank
	// after it, and only the others are candidates.
	t := float32((1 - frac) * total / float64(len(logits)) * 0.99)
	s.ids = slices.Grow(s.ids[:0], len(logits))[:len(logits)]
	ids, n := s.ids, 0
	for i, x := range s.w {
		ids[n] = int32(i)
		if x >= t {
			n++
		}
	}
	ids = ids[:n]
	// ids[:lo] are in, ids[end:] out, ids[lo:end] undecided; once more
	// than exactNucleus are in, wideNucleus takes over.
	lo, end := 0, len(ids)
	for end-lo > 64 && need > 0 && lo <= exactNucleus {
		p, mass := partition(logits, s.w, ids[lo:end])
		p += lo
		if mass >= need {
			end = p
			continue
		}
		need -= mass + float64(s.w[ids[p]])
		lo = p + 1
		if need <= 0 {
			end = lo
		}
	}
	if end > exactNucleus {
		return s.wideNucleus(logits, ids[:end], total)
	}
	return s.exact(logits, ids[:end], total, hi)
}

// exact draws from the nucleus as draw does after a sort, given the
// candidates ids (which hold the nucleus) and the total weight: only the
// candidates are weighed in float64 and sorted (more than exactSort,
// selected by rank: the same tokens but where a sum's rounding in another
// order decides, about 10⁻¹⁶), and should they fall short of the nucleus
// (the rounding of the weights behind them), every token is.
func (s *Sampler) exact(logits []float32, ids []int32, total float64, hi float32) int32 {
	top := float64(hi)
	if len(ids) > exactSort {
		// Many candidates: their weights, in float64 as below, and two
		// selections by rank instead of a sort, for the edge where the
		// weights reach TopP of the total and for the drawn point.
		p64 := slices.Grow(s.p64[:0], len(logits))[:len(logits)]
		s.p64 = p64
		var sum float64
		for _, id := range ids {
			p := math.Exp((float64(logits[id]) - top) / s.Temperature)
			p64[id] = p
			sum += p
		}
		if need := s.TopP * total; sum >= need {
			k := rankCut(s, logits, p64, ids, need, false)
			sum = 0
			for _, id := range ids[:k] {
				sum += p64[id]
			}
			u := s.Rand.Float64() * sum
			return ids[rankCut(s, logits, p64, ids[:k], u, true)-1]
		}
		// The margin fell short: the walk below orders every token.
	}
	cand := s.sortByRank(logits, ids)
	s.order, s.probs = s.order[:0], s.probs[:0]
	var acc float64
	for i := 0; i < len(logits); i++ {
		if i == len(cand) { // the margin fell short: order every token
			all := s.ids[:len(logits)]
			for j := range all {
				all[j] = int32(j)
			}
			slices.SortFunc(all, byRank(logits))
			s.order, s.probs, acc, cand = s.order[:0], s.probs[:0], 0, all
			i = -1
			continue
		}
		id := cand[i]
		p := math.Exp((float64(logits[id]) - top) / s.Temperature)
		s.order = append(s.order, id)
		s.probs = append(s.probs, p)
		acc += p / total
		if acc >= s.TopP {
			break
		}
	}
	return s.walk(len(s.order))
}

// exactSort is the most candidates that exact sorts; more are selected
// by rank (rankCut), which costs less than a sort of thousands.
const exactSort = 256

// exactNucleus is the most candidates of a nucleus that nucleus sorts and
// weighs exactly; a wider one (a flat distribution, as an untrained
// model's) is drawn from the float32 weights by wideNucleus.
const exactNucleus = 4096

// wideNucleus draws from a nucleus of many candidates, ids (which hold
// it, the tokens ranking first), without sorting them: a selection finds
// its edge, where the float32 weights in rank order reach TopP of total,
// and another the token where the draw falls, walking in rank order. The
// token is the one draw would give but where the draw falls within the
// weights' rounding (about 1e-6) of the edge of a token or of the
// nucleus.
func (s *Sampler) wideNucleus(logits []float32, ids []int32, total float64) int32 {
	k := rankCut(s, logits, s.w, ids, s.TopP*total, false)
	var sum float64
	for _, id := range ids[:k] {
		sum += float64(s.w[id])
	}
	u := s.Rand.Float64() * sum
	return ids[rankCut(s, logits, s.w, ids[:k], u, true)-1]
}

// rankCut returns the smallest k such that the weights w[id] of the k
// tokens of ids ranking first sum to need or more (more than need if
// strict), or len(ids) if none does; it reorders ids so that those k come
// first, the k-th last of them. w is indexed by token: s.w, or exact's
// float64 weights.
func rankCut[W float32 | float64](s *Sampler, logits []float32, w []W, ids []int32, need float64, strict bool) int {
	reached := func(acc float64) bool { return acc > need || !strict && acc == need }
	lo, end := 0, len(ids)
	for end-lo > 64 {
		p, mass := partition(logits, w, ids[lo:end])
		p += lo
		if reached(mass) {
			end = p
			continue
		}
		need -= mass
		if reached(float64(w[ids[p]])) {
			return p + 1
		}
		need -= float64(w[ids[p]])
		lo = p + 1
	}
	s.sortByRank(logits, ids[lo:end])
	var acc float64
	for i := lo; i < end; i++ {
		acc += float64(w[ids[i]])
		if reached(acc) {
			return i + 1
		}
	}
	return end // rounding between the two sums: the range's last token
}

// nucleusMargin widens the nucleus's share for the selection, so that the
// float32 weights' rounding cannot leave a token of the exact nucleus
// out (a variable for the test of the fallback).
var nucleusMargin = 1e-4

// sortByRank sorts ids most likely first, ties by id, as keys of one
// integer each: the logit's bits made to order as unsigned integers,
// reversed, above the id.
func (s *Sampler) sortByRank(logits []float32, ids []int32) []int32 {
	s.keys = slices.Grow(s.keys[:0], len(ids))
	for _, id := range ids {
		l := logits[id]
		if l == 0 {
			l = 0 // -0 ranks as +0
		}
		b := math.Float32bits(l)
		if b>>31 != 0 {
			b = ^b
		} else {
			b |= 1 << 31
		}
		s.keys = append(s.keys, uint64(^b)<<32|uint64(uint32(id)))
	}
	slices.Sort(s.keys)
	for i, k := range s.keys {
		ids[i] = int32(uint32(k))
	}
	return ids
}

// partition reorders ids around a pivot chosen among three: those
// ranking before it first, then the pivot, then those after; it returns
// the pivot's index and the weight w[id] of the tokens before it.
func partition[W float32 | float64](logits []float32, w []W, ids []int32) (int, float64) {
	a, b, c := 0, len(ids)/2, len(ids)-1
	if better(logits, ids[b], ids[a]) {
		a, b = b, a
	}
	if better(logits, ids[c], ids[b]) {
		b = c
		if better(logits, ids[b], ids[a]) {
			b = a
		}
	}
	last := len(ids) - 1
	ids[b], ids[last] = ids[last], ids[b]
	pv := ids[last]
	pl := logits[pv]
	// Lomuto's scheme without branches on the data: every element is
	// swapped to k, which advances past those ranking before the pivot.
	k := 0
	var mass float64
	for i, id := range ids[:last] {
		l := logits[id]
		var b int
		if l > pl {
			b = 1
		}
		if l == pl && id < pv {
			b = 1
		}
		ids[i], ids[k] = ids[k], id
		mass += float64(w[id]) * float64(b)
		k += b
	}
	ids[k], ids[last] = ids[last], ids[k]
	return k, mass
}

// better reports whether token a ranks before token b: a larger logit,
// or the same and a smaller id.
func better(logits []float32, a, b int32) bool {
	return logits[a] > logits[b] || logits[a] == logits[b] && a < b
}

// byRank returns the comparison of token ids by better, for sorting.
func byRank(logits []float32) func(a, b int32) int {
	return func(a, b int32) int {
		switch {
		case a == b:
			return 0
		case better(logits, a, b):
			return -1
		}
		return 1
	}
}

// topChunk is how many logits top skips at once when their maximum is
// below the heap's root.
const topChunk = 256

// top appends to dst the k tokens that rank first among those ranking
// after token below (all tokens if below is -1), best first, and returns
// the extended slice. It keeps the k best seen in a heap whose root is
// the worst of them, so that most tokens cost one comparison with it.
func (s *Sampler) top(dst []int32, logits []float32, k int, below int32) []int32 {
	if k <= 0 {
		return dst
	}
	h := s.heap[:0]
	bl := float32(math.Inf(1))
	if below >= 0 {
		bl = logits[below]
	}
	thr := float32(math.Inf(-1)) // the root's logit once the heap is full
	for lo := 0; lo < len(logits); lo += topChunk {
		chunk := logits[lo:min(lo+topChunk, len(logits))]
		if len(h) == k && vec.Max(chunk) < thr {
			// Nothing at or above the root, as most chunks once the heap
			// holds good tokens: a vectorized maximum instead of a
			// comparison each.
			continue
		}
		for j, l := range chunk {
			if l < thr || l > bl {
				continue
			}
			id := int32(lo + j)
			if l == bl && id <= below {
				continue // ranks before below, or is it
			}
			if len(h) < k {
				h = append(h, id)
				for c := len(h) - 1; c > 0; { // sift up
					p := (c - 1) / 2
					if !better(logits, h[p], h[c]) {
						break
					}
					h[p], h[c] = h[c], h[p]
					c = p
				}
				if len(h) == k {
					thr = logits[h[0]]
				}
				continue
			}
			if !better(logits, id, h[0]) {
				continue
			}
			h[0] = id
			for p := 0; ; { // sift down
				c := 2*p + 1
				if c >= len(h) {
					break
				}
				if c+1 < len(h) && better(logits, h[c], h[c+1]) {
					c++
				}
				if !better(logits, h[p], h[c]) {
					break
				}
				h[p], h[c] = h[c], h[p]
				p = c
			}
			thr = logits[h[0]]
		}
	}
	slices.SortFunc(h, byRank(logits))
	s.heap = h
	return append(dst, h...)
}

// Top appends to dst the n most likely tokens of logits, best first (ties
// by id), and returns the extended slice; s's scratch is reused.
func (s *Sampler) Top(dst []int32, logits []float32, n int) []int32 {
	return s.top(dst, logits, min(n, len(logits)), -1)
}

// estimate is the distribution of the weights over the logits, as a
// sample of the tokens (one in sampleStride) shows it: their weights
// added in sampleBuckets equal ranges of (l-top)/T, as nucleus's
// buckets, with their squares for the sample's variance.
type estimate struct {
	w, q        [sampleBuckets]float64
	n           [sampleBuckets]int32 // the sampled tokens
	sw, sq      float64              // the sums of w and q
	total       float64              // the weight of all tokens
	top, inv, c float32              // the largest logit, 1/T and buckets per unit of (l-top)/T
}

const (
	sampleStride  = 32
	sampleBuckets = 256
)

// sample fills e from the logits and their weights w; total is the sum
// of w, top the largest logit, inv 1/T, and the buckets span (l-top)/T
// from 0 to -span (the last holding all below).
func (e *estimate) sample(logits, w []float32, top, inv, span float32, total float64) {
	clear(e.w[:])
	clear(e.q[:])
	clear(e.n[:])
	e.total, e.top, e.inv, e.c = total, top, inv, sampleBuckets/span
	for i := 0; i < len(logits); i += sampleStride {
		b, f := sampleBuckets-1, -(logits[i]-top)*inv*e.c
		if f < sampleBuckets-1 { // not -Inf's +Inf
			b = int(f)
		}
		x := float64(w[i])
		e.w[b] += x
		e.q[b] += x * x
		e.n[b]++
	}
	e.sw, e.sq = 0, 0
	for b := range e.w {
		e.sw += e.w[b]
		e.sq += e.q[b]
	}
}

// bounds returns a range of logits [lo, hi) that should hold the token
// where the weights in rank order reach need: the boundaries of buckets
// where the sample's estimate of that sum is below need, or above it, by
// three standard deviations of the estimate and 2·10⁻⁴ of the total (a
// miss costs cross another pass, not a wrong token). The estimate through
// a bucket is the sample's weight up to it, or the total less the
// sample's weight after it, whichever varies less. few reports that the
// sample suggests at most exactNucleus tokens at or above lo.
func (e *estimate) bounds(need float64) (lo, hi float32, few bool) {
	const sd = 3
	S := float64(sampleStride)
	hiB, loB := -1, sampleBuckets-1
	var hw, hq float64
	count := 0 // the sampled tokens up to bucket b
	for b := range sampleBuckets - 1 {
		hw += e.w[b]
		hq += e.q[b]
		count += int(e.n[b])
		est, v := S*hw, S*S*hq
		if tv := S * S * (e.sq - hq); tv < v {
			est, v = e.total-S*(e.sw-hw), tv
		}
		d := sd*math.Sqrt(v) + 2e-4*e.total
		if est+d < need {
			hiB = b
		}
		if est-d >= need {
			loB = b
			break
		}
	}
	inf := float32(math.Inf(1))
	lo, hi = -inf, inf
	if hiB >= 0 {
		hi = e.edge(hiB)
	}
	if loB < sampleBuckets-1 {
		lo = e.edge(loB)
	}
	return lo, hi, count*sampleStride <= exactNucleus
}

// edge returns the logit at the lower edge of bucket b.
func (e *estimate) edge(b int) float32 {
	return e.top - float32(b+1)/e.c/e.inv
}
