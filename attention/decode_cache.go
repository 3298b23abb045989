package attention

import (
	"math"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

func (a *softmaxAttn) NewDecoder(B, H, h int) (Decoder, error) {
	if !a.causal {
		return nil, errNotCausal(a.Kind())
	}
	return newCacheDecoder(B, H, h, 0), nil
}

func (a flashAttn) NewDecoder(B, H, h int) (Decoder, error) {
	if !a.causal {
		return nil, errNotCausal(a.Kind())
	}
	return newCacheDecoder(B, H, h, 0), nil
}

func (a polynomialAttn) NewDecoder(B, H, h int) (Decoder, error) {
	if !a.causal {
		return nil, errNotCausal(a.Kind())
	}
	return newCacheDecoder(B, H, h, a.weights.(polyWeighting).p), nil
}

func (a *squarePolyAttn) NewDecoder(B, H, h int) (Decoder, error) {
	if !a.causal {
		return nil, errNotCausal(a.Kind())
	}
	d := newCacheDecoder(B, H, h, 0)
	d.weights = a.weights.(*squareWeighting).weighRow
	return d, nil
}

// cacheDecoder is a KV cache, one per key/value head: position n attends
// to the keys and values of positions 0…n. With grouped-query attention
// (group > 1) query head i reads key/value head i/group, so that the cache
// holds B·H/group heads, not B·H.
type cacheDecoder struct {
	bh, h  int
	group  int       // query heads per key/value head
	bkv    int       // key/value heads, bh/group
	degree int       // 0 for softmax, else the degree p of polynomial weights
	scale  float32   // softmax: 1/√h, as the mechanisms scale q·k
	n      int       // positions consumed
	size   int       // positions the cache holds before it must grow
	k, v   []float32 // [bkv × size × h]
	w      []float32 // [bh × size] attention weights of a one-position step

	chunk  int       // positions of the Step in progress
	scores []float32 // chunks: per worker, [chunk × (n+chunk)] weights

	o, q    []float32      // the Step in progress
	stepFn  func(w, i int) // bound once: handing it to the pool allocates nothing
	chunkFn func(w, i int)

	// weights, if set, turns a row of scores into its weights in place
	// (sqpoly), in place of softmax or (q·k)^p.
	weights func([]float32)
}

func newCacheDecoder(B, H, h, degree int) *cacheDecoder {
	d := &cacheDecoder{bh: B * H, bkv: B * H, group: 1, h: h, degree: degree, scale: float32(1 / math.Sqrt(float64(h)))}
	d.stepFn, d.chunkFn = d.stepHead, d.chunkHead
	return d
}

func (d *cacheDecoder) Len() int { return d.n }
func (d *cacheDecoder) Reset()   { d.n = 0 }

// groups makes the empty cache one of grouped-query attention, whose
// Steps take keys and values of bh/group heads.
func (d *cacheDecoder) groups(group int) {
	d.group, d.bkv = group, d.bh/group
}

func (d *cacheDecoder) Step(o, q, k, v *tensor.Tensor) {
	n := checkGroupedStep("Decoder.Step", d.bh, d.bkv, d.h, o, q, k, v)
	if d.n+n > d.size {
		d.grow(max(16, 2*d.size, d.n+n))
	}
	// The new keys and values first, every head's, since the query heads
	// of a group read them in parallel below.
	h := d.h
	for j := range d.bkv {
		at := (j*d.size + d.n) * h
		copy(d.k[at:at+n*h], k.Data[j*n*h:(j+1)*n*h])
		copy(d.v[at:at+n*h], v.Data[j*n*h:(j+1)*n*h])
	}
	d.o, d.q = o.Data, q.Data
	total := d.n + n
	if n == 1 {
		parallel.Run(d.bh, stepWorkers(d.bh, d.bh*total*d.h), d.stepFn)
	} else {
		workers := stepWorkers(d.bh, d.bh*n*total*d.h)
		d.chunk = n
		d.scores = tensor.Grow(d.scores, workers*n*total)
		parallel.Run(d.bh, workers, d.chunkFn)
	}
	d.o, d.q = nil, nil
	d.n = total
}

// grow moves the cache to room for size positions per head.
func (d *cacheDecoder) grow(size int) {
	h := d.h
	k, v := make([]float32, d.bkv*size*h), make([]float32, d.bkv*size*h)
	for i := 0; i < d.bkv; i++ {
		copy(k[i*size*h:], d.k[i*d.size*h:(i*d.size+d.n)*h])
		copy(v[i*size*h:], d.v[i*d.size*h:(i*d.size+d.n)*h])
	}
	d.k, d.v, d.w, d.size = k, v, make([]float32, d.bh*size), size
}

// weigh turns the scores q·k of one position against the keys it sees
// into its attention weights, in place.
func (d *cacheDecoder) weigh(w []float32) {
	if d.weights != nil {
		d.weights(w)
		return
	}
	if d.degree == 0 {
		vec.Scale(d.scale, w)
		vec.Softmax(w)
		return
	}
	for j, s := range w {
		w[j] = ipow(s, d.degree)
	}
	vec.Scale(1/(1+vec.Sum(w)), w)
}

// stepHead computes query head i's output.
func (d *cacheDecoder) stepHead(_, i int) {
	h, n := d.h, d.n
	base := i / d.group * d.size * h
	keys, vals := d.k[base:base+(n+1)*h], d.v[base:base+(n+1)*h]
	q, o := d.q[i*h:(i+1)*h], d.o[i*h:(i+1)*h]
	w := d.w[i*d.size : i*d.size+n+1]
	for j := range w {
		w[j] = vec.Dot(q, keys[j*h:(j+1)*h])
	}
	d.weigh(w)
	clear(o)
	for j, wj := range w {
		vec.Axpy(wj, vals[j*h:(j+1)*h], o)
	}
}

// chunkHead computes query head i's outputs of the chunk: S = Q·Kᵀ
// against the whole cache, each row weighed over the keys it sees and
// zeroed beyond (the causal mask), then O = W·V.
func (d *cacheDecoder) chunkHead(w, i int) {
	h, n0, n := d.h, d.n, d.chunk
	total := n0 + n
	base := i / d.group * d.size * h
	keys, vals := d.k[base:base+total*h], d.v[base:base+total*h]
	q, o := d.q[i*n*h:(i+1)*n*h], d.o[i*n*h:(i+1)*n*h]
	s := d.scores[w*n*total : (w+1)*n*total]
	blas.SgemmSerial(blas.NoTrans, blas.Trans, 1, blas.NewGeneral(n, h, q), blas.NewGeneral(total, h, keys), 0, blas.NewGeneral(n, total, s))
	for t := 0; t < n; t++ {
		row := s[t*total : (t+1)*total]
		d.weigh(row[:n0+t+1])
		clear(row[n0+t+1:])
	}
	blas.SgemmSerial(blas.NoTrans, blas.NoTrans, 1, blas.NewGeneral(n, total, s), blas.NewGeneral(total, h, vals), 0, blas.NewGeneral(n, h, o))
}
