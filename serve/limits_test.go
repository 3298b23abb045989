package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/polysketch/polysketch/attention"
)

// errorOf decodes an OpenAI error object, failing the test if b is not
// one.
func errorOf(t *testing.T, b []byte) (message, typ string) {
	t.Helper()
	var e struct {
		Error struct{ Message, Type string }
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("body %s: not an OpenAI error object (%v)", b, err)
	}
	return e.Error.Message, e.Error.Type
}

// TestSizesCannotWrap sends sizes near 2^63: each is refused with 400,
// none wraps around a check into an admitted request (a polysketch model
// by --max-length, a KV-cache model by its context and --kv-memory).
func TestSizesCannotWrap(t *testing.T) {
	_, poly := newTest(t, Options{MaxLength: 100}, nil)
	c := testConfig()
	c.Attention = attention.FlashConfig{Block: 16}
	_, kv := newTest(t, Options{KVMemory: 1 << 20}, testModel(t, c))
	for _, tc := range []struct {
		name, url, body, contains string
	}{
		{"max_tokens 2^63-1", poly.URL, `{"prompt":"ab","max_tokens":9223372036854775807}`, "ask for max_tokens 99 or fewer"},
		{"max_tokens 2^63-2", poly.URL, `{"prompt":"abcd","max_tokens":9223372036854775806}`, "ask for max_tokens 97 or fewer"},
		{"max_completion_tokens 2^63-1", poly.URL, `{"prompt":"ab","max_completion_tokens":9223372036854775807}`, "or fewer"},
		{"chat max_tokens 2^63-1", poly.URL, `{"messages":[{"role":"user","content":"a"}],"max_tokens":9223372036854775807}`, "or fewer"},
		{"KV cache max_tokens 2^63-1", kv.URL, `{"prompt":"ab","max_tokens":9223372036854775807}`, "or fewer"},
		{"KV cache max_tokens 2^63-2, n 16", kv.URL, `{"prompt":"abc","max_tokens":9223372036854775806,"n":16}`, "or fewer"},
		{"max_tokens 2^63", poly.URL, `{"prompt":"ab","max_tokens":9223372036854775808}`, "want an integer"},
		{"top_k 2^63", poly.URL, `{"prompt":"ab","top_k":1e19}`, "want an integer"},
		{"n 2^63-1", poly.URL, `{"prompt":"ab","n":9223372036854775807}`, "n 9223372036854775807: must be between 1 and 16"},
		{"logprobs 2^63-1", poly.URL, `{"prompt":"ab","logprobs":9223372036854775807}`, "from 0 to 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/v1/completions"
			if strings.Contains(tc.body, "messages") {
				path = "/v1/chat/completions"
			}
			code, _, b := call(t, "POST", tc.url+path, tc.body)
			if code != http.StatusBadRequest {
				t.Fatalf("status %d (%.300s), want 400", code, b)
			}
			if msg, _ := errorOf(t, b); !strings.Contains(msg, tc.contains) {
				t.Errorf("error %q, want it to contain %q", msg, tc.contains)
			}
		})
	}
	// A huge top_k that fits an int is no error: it means every token.
	complete(t, poly.URL, `{"prompt":"ab","max_tokens":3,"top_k":9223372036854775807}`)
	complete(t, kv.URL, `{"prompt":"ab","max_tokens":3}`)
}

func TestMulSat(t *testing.T) {
	for _, tc := range []struct{ a, b, want int64 }{
		{0, math.MaxInt64, 0}, {3, 4, 12}, {1 << 32, 1 << 31, math.MaxInt64},
		{1 << 32, 1 << 30, 1 << 62}, {math.MaxInt64, 1, math.MaxInt64}, {2, math.MaxInt64, math.MaxInt64},
		{1 << 20, math.MaxInt64 - 5, math.MaxInt64},
	} {
		if got := mulSat(tc.a, tc.b); got != tc.want {
			t.Errorf("mulSat(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestIntegerFields: a fraction or an out-of-range number in an integer
// field is "want an integer", not "want a number".
func TestIntegerFields(t *testing.T) {
	_, ts := newTest(t, Options{}, nil)
	for _, field := range []string{"max_tokens", "n", "top_k", "seed", "max_completion_tokens"} {
		code, _, b := call(t, "POST", ts.URL+"/v1/completions", fmt.Sprintf(`{"prompt":"a",%q:1.5}`, field))
		msg, _ := errorOf(t, b)
		if code != 400 || !strings.Contains(msg, "field "+field+": got a JSON number 1.5, want an integer") {
			t.Errorf("%s 1.5: %d %q, want 400 saying want an integer", field, code, msg)
		}
	}
}

// TestChoicesOverQueue: a request for more sequences than the queue holds
// can never be queued: 400 at once, not 429 "retry later".
func TestChoicesOverQueue(t *testing.T) {
	_, ts := newTest(t, Options{MaxQueue: 4}, nil)
	for _, body := range []string{
		`{"prompt":"a","n":5,"max_tokens":2}`,
		`{"prompt":["a","b","c"],"n":2,"max_tokens":2}`,
	} {
		code, _, b := call(t, "POST", ts.URL+"/v1/completions", body)
		msg, _ := errorOf(t, b)
		if code != http.StatusBadRequest || !strings.Contains(msg, "more than this server queues at once (4)") {
			t.Errorf("%s: %d %q, want 400 naming the queue's size", body, code, msg)
		}
	}
	if c := complete(t, ts.URL, `{"prompt":"a","n":4,"max_tokens":2}`); len(c.Choices) != 4 {
		t.Errorf("n 4 with a queue of 4: %d choices", len(c.Choices))
	}
}

// TestAuth: the scheme of Authorization is case-insensitive, and with a
// key /metrics needs it too, unless MetricsPublic.
func TestAuth(t *testing.T) {
	_, keyed := newTest(t, Options{APIKey: "sesame"}, nil)
	_, public := newTest(t, Options{APIKey: "sesame", MetricsPublic: true}, nil)
	for _, tc := range []struct {
		name, url, method, path, auth string
		code                          int
	}{
		{"Bearer", keyed.URL, "GET", "/v1/models", "Bearer sesame", 200},
		{"bearer", keyed.URL, "GET", "/v1/models", "bearer sesame", 200},
		{"BEARER", keyed.URL, "GET", "/v1/models", "BEARER sesame", 200},
		{"bEaReR, spaces", keyed.URL, "GET", "/v1/models", "  bEaReR   sesame ", 200},
		{"Basic", keyed.URL, "GET", "/v1/models", "Basic sesame", 401},
		{"key alone", keyed.URL, "GET", "/v1/models", "sesame", 401},
		{"wrong key", keyed.URL, "GET", "/v1/models", "bearer sesam", 401},
		{"metrics without key", keyed.URL, "GET", "/metrics", "", 401},
		{"metrics with key", keyed.URL, "GET", "/metrics", "bearer sesame", 200},
		{"public metrics", public.URL, "GET", "/metrics", "", 200},
		{"public metrics, models", public.URL, "GET", "/v1/models", "", 401},
		{"tokenize without key", keyed.URL, "POST", "/tokenize", "", 401},
		{"tokenize with key", keyed.URL, "POST", "/tokenize", "Bearer sesame", 200},
		{"detokenize without key", keyed.URL, "POST", "/detokenize", "", 401},
		{"tokenizer_info without key", keyed.URL, "GET", "/tokenizer_info", "", 401},
		{"tokenizer_info with key", keyed.URL, "GET", "/tokenizer_info", "Bearer sesame", 200},
		{"health is public", keyed.URL, "GET", "/health", "", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h []string
			if tc.auth != "" {
				h = []string{"Authorization", tc.auth}
			}
			body := ""
			if tc.method == "POST" {
				body = `{"content":"a","tokens":[97]}`
			}
			code, hdr, b := call(t, tc.method, tc.url+tc.path, body, h...)
			if code != tc.code {
				t.Fatalf("status %d (%.200s), want %d", code, b, tc.code)
			}
			if code == 401 {
				errorOf(t, b)
				if hdr.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRejectionsLogLimited sends many rejected requests: the log gets at
// most logBurst lines a second for them, and /metrics counts every one by
// its reason.
func TestRejectionsLogLimited(t *testing.T) {
	var log syncBuffer
	_, ts := newTest(t, Options{APIKey: "k", Logger: slog.New(slog.NewTextHandler(&log, nil))}, nil)
	const n = 60
	start := time.Now()
	for range n {
		if code, _, _ := call(t, "GET", ts.URL+"/v1/models", ""); code != 401 {
			t.Fatalf("status %d, want 401", code)
		}
	}
	for range 3 {
		call(t, "POST", ts.URL+"/v1/completions", `{"prompt":"a","n":0}`, "Authorization", "Bearer k")
	}
	lines := strings.Count(log.String(), "request failed")
	// A burst for each second the requests took, or began in.
	if most := logBurst * (int(time.Since(start)/time.Second) + 2); lines > most {
		t.Errorf("%d log lines for %d rejected requests, want at most %d, %d a second", lines, n+3, most, logBurst)
	}
	if lines == 0 {
		t.Error("no log line at all for the rejected requests")
	}
	_, _, b := call(t, "GET", ts.URL+"/metrics", "", "Authorization", "Bearer k")
	for _, want := range []string{
		fmt.Sprintf(`polysketch_rejected_requests_total{reason="invalid_api_key"} %d`, n),
		`polysketch_rejected_requests_total{reason="invalid_value"} 3`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestRejectLogWindow(t *testing.T) {
	var l rejectLog
	now := l.window.Add(10 * 1e9)
	for i := range logBurst {
		if ok, d := l.allow(now); !ok || d != 0 {
			t.Fatalf("line %d: allow = %v, %d; want true, 0", i, ok, d)
		}
	}
	for range 5 {
		if ok, _ := l.allow(now); ok {
			t.Fatal("a line over the burst was allowed")
		}
	}
	if ok, d := l.allow(now.Add(1e9)); !ok || d != 5 {
		t.Errorf("next second: allow = %v, %d; want true and the 5 dropped", ok, d)
	}
}
