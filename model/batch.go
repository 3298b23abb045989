package model

import (
	"errors"
	"fmt"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/tensor"
)

// Sequence is the decoding state of one sequence: its position and the
// attention state of every layer (a KV cache, or polysketch's recurrent
// state of constant size). Sequences of one Model advance through a
// Batch, any set of them per step, so that a server can let sequences
// join and leave between steps (continuous batching).
type Sequence struct {
	n     int
	limit int
	attn  []attention.Decoder
	busy  bool // in the Step in progress, to refuse a sequence listed twice
}

// NewSequence returns a Sequence at position 0.
func (m *Model) NewSequence() (*Sequence, error) {
	if m.cfg.Bidirectional {
		return nil, errors.New("a bidirectional (encoder) model has no decoder: every position sees the whole sequence")
	}
	s := &Sequence{limit: ContextLimit(m.cfg)}
	h := m.cfg.HeadSize()
	for i, l := range m.layers {
		ad, err := attention.NewGroupedDecoder(l.attn, 1, m.cfg.Heads, m.cfg.KVHeadCount(), h)
		if err != nil {
			return nil, fmt.Errorf("sequence state of layer %d: %w", i, err)
		}
		s.attn = append(s.attn, ad)
	}
	return s, nil
}

// ContextLimit returns the most positions a sequence of a model with
// configuration c may have: Config.Context for the mechanisms whose
// decoder keeps a KV cache and for learned positions (a table of Context
// rows), 0 (no limit) for those with a recurrent state of constant size
// (attention.Properties).
func ContextLimit(c Config) int {
	if c.Properties().ContextLimit || c.positions() == PositionsLearned {
		return c.Context
	}
	return 0
}

// limitAdvice ends the error of a sequence at the context limit of a
// model of configuration c: how to have none, where there is a way.
func limitAdvice(c Config) string {
	if c.positions() == PositionsLearned {
		return " (the learned positions end there)"
	}
	return ", or use polysketch attention, whose state does not grow"
}

// Len returns the number of positions consumed: the position of the next
// token.
func (s *Sequence) Len() int { return s.n }

// Limit returns the number of positions the sequence may have, 0 for no
// limit (see ContextLimit).
func (s *Sequence) Limit() int { return s.limit }

// Reset returns the sequence to position 0, keeping its buffers.
func (s *Sequence) Reset() {
	s.n = 0
	for _, a := range s.attn {
		a.Reset()
	}
}

// Batch runs decoding steps of a Model over any set of its Sequences,
// each consuming one token or a chunk of several. The layers that act on
// each row alone (LayerNorms, projections, GLU, head) run as matrix
// products over the rows of all the sequences of a step; attention runs
// per sequence, sequences in parallel.
//
// A row's result does not depend on the other sequences of its step: a
// chunk of several tokens runs through each product as a matrix of its
// own, and the sequences of one token each are gathered into products of
// at most blas.RowBlock rows (blas.RowBlockBF16 in bf16), where every
// row is computed on its own; every other operation acts on one row or
// one sequence. So a sequence
// gives the same bits alone or batched with any others, as long as it is
// fed the same chunks.
//
// A Batch shares the model's parameters and keeps buffers of its own; do
// not update the parameters while a Step runs. A Batch is not safe for
// concurrent use; Sequences of one model may be stepped by different
// Batches, one at a time.
type Batch struct {
	cfg      Config
	group    int // rows per matrix product
	embed    *nn.Embedding
	embScale float32
	pos      *nn.Sinusoidal // nil unless sinusoidal embeddings are added
	posTable *nn.Embedding  // learned positions; nil otherwise
	blocks   []block
	norm     normalizer
	head     *nn.Linear // nil when tied
	bias     *nn.Param  // nil with NoHeadBias
	rope     *nn.RoPE   // the model's tables, shared by the workers; nil without rotary embeddings
	workers  []*seqWorker

	spans                 []span // the rows of each product
	tokens, posIDs        []int32
	x, a1, qkv, ot, y, a2 tensor.Tensor // rows of all the sequences of a step
	last, final, logits   tensor.Tensor // one row per sequence
	all                   tensor.Tensor // StepEvery's logits
	at                    []int         // first row of each sequence
	order                 []int         // of the sequences in attend

	// The attend phase in progress, read by attendItem (bound once to
	// attendFn, so that handing it to the pool allocates nothing).
	layer    int
	seqs     []*Sequence
	toks     [][]int32
	attendFn func(w, k int)

	// Gather makes StepEvery compute all the logits it returns as one
	// matrix product, which multiplies the output layer's weights much
	// faster than a product per sequence when many sequences want a few
	// rows each and the vocabulary is large; but then a row's last bits
	// depend on the rows it shares the step with (a server must not set
	// it: its responses would change with the load).
	Gather bool
}

// seqWorker is the state of one goroutine of a step's attention: RoPE
// tables and q/k LayerNorms of its own, and the heads of one sequence.
type seqWorker struct {
	rope       *nn.RoPE        // nil without rotary embeddings
	qn, kn     []*nn.LayerNorm // per layer; nil entries for softmax
	q, k, v, o tensor.Tensor   // q, o [1,H,c,h]; k, v [1,KVH,c,h]
}

// NewBatch returns a Batch for the model's Sequences.
func (m *Model) NewBatch() *Batch {
	c := m.cfg
	group := blas.RowBlock
	if m.precision == nn.BF16 {
		group = blas.RowBlockBF16
	}
	b := &Batch{
		cfg: c, group: group(min(c.Dim, c.HiddenSize(), c.Vocab)), embed: &nn.Embedding{Vocab: c.Vocab, Dim: c.Dim, Weight: m.embed.Weight, BF16: m.embed.BF16},
		embScale: m.embScale, norm: shareNorm(m.norm), head: shareLinear(m.head), bias: m.bias,
	}
	if m.pos != nil {
		b.pos = nn.NewSinusoidal(c.Dim)
	}
	if m.posTable != nil {
		b.posTable = &nn.Embedding{Vocab: m.posTable.Vocab, Dim: c.Dim, Weight: m.posTable.Weight}
	}
	for _, l := range m.layers {
		b.blocks = append(b.blocks, l.shared())
	}
	if m.rope != nil {
		b.rope = m.rope.Share()
	}
	b.attendFn = b.attendItem
	return b
}

// Step consumes tokens[i] (one or more ids) for seqs[i], at the
// sequence's positions Len() … Len()+len(tokens[i])−1, and returns the
// logits of the token after each sequence's last one: row i of a
// [len(seqs), Vocab] tensor that belongs to the Batch and is overwritten
// by its next Step. A chunk of several tokens gives the logits n Steps of
// one would, to float tolerance, not bitwise: feed a sequence the same
// chunks to get the same bits. Step fails, consuming nothing, on a token
// outside the vocabulary, an empty chunk, a sequence listed twice, or a
// chunk that passes a sequence's Limit.
func (b *Batch) Step(seqs []*Sequence, tokens [][]int32) (*tensor.Tensor, error) {
	return b.step(seqs, tokens, nil)
}

// StepEvery is Step that also returns the logits after every token, not
// only the last, of the sequences whose every[i] is true: what scoring a
// text under the model needs (the log-probability of each of its tokens
// given those before). The result has len(tokens[i]) rows for such a
// sequence and one for the others, sequence after sequence in the order
// of seqs; like Step's, it belongs to the Batch. A sequence's last row is
// Step's, bit for bit; its rows before go through the output layer as
// one matrix product of their own, so that they do not depend on the
// other sequences of the step either (unless Gather is set).
func (b *Batch) StepEvery(seqs []*Sequence, tokens [][]int32, every []bool) (*tensor.Tensor, error) {
	if len(every) != len(seqs) {
		return nil, fmt.Errorf("batch step: %d every flags for %d sequences", len(every), len(seqs))
	}
	return b.step(seqs, tokens, every)
}

func (b *Batch) step(seqs []*Sequence, tokens [][]int32, every []bool) (*tensor.Tensor, error) {
	if err := b.check(seqs, tokens); err != nil {
		return nil, err
	}
	c, d := b.cfg, b.cfg.Dim
	b.tokens, b.at = b.tokens[:0], b.at[:0]
	for _, t := range tokens {
		b.at = append(b.at, len(b.tokens))
		b.tokens = append(b.tokens, t...)
	}
	R, S := len(b.tokens), len(seqs)
	for _, t := range []*tensor.Tensor{&b.x, &b.a1, &b.y, &b.a2} {
		t.Resize(R, d)
	}
	b.ot.Resize(R, c.Heads*c.HeadSize())
	b.qkv.Resize(R, c.QKVSize())
	b.embed.Forward(&b.x, b.tokens)
	scale(b.embScale, b.x.Data)
	b.addPositions(seqs, tokens)
	b.spans = b.spans[:0]
	gather := false // the last span gathers sequences of one token
	for i, t := range tokens {
		if n := len(b.spans); gather && len(t) == 1 && b.at[i]-b.spans[n-1].lo < b.group {
			b.spans[n-1].hi++
			continue
		}
		b.spans = append(b.spans, span{b.at[i], b.at[i] + len(t)})
		gather = len(t) == 1
	}
	for l, blk := range b.blocks {
		blk.forward(&b.x, &b.a1, &b.qkv, &b.ot, &b.y, &b.a2, b.spans, func() { b.attend(l, seqs, tokens) })
	}
	for _, s := range seqs {
		s.busy = false
	}
	for i, s := range seqs {
		s.n += len(tokens[i])
	}
	if every != nil && b.Gather {
		return b.everyLogits(tokens, every), nil
	}
	// Only each sequence's last row needs logits: the head, a product with
	// Vocab columns, runs on S rows.
	b.last.Resize(S, d)
	b.final.Resize(S, d)
	b.logits.Resize(S, c.Vocab)
	for i := range seqs {
		r := b.at[i] + len(tokens[i]) - 1
		copy(b.last.Data[i*d:(i+1)*d], b.x.Data[r*d:(r+1)*d])
	}
	b.norm.Forward(&b.final, &b.last)
	for lo := 0; lo < S; lo += b.group {
		hi := min(lo+b.group, S)
		b.logitsOf(rows(&b.logits, lo, hi, c.Vocab), rows(&b.final, lo, hi, d))
	}
	if every != nil {
		return b.everyLogits(tokens, every), nil
	}
	return &b.logits, nil
}

// everyLogits returns the logits of a StepEvery: the rows of b.x it
// wants (every row of the sequences marked, the last of the others)
// gathered in order and through the final LayerNorm, then through the
// output layer: with Gather, as one product; else each sequence's rows
// but the last as a product of their own, and the last rows copied from
// Step's logits in b.logits.
func (b *Batch) everyLogits(tokens [][]int32, every []bool) *tensor.Tensor {
	d, V := b.cfg.Dim, b.cfg.Vocab
	n := 0
	for i, t := range tokens {
		lo := b.at[i] + len(t) - 1
		if every[i] {
			lo = b.at[i]
		}
		// a1 and a2 are free once the blocks have run, and have a row
		// for every token of the step.
		copy(b.a1.Data[n*d:], b.x.Data[lo*d:(b.at[i]+len(t))*d])
		n += b.at[i] + len(t) - lo
	}
	gathered, final := rows(&b.a1, 0, n, d), rows(&b.a2, 0, n, d)
	b.all.Resize(n, V)
	if b.Gather {
		b.norm.Forward(final, gathered)
		b.logitsOf(&b.all, final)
		return &b.all
	}
	r := 0
	for i, t := range tokens {
		if k := len(t) - 1; every[i] && k > 0 {
			f := rows(final, r, r+k, d)
			b.norm.Forward(f, rows(gathered, r, r+k, d))
			b.logitsOf(rows(&b.all, r, r+k, V), f)
			r += k
		}
		copy(b.all.Data[r*V:(r+1)*V], b.logits.Data[i*V:(i+1)*V])
		r++
	}
	return &b.all
}

// logitsOf computes the logits out of rows f of the final LayerNorm's
// output.
func (b *Batch) logitsOf(out, f *tensor.Tensor) {
	if b.head != nil {
		b.head.Forward(out, f)
		return
	}
	b.embed.Logits(out, f)
	scale(1/b.embScale, out.Data)
	if b.bias != nil {
		addRows(out.Data, b.bias.Value.Data)
	}
}

// addPositions adds the position embeddings of each sequence's tokens,
// from its position on, to the rows of b.x: sinusoidal, rows of the
// learned table, or none (rotary embeddings alone).
func (b *Batch) addPositions(seqs []*Sequence, tokens [][]int32) {
	d := b.cfg.Dim
	switch {
	case b.pos != nil:
		for i, s := range seqs {
			b.pos.Offset = s.n
			x := rows(&b.x, b.at[i], b.at[i]+len(tokens[i]), d).Reshape(1, len(tokens[i]), d)
			b.pos.Forward(x, x)
		}
	case b.posTable != nil:
		b.posIDs = b.posIDs[:0]
		for i, s := range seqs {
			for j := range tokens[i] {
				b.posIDs = append(b.posIDs, int32(s.n+j))
			}
		}
		b.posTable.Forward(&b.y, b.posIDs) // b.y is free until the first layer
		add(b.x.Data, b.y.Data)
	}
}

// check validates a Step's arguments and marks the sequences busy.
func (b *Batch) check(seqs []*Sequence, tokens [][]int32) (err error) {
	if len(seqs) != len(tokens) {
		return fmt.Errorf("batch step: %d chunks of tokens for %d sequences", len(tokens), len(seqs))
	}
	if len(seqs) == 0 {
		return fmt.Errorf("batch step: no sequences")
	}
	defer func() {
		if err != nil {
			for _, s := range seqs {
				s.busy = false
			}
		}
	}()
	for i, s := range seqs {
		if s == nil || len(s.attn) != len(b.blocks) {
			return fmt.Errorf("batch step: sequence %d is not a sequence of this model", i)
		}
		if s.busy {
			return fmt.Errorf("batch step: sequence %d listed twice", i)
		}
		s.busy = true
		n := len(tokens[i])
		if n == 0 {
			return fmt.Errorf("batch step: no tokens for sequence %d", i)
		}
		for j, t := range tokens[i] {
			if t < 0 || int(t) >= b.cfg.Vocab {
				return fmt.Errorf("batch step: token %d at position %d of sequence %d outside the vocabulary [0, %d)", t, s.n+j, i, b.cfg.Vocab)
			}
		}
		if s.limit > 0 && s.n+n > s.limit {
			return fmt.Errorf("batch step: %d positions from position %d of sequence %d pass the context length %d of this %s model; shorten the sequence%s", n, s.n, i, s.limit, b.cfg.Attention, limitAdvice(b.cfg))
		}
	}
	return nil
}

// attend computes layer l's attention output rows b.ot from b.qkv, each
// sequence through its own attention state, on up to GOMAXPROCS
// goroutines of the process's pool that take the next sequence when done
// with one (prompt chunks and single tokens cost very different times).
// A sequence's own phases (its heads) run on the pool too, helped by
// goroutines that have no sequence left.
func (b *Batch) attend(l int, seqs []*Sequence, tokens [][]int32) {
	W := min(parallel.Threads(), len(seqs))
	for len(b.workers) < W {
		b.workers = append(b.workers, b.newWorker())
	}
	// Prompt chunks first: a chunk costs many single tokens, and started
	// last it would leave the other goroutines idle at the end of the step.
	b.order = b.order[:0]
	for i, t := range tokens {
		if len(t) > 1 {
			b.order = append(b.order, i)
		}
	}
	for i, t := range tokens {
		if len(t) == 1 {
			b.order = append(b.order, i)
		}
	}
	b.layer, b.seqs, b.toks = l, seqs, tokens
	parallel.Run(len(seqs), W, b.attendFn)
	b.seqs, b.toks = nil, nil
}

// attendItem runs the attention of the k-th sequence in b.order on worker
// w's state.
func (b *Batch) attendItem(w, k int) {
	i := b.order[k]
	b.attendOne(b.workers[w], b.layer, b.seqs[i], b.at[i], len(b.toks[i]))
}

// newWorker returns the state of one more goroutine of attend: RoPE
// tables and shares of the q/k LayerNorms of its own.
func (b *Batch) newWorker() *seqWorker {
	w := &seqWorker{}
	if b.rope != nil {
		w.rope = b.rope.Share()
	}
	for _, l := range b.blocks {
		if l.qn != nil {
			w.qn, w.kn = append(w.qn, l.qn.Share()), append(w.kn, l.qn.Share())
		} else {
			w.qn, w.kn = append(w.qn, nil), append(w.kn, nil)
		}
	}
	return w
}

// attendOne runs layer l's attention for the n rows of sequence s
// starting at row at.
func (b *Batch) attendOne(wk *seqWorker, l int, s *Sequence, at, n int) {
	H, KVH, h := b.cfg.Heads, b.cfg.KVHeadCount(), b.cfg.HeadSize()
	wk.q.Resize(1, H, n, h)
	wk.o.Resize(1, H, n, h)
	wk.k.Resize(1, KVH, n, h)
	wk.v.Resize(1, KVH, n, h)
	if wk.rope != nil {
		wk.rope.Offset = s.n
	}
	blk := b.blocks[l]
	blk.qn, blk.kn = wk.qn[l], wk.kn[l]
	blk.heads(&wk.q, &wk.k, &wk.v, rows(&b.qkv, at, at+n, blk.qkv.Out), wk.rope)
	s.attn[l].Step(&wk.o, &wk.q, &wk.k, &wk.v)
	fromHeads(matrix(rows(&b.ot, at, at+n, H*h), H*h), &wk.o)
}
