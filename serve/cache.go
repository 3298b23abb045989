package serve

import (
	"container/list"
	"context"
	"encoding/binary"
	"slices"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
)

// The prefix cache. A request's prompt is read in chunks of
// Options.PrefillChunk tokens counted from its start (scheduler.go), and
// model.Batch computes a chunk's rows from the chunk and the sequence's
// state alone; so the decoding state after the first k·chunk tokens of a
// prompt is a function of those tokens, the same bits whichever request
// computed it. The cache keeps such states (model.Snapshot) in a trie
// over blocks of chunk tokens; a new request resumes from the deepest
// state on its prompt's path and reads only the rest, in the chunks it
// would have read anyway, so that its output is bit for bit that of a
// cold start.
//
// A snapshot is kept where a later request is likely to resume: at the
// last block boundary of each prompt (before its last token, which must
// be read to give the first logits), at the boundaries 1, 2, 4, 8, … blocks
// in (shared preambles of any length lose at most half), and where the
// prompt leaves a path that an earlier prompt took (a branch point: the
// shared part is worth a state). After a chat request, its answer is read
// again as the next turn's prompt will render it (a fill), in aligned
// chunks, so that the next turn reads only its new tokens and at most one
// block of the old. Snapshots of polysketch have a constant size; those
// of a KV cache grow with the prefix. Least recently used entries go
// first when the cache passes its budget; a node's ancestors are always
// used more recently than it, so that only leaves are evicted.

// prefixCache is the scheduler goroutine's own, but for fills, which
// scheduler.mu guards.
type prefixCache struct {
	block   int   // tokens per block: the prefill chunk
	budget  int64 // bytes
	used    int64
	entries int // nodes with a snapshot
	root    node
	lru     list.List   // of *node, every node but the root, most recent first
	fills   []*job      // waiting for a slot
	answers chan answer // to encodeAnswers
	// encoding counts the answers handed to encodeAnswers whose fill is
	// not queued yet: the scheduler is idle only without any.
	encoding atomic.Int64
	key      []byte   // scratch for map lookups
	kvRow    int64    // bytes of KV cache per position, 0 for a recurrent state
	id       [32]byte // what a cache file must name to be used (cacheIdentity)
	met      *cacheMetrics
}

// node is a block of tokens on a path from the root, with the state after
// the path if one is kept.
type node struct {
	parent   *node
	key      string // the block's tokens, 4 bytes each
	children map[string]*node
	snap     *model.Snapshot
	elem     *list.Element
}

// nodeBytes is what a node costs beyond its snapshot: its key (shared by
// the map) and the bookkeeping.
func (c *prefixCache) nodeBytes() int64 { return 4*int64(c.block) + 160 }

// maxFills bounds the fills waiting for a slot; older ones are dropped.
const maxFills = 64

// cacheJob is a job's part in the cache.
type cacheJob struct {
	chat   bool   // a chat request: its answer is read again after it (a fill)
	fill   bool   // a job that reads tokens for the cache only
	at     []int  // prompt positions at which to keep a snapshot, ascending
	answer []byte // the text sent to the client so far (chat)
	reused int    // prompt tokens restored from a cached state
}

// cacheMetrics are the cache's Prometheus metrics.
type cacheMetrics struct {
	hits, misses, reused, evictions prometheus.Counter
	bytes, entries                  prometheus.Gauge
}

func newCacheMetrics(reg *prometheus.Registry) *cacheMetrics {
	m := &cacheMetrics{
		hits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "polysketch_prefix_cache_hits_total", Help: "Sequences that resumed from a cached prefix state.",
		}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "polysketch_prefix_cache_misses_total", Help: "Sequences that found no cached prefix state and read their prompt from the start.",
		}),
		reused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "polysketch_prefix_cache_reused_tokens_total", Help: "Prompt tokens not read again thanks to the prefix cache.",
		}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "polysketch_prefix_cache_evictions_total", Help: "Prefix states dropped to stay within --cache-memory.",
		}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "polysketch_prefix_cache_bytes", Help: "Bytes the prefix cache holds: states and token paths.",
		}),
		entries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "polysketch_prefix_cache_entries", Help: "Prefix states the cache holds.",
		}),
	}
	reg.MustRegister(m.hits, m.misses, m.reused, m.evictions, m.bytes, m.entries)
	return m
}

// newPrefixCache returns an empty cache of budget bytes for blocks of
// block tokens.
func newPrefixCache(block int, budget int64, met *cacheMetrics) *prefixCache {
	c := &prefixCache{block: block, budget: budget, met: met, answers: make(chan answer, maxAnswers)}
	c.lru.Init()
	return c
}

// keyOf returns the key of a block of tokens in c.key.
func (c *prefixCache) keyOf(block []int32) []byte {
	c.key = c.key[:0]
	for _, t := range block {
		c.key = binary.LittleEndian.AppendUint32(c.key, uint32(t))
	}
	return c.key
}

// lookup walks the trie along tokens over whole blocks that leave at
// least keep tokens unread, and returns the deepest snapshot on the way
// with its position, and how many tokens of the path it found (which may
// go past the snapshot). It marks the path used.
func (c *prefixCache) lookup(tokens []int32, keep int) (snap *model.Snapshot, resume, matched int) {
	n := &c.root
	var path []*node
	for d := 0; (d+1)*c.block <= len(tokens)-keep; d++ {
		child := n.children[string(c.keyOf(tokens[d*c.block:(d+1)*c.block]))]
		if child == nil {
			break
		}
		n = child
		path = append(path, n)
		if n.snap != nil {
			snap, resume = n.snap, (d+1)*c.block
		}
	}
	c.touch(path)
	return snap, resume, len(path) * c.block
}

// touch marks a path from the root used, deepest first, so that every
// node is more recent than its descendants.
func (c *prefixCache) touch(path []*node) {
	for i := len(path) - 1; i >= 0; i-- {
		c.lru.MoveToFront(path[i].elem)
	}
}

// insert keeps snap as the state after tokens (whole blocks), unless the
// cache has one there already (the same bits), then evicts what passes
// the budget.
func (c *prefixCache) insert(tokens []int32, snap *model.Snapshot) {
	depth := len(tokens) / c.block
	if depth == 0 || snap.Bytes()+int64(depth)*c.nodeBytes() > c.budget {
		return // no block (not reached), or would evict everything and itself
	}
	n := &c.root
	path := make([]*node, 0, depth)
	for d := range depth {
		k := c.keyOf(tokens[d*c.block : (d+1)*c.block])
		child := n.children[string(k)]
		if child == nil {
			child = &node{parent: n, key: string(k)}
			if n.children == nil {
				n.children = map[string]*node{}
			}
			n.children[child.key] = child
			child.elem = c.lru.PushFront(child)
			c.used += c.nodeBytes()
		}
		n = child
		path = append(path, n)
	}
	if n.snap == nil {
		n.snap = snap
		c.used += snap.Bytes()
		c.entries++
	}
	c.touch(path)
	c.evict()
}

// evict drops least recently used nodes, leaves first, until the cache
// fits its budget.
func (c *prefixCache) evict() {
	for c.used > c.budget && c.lru.Len() > 0 {
		e := c.lru.Back()
		n := e.Value.(*node)
		if len(n.children) > 0 {
			// Not reached: a node is more recent than its descendants. Drop
			// its state only, keeping the paths below it.
			c.dropSnap(n)
			c.lru.MoveToFront(e)
			continue
		}
		c.dropSnap(n)
		c.lru.Remove(e)
		delete(n.parent.children, n.key)
		c.used -= c.nodeBytes()
	}
	c.gauges()
}

func (c *prefixCache) dropSnap(n *node) {
	if n.snap == nil {
		return
	}
	c.used -= n.snap.Bytes()
	c.entries--
	n.snap = nil
	c.met.evictions.Inc()
}

func (c *prefixCache) gauges() {
	c.met.bytes.Set(float64(c.used))
	c.met.entries.Set(float64(c.entries))
}

// resume restores job j's fresh sequence from the deepest cached state on
// its prompt's path, so that it reads only the rest, and plans where its
// prompt's states are to be kept. A nil cache does nothing.
func (c *prefixCache) resume(j *job) {
	if c == nil {
		return
	}
	keep := 1 // the last prompt token gives the first logits
	switch {
	case j.cache.fill:
		keep = 0
	case j.echo:
		keep = len(j.prompt) // every token's logits are wanted
	}
	snap, r, matched := c.lookup(j.prompt, keep)
	if snap != nil {
		if err := j.seq.Restore(snap); err != nil {
			r = 0 // not reached: every snapshot comes from this model
		} else {
			j.fed = r
		}
	}
	j.cache.reused = r
	if !j.cache.fill {
		if r > 0 {
			c.met.hits.Inc()
			c.met.reused.Add(float64(r))
		} else {
			c.met.misses.Inc()
		}
	}
	at := j.cache.at[:0]
	end := len(j.prompt) - keep
	end -= end % c.block
	if !j.cache.fill {
		for p := c.block; p < end; p *= 2 {
			at = append(at, p)
		}
		at = append(at, matched)
	}
	at = append(at, end)
	slices.Sort(at)
	at = slices.Compact(at)
	at = slices.DeleteFunc(at, func(p int) bool { return p <= r })
	j.cache.at = at
}

// reached keeps the state of job j if it has just read up to a position
// its plan names. A nil cache does nothing.
func (c *prefixCache) reached(j *job) {
	if c == nil {
		return
	}
	for len(j.cache.at) > 0 && j.cache.at[0] < j.fed {
		j.cache.at = j.cache.at[1:] // not reached: positions are chunk boundaries
	}
	if len(j.cache.at) == 0 || j.cache.at[0] != j.fed {
		return
	}
	j.cache.at = j.cache.at[1:]
	snap, err := j.seq.Snapshot()
	if err != nil {
		return
	}
	c.insert(j.prompt[:j.fed], snap)
}

// answer is a finished chat job's part in a fill: its prompt and the text
// of its answer as the next turn renders it.
type answer struct {
	prompt []int32
	text   []byte
	tok    tokenizer.Tokenizer
	limit  int
}

// maxAnswers bounds the answers waiting to be encoded; beyond it a
// finished chat's answer is not cached.
const maxAnswers = 64

// finished hands the answer of a chat job that has ended to the
// scheduler's encoder (encodeAnswers), which queues its fill: its prompt
// and its answer as the next turn renders them (see chatPrompt). A nil
// cache does nothing. The scheduler's goroutine never encodes: a hostile
// pre-tokenizer pattern may take up to tokenizer.MatchTimeout a match,
// and every sequence would wait for it.
func (c *prefixCache) finished(j *job) {
	if c == nil || !j.cache.chat || j.cache.fill {
		return
	}
	a := answer{prompt: j.prompt, text: []byte(turnContent(string(j.cache.answer)) + "\n"), tok: j.tok, limit: j.limit}
	c.encoding.Add(1)
	select {
	case c.answers <- a:
	default: // the encoder is behind: this answer is not cached
		c.encoding.Add(-1)
	}
}

// encodeAnswers encodes the answers that finished hands it, until their
// channel is closed, and queues the fill of each: whole blocks of its
// prompt and answer, read in aligned chunks so that the states are those
// a cold start computes. It runs on a goroutine of its own; ctx ends an
// encoding when the scheduler stops.
func (s *scheduler) encodeAnswers(ctx context.Context) {
	c := s.cache
	for a := range c.answers {
		fill := c.fill(ctx, a)
		s.mu.Lock()
		if fill != nil {
			if len(c.fills) == maxFills {
				c.fills = c.fills[1:]
			}
			c.fills = append(c.fills, fill)
		}
		c.encoding.Add(-1)
		s.mu.Unlock()
		s.signal()
	}
}

// fill returns the fill of answer a, nil for none.
func (c *prefixCache) fill(ctx context.Context, a answer) *job {
	// Each match of a hostile pattern is bounded by
	// tokenizer.MatchTimeout; a text it gives up on is not cached.
	ids, err := a.tok.Encode(ctx, slices.Clone(a.prompt), a.text)
	if err != nil {
		return nil
	}
	n := len(ids)
	if a.limit > 0 {
		n = min(n, a.limit)
	}
	n -= n % c.block
	if n <= len(a.prompt)-1-(len(a.prompt)-1)%c.block {
		return nil // no block past the prompt's own last state
	}
	return &job{prompt: ids[:n], limit: a.limit, kv: c.kvRow * int64(n), out: newMailbox(), cache: cacheJob{fill: true}}
}

// admitFills starts waiting fills while there are free slots; s.mu is
// held. They go before the queue: each is a chunk or two of a
// conversation whose next turn is likely to follow.
func (s *scheduler) admitFills() {
	c := s.cache
	if c == nil {
		return
	}
	for len(c.fills) > 0 && len(s.active) < s.maxSeqs {
		j := c.fills[0]
		if s.kvBudget > 0 && s.kvUsed+j.kv > s.kvBudget {
			return
		}
		c.fills = c.fills[1:]
		seq, err := s.sequence()
		if err != nil {
			continue
		}
		j.seq = seq
		c.resume(j)
		if j.fed == len(j.prompt) { // all cached already
			s.free = append(s.free, seq)
			continue
		}
		s.kvUsed += j.kv
		s.active = append(s.active, j)
	}
}

// turnContent is how the chat template renders a turn's content after
// its "Role:": as it is when it starts with a space (as a model's answer
// after the cue "Assistant:" does), so that a prompt and its answer are
// a prefix of the next turn's prompt; else after a space.
func turnContent(content string) string {
	if r, _ := utf8.DecodeRuneInString(content); r != utf8.RuneError && unicode.IsSpace(r) {
		return content
	}
	return " " + content
}
