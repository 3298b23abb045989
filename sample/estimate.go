package sample

import (
	"math"
)

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
