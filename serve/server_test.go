package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/polysketch/polysketch/attention"

	"github.com/polysketch/polysketch/data/tokenizer"
)

// TestGreedyMatchesModel checks the whole path (tokenizer, scheduler,
// batched steps, sampling, text) against decoding the model directly:
// at temperature 0 the server must return the most likely token at
// every step.
func TestGreedyMatchesModel(t *testing.T) {
	m := testModel(t, testConfig())
	_, ts := newTest(t, Options{}, m)
	const prompt, n = "func main() {", 24
	dec, err := m.NewDecoder(1)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := dec.Prefill(byteIDs(prompt))
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for range n {
		best := 0
		for i, v := range logits.Data {
			if v > logits.Data[best] {
				best = i
			}
		}
		want = append(want, byte(best))
		if logits, err = dec.Step([]int32{int32(best)}); err != nil {
			t.Fatal(err)
		}
	}
	got := complete(t, ts.URL, fmt.Sprintf(`{"model":"test","prompt":%q,"max_tokens":%d,"temperature":0}`, prompt, n))
	// Invalid UTF-8 comes back as one U+FFFD per byte, as Go converts it to runes.
	if w := string([]rune(string(want))); len(got.Choices) != 1 || got.Choices[0].Text != w {
		t.Fatalf("greedy text %q, want %q", got.Choices[0].Text, w)
	}
	if got.Object != "text_completion" || got.Model != "test" || got.ID == "" || got.Created == 0 {
		t.Errorf("response fields %+v", got)
	}
	if f := got.Choices[0].FinishReason; f == nil || *f != "length" {
		t.Errorf("finish_reason %v, want length", f)
	}
	if u := got.Usage; u == nil || u.PromptTokens != len(prompt) || u.CompletionTokens != n || u.TotalTokens != len(prompt)+n {
		t.Errorf("usage %+v, want %d prompt and %d completion tokens", u, len(prompt), n)
	}
}

// TestStreamEqualsWhole checks that the streamed text of a seeded request
// is the text of the same request answered whole, and the framing of the
// stream.
func TestStreamEqualsWhole(t *testing.T) {
	_, ts := newTest(t, Options{}, nil)
	for _, body := range []string{
		`"prompt":"package main","max_tokens":40,"seed":11,"temperature":0.9`,
		`"prompt":["a","bc"],"n":2,"max_tokens":12,"seed":3,"top_k":20`,
		`"prompt":"x","max_tokens":12,"seed":5,"echo":true,"top_p":0.5`,
	} {
		whole := complete(t, ts.URL, "{"+body+"}")
		chunks := streamed(t, ts.URL, "/v1/completions", `{"stream":true,"stream_options":{"include_usage":true},`+body+"}")
		text, finish := joined(chunks)
		if len(text) != len(whole.Choices) {
			t.Fatalf("%s: %d choices streamed, %d whole", body, len(text), len(whole.Choices))
		}
		for _, c := range whole.Choices {
			if text[c.Index] != c.Text || finish[c.Index] != *c.FinishReason {
				t.Errorf("%s: choice %d streamed %q (%s), whole %q (%s)", body, c.Index, text[c.Index], finish[c.Index], c.Text, *c.FinishReason)
			}
		}
		last := chunks[len(chunks)-1]
		if last.Usage == nil || *last.Usage != *whole.Usage || len(last.Choices) != 0 {
			t.Errorf("%s: last chunk %+v, want the usage %+v and no choices", body, last, whole.Usage)
		}
		for _, c := range chunks[:len(chunks)-1] {
			if c.Usage != nil || c.Object != "text_completion" {
				t.Errorf("%s: chunk %+v", body, c)
			}
		}
	}
}

func TestEcho(t *testing.T) {
	_, ts := newTest(t, Options{}, nil)
	plain := complete(t, ts.URL, `{"prompt":"abc","max_tokens":5,"seed":1}`)
	echo := complete(t, ts.URL, `{"prompt":"abc","max_tokens":5,"seed":1,"echo":true}`)
	if echo.Choices[0].Text != "abc"+plain.Choices[0].Text {
		t.Errorf("echo text %q, want the prompt and %q", echo.Choices[0].Text, plain.Choices[0].Text)
	}
	zero := complete(t, ts.URL, `{"prompt":"abc","max_tokens":0,"echo":true}`)
	if zero.Choices[0].Text != "abc" || *zero.Choices[0].FinishReason != "length" || zero.Usage.CompletionTokens != 0 {
		t.Errorf("max_tokens 0 with echo: %+v", zero.Choices[0])
	}
}

// TestStop cuts a greedy text at a stop string taken from it.
func TestStop(t *testing.T) {
	_, ts := newTest(t, Options{}, nil)
	full := complete(t, ts.URL, `{"prompt":"fmt.","max_tokens":30,"temperature":0}`).Choices[0].Text
	// A stop string from the middle of the text, of ASCII bytes.
	at := -1
	for i := 5; i+2 <= len(full); i++ {
		if full[i] < 0x80 && full[i+1] < 0x80 && full[i] != '\\' && full[i+1] != '\\' && full[i] >= ' ' && full[i+1] >= ' ' && full[i] != '"' && full[i+1] != '"' {
			at = i
			break
		}
	}
	if at < 0 {
		t.Skipf("no ASCII pair in the greedy text %q", full) // a model without one would need another prompt
	}
	stop := full[at : at+2]
	want := full[:strings.Index(full, stop)]
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"prompt":"fmt.","max_tokens":30,"temperature":0,"stop":["zzzz",%q],"stream":%v}`, stop, stream)
		var text, finish string
		if stream {
			tx, f := joined(streamed(t, ts.URL, "/v1/completions", body))
			text, finish = tx[0], f[0]
		} else {
			c := complete(t, ts.URL, body).Choices[0]
			text, finish = c.Text, *c.FinishReason
		}
		if text != want || finish != "stop" {
			t.Errorf("stream %v, stop %q: %q (%s), want %q (stop)", stream, stop, text, finish, want)
		}
	}
}

func TestChat(t *testing.T) {
	_, ts := newTest(t, Options{}, nil)
	body := `"model":"test","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":10,"seed":2`
	code, _, b := call(t, "POST", ts.URL+"/v1/chat/completions", "{"+body+"}")
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, b)
	}
	var whole chatCompletion
	if err := json.Unmarshal(b, &whole); err != nil {
		t.Fatal(err)
	}
	if whole.Object != "chat.completion" || len(whole.Choices) != 1 || whole.Choices[0].Message == nil || whole.Choices[0].Message.Role != "assistant" {
		t.Fatalf("response %s", b)
	}
	if want := len("System: Be brief.\nUser: hi\nAssistant:"); whole.Usage.PromptTokens != want {
		t.Errorf("prompt tokens %d, want %d: the template of the documentation", whole.Usage.PromptTokens, want)
	}
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true,`+body+"}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var text, finish string
	for i, e := range events(t, resp.Body) {
		var c chatCompletion
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatal(err)
		}
		if c.Object != "chat.completion.chunk" || len(c.Choices) != 1 || c.Choices[0].Delta == nil {
			t.Fatalf("chunk %s", e)
		}
		d := c.Choices[0].Delta
		if (i == 0) != (d.Role == "assistant") {
			t.Errorf("chunk %d has role %q: only the first has the role", i, d.Role)
		}
		if d.Content != nil {
			text += *d.Content
		}
		if f := c.Choices[0].FinishReason; f != nil {
			finish = *f
		}
	}
	if text != *whole.Choices[0].Message.Content || finish != *whole.Choices[0].FinishReason {
		t.Errorf("streamed %q (%s), whole %q (%s)", text, finish, *whole.Choices[0].Message.Content, *whole.Choices[0].FinishReason)
	}
}

func TestChatPrompt(t *testing.T) {
	got, err := chatPrompt([]message{{Role: "system", Content: json.RawMessage(`"S"`)}, {Role: "user", Content: json.RawMessage(`"U\nU"`)}, {Role: "assistant", Content: json.RawMessage(`"A"`)}, {Role: "user", Content: json.RawMessage(`"V"`)}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "System: S\nUser: U\nU\nAssistant: A\nUser: V\nAssistant:"; got != want {
		t.Errorf("chatPrompt = %q, want %q", got, want)
	}
}

func TestEndpoints(t *testing.T) {
	s, ts := newTest(t, Options{}, nil)
	s.mux.HandleFunc("GET /panic", func(http.ResponseWriter, *http.Request) { panic("test panic") })
	for _, tc := range []struct {
		method, path string
		code         int
		contains     string
	}{
		{"GET", "/v1/models", 200, `"data":[{"id":"test","object":"model"`},
		{"GET", "/v1/models/test", 200, `"id":"test"`},
		{"GET", "/v1/models/other", 404, `"model_not_found"`},
		{"GET", "/health", 200, `{"status":"ok"}`},
		{"GET", "/", 200, `<form id="form">`},
		{"GET", "/nothing", 404, `"error":{"message":"no endpoint GET /nothing`},
		{"GET", "/v1/completions", 405, `"message":"GET /v1/completions: use POST"`},
		{"DELETE", "/v1/models", 405, `use GET`},
		{"GET", "/panic", 500, `"type":"server_error"`},
		{"GET", "/health", 200, `{"status":"ok"}`}, // still up after the panic
		{"GET", "/metrics", 200, "polysketch_requests_total"},
	} {
		code, _, b := call(t, tc.method, ts.URL+tc.path, "")
		if code != tc.code || !strings.Contains(string(b), tc.contains) {
			t.Errorf("%s %s: %d %.200s, want %d containing %s", tc.method, tc.path, code, b, tc.code, tc.contains)
		}
	}
	complete(t, ts.URL, `{"prompt":"a","max_tokens":3}`)
	_, _, b := call(t, "GET", ts.URL+"/metrics", "")
	for _, want := range []string{
		"polysketch_requests_total{code=\"200\",path=\"/v1/completions\"} 1",
		"polysketch_requests_total{code=\"500\",path=\"/panic\"} 1",
		"polysketch_generated_tokens_total 3", "polysketch_prompt_tokens_total 1",
		"polysketch_queue_depth 0", "polysketch_active_sequences",
		"polysketch_time_to_first_token_seconds_count 1", "polysketch_inter_token_latency_seconds_count 2",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestLoading(t *testing.T) {
	s := New(Options{})
	ts := httptestServer(t, s)
	for _, path := range []string{"/health", "/v1/completions"} {
		method := "GET"
		if path != "/health" {
			method = "POST"
		}
		code, h, b := call(t, method, ts+path, `{"prompt":"a"}`)
		if code != http.StatusServiceUnavailable || !strings.Contains(string(b), `"error"`) || h.Get("Retry-After") == "" {
			t.Errorf("%s while loading: %d %s, want 503 with an error and Retry-After", path, code, b)
		}
	}
}

// TestBadRequests sends every kind of bad request; each gets an OpenAI
// error object with the right status, and the server goes on serving.
func TestBadRequests(t *testing.T) {
	_, ts := newTest(t, Options{MaxBody: 4096, MaxLength: 100}, nil)
	_, keyed := newTest(t, Options{APIKey: "sesame"}, nil)
	for _, tc := range []struct {
		name, url, path, body string
		header                []string
		code                  int
		contains              string
	}{
		{"malformed JSON", ts.URL, "/v1/completions", `{"prompt":`, nil, 400, "malformed JSON"},
		{"not an object", ts.URL, "/v1/completions", `[1,2]`, nil, 400, "want an object"},
		{"wrong type", ts.URL, "/v1/completions", `{"prompt":"a","max_tokens":"ten"}`, nil, 400, "field max_tokens: got a JSON string, want a number"},
		{"negative max_tokens", ts.URL, "/v1/completions", `{"prompt":"a","max_tokens":-1}`, nil, 400, "max_tokens -1"},
		{"huge max_tokens", ts.URL, "/v1/completions", `{"prompt":"a","max_tokens":100000000}`, nil, 400, "ask for max_tokens 100 or fewer"},
		{"temperature", ts.URL, "/v1/completions", `{"prompt":"a","temperature":-0.5}`, nil, 400, "temperature -0.5"},
		{"top_p 0", ts.URL, "/v1/completions", `{"prompt":"a","top_p":0}`, nil, 400, "top_p 0: must be in (0, 1]"},
		{"top_p 1.5", ts.URL, "/v1/completions", `{"prompt":"a","top_p":1.5}`, nil, 400, "top_p 1.5"},
		{"top_k", ts.URL, "/v1/completions", `{"prompt":"a","top_k":-2}`, nil, 400, "top_k -2"},
		{"n", ts.URL, "/v1/completions", `{"prompt":"a","n":0}`, nil, 400, "n 0"},
		{"choices", ts.URL, "/v1/completions", `{"prompt":["a","b","c"],"n":8}`, nil, 400, "at most 16 sequences"},
		{"stops", ts.URL, "/v1/completions", `{"prompt":"a","stop":["a","b","c","d","e"]}`, nil, 400, "at most 4"},
		{"stop type", ts.URL, "/v1/completions", `{"prompt":"a","stop":7}`, nil, 400, "field stop"},
		{"logprobs", ts.URL, "/v1/completions", `{"prompt":"a","logprobs":6}`, nil, 400, "logprobs 6: want a number of alternatives from 0 to 5"},
		{"logprobs type", ts.URL, "/v1/completions", `{"prompt":"a","logprobs":"x"}`, nil, 400, "logprobs"},
		{"chat logprobs", ts.URL, "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"logprobs":true}`, nil, 400, "/v1/completions only"},
		{"no prompt", ts.URL, "/v1/completions", `{"max_tokens":2}`, nil, 400, "prompt is missing"},
		{"token out of vocabulary", ts.URL, "/v1/completions", `{"prompt":[[1,2],[3,256]]}`, nil, 400, "prompt 1, token 1: id 256 outside the vocabulary [0, 256)"},
		{"negative token", ts.URL, "/v1/completions", `{"prompt":[-1]}`, nil, 400, "id -1 outside the vocabulary"},
		{"mixed prompt", ts.URL, "/v1/completions", `{"prompt":["a",1]}`, nil, 400, "want a string, a list of strings, a list of token ids"},
		{"fractional token", ts.URL, "/v1/completions", `{"prompt":[1.5]}`, nil, 400, "want a string, a list of strings, a list of token ids"},
		{"no prompts", ts.URL, "/v1/completions", `{"prompt":[]}`, nil, 400, "prompt: 0 prompts, want 1 to 16"},
		{"echo logprobs 6", ts.URL, "/v1/completions", `{"prompt":"a","echo":true,"logprobs":6,"max_tokens":0}`, nil, 400, "logprobs 6: want a number of alternatives from 0 to 5"},
		{"empty prompt", ts.URL, "/v1/completions", `{"prompt":""}`, nil, 400, "prompt 0 is empty"},
		{"long prompt", ts.URL, "/v1/completions", `{"prompt":"` + strings.Repeat("x", 101) + `"}`, nil, 400, "over this model's limit of 100"},
		{"invalid UTF-8", ts.URL, "/v1/completions", "{\"prompt\":\"\xff\xfe\"}", nil, 400, "not valid UTF-8"},
		{"unknown model", ts.URL, "/v1/completions", `{"model":"gpt-9","prompt":"a"}`, nil, 404, `model \"gpt-9\" does not exist`},
		{"body too large", ts.URL, "/v1/completions", `{"prompt":"` + strings.Repeat("x", 5000) + `"}`, nil, 413, "over 4096 bytes"},
		{"messages on completions", ts.URL, "/v1/completions", `{"messages":[{"role":"user","content":"a"}]}`, nil, 400, "/v1/chat/completions"},
		{"no messages", ts.URL, "/v1/chat/completions", `{"messages":[]}`, nil, 400, "messages: empty"},
		{"bad role", ts.URL, "/v1/chat/completions", `{"messages":[{"role":"robot","content":"a"}]}`, nil, 400, `messages[0].role \"robot\"`},
		{"bad content", ts.URL, "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, nil, 400, "messages[0].content"},
		{"no key", keyed.URL, "/v1/completions", `{"prompt":"a"}`, nil, 401, "API key"},
		{"wrong key", keyed.URL, "/v1/models", ``, []string{"Authorization", "Bearer open"}, 401, "API key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := "POST"
			if tc.body == "" {
				method = "GET"
			}
			code, _, b := call(t, method, tc.url+tc.path, tc.body, tc.header...)
			var e struct {
				Error struct {
					Message, Type string
				}
			}
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("status %d, body %s: not an error object: %v", code, b, err)
			}
			if code != tc.code || !strings.Contains(e.Error.Message, strings.ReplaceAll(tc.contains, `\"`, `"`)) || e.Error.Type == "" {
				t.Errorf("status %d, error %+v; want %d and a message containing %s", code, e.Error, tc.code, tc.contains)
			}
		})
	}
	// Everyone else is still served, the right key too.
	complete(t, ts.URL, `{"prompt":"a","max_tokens":2}`)
	if code, _, b := call(t, "POST", keyed.URL+"/v1/completions", `{"prompt":"a","max_tokens":2}`, "Authorization", "Bearer sesame"); code != 200 {
		t.Errorf("with the right key: %d %s", code, b)
	}
}

// TestQueueFull fills the one slot and the one place in the queue; the
// next request gets 429 with Retry-After.
func TestQueueFull(t *testing.T) {
	s, ts := newTest(t, Options{MaxSequences: 1, MaxQueue: 1}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The slot: a stream that runs until canceled.
	first := startStream(t, ctx, ts.URL, `{"prompt":"a","max_tokens":4000,"stream":true}`)
	defer first.Body.Close()
	queued := func() int {
		l := s.loaded()
		l.sched.mu.Lock()
		defer l.sched.mu.Unlock()
		return len(l.sched.queue)
	}
	waitFor(t, func() bool { return queued() == 0 && activeGauge(s) == 1 })
	// The queue: a request that waits for the slot.
	done := make(chan int, 1)
	go func() {
		code, _, _ := call(t, "POST", ts.URL+"/v1/completions", `{"prompt":"b","max_tokens":2}`)
		done <- code
	}()
	waitFor(t, func() bool { return queued() == 1 })
	code, h, b := call(t, "POST", ts.URL+"/v1/completions", `{"prompt":"c","max_tokens":2}`)
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" || !strings.Contains(string(b), "queue") {
		t.Errorf("third request: %d %s (Retry-After %q), want 429 with Retry-After", code, b, h.Get("Retry-After"))
	}
	// Disconnecting the first frees the slot for the queued one.
	cancel()
	select {
	case code := <-done:
		if code != 200 {
			t.Errorf("queued request: status %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the queued request did not get the slot of the client that went away")
	}
}

// startStream starts a streaming request and reads its first event.
func startStream(t testing.TB, ctx context.Context, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	buf := make([]byte, 1)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	return resp
}

// waitFor polls cond for up to 30 seconds.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatal("condition not reached in 30 s")
		}
	}
}

// TestKVMemory admits KV-cache sequences by the memory they will need:
// one that could never fit is refused; two that fit only one at a time
// both complete.
func TestKVMemory(t *testing.T) {
	c := testConfig()
	c.Attention = attention.FlashConfig{Block: 16}
	// Per position: 2 (doubling) × 2 (k, v) × layers × dim floats.
	row := int64(2 * 2 * c.Layers * c.Dim * 4)
	_, ts := newTest(t, Options{KVMemory: 40 * row}, testModel(t, c))
	code, _, b := call(t, "POST", ts.URL+"/v1/completions", `{"prompt":"abc","max_tokens":60}`)
	if code != 400 || !strings.Contains(string(b), "KV-cache memory") {
		t.Errorf("a request over the KV budget: %d %s", code, b)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { complete(t, ts.URL, `{"prompt":"abc","max_tokens":30}`) })
	}
	wg.Wait()
	// A chat without max_tokens gets what fits in the context (64), not
	// the default of 256.
	_, roomy := newTest(t, Options{}, testModel(t, c))
	code, _, b = call(t, "POST", roomy.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stop":"never"}`)
	prompt := len("User: hi\nAssistant:")
	if code != 200 || !strings.Contains(string(b), fmt.Sprintf(`"completion_tokens":%d`, c.Context-prompt+1)) && !strings.Contains(string(b), `"finish_reason":"stop"`) {
		t.Errorf("chat without max_tokens on a model of context %d: %d %s", c.Context, code, b)
	}
}

// TestLogprobs checks the log-probabilities of a greedy completion
// against the model's own logits.
func TestLogprobs(t *testing.T) {
	m := testModel(t, testConfig())
	_, ts := newTest(t, Options{}, m)
	const prompt, n = "if err != nil {", 12
	got := complete(t, ts.URL, fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"temperature":0,"logprobs":3,"echo":true}`, prompt, n)).Choices[0]
	lp := got.Logprobs
	P := len(prompt) // bytes: the echoed prompt's tokens come first (TestEchoLogprobs)
	if lp == nil || len(lp.Tokens) != P+n || len(lp.TokenLogprobs) != P+n || len(lp.TopLogprobs) != P+n || len(lp.TextOffset) != P+n {
		t.Fatalf("logprobs %+v, want %d entries of each", lp, P+n)
	}
	dec, err := m.NewDecoder(1)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := dec.Prefill(byteIDs(prompt))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		best, sum := 0, 0.0
		for j, v := range logits.Data {
			if v > logits.Data[best] {
				best = j
			}
		}
		for _, v := range logits.Data {
			sum += math.Exp(float64(v) - float64(logits.Data[best]))
		}
		want := -math.Log(sum) // log-softmax of the most likely token
		got := *lp.TokenLogprobs[P+i]
		if d := math.Abs(got - want); d > 2e-6 { // float32 exponentials (TestLogSumExpAccuracy)
			t.Errorf("token %d: logprob %v, want %v", i, got, want)
		}
		if lp.TextOffset[P+i] != len(prompt)+i {
			t.Errorf("token %d: text offset %d, want %d (after the echoed prompt)", i, lp.TextOffset[P+i], len(prompt)+i)
		}
		top := lp.TopLogprobs[P+i]
		if len(top) != 3 || top[lp.Tokens[P+i]] != got {
			t.Errorf("token %d (%q): top logprobs %v, want 3 with the token itself", i, lp.Tokens[P+i], top)
		}
		for name, v := range top {
			if v > got {
				t.Errorf("token %d: alternative %q has logprob %v over the greedy token's %v", i, name, v, got)
			}
		}
		if logits, err = dec.Step([]int32{int32(best)}); err != nil {
			t.Fatal(err)
		}
	}
	// The streamed logprobs are the same, number for number.
	chunks := streamed(t, ts.URL, "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"temperature":0,"logprobs":3,"echo":true,"stream":true}`, prompt, n))
	var all logprobs
	for _, c := range chunks {
		for _, ch := range c.Choices {
			if ch.Logprobs != nil {
				all.add(ch.Logprobs)
			}
		}
	}
	a, _ := json.Marshal(all)
	b, _ := json.Marshal(lp)
	if string(a) != string(b) {
		t.Errorf("streamed logprobs\n%s\nwhole\n%s", a, b)
	}
}

func TestTokenName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a", "a"}, {"é", "é"}, {"\xc3", `bytes:\xc3`}, {"\xe2\x82", `bytes:\xe2\x82`},
	} {
		if got := tokenName([]byte(tc.in)); got != tc.want {
			t.Errorf("tokenName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// panicky is the byte tokenizer, whose Decode panics while armed.
type panicky struct {
	tokenizer.Tokenizer
	armed atomic.Bool
}

func (p *panicky) Decode(dst []byte, ids []int32) ([]byte, error) {
	if p.armed.Load() {
		panic("test panic in Decode")
	}
	return p.Tokenizer.Decode(dst, ids)
}

// TestPanicInStep: a panic inside the scheduler's step ends the requests
// of that step with 500, and the server goes on serving.
func TestPanicInStep(t *testing.T) {
	tok := &panicky{Tokenizer: tokenizer.Byte}
	s := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := s.Ready(testModel(t, testConfig()), tok); err != nil {
		t.Fatal(err)
	}
	url := httptestServer(t, s)
	tok.armed.Store(true)
	code, _, b := call(t, "POST", url+"/v1/completions", `{"prompt":"a","max_tokens":3}`)
	if code != http.StatusInternalServerError || !strings.Contains(string(b), "internal error") {
		t.Errorf("request meeting the panic: %d %s, want 500", code, b)
	}
	tok.armed.Store(false)
	complete(t, url, `{"prompt":"a","max_tokens":3}`)
	waitFor(t, func() bool { return idle(s) }) // no sequence left behind
}
