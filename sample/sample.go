// Package sample draws tokens from a language model's logits: the most
// likely one at temperature 0, else one drawn from softmax(logits/T) cut
// to the top k and then to the smallest set of probability top p
// (nucleus), with the caller's generator, so that the tokens depend on the
// logits and the seed alone; the logits may first be changed by a bias
// and by penalties on the tokens already drawn (penalty.go). Logits that
// are not finite are an error, never a token. generate and serve share
// it, and the validation of its Settings.
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
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/polysketch/polysketch/vec"
)

// Sampler draws the tokens of one sequence.
type Sampler struct {
	Settings
	Rand *rand.Rand // the source of the draws

	counts   map[int32]int // times each token was drawn, for the penalties
	adjusted []float32     // the logits with the bias and penalties

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

// New returns a Sampler drawing by set with rng. The settings must be
// valid (Settings.Validate).
func New(set Settings, rng *rand.Rand) *Sampler {
	return &Sampler{Settings: set, Rand: rng}
}

// Next returns a token id drawn from logits, and counts it as drawn (for
// the penalties). Logits that are not all finite are an error (a
// *NonFiniteError): a model whose outputs overflow has no distribution
// to draw from.
//
// With top k or top p the token is drawn by walking the candidates most
// likely first (ties by id), as a sort of the whole vocabulary would
// order them. Plain temperature sampling walks the tokens in id order
// instead, which draws from the same distribution without ordering it.
func (s *Sampler) Next(logits []float32) (int32, error) {
	if err := CheckFinite(logits); err != nil {
		return 0, err
	}
	id := s.next(s.adjust(logits))
	s.drawn(id)
	return id, nil
}

// A NonFiniteError is a row of logits holding NaN or an infinity.
type NonFiniteError struct {
	Token int32   // the first token whose logit is not finite
	Logit float32 // its logit
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("the model's logits are not finite (token %d: %v): its weights or activations overflow", e.Token, e.Logit)
}

// CheckFinite returns a *NonFiniteError if a logit is NaN or infinite.
// It costs a vectorized sum when they are finite.
func CheckFinite(logits []float32) error {
	if i := vec.NonFinite(logits); i >= 0 {
		return &NonFiniteError{Token: int32(i), Logit: logits[i]}
	}
	return nil
}

// next draws a token from finite logits.
func (s *Sampler) next(logits []float32) int32 {
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
