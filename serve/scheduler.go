package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/sample"
	"github.com/polysketch/polysketch/tensor"
)

// Continuous batching. Every step of the scheduler runs one batched model
// step (model.Batch) over the sequences that are active: each decoding
// sequence contributes its last token, each sequence still reading its
// prompt one chunk of it. Sequences join from the queue and leave when
// they finish or their client goes away, between steps. A prompt is cut
// into chunks of a fixed size counted from its start, whatever else runs,
// model.Batch computes a sequence's rows independently of the other
// sequences', and each job samples with a generator of its own; so a
// request's tokens do not depend on the requests it shares steps with.

// job is one choice of a request: a prompt to read and tokens to
// generate into the request's mailbox.
type job struct {
	index   int // the choice's index in the response
	prompt  []int32
	max     int // tokens to generate at most
	limit   int // positions the sequence may take, 0 for no limit
	sampler *sample.Sampler
	text    *textStream
	tok     tokenizer.Tokenizer
	eos     []int32 // the tokens that end the sequence
	kv      int64   // bytes of KV cache reserved for it
	top     int     // alternatives of logprobs; -1 for none
	offset  int     // bytes of text so far, for logprobs' text offsets
	// echo asks for the logprobs of the prompt's tokens (echo with
	// logprobs), at the byte offsets offsets of the prompt's text; such a
	// job reads its whole prompt in chunks of StepRows, neither resuming
	// from the prefix cache nor adding to it, and with max 0 ends after
	// it.
	echo    bool
	offsets []int
	out     *mailbox
	cache   cacheJob

	canceled atomic.Bool // done (finished, failed, or its client went away): dropped at the next step

	// The scheduler's own.
	seq       *model.Sequence
	fed       int   // prompt tokens consumed
	next      int32 // the token to feed at the next step
	generated int
	queued    time.Time
	last      time.Time // when the previous token was sampled
	buf       []byte
}

// event is what a job reports to its request: new text, and at the end
// the finish reason ("stop" or "length") and the token counts.
type event struct {
	index     int
	text      string
	logprobs  *logprobs      // of the tokens since the last event, if asked for
	pending   *tokenLogprobs // what logprobs are computed from, by the request's handler
	finish    string
	generated int
	cached    int // prompt tokens its job resumed past, with finish
	err       error
}

// mailbox carries the events of a request's jobs to its handler without
// ever blocking the scheduler.
type mailbox struct {
	mu     sync.Mutex
	events []event
	ready  chan struct{} // has a value when events is not empty
}

func newMailbox() *mailbox { return &mailbox{ready: make(chan struct{}, 1)} }

func (m *mailbox) post(e event) {
	m.mu.Lock()
	m.events = append(m.events, e)
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

// take returns the events posted since the last take.
func (m *mailbox) take(buf []event) []event {
	m.mu.Lock()
	buf = append(buf[:0], m.events...)
	m.events = m.events[:0]
	m.mu.Unlock()
	return buf
}

var (
	errQueueFull = errors.New("the queue of waiting requests is full")
	errClosed    = errors.New("the server is shutting down")
	errKVMemory  = errors.New("the request needs more KV-cache memory than the server has")
	errInternal  = errors.New("internal error in the model step; the server is still up")
)

// scheduler runs the model over the active jobs, one batched step at a
// time, on a goroutine of its own.
type scheduler struct {
	m        *model.Model
	batch    *model.Batch
	maxSeqs  int
	maxQueue int
	chunk    int   // prompt tokens per sequence per step
	rows     int   // rows per step beyond which waiting prompts wait a step
	kvBudget int64 // bytes of KV cache for all active jobs; 0 for no limit
	metrics  *metrics
	logger   *slog.Logger

	mu     sync.Mutex
	queue  []*job
	closed bool
	kvUsed int64 // by the active jobs
	wake   chan struct{}
	done   chan struct{}

	active []*job // the scheduler goroutine's own
	free   []*model.Sequence
	seqs   []*model.Sequence
	chunks [][]int32
	every  []bool // the rows of stepJ that want logits after every token (echo)
	last   []int  // the row of the logits after each one's last token
	stepJ  []*job

	cache *prefixCache // the scheduler goroutine's own; nil when off
	drawn []int        // the rows of stepJ that sample a token
	toks  []int32      // their tokens
	errs  []error      // or why there is none
}

func newScheduler(m *model.Model, o *Options, met *metrics) *scheduler {
	return &scheduler{
		m: m, batch: m.NewBatch(), maxSeqs: o.MaxSequences, maxQueue: o.MaxQueue,
		chunk: o.PrefillChunk, rows: max(o.PrefillChunk, o.StepRows), kvBudget: o.KVMemory, metrics: met, logger: o.Logger,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
}

// submit queues the jobs of one request, all or none.
func (s *scheduler) submit(jobs []*job) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return errClosed
	case len(s.queue)+len(jobs) > s.maxQueue:
		return errQueueFull
	}
	for _, j := range jobs {
		if s.kvBudget > 0 && j.kv > s.kvBudget {
			return errKVMemory
		}
	}
	now := time.Now()
	for _, j := range jobs {
		j.queued = now
		s.queue = append(s.queue, j)
	}
	s.metrics.queue.Set(float64(len(s.queue)))
	s.signal()
	return nil
}

func (s *scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// close stops the scheduler after its current step; jobs still queued or
// active end with errClosed.
func (s *scheduler) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.signal()
	<-s.done
}

// run is the scheduler's loop.
func (s *scheduler) run() {
	defer close(s.done)
	if s.cache != nil {
		ctx, cancel := context.WithCancel(context.Background())
		encoded := make(chan struct{})
		go func() {
			defer close(encoded)
			s.encodeAnswers(ctx)
		}()
		defer func() {
			cancel()
			close(s.cache.answers) // only this goroutine sends on it
			<-encoded
		}()
	}
	for {
		s.mu.Lock()
		closed := s.closed
		if closed {
			for _, j := range s.queue {
				j.out.post(event{index: j.index, err: errClosed})
			}
			s.queue = nil
		}
		s.admit()
		s.mu.Unlock()
		if closed {
			for _, j := range s.active {
				j.out.post(event{index: j.index, err: errClosed})
			}
			return
		}
		s.dropCanceled()
		s.metrics.active.Set(float64(len(s.active)))
		if len(s.active) == 0 {
			<-s.wake
			continue
		}
		s.safeStep()
	}
}

// safeStep runs a step; a panic inside it (a bug) ends the requests of
// the step with an error, drops their sequences, whose state may be
// broken, and leaves the server running.
func (s *scheduler) safeStep() {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		s.logger.Error("panic in a model step", "panic", fmt.Sprint(v), "sequences", len(s.stepJ))
		for _, j := range s.stepJ {
			j.out.post(event{index: j.index, err: errInternal})
			j.canceled.Store(true)
		}
		for i := 0; i < len(s.active); {
			if j := s.active[i]; j.canceled.Load() {
				j.seq = nil // not back to the pool
				s.mu.Lock()
				s.kvUsed -= j.kv
				s.mu.Unlock()
				s.active = append(s.active[:i], s.active[i+1:]...)
				continue
			}
			i++
		}
	}()
	s.step()
}

// admit moves queued jobs to the active set while there is room; s.mu is
// held. Jobs whose client has gone are dropped on the way.
func (s *scheduler) admit() {
	s.admitFills()
	kept := s.queue[:0]
	for i, j := range s.queue {
		switch {
		case j.canceled.Load():
			continue
		case len(s.active) >= s.maxSeqs || s.kvBudget > 0 && s.kvUsed+j.kv > s.kvBudget:
			// First come, first served: nothing overtakes the head.
			kept = append(kept, s.queue[i:]...)
			s.queue = kept
			s.metrics.queue.Set(float64(len(s.queue)))
			return
		}
		seq, err := s.sequence()
		if err != nil {
			j.out.post(event{index: j.index, err: err})
			continue
		}
		j.seq, s.kvUsed = seq, s.kvUsed+j.kv
		s.cache.resume(j)
		s.active = append(s.active, j)
	}
	s.queue = kept
	s.metrics.queue.Set(float64(len(s.queue)))
}

// sequence returns a sequence at position 0, reusing a finished one.
func (s *scheduler) sequence() (*model.Sequence, error) {
	if n := len(s.free); n > 0 {
		seq := s.free[n-1]
		s.free = s.free[:n-1]
		seq.Reset()
		return seq, nil
	}
	return s.m.NewSequence()
}

// retire removes active job i, keeping its sequence for reuse.
func (s *scheduler) retire(i int) {
	j := s.active[i]
	s.free = append(s.free, j.seq)
	j.seq = nil
	s.mu.Lock()
	s.kvUsed -= j.kv
	s.mu.Unlock()
	s.active = append(s.active[:i], s.active[i+1:]...)
}

func (s *scheduler) dropCanceled() {
	for i := 0; i < len(s.active); {
		if s.active[i].canceled.Load() {
			s.retire(i)
			continue
		}
		i++
	}
}

// step runs one batched model step and hands out its tokens.
func (s *scheduler) step() {
	s.seqs, s.chunks, s.stepJ = s.seqs[:0], s.chunks[:0], s.stepJ[:0]
	rows := 0
	// Decoding sequences first, one row each; then prompt chunks while
	// the step has room, at least one, so that a long prompt takes its
	// turns without stalling the others.
	for _, j := range s.active {
		if j.fed == len(j.prompt) {
			s.seqs, s.chunks, s.stepJ = append(s.seqs, j.seq), append(s.chunks, []int32{j.next}), append(s.stepJ, j)
			rows++
		}
	}
	prefills := 0
	for _, j := range s.active {
		if j.fed < len(j.prompt) {
			chunk := s.chunk
			if j.echo {
				// Every row's logits go through the output layer, as a
				// product of the chunk's rows: the longer the chunk, the
				// less its weights are packed again (GPT-2's are 51 MB).
				// Such a job never shares the prefix cache, whose states
				// must come from chunks of s.chunk.
				chunk = s.rows
			}
			c := min(chunk, len(j.prompt)-j.fed)
			if prefills > 0 && rows+c > s.rows {
				continue
			}
			s.seqs, s.chunks, s.stepJ = append(s.seqs, j.seq), append(s.chunks, j.prompt[j.fed:j.fed+c]), append(s.stepJ, j)
			rows += c
			prefills++
		}
	}
	// Prompts read for their logprobs want the logits after every token.
	s.every, s.last = s.every[:0], s.last[:0]
	echo, r := false, 0
	for i, j := range s.stepJ {
		e := j.echo && j.fed < len(j.prompt)
		echo = echo || e
		s.every = append(s.every, e)
		if e {
			r += len(s.chunks[i])
		} else {
			r++
		}
		s.last = append(s.last, r-1)
	}
	var logits *tensor.Tensor
	var err error
	if echo {
		logits, err = s.batch.StepEvery(s.seqs, s.chunks, s.every)
	} else {
		logits, err = s.batch.Step(s.seqs, s.chunks)
	}
	if err != nil {
		// Admission checked every limit: a failure here is a bug; end
		// the jobs of this step rather than the server.
		for _, j := range s.stepJ {
			j.out.post(event{index: j.index, err: fmt.Errorf("model step: %w", err)})
			j.canceled.Store(true)
		}
		return
	}
	V := s.m.Config().Vocab
	now := time.Now()
	s.drawn = s.drawn[:0]
	for i, j := range s.stepJ {
		if j.fed < len(j.prompt) {
			if s.every[i] {
				s.promptLogprobs(j, logits.Data[(s.last[i]+1-len(s.chunks[i]))*V:(s.last[i]+1)*V], len(s.chunks[i]))
			}
			j.fed += len(s.chunks[i])
			s.metrics.promptTokens.Add(float64(len(s.chunks[i])))
			s.cache.reached(j)
			if j.cache.fill && j.fed == len(j.prompt) {
				j.canceled.Store(true) // read for the cache only
			}
			if j.fed < len(j.prompt) || j.cache.fill {
				continue
			}
			if j.max == 0 { // read for its logprobs only
				j.out.post(event{index: j.index, finish: "length"})
				j.canceled.Store(true)
				continue
			}
		}
		s.drawn = append(s.drawn, i)
	}
	s.sample(logits.Data, V)
	for k, i := range s.drawn {
		j, r := s.stepJ[i], s.last[i]
		if err := s.errs[k]; err != nil {
			// Logits that are not finite: this request fails, the others
			// go on.
			s.metrics.nonFinite.Inc()
			j.out.post(event{index: j.index, err: err})
			j.canceled.Store(true)
			continue
		}
		s.emit(j, logits.Data[r*V:(r+1)*V], s.toks[k], now)
	}
	for i := 0; i < len(s.active); {
		if s.active[i].canceled.Load() {
			s.retire(i)
			continue
		}
		i++
	}
}

// sample draws the tokens of the rows s.drawn of logits (V columns) into
// s.toks, and the sampler's error for each into s.errs, the jobs side by
// side: each has a generator of its own, so their tokens do not depend on
// how they are spread. A panic in one is raised again here, for safeStep.
func (s *scheduler) sample(logits []float32, V int) {
	s.toks = slices.Grow(s.toks[:0], len(s.drawn))[:len(s.drawn)]
	s.errs = slices.Grow(s.errs[:0], len(s.drawn))[:len(s.drawn)]
	var failed atomic.Value
	parallel.For(len(s.drawn), func(k int) {
		defer func() {
			if v := recover(); v != nil {
				failed.CompareAndSwap(nil, fmt.Sprint(v))
			}
		}()
		i := s.drawn[k]
		r := s.last[i]
		s.toks[k], s.errs[k] = s.stepJ[i].sampler.Next(logits[r*V : (r+1)*V])
	})
	if v := failed.Load(); v != nil {
		panic(v)
	}
}

// emit hands token tok of job j to its request, and ends the job when it
// is done (marking it canceled, which retires it).
func (s *scheduler) emit(j *job, logits []float32, tok int32, now time.Time) {
	if j.generated == 0 {
		s.metrics.ttft.Observe(now.Sub(j.queued).Seconds())
	} else {
		s.metrics.itl.Observe(now.Sub(j.last).Seconds())
	}
	j.last = now
	j.generated++
	s.metrics.generated.Inc()
	var lp *tokenLogprobs
	if j.top >= 0 {
		// The request's handler computes them from a copy of the row, off
		// this goroutine: a softmax over the vocabulary costs as much as
		// sampling.
		lp = &tokenLogprobs{logits: rowPool.get(len(logits)), toks: []int32{tok}, top: j.top, offsets: []int{j.offset}, tk: j.tok}
		copy(lp.logits, logits)
		b, _ := j.tok.Decode(nil, []int32{tok})
		j.offset += len(b)
	}
	finish := ""
	var text string
	if slices.Contains(j.eos, tok) {
		finish, text = "stop", j.text.flush()
	} else {
		var err error
		j.buf, err = j.tok.Decode(j.buf[:0], []int32{tok})
		if err != nil {
			j.out.post(event{index: j.index, err: fmt.Errorf("decode token %d: %w", tok, err)})
			j.canceled.Store(true)
			return
		}
		var stopped bool
		text, stopped = j.text.add(j.buf)
		switch {
		case stopped:
			finish = "stop"
		case j.generated >= j.max || j.limit > 0 && j.seq.Len()+1 > j.limit:
			finish = "length"
			text += j.text.flush()
		}
	}
	if j.cache.chat && s.cache != nil {
		j.cache.answer = append(j.cache.answer, text...)
	}
	if text != "" || finish != "" || lp != nil {
		j.out.post(event{index: j.index, text: text, pending: lp, finish: finish, generated: j.generated, cached: j.cache.reused})
	}
	if finish != "" {
		j.canceled.Store(true)
		s.cache.finished(j)
		return
	}
	j.next = tok
}

// promptLogprobs posts the logprobs of the prompt tokens that the logits
// of a chunk of n prompt tokens of j (n rows, from position j.fed)
// predict: those after each token of the chunk but the last of the
// prompt, whose logits predict the first generated token; and, for the
// first chunk, the first token, which nothing predicts (null, as OpenAI
// and vLLM give it).
func (s *scheduler) promptLogprobs(j *job, logits []float32, n int) {
	V := len(logits) / n
	first := j.fed + 1
	k := min(n, len(j.prompt)-first) // rows that predict prompt tokens
	lp := &tokenLogprobs{toks: j.prompt[first : first+k], offsets: j.offsets[first : first+k], top: j.top, tk: j.tok}
	if j.fed == 0 {
		lp.toks, lp.offsets, lp.nulls = j.prompt[:first+k], j.offsets[:first+k], 1
	}
	if len(lp.toks) == 0 {
		return
	}
	lp.logits = rowPool.get(k * V)
	copy(lp.logits, logits[:k*V])
	j.out.post(event{index: j.index, pending: lp})
}

// tokenLogprobs is what logprobs entries are computed from: tokens, and
// copies of the logits that predicted them (those they were drawn from,
// for generated tokens), one row each but for the first nulls tokens,
// which nothing predicts.
type tokenLogprobs struct {
	logits  []float32 // len(toks)-nulls rows
	toks    []int32
	nulls   int   // 0, or 1 for the first token of a prompt
	top     int   // alternatives to list
	offsets []int // of the tokens in the choice's text
	tk      tokenizer.Tokenizer
}

// rowPool recycles the copies of logits rows that logprobs take.
var rowPool pool

type pool struct{ p sync.Pool }

func (p *pool) get(n int) []float32 {
	if b, ok := p.p.Get().(*[]float32); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	return make([]float32, n)
}

func (p *pool) put(b []float32) { p.p.Put(&b) }

// compute returns the entries of logprobs for the tokens: each one's
// log-probability under softmax(logits), computed in float64, and the
// top most likely tokens (ties by id), found by partial selection; null
// for the nulls first. It gives the copy of the logits back to the pool.
func (t *tokenLogprobs) compute() *logprobs {
	defer rowPool.put(t.logits)
	name := func(id int32) string {
		b, err := t.tk.Decode(nil, []int32{id})
		if err != nil {
			return fmt.Sprintf("token:%d", id)
		}
		return tokenName(b)
	}
	n := len(t.toks)
	lp := &logprobs{
		Tokens:        make([]string, n),
		TokenLogprobs: make([]*float64, n),
		TopLogprobs:   make([]map[string]float64, n),
		TextOffset:    t.offsets,
	}
	V := 0
	if n > t.nulls {
		V = len(t.logits) / (n - t.nulls)
	}
	var sel sample.Sampler
	var ids []int32
	for i, tok := range t.toks {
		lp.Tokens[i] = name(tok)
		if i < t.nulls {
			continue
		}
		logits := t.logits[(i-t.nulls)*V : (i-t.nulls+1)*V]
		lse := sample.LogSumExp(logits)
		v := float64(logits[tok]) - lse
		lp.TokenLogprobs[i] = &v
		lp.TopLogprobs[i] = map[string]float64{}
		if t.top > 0 {
			ids = sel.Top(ids[:0], logits, t.top)
			for _, id := range ids {
				lp.TopLogprobs[i][name(id)] = float64(logits[id]) - lse
			}
		}
	}
	return lp
}

// tokenName is how logprobs show a token: its text, or for bytes that
// are not valid UTF-8 on their own (a piece of a character), "bytes:"
// and their escapes, as OpenAI does, so that different tokens never
// share a name.
func tokenName(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var s strings.Builder
	s.WriteString("bytes:")
	for _, c := range b {
		fmt.Fprintf(&s, "\\x%02x", c)
	}
	return s.String()
}
