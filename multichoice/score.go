package multichoice

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode"

	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/sample"
)

// stepRows bounds the rows (sequences × positions) of one model step, as
// model.Decoder's prefill does: enough for the dense layers to multiply
// matrices, few enough that a step's buffers stay small.
const stepRows = 256

// Scorer computes the log-likelihoods of continuations of a context
// under a model, as lm-evaluation-harness's loglikelihood requests do.
// It is not safe for concurrent use, and it reads the model's parameters:
// do not train the model while it scores.
type Scorer struct {
	m      *model.Model
	tok    tokenizer.Tokenizer
	prefix int32 // the token an empty context stands for
	empty  bool  // whether there is one
	limit  int   // positions a sequence may take, 0 for no limit
	batch  *model.Batch
	seqs   []*model.Sequence // [0] reads the context, [1+j] continuation j
	// Begin are the tokens put before every context: the model's
	// beginning-of-sequence token where its tokenizer adds one
	// (tokenizer.Config.Begin), as generate and serve put it before a
	// prompt. An empty context is Begin alone, when there is one.
	Begin []int32
	// Separate reads the context again for each continuation, in the
	// same batched steps, instead of continuing each from a copy of the
	// state after it: what a model whose decoding state cannot be copied
	// (HyperAttention) does anyway, and the baseline the sharing is
	// measured against.
	Separate bool

	first []float32 // the logits after the context
	ids   []int32
}

// NewScorer returns a Scorer of m's log-likelihoods of texts that tok
// turns into tokens.
func NewScorer(m *model.Model, tok tokenizer.Tokenizer) (*Scorer, error) {
	if v := m.Config().Vocab; tok.VocabSize() > v {
		return nil, fmt.Errorf("tokenizer %s has %d tokens, the model only %d", tok.Name(), tok.VocabSize(), v)
	}
	s := &Scorer{m: m, tok: tok, limit: model.ContextLimit(m.Config()), batch: m.NewBatch()}
	// The continuations' logits as one product: four endings of twenty
	// tokens each would multiply a large vocabulary's output weights four
	// times, at a fraction of the speed of one product of their rows.
	s.batch.Gather = true
	s.prefix, s.empty = tokenizer.EndOfText(tok)
	seq, err := m.NewSequence()
	if err != nil {
		return nil, err
	}
	s.seqs = append(s.seqs, seq)
	if _, err := seq.Snapshot(); err != nil {
		s.Separate = true
	}
	return s, nil
}

// Scores are the log-likelihoods of continuations of one context.
type Scores struct {
	LogLik []float64 // each continuation's Σ log p(token | context, tokens before)
	Greedy []bool    // whether each continuation is what greedy decoding gives
	Tokens []int     // each continuation's tokens
	// Dropped counts the context's tokens dropped from its start so that
	// context and longest continuation fit the model's context length.
	Dropped int
}

// Score returns the log-likelihoods of each continuation after context,
// both tokenized as the harness tokenizes them: whitespace that ends the
// context moves to the start of the continuations, the context's tokens
// are those of the context alone, and a continuation's are the tokens of
// context + continuation after as many tokens as the context has. An
// empty context stands for the end-of-text token. When context and the
// longest continuation pass a KV-cache model's context length, the
// context loses tokens from its start (the harness truncates each
// context + continuation pair alone, the shorter ones less).
func (s *Scorer) Score(context string, continuations []string) (Scores, error) {
	ctx, conts, err := s.encode(context, continuations)
	if err != nil {
		return Scores{}, err
	}
	sc := Scores{LogLik: make([]float64, len(conts)), Greedy: make([]bool, len(conts)), Tokens: make([]int, len(conts))}
	longest := 0
	for j, c := range conts {
		sc.Tokens[j], sc.Greedy[j] = len(c), true
		longest = max(longest, len(c))
	}
	if longest == 0 {
		return sc, nil
	}
	// The last token of a continuation is predicted, never read.
	if need := len(ctx) + longest - 1; s.limit > 0 && need > s.limit {
		sc.Dropped = need - s.limit
		if sc.Dropped >= len(ctx) {
			return sc, fmt.Errorf("a continuation of %d tokens does not fit this model's context length of %d", longest, s.limit)
		}
		ctx = ctx[sc.Dropped:]
	}
	for len(s.seqs) < 1+len(conts) {
		seq, err := s.m.NewSequence()
		if err != nil {
			return sc, err
		}
		s.seqs = append(s.seqs, seq)
	}
	add := func(j int, row []float32, tok int32) {
		sc.LogLik[j] += float64(row[tok]) - sample.LogSumExp(row)
		if argmax(row) != tok {
			sc.Greedy[j] = false
		}
	}
	// Each continuation's first token is predicted by the logits after
	// the context; the others by those after the token before them.
	var seqs []*model.Sequence
	var rest [][]int32
	var which []int
	if s.Separate {
		var ctxs [][]int32
		for j, c := range conts {
			if len(c) > 0 {
				seq := s.seqs[1+j]
				seq.Reset()
				seqs, ctxs, which = append(seqs, seq), append(ctxs, ctx), append(which, j)
			}
		}
		err := s.feed(seqs, ctxs, false, func(i, _ int, row []float32) { add(which[i], row, conts[which[i]][0]) })
		if err != nil {
			return sc, err
		}
		for _, j := range which {
			rest = append(rest, conts[j][:len(conts[j])-1])
		}
	} else {
		ctxSeq := s.seqs[0]
		ctxSeq.Reset()
		if err := s.feed([]*model.Sequence{ctxSeq}, [][]int32{ctx}, false, func(_, _ int, row []float32) {
			s.first = append(s.first[:0], row...)
		}); err != nil {
			return sc, err
		}
		for j, c := range conts {
			if len(c) > 0 {
				add(j, s.first, c[0])
			}
		}
		var snap *model.Snapshot
		for j, c := range conts {
			if len(c) < 2 {
				continue
			}
			if snap == nil {
				if snap, err = ctxSeq.Snapshot(); err != nil {
					return sc, err
				}
			}
			seq := s.seqs[1+j]
			if err := seq.Restore(snap); err != nil {
				return sc, err
			}
			seqs, rest, which = append(seqs, seq), append(rest, c[:len(c)-1]), append(which, j)
		}
	}
	// Drop the continuations of one token, read in full already.
	k := 0
	for i := range seqs {
		if len(rest[i]) > 0 {
			seqs[k], rest[k], which[k] = seqs[i], rest[i], which[i]
			k++
		}
	}
	seqs, rest, which = seqs[:k], rest[:k], which[:k]
	err = s.feed(seqs, rest, true, func(i, k int, row []float32) {
		j := which[i]
		add(j, row, conts[j][k+1])
	})
	if err != nil {
		return sc, err
	}
	for j, ll := range sc.LogLik {
		if math.IsNaN(ll) || math.IsInf(ll, 0) {
			// Finite logits give finite log-likelihoods.
			return sc, fmt.Errorf("continuation %d: log-likelihood %v: the model's logits are not finite; its weights or activations overflow", j, ll)
		}
	}
	return sc, nil
}

// encode tokenizes a context and its continuations as the harness's
// _encode_pair does. A context of whitespace alone reads as an empty one.
func (s *Scorer) encode(context string, continuations []string) ([]int32, [][]int32, error) {
	trimmed := strings.TrimRightFunc(context, unicode.IsSpace)
	space := context[len(trimmed):]
	ctx, err := s.tokens(nil, trimmed)
	if err != nil {
		return nil, nil, err
	}
	conts := make([][]int32, len(continuations))
	if len(ctx) == 0 {
		prefix := s.Begin
		if len(prefix) == 0 {
			if !s.empty {
				return nil, nil, fmt.Errorf("an empty context, and the tokenizer %s has no end-of-text token to stand for it", s.tok.Name())
			}
			prefix = []int32{s.prefix}
		}
		for j, c := range continuations {
			if conts[j], err = s.tokens(nil, space+c); err != nil {
				return nil, nil, err
			}
		}
		return prefix, conts, nil
	}
	for j, c := range continuations {
		if s.ids, err = s.tokens(s.ids[:0], trimmed+space+c); err != nil {
			return nil, nil, err
		}
		if len(s.ids) > len(ctx) {
			conts[j] = append([]int32(nil), s.ids[len(ctx):]...)
		}
	}
	return append(slices.Clone(s.Begin), ctx...), conts, nil
}

// tokens appends the tokens of text to dst. Encoding fails only for a
// tokenizer whose pre-tokenizer pattern gives up on the text
// (tokenizer.PatternError).
func (s *Scorer) tokens(dst []int32, text string) ([]int32, error) {
	return s.tok.Encode(context.Background(), dst, []byte(text))
}

// feed steps seqs through their tokens together, at most stepRows rows a
// step, and calls row(i, k, logits) with the logits after token k of
// seqs[i]: after every token when every is set, else after the last
// only. The logits are the Batch's, valid during the call.
func (s *Scorer) feed(seqs []*model.Sequence, toks [][]int32, every bool, row func(i, k int, logits []float32)) error {
	V := s.m.Config().Vocab
	done := make([]int, len(seqs))
	var active []*model.Sequence
	var chunks [][]int32
	var flags []bool
	var idx []int
	for {
		active, chunks, flags, idx = active[:0], chunks[:0], flags[:0], idx[:0]
		left := 0
		for i := range seqs {
			if done[i] < len(toks[i]) {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		per := max(1, stepRows/left)
		for i, seq := range seqs {
			if n := len(toks[i]) - done[i]; n > 0 {
				c := min(n, per)
				active, chunks, idx = append(active, seq), append(chunks, toks[i][done[i]:done[i]+c]), append(idx, i)
				flags = append(flags, every)
			}
		}
		logits, err := s.batch.StepEvery(active, chunks, flags)
		if err != nil {
			return err
		}
		r := 0
		for a, i := range idx {
			c := len(chunks[a])
			if every {
				for k := range c {
					row(i, done[i]+k, logits.Data[(r+k)*V:(r+k+1)*V])
				}
				r += c
			} else {
				if done[i]+c == len(toks[i]) {
					row(i, len(toks[i])-1, logits.Data[r*V:(r+1)*V])
				}
				r++
			}
			done[i] += c
		}
	}
}

// argmax returns the index of the largest logit, the first of equals.
func argmax(row []float32) int32 {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return int32(best)
}
