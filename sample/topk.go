package sample

import (
	"math"
	"slices"

	"github.com/polysketch/polysketch/vec"
)

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
