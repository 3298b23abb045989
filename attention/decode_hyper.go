package attention

import (
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
)

// NewDecoder returns a decoder that reproduces causal Forward position by
// position: output i depends on q_i and the keys and values up to i only
// (see Hyper), so the decoder keeps a KV cache with each key's hash rank,
// and at the start of every chunk of Block positions it sorts the keys
// before the chunk by rank and draws the chunk's samples, as Forward does.
// A position then costs its chunk's part of Forward: O((b + s)·h) once
// past MinLength, O(n·h) before (where attention is exact), plus the
// sort, O(n + 2^hashes) per chunk. Memory grows as about 4·n·h floats
// per head (the cache and its sorted copy); the caches double when full.
func (a *hyperAttn) NewDecoder(B, H, h int) (Decoder, error) {
	if !a.causal {
		return nil, errNotCausal(a.Kind())
	}
	d := &hyperDecoder{a: newHyper(a.cfg, Setup{Causal: true, Seed: a.seed}), H: H, h: h,
		heads: make([]hyperHead, B*H)}
	d.a.setHeadSize(h)
	d.a.call.h = h
	d.stepFn = d.stepHead
	d.Reset()
	return d, nil
}

// hyperDecoder is the decoder of causal HyperAttention.
type hyperDecoder struct {
	a     *hyperAttn // its own instance: hyperplanes drawn from the same seed, scratch
	H, h  int
	n     int // positions consumed
	heads []hyperHead

	m          int // positions of the Step in progress
	o, q, k, v []float32
	stepFn     func(w, i int)
}

// hyperHead is the state of one head.
type hyperHead struct {
	k, v  []float32 // [cap×h] every key and value consumed
	rk    []int32   // [cap] the keys' Gray ranks
	vcum  []float64 // [cap+1] vnorm: prefix sums of ‖v_j‖²
	rq    []int32   // the ranks of the Step's queries
	chunk int       // the chunk the sorted keys and samples below belong to; −1: none

	sortK, posK []int32   // the keys before the chunk by (rank, position), each key's index there
	start, cnt  []int32   // per rank: where its keys start in sortK, how many
	ksrt, vsrt  []float32 // those keys and values in sortK's order
	samp        []int32   // the chunk's sampled keys
	lw          []float32
	sampled     bool
}

func (d *hyperDecoder) Len() int { return d.n }

func (d *hyperDecoder) Reset() {
	d.n = 0
	for i := range d.heads {
		d.heads[i].chunk = -1
	}
}

func (d *hyperDecoder) Step(o, q, k, v *tensor.Tensor) {
	m := checkStep("Decoder.Step", len(d.heads), d.h, o, q, k, v)
	workers := max(min(parallel.Threads(), len(d.heads)), 1)
	d.a.ensureScratch(workers, d.a.cfg.Block, d.h, d.a.cfg.Block+2)
	d.m, d.o, d.q, d.k, d.v = m, o.Data, q.Data, k.Data, v.Data
	parallel.Run(len(d.heads), workers, d.stepFn)
	d.n += m
	d.o, d.q, d.k, d.v = nil, nil, nil, nil
}

// stepHead consumes the Step's positions of head bh: it appends their keys
// and values to the cache, then computes their outputs chunk by chunk.
func (d *hyperDecoder) stepHead(w, bh int) {
	a, hd, h, m, n0 := d.a, &d.heads[bh], d.h, d.m, d.n
	b := a.cfg.Block
	sc := a.sc[w]
	hd.grow(n0+m, h)
	span := func(x []float32) []float32 { return x[bh*m*h : (bh+1)*m*h] }
	q, k, v, o := span(d.q), span(d.k), span(d.v), span(d.o)
	copy(hd.k[n0*h:], k)
	copy(hd.v[n0*h:], v)
	a.hash(sc, k, hd.rk[n0:n0+m], m, h)
	hd.rq = growInt32(hd.rq, m)
	a.hash(sc, q, hd.rq, m, h)
	for j := n0; j < n0+m; j++ {
		var s float64
		for _, x := range hd.v[j*h : (j+1)*h] {
			s += float64(x) * float64(x)
		}
		hd.vcum[j+1] = hd.vcum[j] + s
	}
	for pos := n0; pos < n0+m; {
		c := pos / b
		end := min((c+1)*b, n0+m)
		if hd.chunk != c {
			d.build(hd, bh, c)
		}
		vw := hyperView{N: end, lo: pos, qOff: n0, q: q, k: hd.k[:end*h], v: hd.v[:end*h],
			rankQ: hd.rq, rankK: hd.rk[:end], cnt: hd.cnt, sortK: hd.sortK, posK: hd.posK,
			start: hd.start, ksrt: hd.ksrt, vsrt: hd.vsrt}
		if hd.sampled {
			vw.samp, vw.lw = hd.samp, hd.lw
		}
		n := a.forwardRows(sc, &vw, c)
		for r, i := range sc.pos[:n] {
			copy(o[(int(i)-n0)*h:(int(i)-n0+1)*h], sc.og[r*h:])
		}
		pos = end
	}
}

// build sorts the keys before chunk c by rank and draws the chunk's
// samples, as Forward's preparation does for the whole sequence.
func (d *hyperDecoder) build(hd *hyperHead, bh, c int) {
	a, h := d.a, d.h
	hd.chunk, hd.sampled = c, false
	if !a.chunkApprox(c) || c == 0 {
		return // exact chunks need no sort
	}
	cb := c * a.cfg.Block
	R := 1 << a.cfg.Hashes
	hd.sortK, hd.posK = growInt32(hd.sortK, cb), growInt32(hd.posK, cb)
	hd.start, hd.cnt = growInt32(hd.start, R+1), growInt32(hd.cnt, R)
	countingSort(hd.rk[:cb], R, hd.start, hd.sortK, hd.posK)
	for r := range R {
		hd.cnt[r] = hd.start[r+1] - hd.start[r]
	}
	hd.ksrt, hd.vsrt = tensor.Grow(hd.ksrt, cb*h), tensor.Grow(hd.vsrt, cb*h)
	for at, j := range hd.sortK {
		copy(hd.ksrt[at*h:(at+1)*h], hd.k[int(j)*h:])
		copy(hd.vsrt[at*h:(at+1)*h], hd.v[int(j)*h:])
	}
	if s := a.cfg.Samples; s > 0 {
		var vcum []float64
		if a.cfg.Sampling == SampleVNorm {
			vcum = hd.vcum[:cb+1]
		}
		hd.samp, hd.lw = growInt32(hd.samp, s), tensor.Grow(hd.lw, s)
		a.draw(hd.samp, hd.lw, bh%d.H, c, cb, vcum)
		hd.sampled = true
	}
}

// grow makes room for n positions, doubling the caches.
func (hd *hyperHead) grow(n, h int) {
	if n <= len(hd.rk) {
		return
	}
	size := max(16, 2*len(hd.rk), n)
	k, v := make([]float32, size*h), make([]float32, size*h)
	copy(k, hd.k)
	copy(v, hd.v)
	rk, vcum := make([]int32, size), make([]float64, size+1)
	copy(rk, hd.rk)
	copy(vcum, hd.vcum)
	hd.k, hd.v, hd.rk, hd.vcum = k, v, rk, vcum
}
