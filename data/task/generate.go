package task

import (
	"math"
	"math/rand/v2"
	"slices"
)

// selectiveCopy is the S4/Mamba selective-copying task: Count data tokens
// (1…Vocab−2) scattered at sorted random positions among the first
// Length−Count slots, the rest noise (0), then Count markers (Vocab−1).
// At the i-th marker the target is the i-th data token.
func (s Spec) selectiveCopy(rng *rand.Rand, ex *Example) {
	reset(ex, s.Length)
	slots := s.Length - s.Count
	// Count distinct positions (Floyd's algorithm), in order.
	pos := make([]int, 0, s.Count)
	for j := slots - s.Count; j < slots; j++ {
		t := rng.IntN(j + 1)
		if slices.Contains(pos, t) {
			t = j
		}
		pos = append(pos, t)
	}
	slices.Sort(pos)
	marker := int32(s.Vocab - 1)
	for i, p := range pos {
		tok := 1 + int32(rng.IntN(s.Vocab-2))
		ex.Tokens[p] = tok
		ex.Tokens[slots+i] = marker
		ex.Targets[slots+i] = tok
	}
}

// inductionHeads is 003 App. F.2: random tokens 0…Vocab−1; the special
// token (Vocab) replaces a random position but the last three and the
// second to last; the last is the token that followed the first special
// token. The target, at the second special token, is that last token.
func (s Spec) inductionHeads(rng *rand.Rand, ex *Example) {
	reset(ex, s.Length)
	n := s.Length
	for i := range ex.Tokens {
		ex.Tokens[i] = int32(rng.IntN(s.Vocab))
	}
	special := int32(s.Vocab)
	at := rng.IntN(n - 3)
	ex.Tokens[at] = special
	ex.Tokens[n-2] = special
	ex.Tokens[n-1] = ex.Tokens[at+1]
	ex.Targets[n-2] = ex.Tokens[n-1]
}

// powerA is the exponent of the power law of MQAR's query gaps (zoology's
// default): a gap g is drawn with weight (g+1)^(a−1), so queries cluster
// close after the key-value pairs.
const powerA = 0.01

// mqar is multi-query associative recall in the zoology convention: Count
// pairs k v of distinct keys (1…Vocab/2−1) and distinct values
// (Vocab/2…Vocab−1), then every key again, each followed by its value, at
// even offsets drawn from a power law, noise (0) elsewhere. The target at
// each queried key is its value.
func (s Spec) mqar(rng *rand.Rand, ex *Example) {
	reset(ex, s.Length)
	half := s.Vocab / 2
	keys := pick(rng, half-1, s.Count)
	vals := pick(rng, s.Vocab-half, s.Count)
	for i := range s.Count {
		ex.Tokens[2*i] = int32(1 + keys[i])
		ex.Tokens[2*i+1] = int32(half + vals[i])
	}
	start := 2 * s.Count
	space := (s.Length - start) / 2
	w := make([]float64, space)
	for g := range w {
		w[g] = math.Pow(float64(g+1), powerA-1)
	}
	for i := range s.Count {
		g := weighted(rng, w)
		w[g] = 0 // without replacement
		p := start + 2*g
		ex.Tokens[p], ex.Tokens[p+1] = ex.Tokens[2*i], ex.Tokens[2*i+1]
		ex.Targets[p] = ex.Tokens[2*i+1]
	}
}

// pick returns k distinct integers of [0, n) in random order.
func pick(rng *rand.Rand, n, k int) []int {
	p := rng.Perm(n)
	return p[:k]
}

// weighted draws an index with probability proportional to w.
func weighted(rng *rand.Rand, w []float64) int {
	var sum float64
	for _, v := range w {
		sum += v
	}
	u := rng.Float64() * sum
	last := 0
	for i, v := range w {
		if v == 0 {
			continue
		}
		last = i
		if u < v {
			return i
		}
		u -= v
	}
	return last // rounding
}

// reversal is the thesis's sequence reversal (§5) for a decoder: Count
// random digits (0…Vocab−1), a separator (Vocab), then the digits
// reversed; from the separator on, the target at each position is the
// next digit of the reversed sequence. Positions after 2·Count are
// padding.
func (s Spec) reversal(rng *rand.Rand, ex *Example) {
	reset(ex, s.Length)
	L := s.Count
	for i := range L {
		ex.Tokens[i] = int32(rng.IntN(s.Vocab))
	}
	ex.Tokens[L] = int32(s.Vocab)
	for j := range L {
		d := ex.Tokens[L-1-j]
		ex.Targets[L+j] = d
		if j < L-1 {
			ex.Tokens[L+1+j] = d
		}
	}
}

// mirror is the thesis's sequence reversal for an encoder-only model
// (§5): Count random digits, and at each position i the target is the
// digit at position Count−1−i.
func (s Spec) mirror(rng *rand.Rand, ex *Example) {
	reset(ex, s.Length)
	for i := range s.Count {
		ex.Tokens[i] = int32(rng.IntN(s.Vocab))
	}
	for i := range s.Count {
		ex.Targets[i] = ex.Tokens[s.Count-1-i]
	}
}
