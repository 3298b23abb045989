package attention

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"

	"github.com/polysketch/polysketch/vec"
)

// HyperAttention's sampled part (see Hyper): the draws of the sampled
// key columns, uniform or ∝ ‖v‖², and the gradient of their log-weights.

// sample draws the sample sets of head bh, with vnorm from the prefix sums
// of ‖v_j‖², which it computes first.
func (a *hyperAttn) sample(bh int) {
	c := &a.call
	N, h, b := c.N, c.h, a.cfg.Block
	head := bh * N * h
	var vcum []float64
	if a.cfg.Sampling == SampleVNorm {
		vcum = a.vcum[bh*(N+1) : (bh+1)*(N+1)]
		v := a.v.Data[head : head+N*h]
		vcum[0] = 0
		for j := range N {
			var s float64
			for _, x := range v[j*h : (j+1)*h] {
				s += float64(x) * float64(x)
			}
			vcum[j+1] = vcum[j] + s
		}
	}
	s := a.cfg.Samples
	for set := range c.sets {
		i := bh*c.sets + set
		a.sampOK[i] = false
		past := N // keys to sample from
		if a.causal {
			past = set * b
			if !a.chunkApprox(set) {
				continue
			}
		}
		if past == 0 || s == 0 {
			continue
		}
		a.sampOK[i] = true
		a.draw(a.samp[i*s:(i+1)*s], a.lw[i*s:(i+1)*s], bh%c.H, set, past, vcum)
	}
}

// draw samples len(pos) key positions in [0, past) for sample set `set` of
// head hd, with their log-weights: uniform, or ∝ ‖v_j‖² by the prefix sums
// vcum. The stream depends on the seed, the head and the set only.
func (a *hyperAttn) draw(pos []int32, lw []float32, hd, set, past int, vcum []float64) {
	var rng rand.PCG
	rng.Seed(a.seed^0x6879706572736d70, uint64(hd)<<32|uint64(set)) // "hypersmp"
	s := len(pos)
	if vcum != nil && vcum[past] > 0 {
		z := vcum[past]
		for u := range pos {
			x := float64(rng.Uint64()>>11) / (1 << 53) * z
			// The first j with vcum[j+1] > x: its interval holds x.
			j, _ := slices.BinarySearch(vcum[1:past+1], x)
			for j < past-1 && vcum[j+1] <= x {
				j++
			}
			pos[u] = int32(j)
			lw[u] = float32(math.Log(z / (float64(s) * (vcum[j+1] - vcum[j]))))
		}
		return
	}
	w := float32(math.Log(float64(past) / float64(s)))
	for u := range pos {
		hi, _ := bits.Mul64(rng.Uint64(), uint64(past))
		pos[u], lw[u] = int32(hi), w
	}
}

// vnormDrawn reports whether the samples of block blk of head bh were
// drawn ∝ ‖v‖² (not uniformly, as when every v they cover is 0).
func (a *hyperAttn) vnormDrawn(bh, blk int) bool {
	c := &a.call
	past := c.N
	if a.causal {
		past = blk * a.cfg.Block
	}
	return a.vcum[bh*(c.N+1)+past] > 0
}

// logWeightGrads adds the gradient of the sampled columns' log-weights
// under vnorm to their dV rows in sc.dvg, from the logit gradients dp of
// the part's rows, and sums it for the normalizer Z (normalizerGrads).
func (a *hyperAttn) logWeightGrads(sc *hyperScratch, n, rows int, dp []float32, bh, blk int) {
	c := &a.call
	h := c.h
	head := bh * c.N * h
	v := a.v.Data[head : head+c.N*h]
	// lw_u = log Z − log s − log‖v_j‖²: its gradient reaches v_j
	// here and every v before the chunk through Z (reduceItem).
	glw := sc.glw[:n]
	clear(glw)
	for r := range rows {
		vec.Add(glw, glw, dp[r*n:(r+1)*n])
	}
	var sum float64
	for _, x := range glw {
		sum += float64(x)
	}
	a.gz[bh*c.nb+blk] += sum
	for u, j := range sc.kidx[:n] {
		vj := v[int(j)*h : int(j+1)*h]
		if n2 := vec.Dot(vj, vj); n2 > 0 { // drawn, so ‖v_j‖ > 0 unless float32 underflows
			vec.Axpy(-2*glw[u]/n2, vj, sc.dvg[u*h:(u+1)*h])
		}
	}
}

// normalizerGrads adds to dv, the rows from i0 of head bh, the gradient
// through the normalizers Z of the vnorm sampling distributions that
// cover them; v are their values.
func (a *hyperAttn) normalizerGrads(bh, i0 int, v, dv []float32) {
	c := &a.call
	N, b := c.N, a.cfg.Block
	// Z_c = Σ_{j<cb} ‖v_j‖² (causal) or Σ_j ‖v_j‖² (non-causal): each
	// sampled set's Z depends on every v it covers.
	vcum := a.vcum[bh*(N+1) : (bh+1)*(N+1)]
	var coef float64
	for set := range c.sets {
		past := N
		if a.causal {
			past = set * b
			if past <= i0 {
				continue // the rows of this block are not before the chunk
			}
		}
		if !a.sampOK[bh*c.sets+set] || vcum[past] <= 0 {
			continue
		}
		gz := a.gz[bh*c.nb+set]
		if !a.causal {
			gz = 0
			for blk := range c.nb {
				gz += a.gz[bh*c.nb+blk]
			}
		}
		coef += gz / vcum[past]
	}
	vec.Axpy(float32(2*coef), v, dv)
}
