package attention

import (
	"errors"
	"math/rand/v2"
	"slices"

	"github.com/polysketch/polysketch/internal/field"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
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
		errs = append(errs, field.Invalid("hashes", c.Hashes, "must be between 1 and 12 (7 is the default)"))
	}
	if c.Samples < 0 {
		errs = append(errs, field.Invalid("samples", c.Samples, "must be 0 (blocks only) or positive (256 is the default)"))
	}
	errs = append(errs, checkMax("samples", c.Samples, maxSamples))
	if c.MinLength < 0 {
		errs = append(errs, field.Invalid("min_length", c.MinLength, "must be 0 or positive (4096 is the default)"))
	}
	if c.Sampling != SampleUniform && c.Sampling != SampleVNorm {
		errs = append(errs, field.Invalid("sampling", c.Sampling, "use %s or %s", SampleUniform, SampleVNorm))
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

	sc []*hyperScratch

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

// setHeadSize draws the hash hyperplanes for heads of size h.
func (a *hyperAttn) setHeadSize(h int) {
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
	return max(min(parallel.Threads(), B*H*nb), 1)
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
		a.setHeadSize(h)
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
		parallel.Run(B*H, workers, a.prepFn)
	}
	parallel.Run(B*H*nb, workers, a.forwardFn)
	a.call = hyperCall{}
}
