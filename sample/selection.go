package sample

import (
	"math"
	"slices"
)

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
