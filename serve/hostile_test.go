package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/polysketch/polysketch/data/tokenizer"
)

// hostileTokenizer is a byte-level BPE whose pre-tokenizer splits with
// (a+)+$, a pattern that backtracks catastrophically on a run of a's that
// ends otherwise.
func hostileTokenizer(t testing.TB) tokenizer.Tokenizer {
	t.Helper()
	c := tokenizer.NewCounts(nil)
	c.Add([]byte("aaaa bbbb"))
	base, err := tokenizer.Train(c, tokenizer.TrainOptions{VocabSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(base.JSON(), &f); err != nil {
		t.Fatal(err)
	}
	f["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "(a+)+$"}, "behavior": "Isolated", "invert": false},
		map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
	}}
	b, _ := json.Marshal(f)
	tok, err := tokenizer.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// readyWith starts a ready Server with tokenizer tok on an httptest
// server.
func readyWith(t testing.TB, tok tokenizer.Tokenizer) (*Server, *httptest.Server) {
	t.Helper()
	return newTestWith(t, Options{}, nil, tok)
}

// TestPromptPatternBound sends a 41-byte prompt on which the tokenizer's
// pattern backtracks catastrophically: the server must answer 400, naming
// the pattern, within the bound of one match, not hold a core forever.
func TestPromptPatternBound(t *testing.T) {
	_, ts := readyWith(t, hostileTokenizer(t))
	prompt := strings.Repeat("a", 40) + "!"
	for _, c := range []struct{ path, body string }{
		{"/v1/completions", `{"prompt":"` + prompt + `","max_tokens":1}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":1}`},
		{"/tokenize", `{"content":"` + prompt + `"}`},
	} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			code, _, b := call(t, "POST", ts.URL+c.path, c.body)
			if code != http.StatusBadRequest || !strings.Contains(string(b), "tokenization_failed") || !strings.Contains(string(b), "backtracks catastrophically") {
				t.Errorf("POST %s: %d %s, want 400 tokenization_failed", c.path, code, b)
			}
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Minute):
			t.Fatalf("POST %s has not been answered after 5 minutes: the pattern's match is not bounded", c.path)
		}
	}
}

// blockingTokenizer encodes as the byte tokenizer once its context is
// done, and not before: an encoding as long as the client stays.
type blockingTokenizer struct {
	tokenizer.Tokenizer
	started chan struct{}
}

func (b blockingTokenizer) Encode(ctx context.Context, dst []int32, text []byte) ([]int32, error) {
	b.started <- struct{}{}
	<-ctx.Done()
	return dst, ctx.Err()
}

// TestEncodeCanceledWithClient checks that a prompt's tokenization is
// canceled when its client goes away, and counted apart (499).
func TestEncodeCanceledWithClient(t *testing.T) {
	tok := blockingTokenizer{Tokenizer: tokenizer.Byte, started: make(chan struct{}, 1)}
	s, ts := readyWith(t, tok)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"hello","max_tokens":1}`))
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-tok.started
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the request was answered")
	}
	deadline := time.Now().Add(time.Minute)
	for s.flight.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the request's handler still runs a minute after its client left")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := labeledValue(t, s, "polysketch_requests_total", "path", "/v1/completions", "code", "499"); n != 1 {
		t.Errorf("%v requests counted as 499, want 1", n)
	}
}

// labeledValue returns the value of the counter name with the given label
// pairs, 0 if it has none.
func labeledValue(t testing.TB, s *Server, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := s.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// answerBlocker encodes as the byte tokenizer, but holds the encoding of
// a finished chat's answer for the prefix cache (a text ending in a
// newline, which no prompt of the test ends in) until release is closed
// or its context is done.
type answerBlocker struct {
	tokenizer.Tokenizer
	started chan struct{}
	release chan struct{}
}

func (b answerBlocker) Encode(ctx context.Context, dst []int32, text []byte) ([]int32, error) {
	if bytes.HasSuffix(text, []byte("\n")) {
		select {
		case b.started <- struct{}{}:
		default:
		}
		select {
		case <-b.release:
		case <-ctx.Done():
			return dst, ctx.Err()
		}
	}
	return b.Tokenizer.Encode(ctx, dst, text)
}

// TestAnswerEncodingHoldsNoSequence holds the prefix cache's encoding of
// a finished chat's answer, as a hostile pre-tokenizer pattern holds it
// for up to tokenizer.MatchTimeout a match, and requires other requests
// to be served meanwhile: the encoding is not the scheduler's to wait for.
func TestAnswerEncodingHoldsNoSequence(t *testing.T) {
	tok := answerBlocker{Tokenizer: tokenizer.Byte, started: make(chan struct{}, 1), release: make(chan struct{})}
	_, ts := newTestWith(t, Options{PrefillChunk: cacheChunk, CacheMemory: 256 << 20}, nil, tok)
	defer close(tok.release)
	if code, _, b := call(t, "POST", ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`); code != http.StatusOK {
		t.Fatalf("chat: %d %s", code, b)
	}
	select {
	case <-tok.started:
	case <-time.After(time.Minute):
		t.Fatal("the chat's answer was not encoded for the prefix cache within a minute")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if code, _, b := call(t, "POST", ts.URL+"/v1/completions", `{"prompt":"hello","max_tokens":8,"temperature":0}`); code != http.StatusOK {
			t.Errorf("completion: %d %s", code, b)
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("a completion was not answered in a minute while a finished chat's answer was being encoded: the scheduler waits for the encoding")
	}
}
