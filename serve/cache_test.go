package serve

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/internal/fifotest"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
)

// cacheChunk is the prefill chunk, and so the cache's block, of the
// cache tests: small, so that short prompts span many blocks.
const cacheChunk = 8

// cacheConfigs are the models the cache tests run: polysketch (constant
// state) and softmax (a KV cache).
func cacheConfigs() map[string]model.Config {
	soft := testConfig()
	soft.Attention, soft.Context = attention.SoftmaxConfig{}, 512
	return map[string]model.Config{"polysketch": testConfig(), "softmax": soft}
}

// metricValue returns the value of the counter or gauge name of s.
func metricValue(t testing.TB, s *Server, name string) float64 {
	t.Helper()
	mfs, err := s.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// cacheStats are the cache's counters.
type cacheStats struct{ hits, misses, reused, evictions, bytes, entries float64 }

func statsOf(t testing.TB, s *Server) cacheStats {
	v := func(n string) float64 { return metricValue(t, s, "polysketch_prefix_cache_"+n) }
	return cacheStats{v("hits_total"), v("misses_total"), v("reused_tokens_total"), v("evictions_total"), v("bytes"), v("entries")}
}

// seeded returns the text and logprobs of a seeded completion of prompt:
// the logprobs show the logits, which a change in the last bit alters.
func seeded(t testing.TB, url, prompt string, seed int) string {
	t.Helper()
	body := fmt.Sprintf(`{"prompt":%q,"max_tokens":12,"seed":%d,"temperature":0.9,"logprobs":2}`, prompt, seed)
	c := complete(t, url, body).Choices[0]
	lp, err := json.Marshal(c.Logprobs)
	if err != nil {
		t.Fatal(err)
	}
	return c.Text + "|" + string(lp)
}

// cachePrompts share prefixes of different lengths: 61 bytes, the first
// 45 of them then others, and the first 45 with yet others.
var cachePrompts = func() []string {
	a := "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(1)\n}\n"
	return []string{a, a[:45] + "print(2)\n}\n", a[:45] + "x := 3\n"}
}()

// TestCacheInvariance sends seeded requests to a server with the cache
// and to one without, cold, warm (exact and partial reuse at block
// boundaries) and under load, and requires the same text and logprobs
// bit for bit; it checks the hits and the tokens reused that the design
// predicts.
func TestCacheInvariance(t *testing.T) {
	for name, cfg := range cacheConfigs() {
		t.Run(name, func(t *testing.T) {
			m := testModel(t, cfg)
			_, cold := newTest(t, Options{PrefillChunk: cacheChunk}, m)
			s, warm := newTest(t, Options{PrefillChunk: cacheChunk, CacheMemory: 256 << 20}, m)
			want := map[string]string{}
			for i, p := range cachePrompts[:3] {
				want[p] = seeded(t, cold.URL, p, i)
			}
			a := cachePrompts[0]
			// Cold: nothing cached.
			if got := seeded(t, warm.URL, a, 0); got != want[a] {
				t.Fatalf("cold cache: %s\nwithout cache: %s", got, want[a])
			}
			waitFor(t, func() bool { return idle(s) })
			st := statsOf(t, s)
			if st.hits != 0 || st.misses != 1 || st.entries == 0 || st.bytes <= 0 {
				t.Fatalf("after one request: %+v, want a miss and states kept", st)
			}
			// Exact reuse: the same prompt resumes from its last block
			// boundary before its last token (61 bytes: 56).
			if got := seeded(t, warm.URL, a, 0); got != want[a] {
				t.Fatalf("warm cache, same prompt: %s\nwithout cache: %s", got, want[a])
			}
			if st = statsOf(t, s); st.hits != 1 || st.reused != 56 {
				t.Fatalf("same prompt again: %+v, want a hit reusing 56 tokens", st)
			}
			// Partial reuse: 45 shared bytes hold 5 whole blocks; the
			// deepest state on them is at 32 (1, 2, 4 blocks and the end of
			// each prompt are kept), and the branch at 40 is kept now.
			b := cachePrompts[1]
			if got := seeded(t, warm.URL, b, 1); got != want[b] {
				t.Fatalf("warm cache, shared prefix: %s\nwithout cache: %s", got, want[b])
			}
			if st = statsOf(t, s); st.hits != 2 || st.reused != 56+32 {
				t.Fatalf("a prompt sharing 45 tokens: %+v, want a hit reusing 32 tokens", st)
			}
			c := cachePrompts[2]
			if got := seeded(t, warm.URL, c, 2); got != want[c] {
				t.Fatalf("warm cache, from the branch point: %s\nwithout cache: %s", got, want[c])
			}
			if st = statsOf(t, s); st.hits != 3 || st.reused != 56+32+40 {
				t.Fatalf("a third prompt sharing 45 tokens: %+v, want a hit reusing 40 tokens, from the branch point", st)
			}
			// Under load: every prompt several times at once, each as
			// alone without the cache.
			var wg sync.WaitGroup
			errs := make(chan string, 64)
			for k := range 4 {
				for i, p := range cachePrompts[:3] {
					wg.Go(func() {
						if got := seeded(t, warm.URL, p, i); got != want[p] {
							errs <- fmt.Sprintf("round %d, prompt %d under load: %s\nwithout cache: %s", k, i, got, want[p])
						}
					})
				}
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Error(e)
			}
		})
	}
}

// TestCacheEviction fills a cache whose budget holds a few states with
// distinct prompts: it must stay within the budget, evict the least
// recently used first, and still serve the most recent prompt from the
// cache.
func TestCacheEviction(t *testing.T) {
	m := testModel(t, testConfig())
	seq, _ := m.NewSequence()
	snap, err := seq.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Room for three states and their paths; each prompt below keeps two
	// (after 1 and 2 blocks).
	budget := 3*snap.Bytes() + 1024
	s, ts := newTest(t, Options{PrefillChunk: cacheChunk, CacheMemory: budget}, m)
	prompt := func(i int) string { return fmt.Sprintf("%02d: prompt text!!", i) } // 18 bytes
	for i := range 4 {
		seeded(t, ts.URL, prompt(i), i)
		waitFor(t, func() bool { return idle(s) })
		if st := statsOf(t, s); st.bytes > float64(budget) {
			t.Fatalf("after %d prompts the cache holds %v bytes, over its budget of %d", i+1, st.bytes, budget)
		}
	}
	st := statsOf(t, s)
	if st.evictions < 5 || st.entries > 3 {
		t.Fatalf("4 prompts of 2 states each in a budget of 3: %+v, want 5 evictions or more and at most 3 states", st)
	}
	seeded(t, ts.URL, prompt(3), 3) // the most recent: still there
	if got := statsOf(t, s); got.hits != st.hits+1 {
		t.Errorf("the most recent prompt again: %+v, want a hit", got)
	}
	seeded(t, ts.URL, prompt(0), 0) // the least recent: evicted
	if got := statsOf(t, s); got.misses != st.misses+1 {
		t.Errorf("the first prompt again: %+v, want a miss: it was the least recently used", got)
	}
}

// TestCacheChat holds a conversation of three turns: each later turn must
// resume after the previous turn's prompt and answer (all but the last
// block boundary's remainder), with the answers a server without cache
// gives, and usage.prompt_tokens_details.cached_tokens the tokens reused
// (0 without the cache), streamed or not.
func TestCacheChat(t *testing.T) {
	m := testModel(t, testConfig())
	_, cold := newTest(t, Options{PrefillChunk: cacheChunk}, m)
	s, warm := newTest(t, Options{PrefillChunk: cacheChunk, CacheMemory: 256 << 20}, m)
	chat := func(url string, msgs []map[string]string, stream bool) (text string, prompt, cached int) {
		req := map[string]any{"messages": msgs, "max_tokens": 20, "seed": 5, "temperature": 0.9}
		if stream {
			req["stream"], req["stream_options"] = true, map[string]bool{"include_usage": true}
		}
		body, _ := json.Marshal(req)
		code, _, b := call(t, "POST", url+"/v1/chat/completions", string(body))
		if code != http.StatusOK {
			t.Fatalf("status %d: %s", code, b)
		}
		if stream { // the usage chunk is the last before [DONE]
			for line := range strings.Lines(string(b)) {
				var c chatCompletion
				if data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok && strings.Contains(data, `"usage"`) {
					if err := json.Unmarshal([]byte(data), &c); err != nil {
						t.Fatal(err)
					}
					return "", c.Usage.PromptTokens, c.Usage.PromptTokensDetails.CachedTokens
				}
			}
			t.Fatalf("no usage in the stream: %s", b)
		}
		var c chatCompletion
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		return *c.Choices[0].Message.Content, c.Usage.PromptTokens, c.Usage.PromptTokensDetails.CachedTokens
	}
	msgs := []map[string]string{{"role": "system", "content": "You write Go."}}
	var last int // the tokens the last turn's prompt had
	for turn, q := range []string{"Print hello.", "Now in a loop.", "Thanks."} {
		msgs = append(msgs, map[string]string{"role": "user", "content": q})
		want, _, none := chat(cold.URL, msgs, false)
		if none != 0 {
			t.Errorf("turn %d without the cache: %d cached tokens, want 0", turn, none)
		}
		before := statsOf(t, s)
		got, prompt, cached := chat(warm.URL, msgs, false)
		if got != want {
			t.Fatalf("turn %d: %q with the cache, %q without", turn, got, want)
		}
		after := statsOf(t, s)
		if reused := after.reused - before.reused; float64(cached) != reused || turn > 0 && cached == 0 {
			t.Errorf("turn %d: usage says %d cached tokens, the cache reused %v", turn, cached, reused)
		}
		if turn > 0 {
			// Everything but the last block and the new turn comes from the
			// cache: at least the prompt less the new user line and less a
			// block (and the cue).
			newPart := len("User: " + q + "\nAssistant:")
			if reused := after.reused - before.reused; reused < float64(prompt-newPart-cacheChunk) {
				t.Errorf("turn %d of %d prompt tokens reused %v, want at least %d: all but its new tokens and less than a block", turn, prompt, reused, prompt-newPart-cacheChunk)
			}
		}
		msgs = append(msgs, map[string]string{"role": "assistant", "content": got})
		waitFor(t, func() bool { return idle(s) }) // the fill of the answer
		last = prompt
	}
	// The whole conversation again, streamed: it resumes past the last
	// turn's prompt, whose answer was read into the cache.
	before := statsOf(t, s)
	_, prompt, cached := chat(warm.URL, msgs, true)
	if reused := statsOf(t, s).reused - before.reused; float64(cached) != reused || cached <= last-cacheChunk {
		t.Errorf("streamed: usage says %d cached tokens of %d, the cache reused %v; want past the last turn's %d less a block", cached, prompt, reused, last)
	}
}

// TestCachePersistence writes the cache at shutdown and reads it back in a
// new server of the same model: the first request there is a hit with the
// output of a cold start.
func TestCachePersistence(t *testing.T) {
	for name, cfg := range cacheConfigs() {
		t.Run(name, func(t *testing.T) {
			m := testModel(t, cfg)
			dir := t.TempDir()
			a := cachePrompts[0]
			_, cold := newTest(t, Options{PrefillChunk: cacheChunk}, m)
			want := seeded(t, cold.URL, a, 0)
			o := Options{PrefillChunk: cacheChunk, CacheMemory: 256 << 20, CacheDir: dir}
			s1, ts1 := newTest(t, o, m)
			seeded(t, ts1.URL, a, 0)
			waitFor(t, func() bool { return idle(s1) })
			entries := statsOf(t, s1).entries
			ts1.Close()
			s1.Close()
			if err := s1.SaveCache(); err != nil {
				t.Fatal(err)
			}
			s2, ts2 := newTest(t, o, m)
			if st := statsOf(t, s2); st.entries != entries {
				t.Fatalf("read back %v states, wrote %v", st.entries, entries)
			}
			if got := seeded(t, ts2.URL, a, 0); got != want {
				t.Fatalf("after a restart: %s\ncold: %s", got, want)
			}
			if st := statsOf(t, s2); st.hits != 1 || st.misses != 0 || st.reused != 56 {
				t.Fatalf("after a restart: %+v, want the first request to hit", st)
			}
		})
	}
}

// TestCachePersistenceBF16 keeps a bf16 server's cache across a restart:
// the weights that name the model in the file are hashed before bf16
// inference releases their float32 values, so a second server of the same
// checkpoint reads the file back.
func TestCachePersistenceBF16(t *testing.T) {
	dir := t.TempDir()
	a := cachePrompts[0]
	o := Options{PrefillChunk: cacheChunk, CacheMemory: 256 << 20, CacheDir: dir, Precision: nn.BF16}
	s1, ts1 := newTest(t, o, testModel(t, testConfig()))
	want := seeded(t, ts1.URL, a, 0)
	waitFor(t, func() bool { return idle(s1) })
	entries := statsOf(t, s1).entries
	ts1.Close()
	s1.Close()
	if err := s1.SaveCache(); err != nil {
		t.Fatal(err)
	}
	s2, ts2 := newTest(t, o, testModel(t, testConfig()))
	if st := statsOf(t, s2); entries == 0 || st.entries != entries {
		t.Fatalf("read back %v states, wrote %v", st.entries, entries)
	}
	if got := seeded(t, ts2.URL, a, 0); got != want {
		t.Fatalf("after a restart: %s\nbefore: %s", got, want)
	}
}

// TestCacheFileDamaged damages a cache file in every way a crash, a disk
// or a mix-up can, and requires the server to ignore it whole with one
// log line, start with an empty cache and answer as a cold one.
func TestCacheFileDamaged(t *testing.T) {
	m := testModel(t, testConfig())
	dir := t.TempDir()
	a := cachePrompts[0]
	o := Options{PrefillChunk: cacheChunk, CacheMemory: 256 << 20, CacheDir: dir}
	s1, ts1 := newTest(t, o, m)
	want := seeded(t, ts1.URL, a, 0)
	waitFor(t, func() bool { return idle(s1) })
	ts1.Close()
	s1.Close()
	if err := s1.SaveCache(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, cacheFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	other := testConfig()
	other.Seed = 8
	flip := func(at int) []byte {
		b := bytes.Clone(good)
		b[at] ^= 0x10
		return b
	}
	hdr := len(cacheMagic) + 32 + 8
	for _, tc := range []struct {
		name string
		data []byte
		m    *model.Model
		o    Options
	}{
		{"truncated in the header", good[:20], m, o},
		{"truncated in an entry", good[:len(good)/2], m, o},
		{"truncated by a byte", good[:len(good)-1], m, o},
		{"a byte past the end", append(bytes.Clone(good), 0), m, o},
		{"flipped in the header", flip(10), m, o},
		{"flipped in a length", flip(hdr + 2), m, o},
		{"flipped in the tokens", flip(hdr + 14), m, o},
		{"flipped in a state", flip(len(good) / 2), m, o},
		{"flipped in a checksum", flip(len(good) - 2), m, o},
		{"a length that wraps", func() []byte {
			b := bytes.Clone(good)
			binary.LittleEndian.PutUint64(b[hdr:], math.MaxUint64-2)
			return b
		}(), m, o},
		{"a length past the end", func() []byte {
			b := bytes.Clone(good)
			binary.LittleEndian.PutUint64(b[hdr:], uint64(len(good)))
			return b
		}(), m, o},
		{"another model", good, testModel(t, other), o},
		{"another chunk", good, m, Options{PrefillChunk: 2 * cacheChunk, CacheMemory: o.CacheMemory, CacheDir: dir}},
		// The same weights in bf16 compute other bits.
		{"another precision", good, testModel(t, testConfig()), Options{PrefillChunk: cacheChunk, CacheMemory: o.CacheMemory, CacheDir: dir, Precision: nn.BF16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			tc.o.Logger = slog.New(slog.NewTextHandler(&log, nil))
			s, ts := newTest(t, tc.o, tc.m)
			if lines := strings.Count(log.String(), "prefix cache file ignored"); lines != 1 {
				t.Errorf("%d log lines about the damaged file, want 1:\n%s", lines, log.String())
			}
			if st := statsOf(t, s); st.entries != 0 || st.bytes != 0 {
				t.Fatalf("states kept from a damaged file: %+v", st)
			}
			if tc.m == m && tc.o.PrefillChunk == cacheChunk {
				if got := seeded(t, ts.URL, a, 0); got != want {
					t.Errorf("after a damaged file: %s, want %s", got, want)
				}
			}
		})
	}
}

// TestCacheOff checks that the cache is off at CacheMemory 0 and for a
// model whose decoding state cannot be copied, with a log line.
func TestCacheOff(t *testing.T) {
	s, ts := newTest(t, Options{PrefillChunk: cacheChunk}, nil)
	seeded(t, ts.URL, cachePrompts[0], 0)
	seeded(t, ts.URL, cachePrompts[0], 0)
	if st := statsOf(t, s); st != (cacheStats{}) {
		t.Errorf("with CacheMemory 0: %+v, want nothing", st)
	}
	cfg := testConfig()
	hyper, err := attention.DefaultConfig("hyper")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Attention, cfg.Context = hyper, 512
	var log bytes.Buffer
	srv := New(Options{CacheMemory: 1 << 20, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err := srv.Ready(testModel(t, cfg), tokenizer.Byte); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !strings.Contains(log.String(), "prefix cache off") {
		t.Errorf("no log line for a model without snapshots: %q", log.String())
	}
}

// TestChatPromptPrefix checks the property the cache relies on in a chat:
// a turn's prompt followed by the model's answer (which starts with a
// space, after the cue "Assistant:") and a newline is a prefix of the next
// turn's prompt, where the client sends the answer back as it got it.
func TestChatPromptPrefix(t *testing.T) {
	msg := func(role, content string) message {
		b, _ := json.Marshal(content)
		return message{Role: role, Content: b}
	}
	for _, answer := range []string{" Hello.", "\tIndented.", "No space.", ""} {
		turn := []message{msg("system", "S"), msg("user", "U")}
		prompt, err := chatPrompt(turn)
		if err != nil {
			t.Fatal(err)
		}
		next, err := chatPrompt(append(turn, msg("assistant", answer), msg("user", "V")))
		if err != nil {
			t.Fatal(err)
		}
		if want := prompt + turnContent(answer) + "\n"; !strings.HasPrefix(next, want) {
			t.Errorf("answer %q: next prompt %q does not start with %q", answer, next, want)
		}
		if strings.HasPrefix(answer, " ") && !strings.HasPrefix(next, prompt+answer+"\n") {
			t.Errorf("answer %q: next prompt %q does not start with the prompt and the answer as generated", answer, next)
		}
	}
}

// TestPrefixTrie drives the trie directly: lookups find the deepest state
// on a path and how far the path goes, leaving the tokens asked; eviction
// takes the least recently used leaves first, never a node whose
// descendants are kept; and the bytes held return to zero when all is
// evicted.
func TestPrefixTrie(t *testing.T) {
	m := testModel(t, testConfig())
	seq, _ := m.NewSequence()
	b := m.NewBatch()
	if _, err := b.Step([]*model.Sequence{seq}, [][]int32{{1, 2}}); err != nil {
		t.Fatal(err)
	}
	snap, err := seq.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	const B = 2
	toks := func(s string) []int32 {
		var out []int32
		for _, c := range s {
			out = append(out, int32(c))
		}
		return out
	}
	c := newPrefixCache(B, 1<<30, newCacheMetrics(newMetrics().reg))
	// States after aabb, aabbcc and aaxx; the node aa has none.
	c.insert(toks("aabb"), snap)
	c.insert(toks("aabbcc"), snap)
	c.insert(toks("aaxx"), snap)
	for _, tc := range []struct {
		prompt          string
		keep            int
		resume, matched int
	}{
		{"aaxxy", 1, 4, 4},
		{"aabbcc", 1, 4, 4}, // the last token is left to read
		{"aabbcc", 0, 6, 6},
		{"aabbcd", 1, 4, 4},
		{"aabz", 1, 0, 2}, // on the path, before any state
		{"zz", 0, 0, 0},
		{"a", 0, 0, 0},
		{"aabbccd", 1, 6, 6},
	} {
		got, r, matched := c.lookup(toks(tc.prompt), tc.keep)
		if r != tc.resume || matched != tc.matched || (got != nil) != (r > 0) {
			t.Errorf("lookup(%q, keep %d) = state %v at %d, path %d; want %d, %d", tc.prompt, tc.keep, got != nil, r, matched, tc.resume, tc.matched)
		}
	}
	// Recency now, most recent first: aa, aabb, aabbcc, aaxx. A budget of
	// one state less evicts aaxx, the least recently used leaf.
	per := snap.Bytes()
	c.budget = c.used - 1
	c.evict()
	if c.entries != 2 {
		t.Fatalf("after one eviction: %d states, want 2", c.entries)
	}
	if _, r, _ := c.lookup(toks("aaxxy"), 1); r != 0 {
		t.Errorf("after one eviction aaxxy resumes at %d, want 0: it was the least recently used", r)
	}
	if _, r, _ := c.lookup(toks("aabbccd"), 1); r != 6 {
		t.Errorf("after one eviction aabbccd resumes at %d, want 6", r)
	}
	// Then aabbcc, a leaf, goes before aabb, its ancestor.
	c.budget = c.used - per
	c.evict()
	if _, r, _ := c.lookup(toks("aabbccd"), 1); r != 4 {
		t.Errorf("after two evictions aabbccd resumes at %d, want 4", r)
	}
	c.budget = 0
	c.evict()
	if c.used != 0 || c.entries != 0 || c.lru.Len() != 0 || len(c.root.children) != 0 {
		t.Errorf("all evicted: %d bytes, %d states, %d nodes, %d children of the root", c.used, c.entries, c.lru.Len(), len(c.root.children))
	}
}

// TestCacheFileNamedPipe puts a named pipe where the cache file goes: the
// server must come up, ignoring it with a log line, rather than wait
// forever for a writer.
func TestCacheFileNamedPipe(t *testing.T) {
	dir := t.TempDir()
	fifotest.Make(t, filepath.Join(dir, cacheFile))
	var log syncLog
	o := Options{PrefillChunk: cacheChunk, CacheMemory: 64 << 20, CacheDir: dir, Logger: slog.New(slog.NewTextHandler(&log, nil))}
	ready := make(chan *Server, 1)
	go func() {
		s := New(o)
		if err := s.Ready(testModel(t, testConfig()), tokenizer.Byte); err != nil {
			t.Error(err)
		}
		ready <- s
	}()
	select {
	case s := <-ready:
		s.Close()
	case <-time.After(time.Minute):
		t.Fatal("Ready has not returned after a minute: it waits on the named pipe")
	}
	if !strings.Contains(log.String(), "prefix cache file ignored") || !strings.Contains(log.String(), "named pipe") {
		t.Errorf("no log line about the named pipe:\n%s", log.String())
	}
}

// syncLog is a log's output, written and read on other goroutines.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCheckCacheDir checks that a cache directory that cannot be written
// is refused when the server starts, not found at shutdown.
func TestCheckCacheDir(t *testing.T) {
	if err := CheckCacheDir(filepath.Join(t.TempDir(), "new", "dir")); err != nil {
		t.Errorf("a new directory: %v", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if err := CheckCacheDir(file); err == nil {
		t.Error("a regular file as the cache directory was accepted")
	}
	ro := t.TempDir()
	os.Chmod(ro, 0o555)
	t.Cleanup(func() { os.Chmod(ro, 0o755) })
	if f, err := os.CreateTemp(ro, "probe"); err == nil {
		// Root writes anywhere the file system allows.
		f.Close()
		os.Remove(f.Name())
		if ro = "/proc/self"; runtime.GOOS != "linux" {
			t.Skip("no directory that this user cannot write: the read-only case is not checked")
		}
	}
	err := CheckCacheDir(ro)
	if err == nil || !strings.Contains(err.Error(), "not writable") {
		t.Errorf("read-only directory %s: %v, want an error saying it is not writable", ro, err)
	}
}
