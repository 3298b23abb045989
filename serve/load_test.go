package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
)

// TestLoad runs 32 concurrent streaming clients, with clients that
// disconnect mid-stream and malformed requests among them, on loopback,
// bounded in requests and time. Every well-formed request must complete,
// with the text and the logprobs it gets alone, to the last bit (fixed
// seeds: batch invariance; the logprobs show the logits, which a change
// in the last bit would alter even where the sampled tokens stay the
// same); the malformed ones get 400; afterwards no sequence is left in
// the scheduler and no goroutine is left over.
func TestLoad(t *testing.T) { testLoad(t, nil) }

// TestLoadBF16 is TestLoad with a model whose dense weights are held in
// bf16 alone, as serve --precision bf16 runs it: batch invariance holds
// in bf16 too.
func TestLoadBF16(t *testing.T) {
	m := testModel(t, testConfig())
	m.SetPrecision(nn.BF16)
	if err := m.ReleaseFP32(); err != nil {
		t.Fatal(err)
	}
	testLoad(t, m)
}

// testLoad is TestLoad on model m (nil: the test model).
func testLoad(t *testing.T, m *model.Model) {
	const clients = 32
	perClient, maxTokens := 3, 24
	if testing.Short() {
		perClient, maxTokens = 1, 12
	}
	s, ts := newTest(t, Options{MaxSequences: 16, PrefillChunk: 8}, m)
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()

	// The requests, and their text alone, one at a time. Prompts of
	// several chunks, so that prefills interleave with decoding.
	type request struct{ body, want string }
	var reqs []request
	for i := range 8 {
		prompt := strings.Repeat(fmt.Sprintf("func f%d() {}\n", i), i+1)
		body := fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"seed":%d,"temperature":0.8,"top_k":40,"logprobs":1}`, prompt, maxTokens+i, 100+i)
		c := complete(t, ts.URL, body).Choices[0]
		lp, err := json.Marshal(c.Logprobs)
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, request{body: body, want: c.Text + "|" + string(lp)})
	}
	tr.CloseIdleConnections()
	waitFor(t, func() bool { return idle(s) })
	base := goroutines()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	completed := 0
	for c := range clients {
		wg.Go(func() {
			for k := range perClient {
				r := reqs[(c+k)%len(reqs)]
				body := strings.Replace(r.body, "{", `{"stream":true,`, 1)
				text, err := streamText(ctx, client, ts.URL, body)
				if err != nil {
					fail("client %d: %v", c, err)
					return
				}
				if text != r.want {
					fail("client %d: %s: text and logprobs under load\n%s\nalone\n%s", c, r.body, text, r.want)
				}
				mu.Lock()
				completed++
				mu.Unlock()
			}
		})
	}
	// Clients that go away after the first event.
	for c := range 8 {
		wg.Go(func() {
			cctx, ccancel := context.WithCancel(ctx)
			defer ccancel()
			req, _ := http.NewRequestWithContext(cctx, "POST", ts.URL+"/v1/completions",
				strings.NewReader(fmt.Sprintf(`{"prompt":"gone %d","max_tokens":1000,"stream":true}`, c)))
			resp, err := client.Do(req)
			if err != nil {
				fail("disconnecting client %d: %v", c, err)
				return
			}
			buf := make([]byte, 64)
			resp.Body.Read(buf)
			ccancel()
			resp.Body.Close()
		})
	}
	// Malformed requests.
	for c := range 8 {
		wg.Go(func() {
			body := []string{`{"prompt":`, `{"prompt":"a","top_p":7}`, "{\"prompt\":\"\xff\"}", `{"prompt":"a","max_tokens":-3}`}[c%4]
			req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(body))
			resp, err := client.Do(req)
			if err != nil {
				fail("malformed %d: %v", c, err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 {
				fail("malformed request %q: status %d, want 400", body, resp.StatusCode)
			}
		})
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	if completed != clients*perClient {
		t.Errorf("%d of %d requests completed", completed, clients*perClient)
	}
	// The disconnected clients' sequences leave at the next step.
	waitFor(t, func() bool { return idle(s) })
	tr.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for goroutines() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := goroutines(); n > base {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after the load, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}

// goroutines counts the live goroutines but blas's helper, which a
// product may start at any time and which stays for the process.
func goroutines() int {
	buf := make([]byte, 1<<20)
	all := string(buf[:runtime.Stack(buf, true)])
	return strings.Count(all, "\ngoroutine ") + 1 - strings.Count(all, "blas.(*helper).loop")
}

// idle reports whether s has no sequence active or queued.
func idle(s *Server) bool {
	l := s.loaded()
	l.sched.mu.Lock()
	defer l.sched.mu.Unlock()
	c := l.sched.cache
	return len(l.sched.queue) == 0 && l.sched.kvUsed == 0 && activeGauge(s) == 0 &&
		(c == nil || c.encoding.Load() == 0 && len(c.fills) == 0)
}

func activeGauge(s *Server) float64 {
	mfs, err := s.metrics.reg.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() == "polysketch_active_sequences" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// streamText posts a streaming request and returns its text, "|" and its
// logprobs as JSON.
func streamText(ctx context.Context, client *http.Client, url, body string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var text strings.Builder
	var lp logprobs
	done := false
	for _, ev := range strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			return "", fmt.Errorf("event %q", ev)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c completion
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return "", fmt.Errorf("event %q: %v", data, err)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Text)
			if ch.Logprobs != nil {
				lp.add(ch.Logprobs)
			}
		}
	}
	if !done {
		return "", fmt.Errorf("stream without [DONE]")
	}
	b, err = json.Marshal(lp)
	return text.String() + "|" + string(b), err
}
