package attention

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// Hyper is HyperAttention (Han et al. 2023; lecture notes 002 §1.2): an
// approximation of softmax attention exp(q·k/√h) that finds the heavy
// entries of each row with sortLSH and estimates the rest by sampling.
//
// sortLSH. Each row x gets the bucket of the sign bits of x·P, P an
// [h × hashes] Gaussian matrix drawn from the layer's seed (shared by the
// heads); the buckets are ordered along the Gray code, so that neighbours
// in the order differ in one bit (rank = inverse Gray code of the bits).
//
// Non-causal (N > MinLength). Queries and keys are sorted by rank
// separately (stable: ties by position) and cut into blocks of Block; query
// block t gets exact attention with key block t. Samples key columns j_1…
// j_s, drawn per head from the seed, estimate the rest: column j_u
// carries the log-weight log(N/s) (uniform) or log(Z/(s‖v_j‖²)) with
// Z = Σ‖v‖² (vnorm, columns drawn ∝ ‖v_j‖²), and a sampled column that
// lies in the query's own key block is masked, so that no column counts
// twice (the authors' pure-PyTorch path drops this mask). All columns of a
// row go through one online softmax, which is the log-sum-exp merge of the
// block and sampled parts; rows are written back in their original order.
//
// Causal. The authors' recursion picks a query's block by its rank among
// the queries of a half, so position i depends on the queries after it.
// Here a query's key block is chosen by its own rank among past keys only.
// Positions are cut into chunks of Block; a query i in chunk c (positions
// [cb, cb+b)) sees
//
//   - its own chunk exactly, keys cb…i;
//   - if fewer than MinLength keys precede the chunk (cb < MinLength),
//     every earlier key exactly: below MinLength attention is exact;
//   - otherwise one block of past keys exactly: the keys 0…cb−1 sorted by
//     (rank, position) and cut into blocks of Block, the block being the
//     one where the query's rank falls (the middle of its bucket);
//   - and Samples past keys drawn for the chunk from the seed, the head
//     and c (uniformly from 0…cb−1 or ∝ ‖v_j‖² over them), weighted as
//     above and masked when they lie in the query's past key block.
//
// Every choice uses q_i and positions before cb ≤ i only, and the draws
// depend on the seed, the head and the chunk, never on the data after i
// (nor on the batch index, so a sequence's output does not depend on its
// slot in a batch): output i depends on nothing after i, and its value
// does not depend on the sequence length N either.
//
// In the causal form the number of blocks per position is fixed (its own
// chunk, one past block, the samples), so the estimate of the far past
// rests on Samples columns however long the sequence: the error grows with
// N where attention is diffuse, as the non-causal form's does. Samples are
// drawn with replacement; vnorm never draws a key whose value is 0, so
// such keys are missing from its estimate of the row sums (uniform
// sampling is unbiased for both). The decoder (NewDecoder) reproduces
// Forward. Cost per head: O(N·(2b + s)·h) past MinLength (causal: exact
// O(MinLength²·h) before), plus the hashes, O(N·h·hashes), and counting
// sorts, O(N + 2^hashes) per causal chunk.
//
// Backward differentiates the approximation as computed: the sort and
// the sampled columns are those of the forward pass; with vnorm the
// log-weights are differentiated as functions of v.
const Hyper Kind = "hyper"

// HyperConfig configures HyperAttention.
type HyperConfig struct {
	Hashes    int    `json:"hashes" help:"hash bits of sortLSH: 2^hashes buckets in Gray-code order (1…12)"`
	Block     int    `json:"block" help:"rows per block of exact attention in the sorted order (and per causal chunk)"`
	Samples   int    `json:"samples" help:"key columns sampled for the rest of each row: per head (non-causal) or per chunk (causal); 0: blocks only"`
	MinLength int    `json:"min_length" help:"exact attention below this length (causal: for chunks with fewer keys before them)"`
	Sampling  string `json:"sampling" help:"how key columns are sampled: uniform, or vnorm (∝ ‖v‖², as the notes propose)"`
}

// The sampling schemes of HyperConfig.Sampling.
const (
	SampleUniform = "uniform"
	SampleVNorm   = "vnorm"
)

func (HyperConfig) Mechanism() string { return string(Hyper) }

func (c HyperConfig) Validate() error {
	var errs []error
	if c.Hashes < 1 || c.Hashes > 12 {
		errs = append(errs, fmt.Errorf("--hashes %d: must be between 1 and 12 (7 is the default)", c.Hashes))
	}
	if c.Samples < 0 {
		errs = append(errs, fmt.Errorf("--samples %d: must be 0 (blocks only) or positive (256 is the default)", c.Samples))
	}
	if c.MinLength < 0 {
		errs = append(errs, fmt.Errorf("--min-length %d: must be 0 or positive (4096 is the default)", c.MinLength))
	}
	if c.Sampling != SampleUniform && c.Sampling != SampleVNorm {
		errs = append(errs, fmt.Errorf("--sampling %q: use %s or %s", c.Sampling, SampleUniform, SampleVNorm))
	}
	return errors.Join(append(errs, checkBlock(c.Block))...)
}

func init() {
	Register(Entry{
		Name: string(Hyper), Order: 140, Cost: "O(N·(b + s)·h)",
		Summary:    "HyperAttention: sortLSH blocks exact, sampled columns for the rest; causal by past keys only",
		Properties: Properties{Linear: true, ContextLimit: true},
		Default: func() Config {
			return HyperConfig{Hashes: 7, Block: 256, Samples: 256, MinLength: 4096, Sampling: SampleUniform}
		},
		New: func(c Config, s Setup) (Mechanism, error) { return newHyper(c.(HyperConfig), s), nil },
	})
}

// hyperAttn is HyperAttention. Forward runs over (head, block) items, each
// owning the output rows of one block of queries (sorted block or causal
// chunk). Backward runs over (head, group) items, each taking every G-th
// block of a head and owning a partial dK and dV (dk and dv themselves
// for group 0), summed in a fixed order afterwards: the split depends on
// the shape alone, so results are bitwise identical whatever GOMAXPROCS.
type hyperAttn struct {
	cfg    HyperConfig
	causal bool
	seed   uint64
	proj   []float32 // [h × hashes] hyperplanes, column u is the normal of bit u
	projH  int       // head size proj was drawn for

	q, k, v *tensor.Tensor
	call    hyperCall

	// Saved by Forward for Backward, per head.
	o      []float32 // [BH·N·h] copy of the output
	lse    []float32 // [BH·N] log Σ of each row's weights
	rankQ  []int32   // [BH·N] Gray rank of each query's bucket
	rankK  []int32   // [BH·N] and of each key's
	sortQ  []int32   // [BH·N] query positions by (rank, position); non-causal
	sortK  []int32   // [BH·N] key positions by (rank, position)
	posK   []int32   // [BH·N] index of each key in sortK
	ksrt   []float32 // [BH·N·h] the keys in the order of sortK
	vsrt   []float32 // [BH·N·h] and the values
	start  []int32   // [BH·(R+1)] where each rank's keys start in sortK
	hist   []int32   // [BH·nb·R] causal: key ranks counted over positions before each chunk
	vcum   []float64 // [BH·(N+1)] vnorm: prefix sums of ‖v_j‖²
	samp   []int32   // [BH·sets·s] sampled key positions
	lw     []float32 // [BH·sets·s] their log-weights
	sampOK []bool    // [BH·sets] whether the set was drawn (causal chunks without past have none)

	// Backward buffers.
	dkp, dvp []float32 // partial dK, dV: see backwardItem
	gz       []float64 // [BH·nb] vnorm: Σ of the logit gradients of each block's samples

	sc   []*hyperScratch
	team team

	prepFn, forwardFn, backwardFn, reduceFn func(w, i int)
}

// hyperCall holds the sizes and tensors of the call in progress.
type hyperCall struct {
	B, H, N, h     int
	nb             int  // blocks (chunks) per head
	sets           int  // sample sets per head: 1, or nb (causal)
	groups         int  // backward groups per head
	exact          bool // non-causal and N ≤ MinLength: exact attention
	out            []float32
	dq, dk, dv, do []float32
}

// hyperScratch is one worker's buffers.
type hyperScratch struct {
	pos              []int32 // b: positions of the item's query rows, in processing order
	grp              []int32 // b: each row's key block (sorted order)
	keys             []int64 // b: sort keys of the rows
	order            []int32 // b: causal: the rows ordered by (key block, position)
	kidx             []int32 // max(b,s): positions of a gathered key part
	blk              []int32 // s: key block of each sampled column (−1: none)
	cum              []int32 // R+1: cumulative rank counts of a chunk's past keys
	parts            []hyperPart
	qg, og, dog, dqg []float32 // b×h: gathered q rows, output, dO, dQ
	qb, db, tb       []float32 // hyperRows×h: a causal batch's q, dO and a product
	kg, vg, dkg, dvg []float32 // max(b,s)×h: gathered keys and values, their gradients
	s, dp            []float32 // b×max(b,s) scores, dP
	m, l, delta      []float32 // b row statistics
	proj             []float32 // b×hashes projections
	glw              []float32 // s: logit gradients of the sampled columns
	ones             []float32 // max(b,s)
}

// hyperView is what the computation of one block of one head reads:
// Forward and Backward make it from their saved arrays, the decoder from
// its caches (whose sorted keys then cover the keys before the block only).
type hyperView struct {
	N       int       // positions in the sequence (so far)
	lo      int       // causal: the first row to compute; earlier rows of the block are left out
	qOff    int       // q and rankQ hold the rows from position qOff on
	q, k, v []float32 // [·×h] rows of the head
	rankQ   []int32   // Gray ranks of the queries (from qOff on) and keys
	rankK   []int32
	sortQ   []int32 // non-causal: query positions by (rank, position)
	cnt     []int32 // causal: rank counts of the keys before the block
	sortK   []int32 // key positions by (rank, position)
	posK    []int32 // index of each key in sortK
	start   []int32 // where each rank's keys start in sortK
	ksrt    []float32
	vsrt    []float32
	samp    []int32   // the block's sampled key positions; nil: none
	lw      []float32 // their log-weights
}

// view returns the view of block blk of head bh in the call in progress.
func (a *hyperAttn) view(bh, blk int) hyperView {
	c := &a.call
	N, h := c.N, c.h
	head := bh * N * h
	vw := hyperView{N: N, q: a.q.Data[head : head+N*h], k: a.k.Data[head : head+N*h], v: a.v.Data[head : head+N*h]}
	if !a.approx(N) {
		return vw
	}
	R := 1 << a.cfg.Hashes
	rows := func(x []int32) []int32 { return x[bh*N : (bh+1)*N] }
	vw.rankQ, vw.rankK, vw.sortK, vw.posK = rows(a.rankQ), rows(a.rankK), rows(a.sortK), rows(a.posK)
	if a.causal {
		vw.cnt = a.hist[(bh*c.nb+blk)*R : (bh*c.nb+blk+1)*R]
	} else {
		vw.sortQ = rows(a.sortQ)
	}
	vw.start = a.start[bh*(R+1) : (bh+1)*(R+1)]
	vw.ksrt, vw.vsrt = a.ksrt[head:head+N*h], a.vsrt[head:head+N*h]
	if set := bh*c.sets + min(blk, c.sets-1); a.sampOK[set] {
		s := a.cfg.Samples
		vw.samp, vw.lw = a.samp[set*s:(set+1)*s], a.lw[set*s:(set+1)*s]
	}
	return vw
}

// hyperPart is one set of key columns a range of the item's rows attends to.
type hyperPart struct {
	r0, r1 int // rows [r0, r1) of the item; causal partBlock: of sc.order
	kind   int // partRange, partBlock, partSamples
	j0, n  int // partRange: keys [j0, j0+n); partBlock: key block j0 (n keys)
	causal bool
	// Causal partBlock: the first and last batch of rows of the block.
	first, last bool
}

// hyperRows is the number of rows of a causal key block's batches. The
// rows of a chunk that share a past key block run in batches of exactly
// this many (padded), in position order: a row's batch and the shapes of
// its products depend on the rows before it only, which keeps causal
// outputs bit-identical whatever follows (a product's rounding may depend
// on its shape).
const hyperRows = 8

const (
	partRange   = iota // contiguous key positions
	partBlock          // a block of keys in sorted order
	partSamples        // the sampled columns
)

func newHyper(cfg HyperConfig, s Setup) *hyperAttn {
	a := &hyperAttn{cfg: cfg, causal: s.Causal, seed: s.Seed}
	a.prepFn, a.forwardFn, a.backwardFn, a.reduceFn = a.prepItem, a.forwardItem, a.backwardItem, a.reduceItem
	return a
}

func (a *hyperAttn) Kind() Kind { return Hyper }

// SetHeadSize draws the hash hyperplanes for heads of size h.
func (a *hyperAttn) SetHeadSize(h int) {
	if a.projH == h {
		return
	}
	a.projH = h
	a.proj = make([]float32, h*a.cfg.Hashes)
	rng := rand.New(rand.NewPCG(a.seed, 0x68797065726c7368)) // "hyperlsh"
	for i := range a.proj {
		a.proj[i] = float32(rng.NormFloat64())
	}
}

// SketchMatrices returns the random draws of the last Forward, so that
// another implementation can reproduce its output: "lsh", the [h, hashes]
// hyperplanes, and for approximated sequences "samples" and
// "sample_logweights", [B, H, sets, s], the sampled key positions and
// their log-weights (sets = 1, or one per causal chunk; chunks that
// sampled nothing have position −1).
func (a *hyperAttn) SketchMatrices() map[string]*tensor.Tensor {
	if a.proj == nil {
		return nil
	}
	m := map[string]*tensor.Tensor{"lsh": tensor.From(slices.Clone(a.proj), a.projH, a.cfg.Hashes)}
	if a.q == nil || a.cfg.Samples == 0 {
		return m
	}
	B, H, N := a.q.Shape[0], a.q.Shape[1], a.q.Shape[2]
	_, sets := a.blocks(N)
	if !a.approx(N) {
		return m
	}
	s := a.cfg.Samples
	pos, lw := tensor.New(B, H, sets, s), tensor.New(B, H, sets, s)
	for i := range B * H * sets {
		for u := range s {
			if a.sampOK[i] {
				pos.Data[i*s+u], lw.Data[i*s+u] = float32(a.samp[i*s+u]), a.lw[i*s+u]
			} else {
				pos.Data[i*s+u] = -1
			}
		}
	}
	m["samples"], m["sample_logweights"] = pos, lw
	return m
}

// blocks returns the blocks per head and the sample sets per head for
// sequences of length N.
func (a *hyperAttn) blocks(N int) (nb, sets int) {
	nb = (N + a.cfg.Block - 1) / a.cfg.Block
	if a.causal {
		return nb, nb
	}
	return nb, 1
}

// approx reports whether some block of a sequence of length N is
// approximated.
func (a *hyperAttn) approx(N int) bool {
	if a.causal {
		nb, _ := a.blocks(N)
		return (nb-1)*a.cfg.Block >= a.cfg.MinLength
	}
	return N > a.cfg.MinLength
}

// chunkApprox reports whether causal chunk c is approximated.
func (a *hyperAttn) chunkApprox(c int) bool { return c*a.cfg.Block >= a.cfg.MinLength }

// groups returns how many backward groups each head's blocks are split
// into (see backwardItems).
func (a *hyperAttn) groups(B, H, N int) int {
	nb, _ := a.blocks(N)
	g := 1
	if bh := B * H; bh > 0 && bh < backwardItems {
		g = (backwardItems + bh - 1) / bh
	}
	return max(min(g, nb), 1)
}

func (a *hyperAttn) workers(B, H, N int) int {
	nb, _ := a.blocks(N)
	return max(min(runtime.GOMAXPROCS(0), B*H*nb), 1)
}

// hyperSizes are the element counts of the buffers held for a shape.
type hyperSizes struct {
	heads, rows, ranks, starts, hist, vcum, samp, sets, partial, gz int
	perWorker32, perWorker64, parts, workers                        int
}

func (a *hyperAttn) sizes(B, H, N, h int) hyperSizes {
	bhN := B * H * N
	nb, sets := a.blocks(N)
	b, s, R := min(a.cfg.Block, N), a.cfg.Samples, 1<<a.cfg.Hashes
	z := hyperSizes{heads: bhN * h, rows: bhN, workers: a.workers(B, H, N)}
	if a.approx(N) {
		z.ranks = bhN
		z.starts = B * H * (R + 1)
		if a.causal {
			z.hist = B * H * nb * R
		}
		if a.cfg.Sampling == SampleVNorm {
			z.vcum = B * H * (N + 1)
			z.gz = B * H * nb
		}
		z.samp, z.sets = B*H*sets*s, B*H*sets
	}
	z.partial = (a.groups(B, H, N) - 1) * bhN * h
	if a.approx(N) {
		z.partial += bhN * h // every group keeps its own, in sorted order
	}
	w := max(b, s)
	// 32-bit words per worker: pos, grp, keys (2), order, kidx, blk, cum;
	// eleven row or key matrices, two score tiles, three row vectors, the
	// projections, glw and ones.
	z.perWorker32 = b + b + 2*b + b + w + s + R + 1 + 4*b*h + 3*hyperRows*h + 4*w*h + 2*max(b, hyperRows)*w + 3*b + b*a.cfg.Hashes + s + w
	z.parts = max(nb+2, b+2)
	return z
}

// Workspace counts the saved output and row statistics, the ranks and
// sorted orders of queries and keys, the causal rank histograms, the
// samples, the partial dK and dV of the backward groups and each thread's
// buffers.
func (a *hyperAttn) Workspace(B, H, N, h int) int64 {
	z := a.sizes(B, H, N, h)
	n32 := int64(z.heads) + 2*int64(z.rows) + (5+2*int64(h))*int64(z.ranks) + int64(z.starts) + int64(z.hist) +
		2*int64(z.samp) + 2*int64(z.partial) + int64(z.perWorker32)*int64(z.workers)
	n64 := int64(z.vcum) + int64(z.gz)
	partBytes := int64(z.parts) * 6 * 8 // hyperPart: five ints and two bools
	proj := int64(h * a.cfg.Hashes)
	return 4*(n32+proj) + 8*n64 + int64(z.sets) + partBytes*int64(z.workers)
}

// ensure sizes the buffers for a shape; it allocates only when they grow.
func (a *hyperAttn) ensure(B, H, N, h int) {
	if a.projH != h {
		a.SetHeadSize(h)
	}
	z := a.sizes(B, H, N, h)
	a.o = tensor.Grow(a.o, z.heads)
	a.lse = tensor.Grow(a.lse, z.rows)
	a.rankQ = growInt32(a.rankQ, z.ranks)
	a.rankK = growInt32(a.rankK, z.ranks)
	a.sortQ = growInt32(a.sortQ, z.ranks)
	a.sortK = growInt32(a.sortK, z.ranks)
	a.posK = growInt32(a.posK, z.ranks)
	a.ksrt = tensor.Grow(a.ksrt, z.ranks*h)
	a.vsrt = tensor.Grow(a.vsrt, z.ranks*h)
	a.start = growInt32(a.start, z.starts)
	a.hist = growInt32(a.hist, z.hist)
	a.vcum = growFloat64(a.vcum, z.vcum)
	a.gz = growFloat64(a.gz, z.gz)
	a.samp = growInt32(a.samp, z.samp)
	a.lw = tensor.Grow(a.lw, z.samp)
	if cap(a.sampOK) < z.sets {
		a.sampOK = make([]bool, z.sets)
	}
	a.sampOK = a.sampOK[:z.sets]
	a.dkp = tensor.Grow(a.dkp, z.partial)
	a.dvp = tensor.Grow(a.dvp, z.partial)
	a.ensureScratch(z.workers, min(a.cfg.Block, N), h, z.parts)
}

// ensureScratch sizes the buffers of the first `workers` workers for
// blocks of b rows and heads of size h.
func (a *hyperAttn) ensureScratch(workers, b, h, parts int) {
	for len(a.sc) < workers {
		a.sc = append(a.sc, &hyperScratch{})
	}
	s, R := a.cfg.Samples, 1<<a.cfg.Hashes
	w := max(b, s)
	for _, sc := range a.sc[:workers] {
		sc.pos = growInt32(sc.pos, b)
		sc.grp = growInt32(sc.grp, b)
		sc.order = growInt32(sc.order, b)
		if cap(sc.keys) < b {
			sc.keys = make([]int64, b)
		}
		sc.kidx = growInt32(sc.kidx, w)
		sc.blk = growInt32(sc.blk, s)
		sc.cum = growInt32(sc.cum, R+1)
		if cap(sc.parts) < parts {
			sc.parts = make([]hyperPart, 0, parts)
		}
		for _, p := range []*[]float32{&sc.qg, &sc.og, &sc.dog, &sc.dqg} {
			*p = tensor.Grow(*p, b*h)
		}
		for _, p := range []*[]float32{&sc.qb, &sc.db, &sc.tb} {
			*p = tensor.Grow(*p, hyperRows*h)
		}
		for _, p := range []*[]float32{&sc.kg, &sc.vg, &sc.dkg, &sc.dvg} {
			*p = tensor.Grow(*p, w*h)
		}
		sc.s = tensor.Grow(sc.s, max(b, hyperRows)*w)
		sc.dp = tensor.Grow(sc.dp, max(b, hyperRows)*w)
		sc.m = tensor.Grow(sc.m, b)
		sc.l = tensor.Grow(sc.l, b)
		sc.delta = tensor.Grow(sc.delta, b)
		sc.proj = tensor.Grow(sc.proj, b*a.cfg.Hashes)
		sc.glw = tensor.Grow(sc.glw, s)
		if len(sc.ones) != w {
			sc.ones = tensor.Grow(sc.ones, w)
			for i := range sc.ones {
				sc.ones[i] = 1
			}
		}
	}
}

func growInt32(b []int32, n int) []int32 {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]int32, n)
}

func growFloat64(b []float64, n int) []float64 {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]float64, n)
}

// Forward computes o = HyperAttention(q, k, v) and saves what Backward needs.
func (a *hyperAttn) Forward(o, q, k, v *tensor.Tensor) {
	mustMatch("hyper.Forward", q, k, v, o)
	B, H, N, h := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	a.ensure(B, H, N, h)
	a.q, a.k, a.v = q, k, v
	nb, sets := a.blocks(N)
	a.call = hyperCall{B: B, H: H, N: N, h: h, nb: nb, sets: sets, out: o.Data,
		exact: !a.causal && !a.approx(N)}
	workers := a.workers(B, H, N)
	if a.approx(N) {
		a.team.run(workers, B*H, a.prepFn)
	}
	a.team.run(workers, B*H*nb, a.forwardFn)
	a.call = hyperCall{}
}

// prepItem hashes one head's queries and keys, sorts them by rank, counts
// the causal rank histograms and draws the samples.
func (a *hyperAttn) prepItem(w, bh int) {
	c := &a.call
	N, h, b, nh := c.N, c.h, a.cfg.Block, a.cfg.Hashes
	R := 1 << nh
	head := bh * N * h
	sc := a.sc[w]
	rq, rk := a.rankQ[bh*N:(bh+1)*N], a.rankK[bh*N:(bh+1)*N]
	a.hash(sc, a.q.Data[head:head+N*h], rq, N, h)
	a.hash(sc, a.k.Data[head:head+N*h], rk, N, h)
	start := a.start[bh*(R+1) : (bh+1)*(R+1)]
	sortK, posK := a.sortK[bh*N:(bh+1)*N], a.posK[bh*N:(bh+1)*N]
	countingSort(rk, R, start, sortK, posK)
	// Keys and values in sorted order, so that key blocks are a few
	// contiguous runs.
	kd, vd := a.k.Data[head:head+N*h], a.v.Data[head:head+N*h]
	ks, vs := a.ksrt[head:head+N*h], a.vsrt[head:head+N*h]
	for at, j := range sortK {
		copy(ks[at*h:(at+1)*h], kd[int(j)*h:])
		copy(vs[at*h:(at+1)*h], vd[int(j)*h:])
	}
	if !a.causal {
		sortQ := a.sortQ[bh*N : (bh+1)*N]
		countingSort(rq, R, sc.cum, sortQ, nil)
	} else {
		hist := a.hist[bh*c.nb*R : (bh+1)*c.nb*R]
		clear(hist[:R])
		for ch := 1; ch < c.nb; ch++ {
			cur := hist[ch*R : (ch+1)*R]
			copy(cur, hist[(ch-1)*R:ch*R])
			for _, r := range rk[(ch-1)*b : ch*b] {
				cur[r]++
			}
		}
	}
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

// hash sets ranks[i] to the Gray rank of the bucket of row i of x ([n×h]).
func (a *hyperAttn) hash(sc *hyperScratch, x []float32, ranks []int32, n, h int) {
	nh, b := a.cfg.Hashes, len(sc.pos)
	for i0 := 0; i0 < n; i0 += b {
		rows := min(b, n-i0)
		p := sc.proj[:rows*nh]
		blas.SgemmSerial(blas.NoTrans, blas.NoTrans, rows, nh, h, 1, x[i0*h:], h, a.proj, nh, 0, p, nh)
		for r := range rows {
			code := 0
			for u, y := range p[r*nh : (r+1)*nh] {
				if y > 0 {
					code |= 1 << u
				}
			}
			ranks[i0+r] = int32(grayRank(code))
		}
	}
}

// grayRank returns the position of code in the reflected Gray code
// sequence g(r) = r ^ (r>>1): consecutive ranks differ in one bit.
func grayRank(code int) int {
	r := code
	for s := 1; s < 32; s <<= 1 {
		r ^= r >> s
	}
	return r
}

// countingSort writes to order the indices 0…n−1 sorted by rank (stable),
// to start[r] where rank r's indices begin (start has R+1 entries), and,
// if inv is not nil, to inv[i] the index of i in order.
func countingSort(ranks []int32, R int, start, order, inv []int32) {
	clear(start[:R+1])
	for _, r := range ranks {
		start[r+1]++
	}
	for r := range R {
		start[r+1] += start[r]
	}
	for i, r := range ranks {
		at := start[r]
		order[at] = int32(i)
		if inv != nil {
			inv[i] = at
		}
		start[r]++
	}
	// start[r] now holds the end of rank r: shift back to the starts.
	copy(start[1:R+1], start[:R])
	start[0] = 0
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

// rows fills sc.pos (and sc.grp, sc.order) with the query rows of block
// blk, in the order the item processes them, copies them to sc.qg and
// returns their number.
func (a *hyperAttn) rows(sc *hyperScratch, vw *hyperView, blk int) int {
	N, b, h := vw.N, a.cfg.Block, a.call.h
	i0 := blk * b
	lo := max(i0, vw.lo)
	n := min(i0+b, N) - lo
	switch {
	case !a.causal && !a.approx(N), a.causal && !a.chunkApprox(blk):
		for r := range n {
			sc.pos[r] = int32(lo + r)
		}
	case !a.causal:
		copy(sc.pos[:n], vw.sortQ[i0:i0+n])
		for r := range n {
			sc.grp[r] = int32(blk)
		}
	case i0 == 0:
		for r := range n {
			sc.pos[r], sc.grp[r] = int32(lo+r), 0
		}
	default:
		// Each query's key block is where its rank falls among the past
		// keys sorted by rank: the middle of its bucket.
		R := 1 << a.cfg.Hashes
		cnt, cum := vw.cnt, sc.cum
		cum[0] = 0
		for r := range R {
			cum[r+1] = cum[r] + cnt[r]
		}
		last := int32((i0+b-1)/b - 1)
		for r := range n {
			rk := vw.rankQ[lo+r-vw.qOff]
			kb := min((cum[rk]+cnt[rk]/2)/int32(b), last)
			sc.pos[r], sc.grp[r] = int32(lo+r), kb
			sc.keys[r] = int64(kb)<<32 | int64(r)
		}
		slices.Sort(sc.keys[:n])
		for r, key := range sc.keys[:n] {
			sc.order[r] = int32(key & 0xffffffff)
		}
	}
	for r, i := range sc.pos[:n] {
		copy(sc.qg[r*h:(r+1)*h], vw.q[(int(i)-vw.qOff)*h:])
	}
	return n
}

// parts lists the key columns the n rows of block blk attend to.
func (a *hyperAttn) parts(sc *hyperScratch, vw *hyperView, blk, n int) []hyperPart {
	N, b := vw.N, a.cfg.Block
	ps := sc.parts[:0]
	i0 := blk * b
	end := min(i0+b, N)
	switch {
	case !a.causal && !a.approx(N):
		for j0 := 0; j0 < N; j0 += b {
			ps = append(ps, hyperPart{r0: 0, r1: n, kind: partRange, j0: j0, n: min(b, N-j0)})
		}
	case !a.causal:
		ps = append(ps, hyperPart{r0: 0, r1: n, kind: partBlock, j0: blk, n: min(b, N-blk*b)})
		if vw.samp != nil {
			ps = append(ps, hyperPart{r0: 0, r1: n, kind: partSamples, n: a.cfg.Samples})
		}
	case !a.chunkApprox(blk):
		for j0 := 0; j0 < i0; j0 += b {
			ps = append(ps, hyperPart{r0: 0, r1: n, kind: partRange, j0: j0, n: b})
		}
		ps = append(ps, hyperPart{r0: 0, r1: n, kind: partRange, j0: i0, n: end - i0, causal: true})
	default:
		ps = append(ps, hyperPart{r0: 0, r1: n, kind: partRange, j0: i0, n: end - i0, causal: true})
		if i0 == 0 {
			break
		}
		for r0 := 0; r0 < n; {
			kb := sc.grp[sc.order[r0]]
			r1 := r0 + 1
			for r1 < n && sc.grp[sc.order[r1]] == kb {
				r1++
			}
			for s0 := r0; s0 < r1; s0 += hyperRows {
				ps = append(ps, hyperPart{r0: s0, r1: min(s0+hyperRows, r1), kind: partBlock, j0: int(kb),
					n: min(b, i0-int(kb)*b), first: s0 == r0, last: s0+hyperRows >= r1})
			}
			r0 = r1
		}
		if vw.samp != nil {
			ps = append(ps, hyperPart{r0: 0, r1: n, kind: partSamples, n: a.cfg.Samples})
		}
	}
	sc.parts = ps
	return ps
}

// keys returns the keys and values of part p ([p.n × h] each) and, for
// sampled columns, their log-weights; gathered parts leave the key
// positions in sc.kidx and, for samples, the key blocks in sc.blk.
func (a *hyperAttn) keys(sc *hyperScratch, vw *hyperView, p hyperPart) (k, v, lw []float32) {
	h, b := a.call.h, a.cfg.Block
	if p.kind == partRange {
		return vw.k[p.j0*h : (p.j0+p.n)*h], vw.v[p.j0*h : (p.j0+p.n)*h], nil
	}
	idx := sc.kidx[:p.n]
	switch {
	case p.kind == partBlock && !a.causal:
		copy(idx, vw.sortK[p.j0*b:])
		at := p.j0 * b * h
		return vw.ksrt[at : at+p.n*h], vw.vsrt[at : at+p.n*h], nil
	case p.kind == partBlock:
		if !p.first {
			return sc.kg[:p.n*h], sc.vg[:p.n*h], nil // gathered by the first batch
		}
		// Keys [kb·b, kb·b+n) of the past sorted by rank: walk the ranks.
		first := int32(p.j0 * b)
		r := int32(0)
		for sc.cum[r+1] <= first {
			r++
		}
		off := first - sc.cum[r]
		k, v = sc.kg[:p.n*h], sc.vg[:p.n*h]
		for at := 0; at < p.n; r, off = r+1, 0 {
			run := min(int(vw.cnt[r]-off), p.n-at)
			if run <= 0 {
				continue
			}
			from := int(vw.start[r] + off)
			copy(idx[at:at+run], vw.sortK[from:])
			copy(k[at*h:(at+run)*h], vw.ksrt[from*h:])
			copy(v[at*h:(at+run)*h], vw.vsrt[from*h:])
			at += run
		}
		return k, v, nil
	}
	copy(idx, vw.samp)
	for u, j := range idx {
		rk := vw.rankK[j]
		if a.causal {
			// Index among the past keys sorted by rank.
			sc.blk[u] = (sc.cum[rk] + vw.posK[j] - vw.start[rk]) / int32(b)
		} else {
			sc.blk[u] = vw.posK[j] / int32(b)
		}
	}
	k, v = sc.kg[:p.n*h], sc.vg[:p.n*h]
	for u, j := range idx {
		copy(k[u*h:(u+1)*h], vw.k[int(j)*h:])
		copy(v[u*h:(u+1)*h], vw.v[int(j)*h:])
	}
	return k, v, vw.lw
}

// scores computes the logits of part p for its rows, α·q·k + log-weight,
// with −∞ where a column is masked, into sc.s ([rows × p.n]).
func (a *hyperAttn) scores(sc *hyperScratch, p hyperPart, k, lw []float32) []float32 {
	h := a.call.h
	rows, n := p.r1-p.r0, p.n
	s := sc.s[:rows*n]
	blas.SgemmSerial(blas.NoTrans, blas.Trans, rows, n, h, float32(1/math.Sqrt(float64(h))), sc.qg[p.r0*h:], h, k, h, 0, s, n)
	for r := range rows {
		row := s[r*n : (r+1)*n]
		switch {
		case p.causal:
			vis := min(max(int(sc.pos[p.r0+r])-p.j0+1, 0), n)
			for j := vis; j < n; j++ {
				row[j] = negInf
			}
		case p.kind == partSamples:
			g := sc.grp[p.r0+r]
			for u, x := range lw {
				if sc.blk[u] == g {
					row[u] = negInf
				} else {
					row[u] = x + row[u]
				}
			}
		}
	}
	return s
}

// forwardItem computes the output rows of one block of one head. Causal
// items run from the last chunk to the first, so that the long exact
// chunks do not start last.
func (a *hyperAttn) forwardItem(w, item int) {
	c := &a.call
	bh, blk := item%(c.B*c.H), c.nb-1-item/(c.B*c.H)
	N, h := c.N, c.h
	head := bh * N * h
	sc := a.sc[w]
	vw := a.view(bh, blk)
	n := a.forwardRows(sc, &vw, blk)
	for r, i := range sc.pos[:n] {
		row := sc.og[r*h : (r+1)*h]
		copy(c.out[head+int(i)*h:], row)
		copy(a.o[head+int(i)*h:], row)
		a.lse[bh*N+int(i)] = sc.m[r]
	}
}

// forwardRows computes the output rows of block blk into sc.og, their
// positions in sc.pos and their log-sum-exps in sc.m, and returns their
// number.
func (a *hyperAttn) forwardRows(sc *hyperScratch, vw *hyperView, blk int) int {
	h := a.call.h
	n := a.rows(sc, vw, blk)
	og := sc.og[:n*h]
	clear(og)
	for r := range n {
		sc.m[r], sc.l[r] = negInf, 0
	}
	for _, p := range a.parts(sc, vw, blk, n) {
		k, v, lw := a.keys(sc, vw, p)
		if a.causal && p.kind == partBlock {
			a.forwardBatch(sc, p, k, v)
			continue
		}
		s := a.scores(sc, p, k, lw)
		for r := p.r0; r < p.r1; r++ {
			sc.online(r, s[(r-p.r0)*p.n:(r-p.r0+1)*p.n], og, h)
		}
		blas.SgemmSerial(blas.NoTrans, blas.NoTrans, p.r1-p.r0, h, p.n, 1, s, p.n, v, h, 1, og[p.r0*h:], h)
	}
	for r := range n {
		vec.Scale(1/sc.l[r], og[r*h:(r+1)*h])
		sc.m[r] += float32(math.Log(float64(sc.l[r])))
	}
	return n
}

// online folds the logits row (of row r) into the running statistics and
// replaces them by their weights exp(logit − m); it reports false, leaving
// nothing changed, for a row whose columns are all masked.
func (sc *hyperScratch) online(r int, row, og []float32, h int) bool {
	mx := vec.Max(row)
	if mx == negInf {
		clear(row)
		return false
	}
	if mx > sc.m[r] {
		if old := sc.m[r]; old != negInf {
			cf := float32(math.Exp(float64(old - mx)))
			sc.l[r] *= cf
			vec.Scale(cf, og[r*h:(r+1)*h])
		}
		sc.m[r] = mx
	}
	vec.Axpy(-sc.m[r], sc.ones[:len(row)], row)
	vec.Exp(row, row)
	sc.l[r] += vec.Sum(row)
	return true
}

// forwardBatch runs one batch of a causal chunk's rows against their past
// key block, in products of hyperRows rows whatever the batch's size.
func (a *hyperAttn) forwardBatch(sc *hyperScratch, p hyperPart, k, v []float32) {
	h := a.call.h
	rows := sc.order[p.r0:p.r1]
	qb := sc.qb[:hyperRows*h]
	clear(qb)
	for u, r := range rows {
		copy(qb[u*h:(u+1)*h], sc.qg[int(r)*h:])
	}
	s := sc.s[:hyperRows*p.n]
	blas.SgemmSerial(blas.NoTrans, blas.Trans, hyperRows, p.n, h, float32(1/math.Sqrt(float64(h))), qb, h, k, h, 0, s, p.n)
	og := sc.og
	for u := range hyperRows {
		if u >= len(rows) || !sc.online(int(rows[u]), s[u*p.n:(u+1)*p.n], og, h) {
			clear(s[u*p.n : (u+1)*p.n])
		}
	}
	tb := sc.tb[:hyperRows*h]
	blas.SgemmSerial(blas.NoTrans, blas.NoTrans, hyperRows, h, p.n, 1, s, p.n, v, h, 0, tb, h)
	for u, r := range rows {
		vec.Add(og[int(r)*h:int(r+1)*h], og[int(r)*h:int(r+1)*h], tb[u*h:(u+1)*h])
	}
}

// backwardBatch is the backward pass of forwardBatch: it adds to the
// rows' dQ and to the key block's dK and dV in sc.dkg, sc.dvg (cleared by
// the block's first batch).
func (a *hyperAttn) backwardBatch(sc *hyperScratch, p hyperPart, k, v []float32) {
	h := a.call.h
	alpha := float32(1 / math.Sqrt(float64(h)))
	rows := sc.order[p.r0:p.r1]
	qb, db := sc.qb[:hyperRows*h], sc.db[:hyperRows*h]
	clear(qb)
	clear(db)
	for u, r := range rows {
		copy(qb[u*h:(u+1)*h], sc.qg[int(r)*h:])
		copy(db[u*h:(u+1)*h], sc.dog[int(r)*h:])
	}
	s := sc.s[:hyperRows*p.n]
	blas.SgemmSerial(blas.NoTrans, blas.Trans, hyperRows, p.n, h, alpha, qb, h, k, h, 0, s, p.n)
	for u := range hyperRows {
		row := s[u*p.n : (u+1)*p.n]
		if u >= len(rows) {
			clear(row)
			continue
		}
		vec.Axpy(-sc.m[rows[u]], sc.ones[:p.n], row)
		vec.Exp(row, row)
	}
	if p.first {
		clear(sc.dkg[:p.n*h])
		clear(sc.dvg[:p.n*h])
	}
	blas.SgemmSerial(blas.Trans, blas.NoTrans, p.n, h, hyperRows, 1, s, p.n, db, h, 1, sc.dvg, h)
	dp := sc.dp[:hyperRows*p.n]
	blas.SgemmSerial(blas.NoTrans, blas.Trans, hyperRows, p.n, h, 1, db, h, v, h, 0, dp, p.n)
	for u, r := range rows {
		vec.Axpy(-sc.delta[r], sc.ones[:p.n], dp[u*p.n:(u+1)*p.n])
	}
	vec.Mul(dp, dp, s)
	tb := sc.tb[:hyperRows*h]
	blas.SgemmSerial(blas.NoTrans, blas.NoTrans, hyperRows, h, p.n, alpha, dp, p.n, k, h, 0, tb, h)
	for u, r := range rows {
		vec.Add(sc.dqg[int(r)*h:int(r+1)*h], sc.dqg[int(r)*h:int(r+1)*h], tb[u*h:(u+1)*h])
	}
	blas.SgemmSerial(blas.Trans, blas.NoTrans, p.n, h, hyperRows, alpha, dp, p.n, qb, h, 1, sc.dkg, h)
}

// Backward computes dq, dk, dv from do for the last Forward.
func (a *hyperAttn) Backward(dq, dk, dv, do *tensor.Tensor) {
	if a.q == nil {
		panic("attention.hyper.Backward: called before Forward")
	}
	mustMatch("hyper.Backward", a.q, dq, dk, dv, do)
	B, H, N, h := a.q.Shape[0], a.q.Shape[1], a.q.Shape[2], a.q.Shape[3]
	a.ensure(B, H, N, h)
	nb, sets := a.blocks(N)
	a.call = hyperCall{B: B, H: H, N: N, h: h, nb: nb, sets: sets, groups: a.groups(B, H, N),
		exact: !a.causal && !a.approx(N), dq: dq.Data, dk: dk.Data, dv: dv.Data, do: do.Data}
	workers := a.workers(B, H, N)
	a.team.run(workers, B*H*a.call.groups, a.backwardFn)
	a.team.run(workers, B*H*nb, a.reduceFn)
	a.call = hyperCall{}
}

// backwardItem runs blocks g, g+G, … of one head, writing their rows of
// dQ and accumulating into the group's dK and dV. Where the sequence is
// approximated, every group accumulates in dkp, dvp in the keys' sorted
// order, in which key blocks are contiguous runs, and reduceItem puts the
// rows back in place; otherwise group 0 accumulates in dk, dv and the
// others in dkp, dvp in position order.
func (a *hyperAttn) backwardItem(w, item int) {
	c := &a.call
	G := c.groups
	bh, g := item/G, item%G
	N, h := c.N, c.h
	head := bh * N * h
	sorted := a.approx(N)
	var dk, dv []float32
	switch {
	case sorted:
		at := (g*c.B*c.H + bh) * N * h
		dk, dv = a.dkp[at:at+N*h], a.dvp[at:at+N*h]
	case g == 0:
		dk, dv = c.dk[head:head+N*h], c.dv[head:head+N*h]
	default:
		at := ((g-1)*c.B*c.H + bh) * N * h
		dk, dv = a.dkp[at:at+N*h], a.dvp[at:at+N*h]
	}
	clear(dk)
	clear(dv)
	// row returns where key j's gradient row lives in dk, dv.
	var posK []int32
	if sorted {
		posK = a.posK[bh*N : (bh+1)*N]
	}
	row := func(j int32) int {
		if posK != nil {
			return int(posK[j]) * h
		}
		return int(j) * h
	}
	sc := a.sc[w]
	alpha := float32(1 / math.Sqrt(float64(h)))
	v, do := a.v.Data[head:head+N*h], c.do[head:head+N*h]
	vnorm := a.cfg.Sampling == SampleVNorm && !c.exact
	for blk := g; blk < c.nb; blk += G {
		vw := a.view(bh, blk)
		n := a.rows(sc, &vw, blk)
		for r, i := range sc.pos[:n] {
			copy(sc.dog[r*h:(r+1)*h], do[int(i)*h:])
			sc.m[r] = a.lse[bh*N+int(i)]
			sc.delta[r] = vec.Dot(sc.dog[r*h:(r+1)*h], a.o[head+int(i)*h:head+int(i+1)*h])
		}
		dqg := sc.dqg[:n*h]
		clear(dqg)
		if vnorm {
			a.gz[bh*c.nb+blk] = 0
		}
		for _, p := range a.parts(sc, &vw, blk, n) {
			k, vv, lw := a.keys(sc, &vw, p)
			if a.causal && p.kind == partBlock {
				a.backwardBatch(sc, p, k, vv)
				if p.last {
					// The block is a few runs of consecutive sorted keys.
					idx := sc.kidx[:p.n]
					for u0 := 0; u0 < len(idx); {
						u1 := u0 + 1
						for u1 < len(idx) && posK[idx[u1]] == posK[idx[u1-1]]+1 {
							u1++
						}
						at, n := row(idx[u0]), (u1-u0)*h
						vec.Add(dk[at:at+n], dk[at:at+n], sc.dkg[u0*h:u1*h])
						vec.Add(dv[at:at+n], dv[at:at+n], sc.dvg[u0*h:u1*h])
						u0 = u1
					}
				}
				continue
			}
			s := a.scores(sc, p, k, lw)
			rows := p.r1 - p.r0
			for r := p.r0; r < p.r1; r++ {
				vec.Axpy(-sc.m[r], sc.ones[:p.n], s[(r-p.r0)*p.n:(r-p.r0+1)*p.n])
			}
			vec.Exp(s, s) // P; masked columns are exp(−∞) = 0
			// Contiguous rows accumulate in place; others are scattered below.
			dks, dvs := dk[p.j0*h:], dv[p.j0*h:]
			var beta float32 = 1
			direct := p.kind == partRange && !sorted
			if p.kind == partBlock && !a.causal {
				dks, dvs = dk[p.j0*a.cfg.Block*h:], dv[p.j0*a.cfg.Block*h:] // sorted block p.j0
				direct = true
			} else if !direct {
				dks, dvs, beta = sc.dkg, sc.dvg, 0
			}
			dog := sc.dog[p.r0*h:]
			blas.SgemmSerial(blas.Trans, blas.NoTrans, p.n, h, rows, 1, s, p.n, dog, h, beta, dvs, h)
			dp := sc.dp[:rows*p.n]
			blas.SgemmSerial(blas.NoTrans, blas.Trans, rows, p.n, h, 1, dog, h, vv, h, 0, dp, p.n)
			for r := p.r0; r < p.r1; r++ {
				vec.Axpy(-sc.delta[r], sc.ones[:p.n], dp[(r-p.r0)*p.n:(r-p.r0+1)*p.n])
			}
			vec.Mul(dp, dp, s) // dS, the gradient of the logits
			blas.SgemmSerial(blas.NoTrans, blas.NoTrans, rows, h, p.n, alpha, dp, p.n, k, h, 1, dqg[p.r0*h:], h)
			blas.SgemmSerial(blas.Trans, blas.NoTrans, p.n, h, rows, alpha, dp, p.n, sc.qg[p.r0*h:], h, beta, dks, h)
			if direct {
				continue
			}
			if p.kind == partRange {
				for u := range p.n {
					at := row(int32(p.j0 + u))
					vec.Add(dk[at:at+h], dk[at:at+h], sc.dkg[u*h:(u+1)*h])
					vec.Add(dv[at:at+h], dv[at:at+h], sc.dvg[u*h:(u+1)*h])
				}
				continue
			}
			if vnorm && p.kind == partSamples && a.vnormDrawn(bh, blk) {
				// lw_u = log Z − log s − log‖v_j‖²: its gradient reaches v_j
				// here and every v before the chunk through Z (reduceItem).
				glw := sc.glw[:p.n]
				clear(glw)
				for r := range rows {
					vec.Add(glw, glw, dp[r*p.n:(r+1)*p.n])
				}
				var sum float64
				for _, x := range glw {
					sum += float64(x)
				}
				a.gz[bh*c.nb+blk] += sum
				for u, j := range sc.kidx[:p.n] {
					vj := v[int(j)*h : int(j+1)*h]
					if n2 := vec.Dot(vj, vj); n2 > 0 { // drawn, so ‖v_j‖ > 0 unless float32 underflows
						vec.Axpy(-2*glw[u]/n2, vj, sc.dvg[u*h:(u+1)*h])
					}
				}
			}
			for u, j := range sc.kidx[:p.n] {
				at := row(j)
				vec.Add(dk[at:at+h], dk[at:at+h], sc.dkg[u*h:(u+1)*h])
				vec.Add(dv[at:at+h], dv[at:at+h], sc.dvg[u*h:(u+1)*h])
			}
		}
		for r, i := range sc.pos[:n] {
			copy(c.dq[head+int(i)*h:head+int(i+1)*h], dqg[r*h:(r+1)*h])
		}
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

// reduceItem adds the partial dK and dV of groups 1… to one block of rows
// of a head, in group order, and with vnorm the gradient through the
// normalizers Z of the sampling distributions.
func (a *hyperAttn) reduceItem(_, item int) {
	c := &a.call
	bh, blk := item/c.nb, item%c.nb
	N, h, b := c.N, c.h, a.cfg.Block
	i0 := blk * b
	rows := min(b, N-i0)
	lo, hi := (bh*N+i0)*h, (bh*N+i0+rows)*h
	dk, dv := c.dk[lo:hi], c.dv[lo:hi]
	if !a.approx(N) {
		for g := 1; g < c.groups; g++ {
			at := ((g-1)*c.B*c.H)*N*h + lo
			vec.Add(dk, dk, a.dkp[at:at+rows*h])
			vec.Add(dv, dv, a.dvp[at:at+rows*h])
		}
		return
	}
	// Gather each key's rows from the groups' sorted buffers, in group order.
	posK := a.posK[bh*N+i0 : bh*N+i0+rows]
	for r, p := range posK {
		d, e := dk[r*h:(r+1)*h], dv[r*h:(r+1)*h]
		at := (bh*N + int(p)) * h
		copy(d, a.dkp[at:at+h])
		copy(e, a.dvp[at:at+h])
		for g := 1; g < c.groups; g++ {
			at += c.B * c.H * N * h
			vec.Add(d, d, a.dkp[at:at+h])
			vec.Add(e, e, a.dvp[at:at+h])
		}
	}
	if a.cfg.Sampling != SampleVNorm {
		return
	}
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
	v := a.v.Data[lo:hi]
	vec.Axpy(float32(2*coef), v, dv)
}
