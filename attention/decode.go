package attention

import (
	"fmt"

	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
)

// Incremental decoding. A Decoder consumes q, k, v of n new positions per
// Step (n = 1 for a generated token, more for a prompt) and returns their
// outputs, equal to float tolerance to the rows of a full causal Forward.
// Three kinds of state do this, one file each, holding the state and the
// NewDecoder methods of the mechanisms that use it:
//
//   - cacheDecoder (decode_cache.go; softmax, flash, polynomial, sqpoly):
//     a KV cache; position n costs O(n·h) per head and the cache grows
//     with the sequence.
//   - sketchDecoder (decode_sketch.go; every mechanism on the engine:
//     polysketch, elu, performer, sqpolysketch): the recurrent state of the
//     block algorithm, constant in size, so that every position costs the
//     same.
//   - hyperDecoder (decode_hyper.go): a KV cache with each key's hash rank,
//     sorted and sampled per chunk as HyperAttention's Forward does.
//
// A Step of one position works with vector operations over the heads; a
// Step of several runs each head's chunk as matrix products (the scores of
// the whole chunk against the cache; the sketches, features and state
// updates of whole block segments for the engine's), heads in parallel.

// NewDecoder returns a Decoder running the causal mechanism m a few
// positions at a time for B sequences of H heads of size h. Softmax and
// flash keep a KV cache and weight it by softmax(q·k/√h); polynomial keeps
// a KV cache and weights it by (q·k)^p/(1 + Σ (q·k')^p). Their caches
// start small and double when full, so a Decoder accepts sequences of any
// length, with memory growing as 2·n·h floats per head and a few
// allocations over a sequence (none once the cache has reached its size;
// Reset keeps it). Polysketch keeps the prefix state over completed blocks
// and the keys (with their sketches) and values of the current block and,
// until it is folded in, the previous one (see sketchDecoder):
// constant memory and cost per position, however long the sequence.
// A Step of n > 1 positions also keeps per-worker scratch of O(n) rows
// (O(n·Len()) scores for a KV cache), allocated at the first Step of that
// size and reused after.
//
// A polysketch Decoder shares m's sketch (drawing it now if m has not run
// yet), learned sketches included, whose current parameters it reads at
// every Step; do not run it concurrently with m's Forward or Backward or
// with updates of the parameters. Non-causal
// mechanisms have no incremental form and get an error.
func NewDecoder(m Mechanism, B, H, h int) (Decoder, error) {
	if B <= 0 || H <= 0 || h <= 0 {
		return nil, fmt.Errorf("decoder for [B=%d, H=%d, h=%d]: sizes must be positive", B, H, h)
	}
	d, ok := m.(Decodable)
	if !ok {
		return nil, fmt.Errorf("no incremental decoder for mechanism %T", m)
	}
	return d.NewDecoder(B, H, h)
}

// NewGroupedDecoder returns a Decoder of the causal mechanism m for
// grouped-query attention (Ainslie et al., 2023): B sequences of H query
// heads of size h and kvHeads key/value heads, each serving H/kvHeads
// query heads in order (query head i reads key/value head
// i/(H/kvHeads)). Its Steps take q and o of [B,H,n,h] and k and v of
// [B,kvHeads,n,h], and give what a Decoder of H heads gives for k and v
// whose heads are repeated so. A KV cache keeps the kvHeads heads alone;
// the other decoders are given the repeated heads. kvHeads = H is
// NewDecoder.
func NewGroupedDecoder(m Mechanism, B, H, kvHeads, h int) (Decoder, error) {
	if kvHeads <= 0 || H%max(kvHeads, 1) != 0 {
		return nil, fmt.Errorf("decoder for %d query heads and %d key/value heads: the query heads must be a positive multiple of the key/value heads", H, kvHeads)
	}
	d, err := NewDecoder(m, B, H, h)
	if err != nil || kvHeads == H {
		return d, err
	}
	if c, ok := d.(*cacheDecoder); ok {
		c.groups(H / kvHeads)
		return c, nil
	}
	return &repeatDecoder{inner: d, group: H / kvHeads, h: h}, nil
}

// repeatDecoder runs a Decoder of H heads on the keys and values of fewer
// heads, repeating each for its group of query heads.
type repeatDecoder struct {
	inner  Decoder
	group  int
	h      int
	kr, vr tensor.Tensor // [B,H,n,h]
}

func (d *repeatDecoder) Step(o, q, k, v *tensor.Tensor) {
	bh := q.Shape[0] * q.Shape[1]
	checkGroupedStep("Decoder.Step", bh, bh/d.group, d.h, o, q, k, v)
	d.kr.Resize(q.Shape...)
	d.vr.Resize(q.Shape...)
	per := q.Len() / bh // n·h floats a head
	for i := range bh {
		j := i / d.group
		copy(d.kr.Data[i*per:(i+1)*per], k.Data[j*per:(j+1)*per])
		copy(d.vr.Data[i*per:(i+1)*per], v.Data[j*per:(j+1)*per])
	}
	d.inner.Step(o, q, &d.kr, &d.vr)
}

func (d *repeatDecoder) Len() int { return d.inner.Len() }
func (d *repeatDecoder) Reset()   { d.inner.Reset() }

// unwrap returns the decoder whose state d's is.
func unwrap(d Decoder) Decoder {
	if r, ok := d.(*repeatDecoder); ok {
		return r.inner
	}
	return d
}

// Decodable is implemented by mechanisms that run incrementally; see
// NewDecoder, which checks the sizes before calling it.
type Decodable interface {
	NewDecoder(B, H, h int) (Decoder, error)
}

// errNotCausal is the error of a decoder asked of a non-causal mechanism.
func errNotCausal(k Kind) error {
	return fmt.Errorf("%s attention is not causal: decoding one position at a time needs causal attention", k)
}

// checkStep panics unless o, q, k, v are all [B,H,h] or all [B,H,n,h],
// with B·H = bh, and returns n.
func checkStep(op string, bh, h int, o, q, k, v *tensor.Tensor) int {
	n := 1
	if q.Dims() == 4 {
		n = q.Shape[2]
	}
	if (q.Dims() != 3 && q.Dims() != 4) || q.Shape[0]*q.Shape[1] != bh || q.Shape[q.Dims()-1] != h || n < 1 {
		panic(fmt.Sprintf("attention.%s: shape %v, want [B,H,h] or [B,H,n≥1,h] with B·H = %d, h = %d", op, q.Shape, bh, h))
	}
	for _, t := range []*tensor.Tensor{o, k, v} {
		if !tensor.SameShape(q, t) {
			panic(fmt.Sprintf("attention.%s: shapes %v and %v differ", op, q.Shape, t.Shape))
		}
	}
	return n
}

// checkGroupedStep is checkStep for grouped-query attention: o and q of
// bh heads, k and v of bkv.
func checkGroupedStep(op string, bh, bkv, h int, o, q, k, v *tensor.Tensor) int {
	if bkv == bh {
		return checkStep(op, bh, h, o, q, k, v)
	}
	n := checkStep(op, bh, h, o, q, q, o)
	kn := checkStep(op, bkv, h, k, k, k, v)
	if kn != n || k.Dims() != q.Dims() {
		panic(fmt.Sprintf("attention.%s: q %v and k %v differ in positions", op, q.Shape, k.Shape))
	}
	return n
}

// stepWorkers returns how many goroutines a step of work floats deserves:
// one per 4k floats (16 KB). The pool hands an item out in 0.1–0.2 µs,
// less than a head's step costs: the 4 heads of the default model (528×65
// floats of prefix state each) on 2 threads decode one sequence 1.3–1.5×
// faster than on one goroutine, flash's at position 1024 1.5–1.9×
// (BenchmarkDecode, B=1; with goroutines started per call, serial had
// been faster, and the grain was 512k floats).
func stepWorkers(items, work int) int {
	return max(1, min(parallel.Threads(), items, work>>12))
}
